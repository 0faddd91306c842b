//! A `dlock run NAME` inside a job that holds NAME on the same stores and namespace runs its
//! command at once, takes nothing and passes its status on (flock's inherited descriptor);
//! `--shared` inside an exclusive hold too; an exclusive run inside a shared hold is refused
//! (64); another name, another store or a lease no longer held is taken as usual (issue 36).

use std::process::Command;
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

/// `sh -c SCRIPT` in the test's dir, with `$DLOCK $STORES` to call dlock as the test does,
/// and `$ELSEWHERE` another store (a file store).
fn shell(env: &Env, script: &str) -> Command {
    let mut c = env.shell(script);
    let elsewhere = format!("file://{}", env.path("store-b").display());
    c.current_dir(env.dir.path())
        .env("DLOCK", env!("CARGO_BIN_EXE_dlock"))
        .env("ELSEWHERE", elsewhere);
    c
}

fn sh(env: &Env, script: &str) -> std::process::Output {
    output_within(shell(env, script), Duration::from_secs(60))
}

/// The steps a job runs under `run job`, each writing its status to a file of its name. Each
/// waits at most 5 s: without pass-through, the first would wait for its own job.
const STEPS: &str = r#"
$DLOCK $STORES run -w 5s job -- sh -c 'exit 3'; echo $? > inner
$DLOCK $STORES run --shared -w 5s job -- true; echo $? > shared
$DLOCK $STORES run -n other -- true 2>/dev/null; echo $? > other
$DLOCK --store "$ELSEWHERE" run -n job -- true 2>/dev/null; echo $? > elsewhere
"#;

fn nested_runs_pass_through(env: &Env) {
    // `other` here, and `job` on another store, are held by someone else.
    assert_code(&env.run(&["lock", "other", "--ttl", "5m"]), 0);
    std::fs::create_dir(env.path("store-b")).unwrap();
    assert_code(
        &sh(env, "$DLOCK --store \"$ELSEWHERE\" lock job --ttl 5m"),
        0,
    );
    std::fs::write(env.path("steps.sh"), STEPS).unwrap();
    assert_code(&sh(env, "$DLOCK $STORES run job -- sh steps.sh"), 0);
    let status = |f: &str| read(&env.path(f)).trim().to_string();
    assert_eq!(status("inner"), "3", "the nested run's status, passed on");
    assert_eq!(status("shared"), "0", "--shared inside an exclusive hold");
    assert_eq!(status("other"), "75", "another name is taken as usual");
    assert_eq!(status("elsewhere"), "75", "another store is taken as usual");

    // Exclusive inside a shared hold: one line, 64, passed on by the outer run.
    let o = sh(
        env,
        "$DLOCK $STORES run --shared job -- sh -c '$DLOCK $STORES run -w 5s job -- true'",
    );
    assert_code(&o, 64);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("this job holds job shared"), "{err}");

    // A job's variables once its lease has ended (copied into another shell, say): the
    // store says the token no longer holds `job`, so it is taken as usual (busy: held by
    // another).
    let o = sh(
        env,
        "$DLOCK $STORES run job -- sh -c 'env | grep ^DLOCK_ > vars' && $DLOCK $STORES lock job",
    );
    assert_code(&o, 0);
    let o = sh(env, "env $(cat vars) $DLOCK $STORES run -n job -- true");
    assert_code(&o, 75);
}

#[test]
fn nested_runs_pass_through_on_the_file_store() {
    nested_runs_pass_through(&Env::file());
}

#[test]
fn nested_runs_pass_through_on_redis() {
    let redis = RedisServer::start();
    nested_runs_pass_through(&Env::with_stores(vec![redis.url()]));
}
