//! `run`'s helpers for scheduled jobs: `--hold-min` (the lease outlives a short command, and
//! dlock does not wait for it), `--max-runtime` (a command that runs too long is stopped,
//! exit 124) and `--jitter` (a random pause before trying).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::etcd::EtcdServer;
use crate::common::redis::RedisServer;
use crate::common::zk::ZkServer;
use crate::common::*;

fn held(env: &Env, name: &str) -> serde_json::Value {
    let o = env.run(&["--json", "inspect", name]);
    assert_code(&o, 0);
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// A 6 s `--hold-min` on a command that ends at once: dlock exits with the command, the lease
/// stays held by the finished run (others get 75 with -n) and only frees about 6 s after
/// the command started.
fn hold_min_keeps_the_lease_after_the_command(env: &Env) {
    let hold = Duration::from_secs(6);
    let started = Instant::now();
    let o = env.run(&["run", "job", "--hold-min", "6s", "--", "sh", "-c", "exit 3"]);
    let returned = started.elapsed();
    assert_code(&o, 3);
    assert!(returned < hold, "dlock waited for --hold-min: {returned:?}");

    let v = held(env, "job");
    assert_eq!(v["held"], true, "{v}");
    let h = &v["holders"][0];
    assert_eq!(h["meta"]["command"], "sh -c 'exit 3'", "{v}");
    let left = h["ttl_left_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 6000, "{v}");
    assert_code(&env.run(&["run", "job", "-n", "--", "true"]), 75);

    let o = env.run(&["run", "job", "-w", "30s", "--", "true"]);
    assert_code(&o, 0);
    let entered = started.elapsed();
    // The lease ends at the command's start + 6 s (the command started after `started`);
    // allow the store's rounding and the drift margin below that.
    assert!(
        entered >= hold - Duration::from_millis(300),
        "the next run got in after {entered:?}"
    );
}

#[test]
fn hold_min_on_the_file_store() {
    hold_min_keeps_the_lease_after_the_command(&Env::file());
}

#[test]
fn hold_min_on_redis() {
    let redis = RedisServer::start();
    hold_min_keeps_the_lease_after_the_command(&Env::with_stores(vec![redis.url()]));
}

#[test]
fn hold_min_on_etcd() {
    let etcd = EtcdServer::start();
    hold_min_keeps_the_lease_after_the_command(&Env::with_stores(vec![etcd.url()]));
}

#[test]
fn hold_min_on_zookeeper() {
    let zk = ZkServer::start();
    hold_min_keeps_the_lease_after_the_command(&Env::with_stores(vec![zk.url()]));
}

#[test]
fn hold_min_shorter_than_the_command_releases_at_once() {
    let env = Env::file();
    assert_code(
        &env.run(&["run", "job", "--hold-min", "100ms", "--", "sleep", "0.3"]),
        0,
    );
    assert_eq!(held(&env, "job")["held"], false);
    assert_eq!(held(&env, "job")["previous"], "released");
}

#[test]
fn max_runtime_kills_a_command_that_ignores_sigterm_and_exits_124() {
    let env = Env::file();
    let pidfile = env.path("pid");
    // An ignored signal stays ignored across exec, so `sleep` ignores SIGTERM too.
    let script = format!(
        "trap '' TERM; echo $$ > {}; sleep 60 & wait; sleep 60",
        pidfile.display()
    );
    let started = Instant::now();
    let o = env.run(&[
        "run",
        "job",
        "--max-runtime",
        "1s",
        "--kill-grace",
        "1s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let took = started.elapsed();
    assert_code(&o, 124);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--max-runtime 1s"), "{err}");
    // SIGTERM at 1 s was ignored: only SIGKILL, a grace later, ended it.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!running(pid));
    assert_eq!(held(&env, "job")["held"], false);
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

#[test]
fn max_runtime_stops_a_command_that_obeys_sigterm_with_124() {
    let env = Env::file();
    let log = env.path("log");
    let script = format!(
        "trap 'echo term >> {}; exit 0' TERM; while :; do sleep 0.05; done",
        log.display()
    );
    let o = env.run(&[
        "run",
        "job",
        "--max-runtime",
        "0.5",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_code(&o, 124);
    assert!(std::fs::read_to_string(&log).unwrap().contains("term"));
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

#[test]
fn max_runtime_leaves_a_quick_command_alone() {
    let env = Env::file();
    assert_code(
        &env.run(&[
            "run",
            "job",
            "--max-runtime",
            "1m",
            "--",
            "sh",
            "-c",
            "exit 5",
        ]),
        5,
    );
}

#[test]
fn jitter_pauses_before_trying() {
    let env = Env::file();
    let started = Instant::now();
    let o = env.run(&["-v", "run", "job", "--jitter", "0.5", "--", "true"]);
    assert_code(&o, 0);
    let err = stderr(&o);
    let slept = err
        .lines()
        .find_map(|l| l.strip_prefix("dlock: --jitter: sleeping "))
        .unwrap_or_else(|| panic!("{err}"));
    let slept = humantime::parse_duration(slept.trim_end_matches(" before trying")).unwrap();
    assert!(slept <= Duration::from_millis(500), "{slept:?}");
    assert!(started.elapsed() >= slept);
    // Only loosely bounded above: the machine may be busy.
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// Whether `pid` has a handler for `sig` (the SigCgt mask /proc shows).
fn catches(pid: u32, sig: i32) -> bool {
    read(std::path::Path::new(&format!("/proc/{pid}/status")))
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

#[test]
fn sigterm_during_jitter_exits_143_without_taking_the_lock() {
    let env = Env::file();
    let err = env.path("err");
    let mut c = env.cmd();
    c.args(["-v", "run", "job", "--jitter", "1h", "--", "true"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = c.spawn().unwrap();
    // In its jitter pause: it said so, and it has its handler for SIGTERM in place.
    let id = child.id();
    assert!(
        wait_for(Duration::from_secs(10), || read(&err)
            .contains("--jitter: sleeping")
            && catches(id, libc::SIGTERM)),
        "{}",
        read(&err)
    );
    signal(id, libc::SIGTERM);
    let status = wait_child(&mut child, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert_eq!(held(&env, "job")["held"], false);
}
