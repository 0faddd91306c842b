//! A grant the store applied but whose reply the client never heard (issue 18): the client
//! must not enter, and the orphaned grant must be given back at once, as design rule 4 says,
//! instead of leaving the lock blocked for the whole ttl. The reply is lost in the fault proxy: it delays the traffic so
//! that the grant is seen applied on the store before its answer is due back, and is then
//! switched to drop every reply (the release's too).

use std::time::{Duration, Instant};

use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::postgres::PgServer;
use crate::common::proxy::{Mode, Proxy};
use crate::common::redis::RedisServer;
use crate::common::*;

/// How long the proxy holds each chunk each way: the window in which the test sees the grant
/// applied and drops its answer.
const DELAY: Duration = Duration::from_millis(700);

/// How a store's unheard grant is lost and how soon it must be free again.
struct Loss {
    /// Each chunk's delay, each way: long enough to see the grant applied before its answer
    /// is due back, short enough for a grant of several round trips to fit the store timeout.
    delay: Duration,
    store_timeout: &'static str,
    ttl: &'static str,
    /// Another client must get the lock within this long of the loss.
    free_within: Duration,
}

/// The grant of a client behind a proxy on `url`'s server at `port` is applied, its answer
/// lost: the client must not enter, and another client gets the lock within `free_within`.
/// The store is watched with a tolerant `inspect` (a SQL grant's open transaction may hold
/// it up).
fn an_unheard_grant_is_freed(url: &str, port: u16, loss: Loss) {
    let proxy = Proxy::to_port(port);
    let direct = Env::with_stores(vec![url.to_string()]);
    let behind = Env::with_stores(vec![
        url.replace(&format!("127.0.0.1:{port}"), &proxy.addr()),
    ]);
    proxy.set(Mode::Delay(loss.delay));
    let client = behind.spawn(&[
        "--store-timeout",
        loss.store_timeout,
        "lock",
        "job",
        "-n",
        "--ttl",
        loss.ttl,
    ]);
    let mut client = client;
    let pid = client.id();
    let mut applied = false;
    wait_for(Duration::from_secs(60), || {
        let o = direct.run(&["--json", "inspect", "job"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        applied = v["holders"]
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h["meta"]["pid"] == pid));
        applied || matches!(client.try_wait(), Ok(Some(_)))
    });
    proxy.set(Mode::DropReplies);
    let lost = Instant::now();
    let o = finish(client, Duration::from_secs(60));
    assert!(applied, "the grant never reached the store: {}", stderr(&o));
    assert_ne!(
        code(&o),
        0,
        "the grant's answer crossed before the proxy dropped it: the test did not lose it"
    );
    assert_code(&o, 69);
    let o = direct.run(&["lock", "job", "-w", "30s", "--ttl", "20s"]);
    assert_code(&o, 0);
    let freed = lost.elapsed();
    assert!(
        freed <= loss.free_within,
        "the lock came free {freed:?} after the lost grant, beyond {:?}",
        loss.free_within
    );
}

/// Every store gives the grant back at once when the attempt gives up: well within the 20 s
/// ttl (the attempt's own 5 s store timeout, then its release, unheard, reaches the store).
/// `delay` is the proxy's, each way.
fn given_back_through(delay: Duration) -> Loss {
    Loss {
        delay,
        store_timeout: "5s",
        ttl: "20s",
        free_within: Duration::from_secs(10),
    }
}

fn given_back() -> Loss {
    given_back_through(DELAY)
}

/// A PostgreSQL release reads before it writes, so while every answer is lost only its blind
/// first message (one simple query) can free the grant. A grant takes a few round trips: a
/// shorter delay.
#[test]
fn an_unheard_grant_on_postgres_is_given_back() {
    let pg = PgServer::start();
    let loss = given_back_through(Duration::from_millis(300));
    an_unheard_grant_is_freed(&pg.url(), pg.port, loss);
}

/// As on PostgreSQL, with one text query. A MariaDB session and grant take many round trips:
/// a short delay.
#[test]
fn an_unheard_grant_on_mariadb_is_given_back() {
    let db = MariaDb::start();
    let loss = given_back_through(Duration::from_millis(100));
    an_unheard_grant_is_freed(&db.url(), db.port, loss);
}

#[test]
fn an_unheard_grant_on_etcd_is_given_back() {
    let etcd = EtcdServer::start();
    let port = etcd.client_port(0);
    an_unheard_grant_is_freed(&format!("etcd://127.0.0.1:{port}"), port, given_back());
}

#[test]
fn an_unheard_grant_on_redis_is_given_back() {
    let redis = RedisServer::start();
    an_unheard_grant_is_freed(&redis.url(), redis.port, given_back());
}

/// On etcd a release hands the lock to the waiter behind it in its own transaction (on the
/// waiter's spare lease), and the waiter learns of it from its watch. With the waiter's
/// replies lost it never does: when it gives up, its release must give the lock back too.
#[test]
fn a_lock_handed_over_unheard_on_etcd_is_given_back() {
    let etcd = EtcdServer::start();
    let port = etcd.client_port(0);
    let proxy = Proxy::to_port(port);
    let direct = Env::with_stores(vec![format!("etcd://127.0.0.1:{port}")]);
    let behind = Env::with_stores(vec![format!("etcd://{}", proxy.addr())]);
    let token = stdout(&direct.run(&["lock", "job", "--ttl", "20s"]));
    let waiter = behind.spawn(&["lock", "job", "-w", "5s", "--ttl", "20s"]);
    assert!(wait_for(Duration::from_secs(10), || {
        direct.inspect("job")["waiters"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
    }));
    proxy.set(Mode::DropReplies);
    assert_code(&direct.run(&["unlock", "job", "--token", &token]), 0);
    // Handed over: held, by the waiter that cannot hear it.
    assert_eq!(direct.inspect("job")["held"], true);
    let o = finish(waiter, Duration::from_secs(30));
    assert_code(&o, 69);
    assert_code(&direct.run(&["lock", "job", "-w", "5s", "--ttl", "20s"]), 0);
}
