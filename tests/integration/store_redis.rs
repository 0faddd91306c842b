//! The Redis store's own promises: one release wakes one waiter, an interrupted waiter leaves
//! no key behind, the fence record survives its holders, and TLS works. The store contract is
//! in conformance.rs.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use dlock::store::kind::Location;
use dlock::store::redis::RedisStore;
use dlock::store::{Acquire, Attempt, Mode, Outcome, Store};
use futures_util::future::join_all;

use crate::common::redis::RedisServer;
use crate::common::*;

fn waiter(env: &Env, name: &str) -> Child {
    let mut c = env.cmd();
    c.args(["run", name, "-w", "60s", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().unwrap()
}

fn waiters(redis: &RedisServer, name: &str) -> usize {
    redis
        .cmd(&format!("ZCARD dlock:{{default:{name}}}:w"))
        .trim_start_matches(':')
        .parse()
        .unwrap()
}

pub(crate) fn request(name: &str) -> Acquire {
    Acquire {
        names: vec![name.to_string()],
        token: dlock::names::new_token(),
        modes: vec![Mode::Exclusive],
        ttl: Duration::from_secs(60),
        meta: "{}".into(),
        detached: false,
    }
}

/// `body` on a store client of `redis`, on a runtime of its own: tests of the store's own
/// calls, below the engine.
fn on_store<F: std::future::Future<Output = ()>>(
    redis: &RedisServer,
    body: impl FnOnce(RedisStore) -> F,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let Location::Server(url) = dlock::store::url::parse(&redis.url()).unwrap().at else {
            unreachable!()
        };
        let store = RedisStore::connect(&url, "default", Duration::from_secs(2))
            .await
            .unwrap();
        body(store).await
    });
}

/// Five exclusive waiters queue behind `holder` on `name`; its release must wake exactly
/// one listener, the longest-waiting one, well within `max` (each listens that long).
pub(crate) async fn one_release_wakes_one_of_five(
    store: &dyn Store,
    name: &str,
    holder: &Acquire,
    max: Duration,
) {
    let mut listeners = Vec::new();
    for _ in 0..5 {
        let w = request(name);
        let l = store.listen(&w).await.unwrap();
        let busy = store.try_acquire(&w, true).await.unwrap();
        assert!(matches!(busy, Attempt::Busy { .. }));
        listeners.push(l);
    }
    let names = &holder.names;
    assert!(
        store
            .release(names, &holder.token, Outcome::Released)
            .await
            .unwrap()
    );
    let woken = join_all(listeners.iter_mut().map(|l| async move {
        let start = Instant::now();
        l.changed(max).await;
        start.elapsed() < max * 3 / 4
    }))
    .await;
    assert_eq!(woken.iter().filter(|w| **w).count(), 1, "{woken:?}");
    assert!(woken[0], "the longest-waiting waiter is the one woken");
}

/// Five queued exclusive waiters, one release: exactly one waiter's listener fires.
#[test]
fn one_release_wakes_exactly_one_exclusive_waiter() {
    let redis = RedisServer::start();
    on_store(&redis, |store| async move {
        let holder = request("hot");
        assert!(matches!(
            store.try_acquire(&holder, false).await.unwrap(),
            Attempt::Granted(_)
        ));
        one_release_wakes_one_of_five(&store, "hot", &holder, Duration::from_millis(800)).await;
    });
}

/// Five `dlock run` waiters queue on one holder; after its release each gets its turn, each
/// woken by the previous one's release: nobody waits out a poll interval (500 ms), so the
/// four hand-overs between them, each from one's `released` event to the next one's
/// `acquired` (dlock's own clock; no process start in between), take well under that in all.
#[test]
fn waiters_hand_the_lock_on_one_by_one() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let token = stdout(&env.run(&["lock", "hot", "--ttl", "60s"]));
    let logs: Vec<_> = (0..5).map(|i| env.path(&format!("w{i}.events"))).collect();
    let mut ws: Vec<Child> = logs
        .iter()
        .map(|log| {
            let mut c = env.cmd();
            c.args(["run", "hot", "-w", "60s", "--events"])
                .arg(log)
                .args(["--", "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            c.spawn().unwrap()
        })
        .collect();
    assert!(wait_for(Duration::from_secs(10), || waiters(&redis, "hot") == 5));
    assert_code(&env.run(&["unlock", "hot", "--token", &token]), 0);
    for w in &mut ws {
        assert!(wait_child(w, Duration::from_secs(30)).unwrap().success());
    }
    let mut turns: Vec<(u64, u64)> = logs
        .iter()
        .map(|l| {
            let at = |kind| event_ms(l, kind).unwrap_or_else(|| panic!("no {kind} event"));
            (at("acquired"), at("released"))
        })
        .collect();
    turns.sort();
    let handovers: u64 = turns
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].1))
        .sum();
    assert!(
        handovers < 600,
        "four hand-overs took {handovers} ms: {turns:?}"
    );
}

