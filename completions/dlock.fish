# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_dlock_global_optspecs
    string join \n store= shard= namespace= json color= v/verbose q/quiet store-timeout= h/help V/version
end

function __fish_dlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_dlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_dlock_using_subcommand
    set -l cmd (__fish_dlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c dlock -n "__fish_dlock_needs_command" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_needs_command" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_needs_command" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_needs_command" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_needs_command" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_needs_command" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_needs_command" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_needs_command" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_needs_command" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "lock" -d 'Take a lock that outlives this process and print its token'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "unlock" -d 'Release a lock by its token, or any holder with --force'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "extend" -d 'Renew a lease held by a token'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "check" -d 'Exit 0 while a token holds a lock, 1 when it does not (69: the stores cannot tell)'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "run" -d 'Run a command while holding a lock, renewing it until the command exits'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "multilock" -d 'Take several locks at once, all or none, then run a command or print the token'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "inspect" -d 'Show who holds a lock, its fence and its waiters'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "doctor" -d 'Check each store for what dlock\'s guarantees need: reachable, permitted, persistent'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "list" -d 'List the locks that are held'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "wait" -d 'Wait until a lock is free, without taking it'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "shards" -d 'Manage the shard list that --shard gives'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l ttl -d 'Lease time; renewed by `run`, kept until then by `lock`' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s w -l wait -l timeout -d 'Wait at most this long for the lock (default: forever)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s E -l conflict-exit-code -d 'Exit code when the lock is not acquired (default 75)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l limit -d 'Let up to K holders in at once (a semaphore)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l reason -d 'Why the lock is taken; shown to whoever waits for it, by `inspect` and `list` (at most 200 bytes are kept)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l events -d 'Append one JSON object per line for each event of the lease (waiting, acquired, renewed, renew-failed, renew-late, lost, released) to FILE; `-` is stdout (`run` and `multilock -- CMD` only, where dlock prints no result of its own)' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l metrics-file -d 'After the run, record it in this node_exporter textfile-collector file (Prometheus text format, replaced atomically): last start, success and failure times, exit code, duration, wait, busy skips and lost leases, labelled by lock name; several names and runs may share one file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l follow -d 'With --keepalive: the process whose end releases the lock: `parent` (the default: the shell or program that ran `dlock lock`), a PID, or `none` (only unlock or a lost lease end the hold: a CI job\'s later steps)' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s n -l no-wait -l nonblock -d 'Fail at once if the lock is busy'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l shared -d 'Share the lock with other --shared holders (readers); exclusive holders wait'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l keepalive -d 'Leave a renewer process behind that renews the lease every ttl/3 until `dlock unlock --token` (which stops it and releases), the lease is lost, or the --follow process ends'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand lock" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l token -d 'Token printed by `lock`' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l force -d 'Release every holder, whoever it is'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand unlock" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l token -d 'Token printed by `lock`' -r
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l ttl -d 'New lease time, counted from now' -r
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand extend" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand extend" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand extend" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand extend" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand extend" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand check" -l token -d 'Token printed by `lock`' -r
complete -c dlock -n "__fish_dlock_using_subcommand check" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand check" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand check" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand check" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand check" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand check" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand check" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand check" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand check" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand check" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand run" -l any -d 'Take whichever of these names is free first (tried in a random rotation; waits on all of them); the command learns which from DLOCK_NAME. End the names with `--`' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l ttl -d 'Lease time; renewed by `run`, kept until then by `lock`' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -s w -l wait -l timeout -d 'Wait at most this long for the lock (default: forever)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -s E -l conflict-exit-code -d 'Exit code when the lock is not acquired (default 75)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l limit -d 'Let up to K holders in at once (a semaphore)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l kill-grace -d 'Always the time between SIGTERM and SIGKILL when a job is stopped (its command killed, --max-runtime, dlock gone, the lease lost); a lease that cannot be renewed gets its SIGTERM this long before it would run out [default: ttl/4, at most 10s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l on-lost -d 'The moment the lease is known lost (the store refused a renewal: `unlock --force`, an expiry; or no renewal by the point of no return), run this shell command (`sh -c`) with the lease\'s DLOCK_* variables and DLOCK_LOST_REASON. It runs beside the job and is not waited for: the job is stopped at the usual time' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l warn-signal -d 'The moment the lease is known lost, send this signal (USR1, SIGUSR2, 10...) to the command\'s process group, just before the SIGTERM that stops it. A process of the group that does not catch it gets its default action (USR1, USR2: terminate)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l reason -d 'Why the lock is taken; shown to whoever waits for it, by `inspect` and `list` (at most 200 bytes are kept)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l events -d 'Append one JSON object per line for each event of the lease (waiting, acquired, renewed, renew-failed, renew-late, lost, released) to FILE; `-` is stdout (`run` and `multilock -- CMD` only, where dlock prints no result of its own)' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand run" -l metrics-file -d 'After the run, record it in this node_exporter textfile-collector file (Prometheus text format, replaced atomically): last start, success and failure times, exit code, duration, wait, busy skips and lost leases, labelled by lock name; several names and runs may share one file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand run" -l hold-min -d 'Keep the lock at least this long after the command started, even if it ends sooner (the lease is left to expire on the store; dlock exits with the command)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l max-runtime -d 'Stop the command after this long: SIGTERM to its group, SIGKILL after --kill-grace, then release; dlock exits 124' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l jitter -d 'Sleep a random time up to this long before trying for the lock' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand run" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -s n -l no-wait -l nonblock -d 'Fail at once if the lock is busy'
complete -c dlock -n "__fish_dlock_using_subcommand run" -l shared -d 'Share the lock with other --shared holders (readers); exclusive holders wait'
complete -c dlock -n "__fish_dlock_using_subcommand run" -l leave-running -d 'Release when the command exits, even if processes it started still run (they go on outside the lock: a deploy that starts a daemon). Without it the lock is held until they have exited too, as flock\'s would be'
complete -c dlock -n "__fish_dlock_using_subcommand run" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l shared -d 'Also take this name shared (with other sharers, never with an exclusive holder); may repeat' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l ttl -d 'Lease time; renewed by `run`, kept until then by `lock`' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s w -l wait -l timeout -d 'Wait at most this long for the lock (default: forever)' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s E -l conflict-exit-code -d 'Exit code when the lock is not acquired (default 75)' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l kill-grace -d 'Always the time between SIGTERM and SIGKILL when a job is stopped (its command killed, --max-runtime, dlock gone, the lease lost); a lease that cannot be renewed gets its SIGTERM this long before it would run out [default: ttl/4, at most 10s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l on-lost -d 'The moment the lease is known lost (the store refused a renewal: `unlock --force`, an expiry; or no renewal by the point of no return), run this shell command (`sh -c`) with the lease\'s DLOCK_* variables and DLOCK_LOST_REASON. It runs beside the job and is not waited for: the job is stopped at the usual time' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l warn-signal -d 'The moment the lease is known lost, send this signal (USR1, SIGUSR2, 10...) to the command\'s process group, just before the SIGTERM that stops it. A process of the group that does not catch it gets its default action (USR1, USR2: terminate)' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l reason -d 'Why the lock is taken; shown to whoever waits for it, by `inspect` and `list` (at most 200 bytes are kept)' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l events -d 'Append one JSON object per line for each event of the lease (waiting, acquired, renewed, renew-failed, renew-late, lost, released) to FILE; `-` is stdout (`run` and `multilock -- CMD` only, where dlock prints no result of its own)' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l metrics-file -d 'After the run, record it in this node_exporter textfile-collector file (Prometheus text format, replaced atomically): last start, success and failure times, exit code, duration, wait, busy skips and lost leases, labelled by lock name; several names and runs may share one file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s n -l no-wait -l nonblock -d 'Fail at once if the lock is busy'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l leave-running -d 'Release when the command exits, even if processes it started still run (they go on outside the lock: a deploy that starts a daemon). Without it the lock is held until they have exited too, as flock\'s would be'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand multilock" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand inspect" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l ttl -d 'The ttl the locks will use: ZooKeeper\'s session bounds are checked against it' -r
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand list" -l format -d 'table: for people; prometheus: the Prometheus text format (holders, how long the oldest has held, waiters; one series per name), for a scrape script' -r -f -a "table\t''
prometheus\t''"
complete -c dlock -n "__fish_dlock_using_subcommand list" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand list" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand list" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand list" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand list" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand list" -l names -d 'The held names alone, one a line: what shell completion offers'
complete -c dlock -n "__fish_dlock_using_subcommand list" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s w -l wait -l timeout -d 'Wait at most this long for the lock to be free (default: forever)' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s E -l conflict-exit-code -d 'Exit code when the lock is still held at the end of the wait (default 75)' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand wait" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand wait" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and not __fish_seen_subcommand_from adopt" -f -a "adopt" -d 'Make the --shard list the one its stores serve (stop every client of the old list first); refused while any lock is held on them'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand shards; and __fish_seen_subcommand_from adopt" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l store -d 'Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, zk://, postgres://, postgresql://, mysql://, mariadb://, s3://, nats://, tls://, dynamodb://]' -r
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l shard -d 'One shard: a store URL or a comma-separated quorum; repeat to spread lock names over several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards separated by ;]' -r
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l namespace -d 'Namespace that keeps unrelated users\' lock names apart' -r
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l color -d 'When to colour output (never when NO_COLOR is set)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l store-timeout -d 'Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]' -r
complete -c dlock -n "__fish_dlock_using_subcommand completions" -l json -d 'Print results as JSON on stdout'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s q -l quiet -d 'Say nothing on stderr but errors'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s h -l help -d 'Print help'
complete -c dlock -n "__fish_dlock_using_subcommand completions" -s V -l version -d 'Print version'

# Written by hand (src/docs/wrap.fish), after clap's completions above:
# - after the `--` of `run`, `run-with-lock` or `multilock`, the wrapped command's own
#   completion, as fish does for sudo;
# - lock names, those `dlock list --names` prints within half a second, so a store that does
#   not answer never holds the shell up for longer.
function __fish_dlock_wrapped
    set -l cmd (commandline -opc)
    contains -- (__fish_dlock_needs_command) run run-with-lock multilock
    or return 1
    set -l at (contains -i -- -- $cmd)
    or return 1
    # Called with the words after `--` (and the one being typed), fish completes that command.
    if test "$argv[1]" = complete
        set -l rest $cmd[(math $at + 1)..-1] (commandline -ct)
        complete -C (string join -- ' ' (string escape -- $rest))
    end
end

function __fish_dlock_held
    set -l cmd (commandline -opc)
    set -l store
    for i in (seq 2 (count $cmd))
        contains -- $cmd[(math $i - 1)] --store --shard --namespace
        and set -a store $cmd[(math $i - 1)] $cmd[$i]
        string match -q -r -- '^--(store|shard|namespace)=' $cmd[$i]
        and set -a store $cmd[$i]
    end
    timeout 0.5 dlock $store list --names 2>/dev/null
end

complete -c dlock -n __fish_dlock_wrapped -f -a '(__fish_dlock_wrapped complete)'
complete -c dlock -n 'not __fish_dlock_wrapped; and __fish_dlock_using_subcommand inspect unlock extend run run-with-lock lock wait multilock' -f -a '(__fish_dlock_held)'
