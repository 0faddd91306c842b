//! The next holder learns how the last one ended (issue 36, item 3): `DLOCK_PREVIOUS` is
//! `released` only after a clean end (the command exited 0, or a script unlocked its own
//! lock), `failed` with `DLOCK_PREVIOUS_EXIT` after any other end of a job (its exit code,
//! 128+signal, 124 for --max-runtime), `expired` when the holder vanished; a waiter's own
//! attempt, given back, never counts as a holder's end. Each case runs on the file store and
//! on Redis; `inspect` and the `acquired` event tell the same.

use std::sync::OnceLock;
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

fn redis() -> Env {
    static SERVER: OnceLock<String> = OnceLock::new();
    Env::with_stores(vec![
        shared(&SERVER, RedisServer::start, RedisServer::url).to_string(),
    ])
}

/// What the next holder of `name` is told, as "DLOCK_PREVIOUS DLOCK_PREVIOUS_EXIT" ("-" for
/// unset). The caller's own DLOCK_PREVIOUS_EXIT must not leak through.
#[track_caller]
fn told(env: &Env, name: &str) -> String {
    let mut c = env.cmd();
    c.env("DLOCK_PREVIOUS_EXIT", "99");
    c.args(["run", name, "-w", "20s", "--", "sh", "-c", TELL]);
    let o = output_within(c, Duration::from_secs(60));
    assert_code(&o, 0);
    stdout(&o)
}

/// What the child prints: "DLOCK_PREVIOUS DLOCK_PREVIOUS_EXIT", "-" for unset.
const TELL: &str = r#"echo "$DLOCK_PREVIOUS ${DLOCK_PREVIOUS_EXIT--}""#;

/// `c` (dlock with its global flags) running a next holder of `name` that prints what it is
/// told, started and seen waiting for the lock (its `waiting` event).
fn waiter(mut c: std::process::Command, env: &Env, name: &str) -> std::process::Child {
    let events = env.path(&format!("{name}.events"));
    c.args(["run", name, "-w", "60s", "--events"])
        .arg(&events)
        .args(["--", "sh", "-c", TELL])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn dlock");
    assert!(wait_for(Duration::from_secs(10), || read(&events)
        .contains("waiting")));
    child
}

/// A run that ends with `script`, and the code dlock ended with.
fn ended(env: &Env, name: &str, extra: &[&str], script: &str) -> i32 {
    let mut args = vec!["run", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    code(&env.run(&args))
}

fn a_clean_end_is_told_released(env: &Env) {
    assert_eq!(told(env, "clean"), "none -");
    assert_eq!(ended(env, "clean", &[], "exit 0"), 0);
    assert_eq!(told(env, "clean"), "released -");
    // A script that releases its own lock ended as it meant to.
    let token = stdout(&env.run(&["lock", "clean"]));
    assert_code(&env.run(&["unlock", "clean", "--token", &token]), 0);
    assert_eq!(told(env, "clean"), "released -");
}

fn a_non_zero_exit_is_told_failed_with_its_code(env: &Env) {
    assert_eq!(ended(env, "exit3", &[], "exit 3"), 3);
    assert_eq!(told(env, "exit3"), "failed 3");
    let v = env.inspect("exit3");
    assert_eq!(v["previous"], "released", "the run that was told: {v}");
    assert_eq!(v["previous_exit"], serde_json::Value::Null, "{v}");
    assert_eq!(ended(env, "exit3", &[], "exit 3"), 3);
    let v = env.inspect("exit3");
    assert_eq!(
        (&v["previous"], &v["previous_exit"]),
        (&"failed".into(), &3.into()),
        "{v}"
    );
    let text = stdout(&env.run(&["inspect", "exit3"]));
    assert!(text.contains("previous  failed (exit 3)"), "{text}");
    // The `acquired` event says it too.
    let events = env.path("exit3.events");
    let o = env.run(&[
        "run",
        "exit3",
        "--events",
        &events.display().to_string(),
        "--",
        "true",
    ]);
    assert_code(&o, 0);
    let log = read(&events);
    let acquired: serde_json::Value = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "acquired")
        .unwrap_or_else(|| panic!("no acquired event: {log}"));
    assert_eq!(acquired["previous"], "failed", "{acquired}");
    assert_eq!(acquired["previous_exit"], 3, "{acquired}");
}

