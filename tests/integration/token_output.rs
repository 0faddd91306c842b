//! `dlock lock` whose token cannot be written (stdout a full disk, or closed) gives the lock
//! back at once and exits 74 with one line: a lock held for its whole ttl under a token that
//! nobody has helps no one (issue 36).

use std::process::Stdio;
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

/// `lock job` with stdout to /dev/full, then with stdout closed: each 74, one line naming the
/// cause, and the name free right after (`-n` takes it at once).
fn a_token_that_cannot_be_printed_is_released(env: &Env) {
    let mut full = env.cmd();
    full.args(["lock", "job", "--ttl", "5m"])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .stderr(Stdio::piped());
    let o = full.spawn().unwrap().wait_with_output().unwrap();
    assert_code(&o, 74);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert_free(env);

    // A closed descriptor 1: the shell's `>&-`.
    let mut closed = env.shell(&format!(
        "exec {} $STORES lock job --ttl 5m >&-",
        env!("CARGO_BIN_EXE_dlock")
    ));
    closed.stderr(Stdio::piped());
    let o = output_within(closed, Duration::from_secs(60));
    assert_code(&o, 74);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("Bad file descriptor"), "{err}");
    assert_free(env);
}

/// The name is free: a `lock -n` right after gets it (and gives it back).
fn assert_free(env: &Env) {
    let o = env.run(&["lock", "job", "-n"]);
    assert_code(&o, 0);
    assert_code(&env.run(&["unlock", "job", "--token", &stdout(&o)]), 0);
}

#[test]
fn a_token_that_cannot_be_printed_is_released_on_the_file_store() {
    a_token_that_cannot_be_printed_is_released(&Env::file());
}

#[test]
fn a_token_that_cannot_be_printed_is_released_on_redis() {
    let redis = RedisServer::start();
    a_token_that_cannot_be_printed_is_released(&Env::with_stores(vec![redis.url()]));
}
