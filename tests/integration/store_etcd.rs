//! What only the etcd store promises, through the real binary against real etcd processes:
//! FIFO waiting, no key left behind, a killed waiter, auth, TLS, and node failures. The store
//! contract (exclusion, fences, previous, modes, multilock, inspect, list) is in
//! conformance.rs; exclusion through the command line in exclusion.rs.

use std::time::{Duration, Instant};

use crate::common::etcd::EtcdServer;
use crate::common::*;

/// One transaction grants every name of a `multilock`, so they share one revision as fence
/// (all or none on every store is in conformance.rs).
#[test]
fn multilock_names_share_one_revision() {
    let etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let o = env.run(&[
        "multilock",
        "a",
        "b",
        "-n",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_FENCE",
    ]);
    assert_code(&o, 0);
    let out = stdout(&o);
    let fences: Vec<&str> = out.split(' ').collect();
    assert_eq!(fences.len(), 2, "{out}");
    assert_eq!(fences[0], fences[1]);
}

#[test]
fn waiters_get_the_lock_in_the_order_they_queued() {
    let etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let go = env.path("go");
    let order = env.path("order");
    let holder = env.hold_until("q", &go);
    let waiting = env.queue_runs("q", 5, |i| format!("echo {i} >> {}", order.display()));
    std::fs::write(&go, "").unwrap();
    assert_code(&finish(holder, Duration::from_secs(20)), 0);
    for w in waiting {
        assert_code(&finish(w, Duration::from_secs(20)), 0);
    }
    let got = std::fs::read_to_string(&order).unwrap();
    assert_eq!(got, "1\n2\n3\n4\n5\n");
}

#[test]
fn an_interrupted_waiter_leaves_no_key_behind() {
    let etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let holder = env.spawn_run(&["busy", "--ttl", "20s"], "sleep 30");
    assert!(wait_for(Duration::from_secs(10), || env.held("busy")));
    let waiter = env.spawn_run(&["busy"], "true");
    assert!(wait_for(Duration::from_secs(10), || env.waiters("busy") == 1));
    assert_eq!(etcd.keys("dlock/default/busy/#q/").len(), 2);
    signal(waiter.id(), libc::SIGINT);
    assert_code(&finish(waiter, Duration::from_secs(10)), 130);
    let left = etcd.keys("dlock/default/busy/#q/");
    assert_eq!(left.len(), 1, "the waiter's entry is still there: {left:?}");
    signal(holder.id(), libc::SIGTERM);
    finish(holder, Duration::from_secs(10));
    assert!(etcd.keys("dlock/default/busy/#q/").is_empty());
}

#[test]
fn a_killed_waiter_holds_up_the_queue_for_a_ttl_at_most() {
    let etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let (released, acquired) = (env.path("holder.events"), env.path("next.events"));
    let flag = |p: &std::path::Path| p.display().to_string();
    let holder = env.spawn_run(
        &["q", "--ttl", "3s", "--events", &flag(&released)],
        "sleep 2",
    );
    assert!(wait_for(Duration::from_secs(10), || env.held("q")));
    let dead = env.spawn_run(&["q", "--ttl", "3s"], "true");
    assert!(wait_for(Duration::from_secs(10), || env.waiters("q") == 1));
    signal(dead.id(), libc::SIGKILL);
    let next = env.spawn_run(&["q", "--ttl", "3s", "--events", &flag(&acquired)], "true");
    assert!(wait_for(Duration::from_secs(10), || env.waiters("q") == 2));
    assert_code(&finish(holder, Duration::from_secs(10)), 0);
    // The release may hand the lock to the dead waiter, whose lease then runs out unrenewed.
    assert_code(&finish(next, Duration::from_secs(10)), 0);
    // By dlock's own clock, from the holder's release to the next one's grant: at most the
    // dead waiter's ttl (3 s), and etcd's expiry of its lease.
    let held_up = event_ms(&acquired, "acquired")
        .unwrap()
        .saturating_sub(event_ms(&released, "released").unwrap());
    assert!(
        held_up < 5500,
        "the dead waiter held the queue up {held_up} ms"
    );
    finish(dead, Duration::from_secs(1));
    assert!(etcd.keys("dlock/default/q/#q/").is_empty());
}

#[test]
fn no_reachable_node_is_exit_69_at_once() {
    let url = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
        free_port(),
        free_port(),
        free_port()
    );
    let env = Env::with_stores(vec![url]);
    let t0 = Instant::now();
    let o = env.run(&["run", "x", "--", "true"]);
    assert_code(&o, 69);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(stderr(&o).contains("cannot reach etcd"), "{}", stderr(&o));
}

#[test]
fn a_wrong_password_is_exit_77_without_showing_it() {
    let mut etcd = EtcdServer::start();
    etcd.enable_auth("right-secret");
    let port = etcd.url().rsplit(':').next().unwrap().to_string();
    let with = |auth: &str| Env::with_stores(vec![format!("etcd://{auth}127.0.0.1:{port}")]);
    let o = with("root:wrong-secret@").run(&["lock", "x", "-n"]);
    assert_code(&o, 77);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("password"), "{err}");
    assert!(!err.contains("wrong-secret"), "{err}");
    assert_code(&with("").run(&["lock", "x", "-n"]), 77);
    let ok = with("root:right-secret@").run(&["run", "x", "--", "true"]);
    assert_code(&ok, 0);
}

#[test]
fn tls_with_a_self_signed_ca() {
    let etcd = EtcdServer::start_tls();
    let env = Env::with_stores(vec![etcd.url()]);
    let o = env.run(&["run", "t", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    assert!(stdout(&o).parse::<u64>().is_ok(), "{}", stdout(&o));
    // Without the CA the server is not trusted.
    let bare = etcd.url().split('?').next().unwrap().to_string();
    let o = Env::with_stores(vec![bare]).run(&["lock", "t", "-n"]);
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn killing_the_leader_keeps_the_lease() {
    let mut etcd = EtcdServer::cluster(3);
    let env = Env::with_stores(vec![etcd.url()]);
    let holder = env.spawn_run(&["lk", "--ttl", "6s"], "sleep 7; echo finished");
    assert!(wait_for(Duration::from_secs(10), || env.held("lk")));
    let leader = etcd.leader();
    etcd.kill(leader);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let o = env.run(&["run", "lk", "-n", "--", "true"]);
        assert_ne!(o.status.code(), Some(0), "a second holder got in");
        std::thread::sleep(Duration::from_millis(300));
    }
    let o = finish(holder, Duration::from_secs(20));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "finished");
    // The lease was still there to release: the next holder is told so.
    let next = env.run(&["run", "lk", "--", "sh", "-c", "echo $DLOCK_PREVIOUS"]);
    assert_code(&next, 0);
    assert_eq!(stdout(&next), "released");
}

#[test]
fn losing_the_majority_stops_the_child_before_the_lease_runs_out() {
    let mut etcd = EtcdServer::cluster(3);
    let env = Env::with_stores(vec![etcd.url()]);
    let ttl = Duration::from_secs(4);
    let holder = env.spawn_run(&["m", "--ttl", "4s"], "sleep 60");
    assert!(wait_for(Duration::from_secs(10), || env.held("m")));
    let t0 = Instant::now();
    etcd.kill(0);
    etcd.kill(1);
    let o = finish(holder, Duration::from_secs(20));
    assert_code(&o, 70);
    // Stopped within one ttl of the last renewal, which was before t0.
    assert!(t0.elapsed() < ttl, "stopped after {:?}", t0.elapsed());
    assert!(
        stderr(&o).contains("could not be renewed"),
        "{}",
        stderr(&o)
    );
}