fn a_killed_command_is_told_failed_with_its_signal(env: &Env) {
    let pidfile = env.path("killed.pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let holder = env.spawn_run(&["killed"], &script);
    assert!(wait_for(Duration::from_secs(10), || !read(&pidfile).is_empty()));
    signal(read(&pidfile).trim().parse().unwrap(), libc::SIGKILL);
    let o = finish(holder, Duration::from_secs(20));
    assert_code(&o, 137);
    assert_eq!(told(env, "killed"), "failed 137");
}

fn a_max_runtime_stop_is_told_failed_124(env: &Env) {
    assert_eq!(
        ended(env, "overran", &["--max-runtime", "300ms"], "sleep 30"),
        124
    );
    assert_eq!(told(env, "overran"), "failed 124");
}

fn a_lock_left_to_expire_is_told_expired(env: &Env) {
    assert_code(&env.run(&["lock", "left", "--ttl", "1s"]), 0);
    assert_eq!(told(env, "left"), "expired -");
}

/// A waiter queued while the lease ran out (its holder never came back) is told expired, and
/// its own clean end is what the one after it hears.
fn a_waiter_through_an_expiry_is_told_expired(env: &Env) {
    assert_code(&env.run(&["lock", "gone", "--ttl", "2s"]), 0);
    let waiter = waiter(env.cmd(), env, "gone");
    let o = finish(waiter, Duration::from_secs(30));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "expired -");
    assert_eq!(told(env, "gone"), "released -");
}

/// A waiter that was queued while the holder ran is told how the holder ended when the lock
/// comes to it (on etcd by a handover, which the waiter learns from its watch).
fn a_waiter_is_told_how_the_holder_before_it_failed(env: &Env) {
    let (started, go) = (env.path("started"), env.path("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done; exit 3",
        started.display(),
        go.display()
    );
    let holder = env.spawn_run(&["queued"], &script);
    assert!(wait_for(Duration::from_secs(10), || started.exists()));
    let waiter = waiter(env.cmd(), env, "queued");
    std::fs::write(&go, "").unwrap();
    assert_code(&finish(holder, Duration::from_secs(20)), 3);
    let o = finish(waiter, Duration::from_secs(30));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "failed 3", "{}", stderr(&o));
}

#[test]
fn a_waiter_on_etcd_is_told_how_the_holder_before_it_failed() {
    let etcd = crate::common::etcd::EtcdServer::start();
    a_waiter_is_told_how_the_holder_before_it_failed(&Env::with_stores(vec![etcd.url()]));
}

macro_rules! on_file_and_redis {
    ($($case:ident),* $(,)?) => {
        mod file {
            $(#[test] fn $case() { super::$case(&crate::common::Env::file()); })*
        }
        mod redis {
            $(#[test] fn $case() { super::$case(&super::redis()); })*
        }
    };
}

on_file_and_redis!(
    a_clean_end_is_told_released,
    a_non_zero_exit_is_told_failed_with_its_code,
    a_killed_command_is_told_failed_with_its_signal,
    a_max_runtime_stop_is_told_failed_124,
    a_lock_left_to_expire_is_told_expired,
    a_waiter_through_an_expiry_is_told_expired,
    a_waiter_is_told_how_the_holder_before_it_failed,
);

/// The issue's case: the holder's `lock` lease runs out while Redis is frozen and a waiter
/// rides the freeze out. The waiter's attempts sent during the freeze are applied when Redis
/// comes back (the first one is granted, since the holder's lease ran out) and given back
/// as too late: that withdrawal must not be taken for the holder's release.
#[test]
fn a_waiter_that_rode_out_a_freeze_is_told_expired_not_released() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    // The holder's lease is on Redis alone; the waiter gives up on each call after 1 s.
    assert_code(&env.run(&["lock", "job", "--ttl", "2s"]), 0);
    let mut c = env.cmd();
    c.args(["--store-timeout", "1s"]);
    let waiter = waiter(c, &env, "job");
    redis.pause();
    // The freeze itself, longer than what is left of the holder's lease.
    std::thread::sleep(Duration::from_secs(4));
    redis.resume();
    let o = finish(waiter, Duration::from_secs(60));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "expired -", "{}", stderr(&o));
}
