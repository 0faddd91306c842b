//! The holder's store losing its data under it (the file store's directory deleted, Redis
//! flushed, the name's record deleted from S3) is a lost lease: a second holder may be let in
//! at once, since the store forgot, so the first must stop its command at its next renewal
//! (70), saying why, and not ride the failure out until its old deadline (issue 36).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::s3::{BUCKET, S3Server};
use crate::common::*;

const TTL: Duration = Duration::from_secs(6);

/// `run job --ttl 6s` whose command runs until stopped, once it runs.
fn holder(env: &Env) -> std::process::Child {
    let held = env.path("held");
    let script = format!("touch {}; while :; do sleep 0.1; done", held.display());
    let child = env.spawn_run(&["job", "--ttl", "6s"], &script);
    assert!(
        wait_for(Duration::from_secs(20), || held.exists()),
        "the holder did not start its command"
    );
    child
}

/// After `wipe`, a second `run -n` gets in at once (the store forgot the lease), and while it
/// is inside, the holder stops its command with 70 before its old deadline, with one line
/// that says `why`.
fn the_holder_stops_at_its_next_renewal(env: &Env, wipe: impl FnOnce(), why: &str) {
    let h = holder(env);
    wipe();
    let wiped = Instant::now();
    let (inside, done) = (env.path("second"), env.path("done"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        inside.display(),
        done.display()
    );
    let second = env.spawn_run(&["job", "-n"], &script);
    assert!(
        wait_for(Duration::from_secs(20), || inside.exists()),
        "the second holder was not let in"
    );
    let o = finish(h, Duration::from_secs(30));
    assert!(wiped.elapsed() < TTL, "learnt only at the old deadline");
    std::fs::write(&done, "").unwrap();
    assert_code(&finish(second, Duration::from_secs(30)), 0);
    assert_code(&o, 70);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("the lease on job was lost"), "{err}");
    assert!(err.contains(why), "{err}");
}

/// The file store's directory as the test's `Env::file` names it.
fn store_dir(env: &Env) -> PathBuf {
    env.path("runtime/dlock")
}

#[test]
fn a_deleted_file_store_is_a_lost_lease() {
    let env = Env::file();
    let dir = store_dir(&env);
    the_holder_stops_at_its_next_renewal(
        &env,
        || std::fs::remove_dir_all(&dir).unwrap(),
        "was the store's data deleted?",
    );
}

/// Nobody makes the directory again: the holder's renewal finds it gone, says so, and does
/// not create it again as if it held the lock there.
#[test]
fn a_deleted_file_store_directory_is_not_made_again_by_the_holder() {
    let env = Env::file();
    let dir = store_dir(&env);
    let h = holder(&env);
    std::fs::remove_dir_all(&dir).unwrap();
    let o = finish(h, Duration::from_secs(30));
    assert_code(&o, 70);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "the store's directory {} was deleted",
            dir.join("default").display()
        )),
        "{err}"
    );
    assert!(!dir.exists(), "the holder made the store's directory again");
}

#[test]
fn a_flushed_redis_is_a_lost_lease() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    the_holder_stops_at_its_next_renewal(
        &env,
        || assert!(redis.cmd("FLUSHALL").contains("OK")),
        "was the store's data deleted?",
    );
}

/// The name's record (`NAMESPACE/lock/NAME`) deleted behind dlock's back.
#[test]
fn a_deleted_s3_record_is_a_lost_lease() {
    let s3 = S3Server::start();
    let env = Env::with_stores(vec![s3.url()]);
    the_holder_stops_at_its_next_renewal(
        &env,
        || s3.delete(&format!("/buckets/{BUCKET}/default/lock/job")),
        "was the store's data deleted?",
    );
}
