//! Bad input, as a table: malformed and hostile URLs, durations, names, tokens, unreachable
//! stores, wrong passwords and TLS against a plain port. Each case gets one line on stderr,
//! its pinned exit code, no panic, nothing on stdout, and leaves the leases already held on
//! the file store and on Redis exactly as they were.

use crate::common::redis::RedisServer;
use crate::common::*;

/// One held lease as `inspect --json` shows it: (owner, fence).
fn lease(env: &Env, name: &str) -> (String, u64) {
    let o = env.run(&["--json", "inspect", name]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["held"], true, "{v}");
    let h = &v["holders"][0];
    (
        h["owner"].as_str().unwrap().to_string(),
        h["fence"].as_u64().unwrap(),
    )
}

#[test]
fn every_bad_input_gets_one_line_its_exit_code_and_leaves_leases_alone() {
    let plain = RedisServer::start();
    let guarded = RedisServer::start_with(&["--requirepass", "right"]);
    let env = Env::file();
    let on_redis = Env::with_stores(vec![plain.url()]);
    assert_code(&env.run(&["lock", "held", "--ttl", "5m"]), 0);
    assert_code(&on_redis.run(&["lock", "held", "--ttl", "5m"]), 0);
    let before = (lease(&env, "held"), lease(&on_redis, "held"));

    let p = plain.port;
    let g = guarded.port;
    let ten_k = "n".repeat(10 * 1024);
    let stranger = "0123456789abcdef0123456789abcdef";
    let s = |v: &str| v.to_string();
    let redis = plain.url();
    let wrong_pw = format!("redis://:wrong@127.0.0.1:{g}");
    let no_pw = format!("redis://127.0.0.1:{g}");
    let tls_plain = format!("rediss://127.0.0.1:{p}");
    let missing_pw_file = format!(
        "redis://127.0.0.1:{p}?password_file={}",
        env.path("missing/pw").display()
    );
    // A typo in a file store's path: only a directory whose parent exists is created.
    let typo = format!("file://{}", env.path("typo/path").display());
    // (arguments, exit code); every case names the held lock where it can, so a bug that
    // acted before refusing would show in the lease check below.
    let cases: Vec<(Vec<String>, i32)> = vec![
        // Store URLs.
        (
            vec![s("--store"), s("localhost:6379"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store"), s("memcached://h/db"), s("lock"), s("held")],
            64,
        ),
        (vec![s("--store"), s("http://h"), s("lock"), s("held")], 64),
        (
            vec![s("--store"), s("redis://h:99999"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store"), s("redis://h:0"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store"), s("redis://h:port"), s("lock"), s("held")],
            64,
        ),
        (vec![s("--store"), s("redis://"), s("lock"), s("held")], 64),
        (
            vec![s("--store"), s("redis://a,b"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store"), s("redis://[::1"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store"), s("redis://h\n:1"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store"), s("file://relative/dir"), s("lock"), s("held")],
            64,
        ),
        // A NATS URL names its KV bucket, and `create` is 1 or 0.
        (
            vec![s("--store"), s("nats://h:4222"), s("lock"), s("held")],
            64,
        ),
        (
            vec![
                s("--store"),
                s("nats://h/b?create=yes"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![
                s("--store"),
                s("redis://h?nonsense=1"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![
                s("--store"),
                s("redis://h/notanumber"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![s("--store"), s("bogus://u:hunter2@h"), s("lock"), s("held")],
            64,
        ),
        (
            vec![
                s("--store"),
                s("redis://h?nat_map=a:1=b:2"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![
                s("--store"),
                s("redis+cluster://127.0.0.1:1?nat_map=a%0a:1=b:2"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![
                s("--store"),
                s("redis+cluster://127.0.0.1:1?nat_map=a:1"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![
                s("--store"),
                redis.clone(),
                s("--store"),
                redis.clone(),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (
            vec![s("--store"), missing_pw_file, s("lock"), s("held")],
            64,
        ),
        // Stores that cannot be used.
        (
            vec![s("--store"), s("redis://127.0.0.1:1"), s("lock"), s("held")],
            69,
        ),
        (
            vec![
                s("--store"),
                redis.clone(),
                s("--store"),
                s("redis://127.0.0.1:1"),
                s("--store"),
                s("redis://127.0.0.1:2"),
                s("lock"),
                s("held"),
                s("-n"),
            ],
            69,
        ),
        (
            vec![s("--store"), tls_plain.clone(), s("lock"), s("held")],
            69,
        ),
        (vec![s("--store"), tls_plain, s("inspect"), s("held")], 69),
        (
            vec![s("--store"), wrong_pw.clone(), s("lock"), s("held")],
            77,
        ),
        (
            vec![s("--store"), wrong_pw, s("unlock"), s("held"), s("--force")],
            77,
        ),
        (vec![s("--store"), no_pw, s("lock"), s("held")], 77),
        (vec![s("--store"), typo, s("lock"), s("held")], 64),
        // A lock name and --any both: the name was run as the command (`echo hello`).
        (
            vec![
                s("run"),
                s("echo"),
                s("--any"),
                s("held"),
                s("other"),
                s("--"),
                s("hello"),
            ],
            64,
        ),
        // An exclusive run inside a job that holds the name shared: it would wait for its
        // own job forever (the outer run passes the 64 on).
        (
            vec![
                s("run"),
                s("--shared"),
                s("nested"),
                s("--"),
                s(env!("CARGO_BIN_EXE_dlock")),
                s("run"),
                s("-w"),
                s("5s"),
                s("nested"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        // Durations.
        (vec![s("lock"), s("held"), s("--ttl"), s("0")], 64),
        (vec![s("lock"), s("held"), s("--ttl"), s("0s")], 64),
        (vec![s("lock"), s("held"), s("--ttl"), s("-5s")], 64),
        (vec![s("lock"), s("held"), s("--ttl"), s("99ms")], 64),
        (vec![s("lock"), s("held"), s("--ttl"), s("9999999d")], 64),
        (
            vec![s("lock"), s("held"), s("--ttl"), s("18446744073709551616s")],
            64,
        ),
        (vec![s("lock"), s("held"), s("--ttl"), s("soon")], 64),
        (vec![s("lock"), s("held"), s("--ttl"), s("")], 64),
        (vec![s("lock"), s("held"), s("--ttl"), s("5 parsecs")], 64),
        (vec![s("lock"), s("held"), s("-w"), s("forever")], 64),
        (vec![s("lock"), s("held"), s("-w"), s("-1s")], 64),
        (vec![s("lock"), s("held"), s("-w"), s("1s"), s("-n")], 64),
        (
            vec![
                s("run"),
                s("held"),
                s("--kill-grace"),
                s("0s"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        (
            vec![
                s("run"),
                s("held"),
                s("--ttl"),
                s("1s"),
                s("--kill-grace"),
                s("900ms"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        (
            vec![s("--store-timeout"), s("0ms"), s("lock"), s("held")],
            64,
        ),
        (
            vec![s("--store-timeout"), s("40s"), s("lock"), s("held")],
            64,
        ),
        (
            vec![
                s("extend"),
                s("held"),
                s("--token"),
                s(stranger),
                s("--ttl"),
                s("never"),
            ],
            64,
        ),
        // Names.
        (vec![s("lock"), s("")], 64),
        (vec![s("lock"), ten_k.clone()], 64),
        (vec![s("inspect"), ten_k], 64),
        (vec![s("lock"), s("ctl\u{1}char")], 64),
        (vec![s("lock"), s("new\nline")], 64),
        (vec![s("lock"), s("tab\there")], 64),
        (vec![s("lock"), s("esc\u{1b}[31m")], 64),
        (vec![s("lock"), s("../x")], 64),
        (vec![s("lock"), s("../../etc/passwd")], 64),
        (vec![s("lock"), s("a/../held")], 64),
        (vec![s("lock"), s("/abs")], 64),
        (vec![s("lock"), s(".hidden")], 64),
        (vec![s("lock"), s("a//b")], 64),
        (vec![s("lock"), s("a b")], 64),
        (vec![s("lock"), s("ünï")], 64),
        (vec![s("lock"), s("{held}")], 64),
        (vec![s("--namespace"), s("a/b"), s("lock"), s("held")], 64),
        (vec![s("--namespace"), s(""), s("lock"), s("held")], 64),
        (vec![s("--namespace"), s("x:y"), s("lock"), s("held")], 64),
        // Tokens.
        (vec![s("unlock"), s("held")], 64),
        (vec![s("unlock"), s("held"), s("--token"), s("nothex")], 64),
        (vec![s("unlock"), s("held"), s("--token"), s("")], 64),
        (
            vec![s("unlock"), s("held"), s("--token"), "g".repeat(32)],
            64,
        ),
        (
            vec![s("unlock"), s("held"), s("--token"), format!("{stranger}0")],
            64,
        ),
        (
            vec![
                s("unlock"),
                s("held"),
                s("--token"),
                s(stranger),
                s("--force"),
            ],
            64,
        ),
        (vec![s("extend"), s("held")], 64),
        (vec![s("unlock"), s("held"), s("--token"), s(stranger)], 1),
        (vec![s("extend"), s("held"), s("--token"), s(stranger)], 1),
        (
            vec![
                s("--store"),
                redis.clone(),
                s("unlock"),
                s("held"),
                s("--token"),
                s(stranger),
            ],
            1,
        ),
        (
            vec![
                s("--store"),
                redis,
                s("extend"),
                s("held"),
                s("--token"),
                s(stranger),
            ],
            1,
        ),
        // Everything else on the command line.
        (
            vec![s("lock"), s("held"), s("--shared"), s("--limit"), s("2")],
            64,
        ),
        (vec![s("lock"), s("held"), s("--limit"), s("0")], 64),
        (vec![s("lock"), s("held"), s("--limit"), s("-1")], 64),
        (vec![s("run"), s("held")], 64),
        (vec![s("--color"), s("sometimes"), s("list")], 64),
        (vec![s("frobnicate")], 64),
        (vec![s("lock"), s("held"), s("--frob")], 64),
        // A flag-like word before run's command is a usage error, never the command.
        (
            vec![
                s("run"),
                s("held"),
                s("--max-runtme"),
                s("1s"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        (vec![s("run"), s("held"), s("-Z"), s("true")], 64),
        // run's cron helpers.
        (
            vec![
                s("run"),
                s("held"),
                s("--hold-min"),
                s("0"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        (
            vec![
                s("run"),
                s("held"),
                s("--max-runtime"),
                s("0s"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        (
            vec![
                s("run"),
                s("held"),
                s("--jitter"),
                s("soon"),
                s("--"),
                s("true"),
            ],
            64,
        ),
        (vec![s("doctor"), s("--ttl"), s("1e3")], 64),
        // A bare number is seconds, as flock -w takes it.
        (vec![s("lock"), s("held"), s("-w"), s("0.5")], 75),
        (vec![s("lock"), s("held"), s("-w"), s("0")], 75),
        (vec![s("lock"), s("held"), s("--ttl"), s("5"), s("-n")], 75),
        // User words with control characters, escaped in the one line.
        (vec![s("lock"), s("bell\u{7}cr\r")], 64),
        (
            vec![s("unlock"), s("held"), s("--token"), s("abc\ndef")],
            64,
        ),
        (vec![s("run"), s("free"), s("--"), s("\u{1b}[2J")], 127),
        (
            vec![
                s("--store"),
                s("redis://127.0.0.1:1,redis://127.0.0.1:2"),
                s("lock"),
                s("held"),
            ],
            64,
        ),
        (vec![s("completions"), s("tcsh")], 64),
        // Usage errors whose message clap spreads over lines or words badly (issue 26).
        (vec![s("unlock"), s("held")], 64),
        (vec![s("multilock"), s("--"), s("true")], 64),
        (vec![s("run"), s("--"), s("true")], 64),
        (vec![s("rn"), s("held"), s("--"), s("true")], 64),
        (vec![s("lock"), s("held"), s("-nowait")], 64),
        (vec![s("run"), s("held"), s("-x")], 64),
        (vec![s("completions"), s("nosuch")], 64),
    ];
    assert!(cases.len() >= 40);
    for (args, expected) in &cases {
        let o = env.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let err = stderr(&o);
        let shown: Vec<String> = args.iter().map(|a| a.chars().take(40).collect()).collect();
        assert_eq!(
            o.status.code(),
            Some(*expected),
            "{shown:?}: expected exit {expected}, stderr: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{shown:?} said:\n{err}");
        assert!(
            !err.chars().any(char::is_control),
            "{shown:?}: a raw control character reached stderr: {err:?}"
        );
        assert!(!err.contains("panicked"), "{shown:?}: {err}");
        assert!(
            !err.contains("hunter2") && !err.contains("wrong"),
            "{shown:?}: {err}"
        );
        assert!(stdout(&o).is_empty(), "{shown:?} printed {}", stdout(&o));
        assert_eq!(
            (lease(&env, "held"), lease(&on_redis, "held")),
            before,
            "{shown:?} changed a lease"
        );
    }
    assert!(!env.path("typo").exists(), "a typo grew a directory tree");
}

/// What the one line says, for the inputs whose message matters most.
#[test]
fn messages_name_the_problem_and_escape_what_the_user_typed() {
    let env = Env::file();
    // Ports nothing listens on: the SQL stores say "connection refused", once.
    let pg_refused = format!("postgres://127.0.0.1:{}/db", free_port());
    let my_refused = format!("mysql://127.0.0.1:{}/db", free_port());
    // A file store that cannot make its namespace's directory (a file is in the way): a local
    // error, answered at once, never a network's silence.
    let blocked = env.path("blocked");
    std::fs::create_dir_all(&blocked).unwrap();
    std::fs::write(blocked.join("default"), "").unwrap();
    let blocked = format!("file://{}", blocked.display());
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["--namespace", "", "lock", "x"],
            64,
            "the namespace is empty; give e.g. team-a (or leave --namespace out for the default)",
        ),
        // A namespace has no `/`: its message names only the rules it has.
        (
            vec!["--namespace", "..", "lock", "x"],
            64,
            r#"the namespace ".." may not start with . or -; "#,
        ),
        (
            vec!["--store", &blocked, "lock", "x"],
            69,
            "/default/.lock: Not a directory (os error 20); gave up after",
        ),
        (
            vec!["run", "x", "--max-runtme", "1s", "--", "true"],
            64,
            "'--max-runtme'",
        ),
        (vec!["lock", "a\rb\u{7}c"], 64, r#""a\rb\u{7}c""#),
        (vec!["lock", "esc\u{1b}[31m"], 64, r"\u{1b}"),
        (
            vec!["unlock", "x", "--token", "abc\ndef"],
            64,
            r#""abc\ndef""#,
        ),
        (
            vec!["run", "x", "--", "\u{1b}[2J"],
            127,
            r#""\u{1b}[2J": command not found"#,
        ),
        (
            vec!["--store", "redis://h:1,redis://h:2", "lock", "x"],
            64,
            "give each store its own --store, or list them comma-separated in DLOCK_STORE",
        ),
        (
            vec!["--store", "redis://u:hunter2@h:1,etcd://h:2", "lock", "x"],
            64,
            "its own --store",
        ),
        (
            vec!["--store", "a,b", "lock", "x"],
            64,
            "several stores are given by repeating --store",
        ),
        (
            vec!["--store", "redis://h:1,", "lock", "x"],
            64,
            "an empty host in the list (a stray comma?)",
        ),
        (
            vec!["run", "echo", "--any", "a", "b", "--", "hello"],
            64,
            "both a lock name (\"echo\") and --any were given",
        ),
        // clap's "not provided:" is followed by what is missing, on the same line.
        (
            vec!["unlock", "a"],
            64,
            "not provided: <--token <TOKEN>|--force>",
        ),
        (vec!["multilock", "--", "true"], 64, "not provided: <NAME>"),
        (vec!["run", "--", "true"], 64, "no lock name"),
        (vec!["rn", "x", "--", "true"], 64, "(did you mean 'run'?)"),
        (
            vec!["lock", "x", "-nowait"],
            64,
            "unexpected argument '-nowait' (a long flag takes two dashes: did you mean '--no-wait'?)",
        ),
        (
            vec!["run", "job", "-x"],
            64,
            "'-x' found: not a flag of dlock run",
        ),
        (
            vec!["completions", "nosuch"],
            64,
            "(possible values: bash, elvish, fish, powershell, zsh)",
        ),
        (
            vec!["--store", &pg_refused, "lock", "x"],
            69,
            ": connection refused (no answer since dlock started, so not waited for); ",
        ),
        (
            vec!["--store", &my_refused, "lock", "x"],
            69,
            ": connection refused (no answer since dlock started, so not waited for); ",
        ),
    ];
    for (args, expected, want) in cases {
        let o = env.run(&args);
        let err = stderr(&o);
        assert_code(&o, expected);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        // Following clap's usual tip would make the mistyped flag the command.
        assert!(!err.contains("'-- -x'"), "{err}");
        assert!(err.matches("refused").count() <= 1, "{err}");
    }
}

#[test]
fn bare_numbers_are_seconds_in_flags_and_the_environment() {
    let env = Env::file();
    let mut c = env.cmd();
    c.env("DLOCK_TTL", "2").args(["--json", "lock", "job"]);
    let o = output_within(c, std::time::Duration::from_secs(60));
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ttl_ms"], 2000);
    let started = std::time::Instant::now();
    assert_code(&env.run(&["lock", "job", "-w", "0.5"]), 75);
    assert!(started.elapsed() >= std::time::Duration::from_millis(500));
}

/// A store that accepts connections and never answers: the message must not claim a shorter
/// time than dlock actually spent.
#[test]
fn the_time_a_timeout_message_names_is_true() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _accepting = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in listener.incoming() {
            kept.push(s);
        }
    });
    for url in [
        format!("etcd://127.0.0.1:{port}"),
        format!("zk://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
        format!("nats://127.0.0.1:{port}/locks"),
    ] {
        let env = Env::with_stores(vec![url.clone()]);
        let started = std::time::Instant::now();
        let o = env.run(&["lock", "job", "-w", "1s"]);
        let took = started.elapsed().as_secs_f64();
        assert_code(&o, 69);
        let err = stderr(&o);
        let said: f64 = err
            .rsplit_once("gave up after ")
            .and_then(|(_, t)| t.strip_suffix('s'))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{url}: no total time in: {err}"));
        assert!(
            said <= took + 0.05,
            "{url}: said {said}s, took {took}s: {err}"
        );
        assert!(said + 0.1 >= 1.0, "{url}: {err}");
    }
}

/// A holder's command line, as another process stored it, reaches `inspect` and `list`
/// escaped: it cannot clear the reader's screen.
#[test]
fn another_holders_metadata_is_shown_escaped() {
    let env = Env::file();
    // --hold-min leaves the lease held by the finished run, so no process needs to linger.
    let o = env.run(&[
        "run",
        "job",
        "--hold-min",
        "1m",
        "--",
        "sh",
        "-c",
        "true",
        "\u{1b}[2J\rgotcha",
    ]);
    assert_code(&o, 0);
    let shown = stdout(&env.run(&["inspect", "job"]));
    assert!(shown.contains(r"\u{1b}[2J\rgotcha"), "{shown:?}");
    assert!(
        !shown.chars().any(|c| c.is_control() && c != '\n'),
        "{shown:?}"
    );
}

/// Without `--`, the first word that is not a flag starts the command, and everything after
/// it is the command's own, flags included.
#[test]
fn run_without_a_double_dash_still_runs_the_command() {
    let env = Env::file();
    let o = env.run(&["run", "job", "-w", "5", "echo", "hi", "-n", "--frob"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "hi -n --frob");
}
