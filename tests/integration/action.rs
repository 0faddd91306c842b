//! The GitHub Action (issue 40): `action.yml` passes the offline validator, and the
//! runner-playing script (`tests/action/run.sh`) runs the action's main and post steps as the
//! runner would, on a file store and on Redis: a job cancelled while it waits releases nothing,
//! two jobs take a lock in turn, post after a lost lease warns. And `shell: dlock run NAME --
//! bash -e {0}`, the other way to lock a step: the runner's cancel (SIGINT, then SIGTERM)
//! reaches dlock, which stops the step's script and releases.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A program the action's tests need; never skipped: missing, the test fails with the fix.
fn tool(binary: &str, install: &str) -> PathBuf {
    let found = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(binary))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("`{binary}` is not installed: {install} (scripts/test installs it)")
    })
}

fn node() -> PathBuf {
    tool("node", "run `apt-get install -y nodejs`")
}

#[test]
fn action_yml_passes_the_offline_validator() {
    let validator = tool(
        "action-validator",
        "run `npm install -g @action-validator/cli@0.6.0`",
    );
    let o = Command::new(validator)
        .arg(root().join("action.yml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// `tests/action/run.sh` with dlock on PATH and `store` in DLOCK_STORE.
fn play_the_runner(store: &str) {
    node();
    let mut c = Command::new("bash");
    c.arg(root().join("tests/action/run.sh"))
        .env("PATH", path_with_dlock())
        .env("DLOCK_STORE", store)
        .env_remove("DLOCK_NAMESPACE")
        .stdin(Stdio::null());
    let o = output_within(c, Duration::from_secs(240));
    let log = stdout(&o);
    assert!(o.status.success(), "{log}\n{}", stderr(&o));
    for scenario in ["cancel", "contend", "lost", "several"] {
        assert!(log.contains(&format!("=== {scenario}")), "{log}");
    }
    assert!(!log.contains("FAIL"), "{log}");
}

#[test]
fn the_runner_playing_script_passes_on_the_file_store() {
    let env = Env::file();
    let runtime = env.path("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    play_the_runner(&file_store(&runtime));
}

#[test]
fn the_runner_playing_script_passes_on_redis() {
    let redis = RedisServer::start();
    play_the_runner(&redis.url());
}

/// A `run:` step's script as the runner writes it, under `shell: dlock run NAME -w 20m --
/// bash -e {0}`: it says it started, then works until stopped (`ignore_int`: it ignores
/// SIGINT, as a script with `trap '' INT` does, so that only the SIGTERM stops it).
fn step_script(env: &Env, ignore_int: bool) -> PathBuf {
    let script = env.path("step.sh");
    let trap = if ignore_int { "trap '' INT\n" } else { "" };
    std::fs::write(
        &script,
        format!(
            "{trap}echo started > {}\nsleep 1000 & echo $! > {}\nwait\n",
            env.path("started").display(),
            env.path("sleep.pid").display()
        ),
    )
    .unwrap();
    script
}

/// The runner's cancel of a `run:` step whose shell is dlock: SIGINT to dlock; if the step
/// still runs 7.5 s later (the runner's grace; shorter here), SIGTERM. dlock forwards each to
/// the script's group, the script and what it started stop, and the lock is free.
fn cancel_reaches_dlock_run(env: &Env, ignore_int: bool) {
    let script = step_script(env, ignore_int);
    let mut step = env.spawn(&[
        "run",
        "deploy",
        "-w",
        "20m",
        "--",
        "bash",
        "-e",
        script.to_str().unwrap(),
    ]);
    assert!(wait_for(Duration::from_secs(20), || env
        .path("sleep.pid")
        .exists()
        && !read(&env.path("sleep.pid")).trim().is_empty()));
    let sleeper: u32 = read(&env.path("sleep.pid")).trim().parse().unwrap();
    signal(step.id(), libc::SIGINT);
    if ignore_int {
        // The script ignores SIGINT and goes on (a second is the safety bound of a "not"):
        // the runner's SIGTERM follows.
        let ended = wait_for(Duration::from_secs(1), || {
            step.try_wait().unwrap().is_some()
        });
        assert!(!ended, "the step stopped on an ignored SIGINT");
        assert!(running(sleeper));
        signal(step.id(), libc::SIGTERM);
    }
    let o = finish(step, Duration::from_secs(20));
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(
        wait_for(Duration::from_secs(20), || !running(sleeper)),
        "the step's work outlived the cancel"
    );
    assert_eq!(env.inspect("deploy")["held"], false);
}

#[test]
fn a_cancelled_run_step_stops_on_sigint() {
    cancel_reaches_dlock_run(&Env::file(), false);
}

#[test]
fn a_cancelled_run_step_that_ignores_sigint_stops_on_the_sigterm_after() {
    cancel_reaches_dlock_run(&Env::file(), true);
}
