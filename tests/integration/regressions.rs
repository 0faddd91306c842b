//! The failure scenarios of the lock designs dlock was seeded from, one test each: what went
//! wrong there must not go wrong here.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

/// Start `n` copies of a dlock command at once and return their exit codes.
fn all_at_once(env: &Env, n: usize, args: &[&str]) -> Vec<i32> {
    let mut children: Vec<Child> = (0..n)
        .map(|_| {
            let mut c = env.cmd();
            c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
            c.spawn().unwrap()
        })
        .collect();
    children
        .iter_mut()
        .map(|c| {
            wait_child(c, Duration::from_secs(60))
                .expect("dlock hung")
                .code()
                .unwrap()
        })
        .collect()
}

fn granted(codes: &[i32]) -> usize {
    assert!(codes.iter().all(|c| *c == 0 || *c == 75), "{codes:?}");
    codes.iter().filter(|c| **c == 0).count()
}

/// The Riak drafts: two workers both read "no lock", then both write theirs. A grant is one
/// atomic conditional operation, so of many workers racing for a free lock exactly one wins.
#[test]
fn two_workers_that_both_read_no_lock_are_not_both_granted() {
    let redis = RedisServer::start();
    for env in [Env::file(), Env::with_stores(vec![redis.url()])] {
        for round in 0..5 {
            let name = format!("job{round}");
            let codes = all_at_once(&env, 12, &["lock", &name, "-n", "--ttl", "30s"]);
            assert_eq!(granted(&codes), 1, "round {round}: {codes:?}");
        }
    }
}

/// A majority counted as `>= n/2` lets two clients in with 2 of 4 stores each. dlock needs
/// n/2+1 = 3 of 4: a client that reaches only two is refused, whichever two, and leaves
/// nothing granted on them.
#[test]
fn two_of_four_stores_are_not_a_majority() {
    let servers: Vec<RedisServer> = (0..4).map(|_| RedisServer::start()).collect();
    let env = Env::with_stores(servers.iter().map(|s| s.url()).collect());
    let halves: [[usize; 2]; 2] = [[0, 1], [2, 3]];
    for (reach, cut) in [(halves[0], halves[1]), (halves[1], halves[0])] {
        cut.iter().for_each(|&i| servers[i].pause());
        let o = env.run(&["--store-timeout", "200ms", "lock", "job", "--ttl", "30s"]);
        cut.iter().for_each(|&i| servers[i].resume());
        assert_code(&o, 69);
        assert!(stderr(&o).contains("3 needed"), "{}", stderr(&o));
        for i in reach {
            let one = Env::with_stores(vec![servers[i].url()]);
            assert_eq!(one.inspect("job")["held"], false, "left granted on {i}");
        }
    }
    // With all four back, a client gets the lock, and a second does not.
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
    assert_code(&env.run(&["lock", "job", "-n"]), 75);
}

