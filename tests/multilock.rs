//! `multilock`: all or none, no deadlock between opposite orders.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::redis::RedisServer;
use common::*;

/// Two loops of 100 rounds taking {a,b} and {b,a}: both finish (no deadlock), and each
/// round ends with both names free again.
fn opposite_orders_finish(env: &Env) {
    let dlock = env!("CARGO_BIN_EXE_dlock");
    let loop_of = |first: &str, second: &str| -> std::process::Child {
        let script = format!(
            "i=0; while [ $i -lt 100 ]; do \"{dlock}\" multilock {first} {second} -w 30s -- true || exit 1; i=$((i+1)); done"
        );
        let mut c = Command::new("sh");
        c.args(["-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Same environment as env.cmd(), but for a shell loop.
        let probe = env.cmd();
        for (k, v) in probe.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if !env.stores.is_empty() {
            c.env("DLOCK_STORE", env.stores.join(","));
        }
        c.spawn().unwrap()
    };
    let mut x = loop_of("a", "b");
    let mut y = loop_of("b", "a");
    let sx = wait_child(&mut x, Duration::from_secs(120)).expect("loop a,b deadlocked");
    let sy = wait_child(&mut y, Duration::from_secs(120)).expect("loop b,a deadlocked");
    assert!(sx.success() && sy.success());
}

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
fn opposite_orders_on_the_file_store() {
    opposite_orders_finish(&Env::file());
}

#[test]
fn opposite_orders_on_redis() {
    let redis = RedisServer::start();
    opposite_orders_finish(&Env::with_stores(vec![redis.url()]));
}

#[test]
fn all_or_none_on_the_file_store() {
    all_or_none(&Env::file());
}

#[test]
fn all_or_none_on_redis() {
    let redis = RedisServer::start();
    all_or_none(&Env::with_stores(vec![redis.url()]));
}
