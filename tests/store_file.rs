//! The embedded file store, through the real binary: exclusion, fences, expiry, previous.

mod common;

use common::*;

#[test]
fn lock_prints_a_token_and_a_second_lock_is_busy() {
    let env = Env::file();
    let first = env.run(&["lock", "job", "--ttl", "10s"]);
    assert_code(&first, 0);
    let token = stdout(&first);
    assert_eq!(token.len(), 32, "{token}");
    let second = env.run(&["lock", "job", "-n"]);
    assert_code(&second, 75);
    assert!(stdout(&second).is_empty());
    assert_code(&env.run(&["unlock", "job", "--token", &token]), 0);
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}
