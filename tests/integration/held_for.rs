//! "held for" (the busy message, the waiting line, `inspect`'s `since`) counts from the grant,
//! not from the start of the dlock that waited for it (issue 36): a holder that waited and
//! then held shows how long it has held.

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

/// How long the second holder waits before the first lets go: longer than the one second the
/// stamp's precision (whole seconds) may add.
const WAITED: Duration = Duration::from_secs(3);

/// A `run job` whose command signals it runs (touches `inside`) and ends once `go` exists.
fn job(env: &Env, inside: &str, go: &str, extra: &[&str]) -> std::process::Child {
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        env.path(inside).display(),
        env.path(go).display()
    );
    let mut args = vec!["job"];
    args.extend_from_slice(extra);
    env.spawn_run(&args, &script)
}

fn held_for_counts_from_the_grant(env: &Env) {
    let first = job(env, "first", "go-first", &[]);
    assert!(wait_for(Duration::from_secs(20), || env
        .path("first")
        .exists()));
    let events = env.path("events");
    let events_flag = events.display().to_string();
    let second = job(env, "second", "go-second", &["--events", &events_flag]);
    assert!(
        wait_for(Duration::from_secs(20), || read(&events)
            .contains("\"waiting\"")),
        "the second run did not wait"
    );
    std::thread::sleep(WAITED);
    let released = Instant::now();
    std::fs::write(env.path("go-first"), "").unwrap();
    assert!(wait_for(Duration::from_secs(20), || env
        .path("second")
        .exists()));
    // What the busy message tells the next one to come.
    let o = env.run(&["--json", "lock", "job", "-n"]);
    let since_release = released.elapsed();
    assert_code(&o, 75);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let held = Duration::from_millis(v["holder"]["held_for_ms"].as_u64().expect("held_for_ms"));
    assert!(
        held <= since_release + Duration::from_secs(1),
        "held for {held:?}, but the lock was free until {since_release:?} ago: the wait counted"
    );
    std::fs::write(env.path("go-second"), "").unwrap();
    assert_code(&finish(first, Duration::from_secs(30)), 0);
    assert_code(&finish(second, Duration::from_secs(30)), 0);
}

#[test]
fn held_for_counts_from_the_grant_on_the_file_store() {
    held_for_counts_from_the_grant(&Env::file());
}

#[test]
fn held_for_counts_from_the_grant_on_redis() {
    let redis = RedisServer::start();
    held_for_counts_from_the_grant(&Env::with_stores(vec![redis.url()]));
}

/// A queued waiter's entry is written when it queues: the grant must stamp it again (the
/// releaser's handover on etcd, the waiter's own grant on ZooKeeper).
#[test]
fn held_for_counts_from_the_grant_on_etcd() {
    let etcd = crate::common::etcd::EtcdServer::start();
    held_for_counts_from_the_grant(&Env::with_stores(vec![etcd.url()]));
}

#[test]
fn held_for_counts_from_the_grant_on_zookeeper() {
    let zk = crate::common::zk::ZkServer::start();
    held_for_counts_from_the_grant(&Env::with_stores(vec![zk.url()]));
}
