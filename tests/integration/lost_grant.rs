//! A grant the store applied but whose reply the client never heard (issue 18): the client
//! must not enter, and must give the orphaned grant back at once, as design rule 4 says,
//! instead of leaving the lock blocked for the whole ttl. The reply is lost in the fault
//! proxy: it delays the traffic so that the grant is seen applied on the store before its
//! answer is due back, and is then switched to drop every reply (the release's too).

use std::time::Duration;

use crate::common::etcd::EtcdServer;
use crate::common::proxy::{Mode, Proxy};
use crate::common::redis::RedisServer;
use crate::common::*;

/// How long the proxy holds each chunk each way: the window in which the test sees the grant
/// applied and drops its answer.
const DELAY: Duration = Duration::from_millis(700);

/// `scheme` is the store's URL scheme; `port` the node the proxy stands in front of.
fn an_unheard_grant_is_given_back(scheme: &str, port: u16) {
    let proxy = Proxy::to_port(port);
    let direct = Env::with_stores(vec![format!("{scheme}://127.0.0.1:{port}")]);
    let behind = Env::with_stores(vec![format!("{scheme}://{}", proxy.addr())]);
    proxy.set(Mode::Delay(DELAY));
    // The store timeout leaves room for the delayed round trips before the grant.
    let client = behind.spawn(&["--store-timeout", "5s", "lock", "job", "-n", "--ttl", "20s"]);
    let applied = wait_for(Duration::from_secs(20), || {
        direct.inspect("job")["held"] == true
    });
    proxy.set(Mode::DropReplies);
    assert!(applied, "the grant never reached the store");
    let o = finish(client, Duration::from_secs(30));
    assert_ne!(
        code(&o),
        0,
        "the grant's answer crossed before the proxy dropped it: the test did not lose it"
    );
    assert_code(&o, 69);
    // Well within the 20 s ttl, someone else gets the lock.
    assert_code(&direct.run(&["lock", "job", "-w", "5s", "--ttl", "20s"]), 0);
}

#[test]
fn an_unheard_grant_on_etcd_is_given_back() {
    let etcd = EtcdServer::start();
    an_unheard_grant_is_given_back("etcd", etcd.client_port(0));
}

#[test]
fn an_unheard_grant_on_redis_is_given_back() {
    let redis = RedisServer::start();
    an_unheard_grant_is_given_back("redis", redis.port);
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