#[test]
fn a_waiter_interrupted_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let token = stdout(&env.run(&["lock", "q"]));
    let mut w = waiter(&env, "q");
    assert!(wait_for(Duration::from_secs(10), || waiters(&redis, "q") == 1));
    signal(w.id(), libc::SIGINT);
    let status = wait_child(&mut w, Duration::from_secs(10)).unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(waiters(&redis, "q"), 0);
    assert_code(&env.run(&["unlock", "q", "--token", &token]), 0);
    // Only the fence record stays: it must outlive holders so fences keep rising.
    assert_eq!(redis.keys(), vec!["dlock:{default:q}:f".to_string()]);
}

#[test]
fn rediss_with_a_private_ca() {
    let certs = temp_dir();
    let (ca, cert, key) = tls_certs(certs.path());
    let port = free_port();
    let p = |f: &std::path::Path| f.display().to_string();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &p(&cert),
        "--tls-key-file",
        &p(&key),
        "--tls-ca-cert-file",
        &p(&ca),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://localhost:{port}?ca_file={}", p(&ca));
    let env = Env::with_stores(vec![url]);
    let o = env.run(&["run", "tls", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    assert!(
        stdout(&o).parse::<u64>().is_ok_and(|f| f > 0),
        "{}",
        stdout(&o)
    );
    // Without the CA the server's certificate is not trusted: no silent downgrade.
    let untrusted = Env::with_stores(vec![format!("rediss://localhost:{port}")]);
    assert_code(&untrusted.run(&["lock", "tls2"]), 69);
    // TLS against the plain port fails cleanly too.
    let plain = Env::with_stores(vec![format!(
        "rediss://127.0.0.1:{}?ca_file={}",
        redis.port,
        p(&ca)
    )]);
    let o = plain.run(&["lock", "tls3"]);
    assert_code(&o, 69);
    assert_eq!(stderr(&o).lines().count(), 1);
}

/// 30 waiters, each started once the one before it is queued, are served in that order.
#[test]
fn thirty_waiters_are_served_in_arrival_order() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    crate::common::line::assert_served_in_arrival_order(&env, 30);
}

/// A reader that comes while readers hold the name waits behind a queued writer: nobody
/// overtakes an earlier waiter, and the writer is not starved by a stream of readers.
#[test]
fn a_reader_waits_behind_a_queued_writer() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let reader = stdout(&env.run(&["lock", "q", "--shared", "--ttl", "60s"]));
    let order = env.path("order");
    let job = |who: &str| format!("echo {who} >> {}", order.display());
    let mut ws = crate::common::line::Waiters(vec![env.spawn_run(&["q"], &job("writer"))]);
    assert!(wait_for(Duration::from_secs(30), || waiters(&redis, "q") == 1));
    assert_code(&env.run(&["run", "-n", "q", "--shared", "--", "true"]), 75);
    ws.0.push(env.spawn_run(&["q", "--shared"], &job("reader")));
    assert!(wait_for(Duration::from_secs(30), || waiters(&redis, "q") == 2));
    assert_code(&env.run(&["unlock", "q", "--token", &reader]), 0);
    for w in std::mem::take(&mut ws.0) {
        assert_code(&finish(w, Duration::from_secs(30)), 0);
    }
    assert_eq!(read(&order), "writer\nreader\n");
}

/// A waiter killed with SIGKILL, which cannot leave the line itself, holds up the one behind
/// it for no longer than its place lives without its polls: the next waiter is served.
#[test]
fn a_killed_waiter_leaves_the_line() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let token = stdout(&env.run(&["lock", "q", "--ttl", "60s"]));
    let mut first = waiter(&env, "q");
    assert!(wait_for(Duration::from_secs(30), || waiters(&redis, "q") == 1));
    signal(first.id(), libc::SIGKILL);
    let _ = first.wait();
    let order = env.path("order");
    let next = env.spawn_run(&["q"], &format!("echo next >> {}", order.display()));
    let mut next = crate::common::line::Waiters(vec![next]);
    // The second to join the line (it joins behind the dead one, if that is still there).
    let joined = || redis.cmd("HINCRBY dlock:{default:q}:f wseq 0") == ":2";
    assert!(wait_for(Duration::from_secs(30), joined));
    assert_code(&env.run(&["unlock", "q", "--token", &token]), 0);
    assert_code(&finish(next.0.remove(0), Duration::from_secs(30)), 0);
    assert_eq!(read(&order), "next\n");
    assert_eq!(waiters(&redis, "q"), 0, "the dead waiter's place is gone");
}

/// `w` queues behind a holder of its name, which then releases: the release hands `w` the
/// lock. Returns `w`'s listener (the handover not yet heard) and a moment after `w` queued.
async fn handed_over(
    store: &RedisStore,
    w: &Acquire,
) -> (Box<dyn dlock::store::Listener>, tokio::time::Instant) {
    let holder = Acquire {
        token: dlock::names::new_token(),
        ..w.clone()
    };
    assert!(matches!(
        store.try_acquire(&holder, false).await.unwrap(),
        Attempt::Granted(_)
    ));
    let heard = store.listen(w).await.unwrap();
    let busy = store.try_acquire(w, true).await.unwrap();
    assert!(matches!(busy, Attempt::Busy { .. }), "{busy:?}");
    let queued = tokio::time::Instant::now();
    let names = &holder.names;
    let released = store.release(names, &holder.token, Outcome::Released);
    assert!(released.await.unwrap());
    (heard, queued)
}

