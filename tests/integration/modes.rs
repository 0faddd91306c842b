//! `--shared` (readers) and `--limit K` (a semaphore) through the command line, on the
//! default file store; the modes' rules on every store are in conformance.rs.

use std::process::Child;
use std::time::Duration;

use crate::common::*;

/// `c`, a `dlock lock NAME -w`, waits: the store lists it among the waiters of `name`, and it
/// has not exited (a grant would have ended it).
fn queued(env: &Env, name: &str, c: &mut Child) -> bool {
    let id = c.id();
    wait_for(Duration::from_secs(10), || {
        env.queued(name, id) || c.try_wait().unwrap().is_some()
    }) && c.try_wait().unwrap().is_none()
}

/// `c` is still not granted after a window in which a wrong grant would show (a safety
/// window: a grant that does not happen has nothing to wait for).
fn still_waiting(c: &mut Child) -> bool {
    std::thread::sleep(Duration::from_millis(400));
    c.try_wait().unwrap().is_none()
}

fn shared_holders_share_and_an_exclusive_one_waits_for_both(env: &Env) {
    let r1 = stdout(&env.run(&["lock", "db", "--shared"]));
    let r2 = env.run(&["lock", "db", "--shared", "-n"]);
    assert_code(&r2, 0);
    assert_code(&env.run(&["lock", "db", "-n"]), 75);
    let mut writer = env.spawn(&["lock", "db", "-w", "20s"]);
    assert!(queued(env, "db", &mut writer));
    assert_code(&env.run(&["unlock", "db", "--token", &r1]), 0);
    assert!(
        still_waiting(&mut writer),
        "the writer got in past a reader"
    );
    assert_code(&env.run(&["unlock", "db", "--token", &stdout(&r2)]), 0);
    let status = wait_child(&mut writer, Duration::from_secs(10)).expect("the writer gets in");
    assert!(status.success());
    // And now readers wait for the writer.
    assert_code(&env.run(&["lock", "db", "--shared", "-n"]), 75);
}

fn a_limit_of_two_lets_two_in_and_the_third_waits(env: &Env) {
    let a = stdout(&env.run(&["lock", "pool", "--limit", "2"]));
    assert_code(&env.run(&["lock", "pool", "--limit", "2", "-n"]), 0);
    assert_code(&env.run(&["lock", "pool", "--limit", "2", "-n"]), 75);
    let mut third = env.spawn(&["lock", "pool", "--limit", "2", "-w", "20s"]);
    assert!(queued(env, "pool", &mut third));
    assert_code(&env.run(&["unlock", "pool", "--token", &a]), 0);
    let status = wait_child(&mut third, Duration::from_secs(10)).expect("the third gets in");
    assert!(status.success());
}

/// Two shared `run`s are inside at the same moment: each child waits until both are in.
fn shared_runs_overlap(env: &Env) {
    let log = env.path("shared.log");
    let script = format!(
        "echo in >> {l}; i=0; while [ $(grep -c in {l}) -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; \
         [ $(grep -c in {l}) -ge 2 ]",
        l = log.display()
    );
    let mut a = env.spawn(&["run", "r", "--shared", "--", "sh", "-c", &script]);
    let mut b = env.spawn(&["run", "r", "--shared", "--", "sh", "-c", &script]);
    assert!(
        wait_child(&mut a, Duration::from_secs(20))
            .unwrap()
            .success()
    );
    assert!(
        wait_child(&mut b, Duration::from_secs(20))
            .unwrap()
            .success()
    );
}

#[test]
fn shared_on_the_file_store() {
    let env = Env::file();
    shared_holders_share_and_an_exclusive_one_waits_for_both(&env);
    shared_runs_overlap(&env);
}

#[test]
fn limit_on_the_file_store() {
    a_limit_of_two_lets_two_in_and_the_third_waits(&Env::file());
}

/// Issue 26: with two `--limit 2` holders, `run --limit 3 -n` got in as a third. A different
/// limit (or `--shared`) waits like any incompatible mode: busy with -n, and it gets in only
/// once the holders of the other limit are gone.
#[test]
fn a_different_limit_never_joins_the_holders() {
    let env = Env::file();
    let a = stdout(&env.run(&["lock", "pool", "--limit", "2"]));
    let b = stdout(&env.run(&["lock", "pool", "--limit", "2"]));
    let third = env.run(&["run", "pool", "--limit", "3", "-n", "--", "true"]);
    assert_code(&third, 75);
    assert_eq!(stderr(&third).lines().count(), 1, "{}", stderr(&third));
    assert_code(&env.run(&["lock", "pool", "--shared", "-n"]), 75);
    assert_code(&env.run(&["unlock", "pool", "--token", &a]), 0);
    let mut waiting = env.spawn(&["lock", "pool", "--limit", "3", "-w", "20s"]);
    assert!(
        queued(&env, "pool", &mut waiting),
        "a limit 3 joined a limit 2 holder"
    );
    assert_code(&env.run(&["unlock", "pool", "--token", &b]), 0);
    let status = wait_child(&mut waiting, Duration::from_secs(10)).expect("it gets in");
    assert!(status.success());
    let held = env.inspect("pool");
    assert_eq!(held["holders"].as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held["holders"][0]["mode"], "limit 3", "{held}");
}
