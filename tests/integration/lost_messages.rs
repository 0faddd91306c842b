//! What `run` says when its lease is lost: the cause once, when it happens, and no claim of a
//! signal dlock did not send.

use std::time::Duration;

use crate::common::*;

/// Start `run job --ttl TTL` whose child writes its pid, and wait until it runs.
fn running_job(env: &Env, ttl: &str) -> (std::process::Child, u32) {
    let pidfile = env.path("child.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let holder = env.spawn_run(&["job", "--ttl", ttl], &script);
    assert!(wait_for(Duration::from_secs(20), || !read(&pidfile)
        .trim()
        .is_empty()));
    (holder, read(&pidfile).trim().parse().unwrap())
}

#[test]
fn a_lost_lease_is_reported_once() {
    let env = Env::file();
    let (holder, _) = running_job(&env, "30s");
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    let o = finish(holder, Duration::from_secs(30));
    assert_code(&o, 70);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no longer held"), "{err}");
}

#[test]
fn a_stopped_dlock_does_not_claim_the_watchdogs_signals() {
    let env = Env::file();
    let (holder, child) = running_job(&env, "1s");
    signal(holder.id(), libc::SIGSTOP);
    // The watchdog stops the child at the lease's deadline, while dlock is still stopped.
    let gone = wait_for(Duration::from_secs(20), || !running(child));
    signal(holder.id(), libc::SIGCONT);
    let o = finish(holder, Duration::from_secs(30));
    assert!(gone, "the watchdog did not stop the child");
    assert_code(&o, 70);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    // Which dlock hears first once it runs again, its watchdog or the store: either way, the
    // command is said to have ended already.
    assert!(
        err.contains("the watchdog stopped the command") || err.contains("had already ended"),
        "{err}"
    );
    assert!(
        !err.contains("SIGTERM") && !err.contains("SIGKILL"),
        "{err}"
    );
}
