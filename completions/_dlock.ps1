
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'dlock' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'dlock'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'dlock' {
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Take a lock that outlives this process and print its token')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release a lock by its token, or any holder with --force')
            [CompletionResult]::new('extend', 'extend', [CompletionResultType]::ParameterValue, 'Renew a lease held by a token')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Exit 0 while a token holds a lock, 1 when it does not (69: the stores cannot tell)')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run a command while holding a lock, renewing it until the command exits')
            [CompletionResult]::new('multilock', 'multilock', [CompletionResultType]::ParameterValue, 'Take several locks at once, all or none, then run a command or print the token')
            [CompletionResult]::new('inspect', 'inspect', [CompletionResultType]::ParameterValue, 'Show who holds a lock, its fence and its waiters')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check each store for what dlock''s guarantees need: reachable, permitted, persistent')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the locks that are held')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until a lock is free, without taking it')
            [CompletionResult]::new('shards', 'shards', [CompletionResultType]::ParameterValue, 'Manage the shard list that --shard gives')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            break
        }
        'dlock;lock' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease time; renewed by `run`, kept until then by `lock`')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock is not acquired (default 75)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock is not acquired (default 75)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Let up to K holders in at once (a semaphore)')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why the lock is taken; shown to whoever waits for it, by `inspect` and `list` (at most 200 bytes are kept)')
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'Append one JSON object per line for each event of the lease (waiting, acquired, renewed, renew-failed, lost, released) to FILE; `-` is stdout (`run` and `multilock -- CMD` only, where dlock prints no result of its own)')
            [CompletionResult]::new('--follow', '--follow', [CompletionResultType]::ParameterName, 'With --keepalive: the process whose end releases the lock: `parent` (the default: the shell or program that ran `dlock lock`), a PID, or `none` (only unlock or a lost lease end the hold: a CI job''s later steps)')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Share the lock with other --shared holders (readers); exclusive holders wait')
            [CompletionResult]::new('--keepalive', '--keepalive', [CompletionResultType]::ParameterName, 'Leave a renewer process behind that renews the lease every ttl/3 until `dlock unlock --token` (which stops it and releases), the lease is lost, or the --follow process ends')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;unlock' {
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Token printed by `lock`')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Release every holder, whoever it is')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;extend' {
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Token printed by `lock`')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'New lease time, counted from now')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;check' {
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Token printed by `lock`')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;run' {
            [CompletionResult]::new('--any', '--any', [CompletionResultType]::ParameterName, 'Take whichever of these names is free first (tried in a random rotation; waits on all of them); the command learns which from DLOCK_NAME. End the names with `--`')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease time; renewed by `run`, kept until then by `lock`')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock is not acquired (default 75)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock is not acquired (default 75)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Let up to K holders in at once (a semaphore)')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'Always the time between SIGTERM and SIGKILL when a job is stopped (its command killed, --max-runtime, dlock gone, the lease lost); a lease that cannot be renewed gets its SIGTERM this long before it would run out [default: ttl/4, at most 10s]')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why the lock is taken; shown to whoever waits for it, by `inspect` and `list` (at most 200 bytes are kept)')
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'Append one JSON object per line for each event of the lease (waiting, acquired, renewed, renew-failed, lost, released) to FILE; `-` is stdout (`run` and `multilock -- CMD` only, where dlock prints no result of its own)')
            [CompletionResult]::new('--hold-min', '--hold-min', [CompletionResultType]::ParameterName, 'Keep the lock at least this long after the command started, even if it ends sooner (the lease is left to expire on the store; dlock exits with the command)')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command after this long: SIGTERM to its group, SIGKILL after --kill-grace, then release; dlock exits 124')
            [CompletionResult]::new('--jitter', '--jitter', [CompletionResultType]::ParameterName, 'Sleep a random time up to this long before trying for the lock')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Share the lock with other --shared holders (readers); exclusive holders wait')
            [CompletionResult]::new('--leave-running', '--leave-running', [CompletionResultType]::ParameterName, 'Release when the command exits, even if processes it started still run (they go on outside the lock: a deploy that starts a daemon). Without it the lock is held until they have exited too, as flock''s would be')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;multilock' {
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Also take this name shared (with other sharers, never with an exclusive holder); may repeat')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease time; renewed by `run`, kept until then by `lock`')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock (default: forever)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock is not acquired (default 75)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock is not acquired (default 75)')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'Always the time between SIGTERM and SIGKILL when a job is stopped (its command killed, --max-runtime, dlock gone, the lease lost); a lease that cannot be renewed gets its SIGTERM this long before it would run out [default: ttl/4, at most 10s]')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why the lock is taken; shown to whoever waits for it, by `inspect` and `list` (at most 200 bytes are kept)')
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'Append one JSON object per line for each event of the lease (waiting, acquired, renewed, renew-failed, lost, released) to FILE; `-` is stdout (`run` and `multilock -- CMD` only, where dlock prints no result of its own)')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is busy')
            [CompletionResult]::new('--leave-running', '--leave-running', [CompletionResultType]::ParameterName, 'Release when the command exits, even if processes it started still run (they go on outside the lock: a deploy that starts a daemon). Without it the lock is held until they have exited too, as flock''s would be')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;inspect' {
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;doctor' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'The ttl the locks will use: ZooKeeper''s session bounds are checked against it')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;list' {
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--names', '--names', [CompletionResultType]::ParameterName, 'The held names alone, one a line: what shell completion offers')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;wait' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock to be free (default: forever)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock to be free (default: forever)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Wait at most this long for the lock to be free (default: forever)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock is still held at the end of the wait (default 75)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock is still held at the end of the wait (default 75)')
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;shards' {
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('adopt', 'adopt', [CompletionResultType]::ParameterValue, 'Make the --shard list the one its stores serve (stop every client of the old list first); refused while any lock is held on them')
            break
        }
        'dlock;shards;adopt' {
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'dlock;completions' {
            [CompletionResult]::new('--store', '--store', [CompletionResultType]::ParameterName, 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://]')
            [CompletionResult]::new('--shard', '--shard', [CompletionResultType]::ParameterName, 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace that keeps unrelated users'' lock names apart')
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'When to colour output (never when NO_COLOR is set)')
            [CompletionResult]::new('--store-timeout', '--store-timeout', [CompletionResultType]::ParameterName, 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print results as JSON on stdout')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Say nothing on stderr but errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