/// A release hands the lock to the waiter at the front of the line in its own script. A
/// waiter's attempt that crosses that handover (sent before the handover reached it) is
/// granted what it was handed: the same fence, one holder, no place left in line.
#[test]
fn an_attempt_crossing_its_handover_gets_the_handed_lease() {
    let redis = RedisServer::start();
    on_store(&redis, |store| async move {
        let w = request("x");
        let (mut heard, _) = handed_over(&store, &w).await;
        let Attempt::Granted(g) = store.try_acquire(&w, true).await.unwrap() else {
            panic!("the waiter handed the lock was refused it");
        };
        let st = store.inspect("x").await.unwrap();
        assert_eq!(st.holders.len(), 1, "{st:?}");
        assert_eq!(st.holders[0].fence, g[0].fence, "{st:?}");
        assert_eq!(
            st.fence, g[0].fence,
            "a second fence was handed out: {st:?}"
        );
        assert!(st.waiters.is_empty(), "still in line: {st:?}");
        heard.changed(Duration::from_millis(500)).await;
        let released = store.release(&w.names, &w.token, Outcome::Released);
        assert!(released.await.unwrap());
    });
}

/// A waiter that hears its handover in time holds without asking the server, and reckons the
/// lease from the attempt that found it in line: that attempt came before the release, so
/// the server's lease began later and ends later.
#[test]
fn a_handover_heard_in_time_is_reckoned_from_the_attempt_that_queued() {
    let redis = RedisServer::start();
    on_store(&redis, |store| async move {
        let w = request("prompt");
        let (mut heard, queued) = handed_over(&store, &w).await;
        heard.changed(Duration::from_millis(500)).await;
        let Attempt::Granted(g) = store.try_acquire(&w, true).await.unwrap() else {
            panic!("the handover was not taken");
        };
        let started = g[0].started.expect("a handed lease says when it began");
        assert!(
            started <= queued,
            "reckoned from after the attempt that queued"
        );
        let st = store.inspect("prompt").await.unwrap();
        assert_eq!(st.holders.len(), 1, "{st:?}");
        assert_eq!(st.holders[0].fence, g[0].fence, "{st:?}");
    });
}

/// A handover heard late (the waiter was frozen, or busy, past a tenth of its ttl; here past
/// the whole of it) is not taken: the lease would start nearly gone. The waiter asks the
/// server as usual, which grants it anew, with a higher fence.
#[test]
fn a_handover_heard_after_its_lease_ran_out_is_not_taken() {
    let redis = RedisServer::start();
    on_store(&redis, |store| async move {
        let w = Acquire {
            ttl: Duration::from_secs(2),
            ..request("late")
        };
        let (mut heard, _) = handed_over(&store, &w).await;
        let handed = store.inspect("late").await.unwrap().fence;
        tokio::time::sleep(Duration::from_millis(2300)).await;
        heard.changed(Duration::from_millis(500)).await;
        let Attempt::Granted(g) = store.try_acquire(&w, true).await.unwrap() else {
            panic!("the free lock was refused");
        };
        assert_eq!(g[0].started, None, "the late handover was taken");
        assert!(g[0].fence > handed, "{} after {handed}", g[0].fence);
    });
}

/// A waiter frozen (SIGSTOP) when a release handed it the lock, until its lease ran out and
/// another client took the lock, takes nothing of that handover once it resumes: it waits
/// for the new holder, then runs.
#[test]
fn a_waiter_frozen_through_its_handover_waits_for_the_next_holder() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let first = stdout(&env.run(&["lock", "f", "--ttl", "60s"]));
    let log = env.path("log");
    let script = format!("echo ran >> {}", log.display());
    let w = env.spawn_run(&["f", "--ttl", "2s", "-w", "60s"], &script);
    assert!(wait_for(Duration::from_secs(30), || waiters(&redis, "f") == 1));
    signal(w.id(), libc::SIGSTOP);
    assert_code(&env.run(&["unlock", "f", "--token", &first]), 0);
    // Handed to the frozen waiter: held until its 2 s run out, then free for another.
    let mut next = None;
    assert!(wait_for(Duration::from_secs(30), || {
        let o = env.run(&["lock", "f", "-n", "--ttl", "60s"]);
        next = (code(&o) == 0).then(|| stdout(&o));
        next.is_some()
    }));
    signal(w.id(), libc::SIGCONT);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !log.exists(),
        "the resumed waiter ran while another held the lock"
    );
    assert!(running(w.id()), "the resumed waiter gave up");
    assert_code(&env.run(&["unlock", "f", "--token", &next.unwrap()]), 0);
    assert_code(&finish(w, Duration::from_secs(30)), 0);
    assert_eq!(read(&log), "ran\n");
}
