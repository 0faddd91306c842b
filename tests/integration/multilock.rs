//! `multilock` through the command line: all or none, one token for every name, and the
//! names in canonical order for the child. All or none on every store is in conformance.rs;
//! opposite orders finishing is in regressions.rs.

use crate::common::*;

fn all_or_none(env: &Env) {
    let b = stdout(&env.run(&["lock", "b"]));
    assert_code(&env.run(&["multilock", "a", "b", "-n"]), 75);
    // `a` was not left taken by the failed attempt.
    let a = env.run(&["lock", "a", "-n"]);
    assert_code(&a, 0);
    assert_code(&env.run(&["unlock", "a", "--token", &stdout(&a)]), 0);
    assert_code(&env.run(&["unlock", "b", "--token", &b]), 0);
    // Without a command: one token for all names, printed on stdout.
    let t = env.run(&["multilock", "b", "a", "c"]);
    assert_code(&t, 0);
    let token = stdout(&t);
    for n in ["a", "b", "c"] {
        assert_code(&env.run(&["lock", n, "-n"]), 75);
    }
    for n in ["a", "b", "c"] {
        assert_code(&env.run(&["unlock", n, "--token", &token]), 0);
    }
    // With a command: the child sees every name and fence, in canonical order.
    let o = env.run(&[
        "multilock",
        "b",
        "a",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_NAME; echo $DLOCK_FENCE",
    ]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert_eq!(out.lines().next(), Some("a b"));
    assert_eq!(out.lines().nth(1).unwrap().split(' ').count(), 2);
}

#[test]
fn all_or_none_on_the_file_store() {
    all_or_none(&Env::file());
}

/// `multilock -- CMD` tells `--events` of a store going away and coming back while its
/// command runs, as `run` does: the two share one path.
#[test]
fn multilock_tells_of_an_outage_while_its_command_runs() {
    crate::store_life::a_holder_tells_of_an_outage_while_its_command_runs(&["multilock", "a", "b"]);
}