/// A crashed ticket holder in a bakery-style queue blocks everyone behind it forever. In
/// dlock a holder that crashed is gone within its ttl, and a waiter killed in the queue does
/// not hold up the ones after it.
#[test]
fn a_crashed_holder_or_waiter_is_freed_within_the_ttl() {
    let redis = RedisServer::start();
    // How long a killed waiter may hold up the line: the file store hears its bell go at
    // once; on Redis its place lapses 2 s after it last came back (README, "waiters in line").
    let stores = [
        (Env::file(), Duration::ZERO),
        (Env::with_stores(vec![redis.url()]), Duration::from_secs(2)),
    ];
    for (env, lapse) in stores {
        // A holder that never comes back to unlock.
        let granted = env.path("holder.events");
        let flag = granted.display().to_string();
        assert_code(
            &env.run(&["lock", "job", "--ttl", "1s", "--events", &flag]),
            0,
        );
        let granted = event_ms(&granted, "acquired").expect("the holder's grant");
        let waiting = env.path("waiter.events");
        let mut queued = env.cmd();
        queued
            .args(["run", "job", "-w", "60s", "--events"])
            .arg(&waiting)
            .args(["--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut queued = queued.spawn().unwrap();
        assert!(
            wait_for(Duration::from_secs(10), || event(&waiting, "waiting")
                .is_some()),
            "the waiter never waited"
        );
        signal(queued.id(), libc::SIGKILL);
        queued.wait().unwrap();
        let next = next_holder(&env, "job");
        assert_eq!(next.previous, "expired");
        next.assert_freed_within(
            (granted, "the crashed holder's grant (ttl 1 s)"),
            Duration::from_millis(1800) + lapse,
        );
    }
}

/// Nested locks taken one at a time, R(P1) then W(P2) against R(P2) then W(P1), deadlock.
/// `multilock` takes both at once, in one canonical order: both loops finish.
#[test]
fn nested_locks_in_opposite_orders_finish_with_multilock() {
    let redis = RedisServer::start();
    for env in [Env::file(), Env::with_stores(vec![redis.url()])] {
        let dlock = env!("CARGO_BIN_EXE_dlock");
        let looping = |first: &str, second: &str| -> Child {
            let script = format!(
                "i=0; while [ $i -lt 40 ]; do \"{dlock}\" $STORES multilock {first} {second} -w 30s -- true || exit 1; i=$((i+1)); done"
            );
            env.shell(&script).spawn().unwrap()
        };
        let mut a = looping("p1", "p2");
        let mut b = looping("p2", "p1");
        let sa = wait_child(&mut a, Duration::from_secs(90)).expect("p1,p2 deadlocked");
        let sb = wait_child(&mut b, Duration::from_secs(90)).expect("p2,p1 deadlocked");
        assert!(sa.success() && sb.success(), "{sa:?} {sb:?}");
        assert_eq!(env.inspect("p1")["held"], false);
        assert_eq!(env.inspect("p2")["held"], false);
    }
}

/// An expired lock scavenged by one client while another re-acquires it: the clean-up of
/// expired holders is part of the grant itself, so of clients racing for an expired lock one
/// gets it, and the expired holder's token can neither release nor extend the new lease.
#[test]
fn an_expired_lock_raced_for_by_many_gets_exactly_one_new_holder() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // The quorum shares its first member with the lone server before it, so each of its names
    // starts with a minority lease there, beside the race: a read that stopped at the first
    // majority's answers once called the new holder's lease on the other two free.
    let envs = [
        Env::file(),
        Env::with_stores(vec![servers[0].url()]),
        Env::with_stores(servers.iter().map(|s| s.url()).collect()),
    ];
    for env in envs {
        for round in 0..3 {
            let name = format!("job{round}");
            // A ttl of 1 s: a store gets a tenth of it to answer (a loaded machine needs it).
            let old = env.run(&["lock", &name, "--ttl", "1s"]);
            assert_code(&old, 0);
            let old = stdout(&old);
            // Expired (as inspect judges it), not yet cleaned up by anyone.
            assert!(
                wait_for(Duration::from_secs(10), || !env.held(&name)),
                "{:?}: {}",
                env.stores,
                env.inspect(&name)
            );
            // A short wait, not -n: on the quorum, racers that split the members between them
            // (none a majority) try again after a jittered pause; with -n a split is 75 for
            // every one of them (it happened once in a loaded full run).
            let codes = all_at_once(&env, 10, &["lock", &name, "-w", "3s", "--ttl", "30s"]);
            assert_eq!(granted(&codes), 1, "round {round}: {codes:?}");
            assert_code(&env.run(&["unlock", &name, "--token", &old]), 1);
            assert_code(&env.run(&["extend", &name, "--token", &old]), 1);
            let v = env.inspect(&name);
            assert_eq!(v["held"], true, "{:?} round {round}: {v}", env.stores);
            assert_eq!(v["holders"].as_array().unwrap().len(), 1, "{v}");
        }
    }
}

/// A delete that a down node missed must not bring the lease back when the node returns:
/// the node that comes back still holds the old lease, but one store of three is no majority,
/// so the lock is free, the old token cannot extend it, and a new holder gets it.
#[test]
fn a_released_lock_is_not_resurrected_when_a_node_comes_back() {
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]))
        .collect();
    let env = Env::with_stores(servers.iter().map(|s| s.url()).collect());
    let token = stdout(&env.run(&["lock", "job", "--ttl", "30s"]));
    servers[0].kill();
    assert_code(&env.run(&["unlock", "job", "--token", &token]), 0);
    // Back from its append-only file, with the lease it had when it went down.
    servers[0].restart();
    let alone = Env::with_stores(vec![servers[0].url()]);
    assert_eq!(
        alone.inspect("job")["held"],
        true,
        "the node kept the old lease"
    );
    let v = env.inspect("job");
    assert_eq!(v["held"], false, "{v}");
    assert_code(&env.run(&["extend", "job", "--token", &token]), 1);
    let new = env.run(&["--json", "lock", "job", "-n"]);
    assert_code(&new, 0);
    assert_code(&env.run(&["lock", "job", "-n"]), 75);
    // The old token cannot take the new holder's lease away either.
    assert_code(&env.run(&["unlock", "job", "--token", &token]), 1);
    assert_eq!(env.inspect("job")["held"], true);
}
