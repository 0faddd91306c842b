//! The store contract (`dlock::store::conformance`) run on every store: in memory, the file
//! store, Redis, Redis Cluster, etcd (1 and 3 members), ZooKeeper (standalone and a
//! 3-member ensemble), PostgreSQL (direct and behind PgBouncer) and MariaDB. One module per store, one test per property, so each run shows by name
//! (`conformance::etcd3::fences_rise`). Each store's servers start once for the whole binary;
//! every property works in its own namespace, so they run in parallel on them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dlock::store::conformance::{Caps, Subject};
use dlock::store::memory::MemoryStore;
use dlock::store::{Store, url};

use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::pgbouncer::PgBouncer;
use crate::common::postgres::PgServer;
use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::zk::ZkServer;
use crate::common::{shared, temp_dir};

/// Clients of the store a URL names, one per call, as separate processes would have.
fn by_url(url: &'static str, caps: Caps) -> Subject {
    Subject {
        open: Box::new(move |namespace| {
            let namespace = namespace.to_string();
            Box::pin(async move {
                let parsed = url::parse(url).expect("a valid store URL");
                dlock::store::open(&parsed, &namespace, Duration::from_secs(5))
                    .await
                    .unwrap_or_else(|e| panic!("open {url}: {e}"))
            })
        }),
        caps,
    }
}

fn memory() -> Subject {
    let store = MemoryStore::new("memory");
    Subject {
        open: Box::new(move |_| {
            let store: Arc<dyn Store> = Arc::new(store.clone());
            Box::pin(async move { store })
        }),
        caps: Caps {
            shows_waiters: true,
            dead_waiters_leave: false,
            ..Caps::default()
        },
    }
}

fn file() -> Subject {
    static DIR: OnceLock<String> = OnceLock::new();
    let url = shared(&DIR, temp_dir, |d| format!("file://{}", d.path().display()));
    let caps = Caps {
        shows_waiters: true,
        fifo: true,
        ..Caps::default()
    };
    by_url(url, caps)
}

const REDIS: Caps = Caps {
    shows_waiters: true,
    fifo: true,
    session_leases: false,
    short_ttl: Duration::from_secs(2),
    notified: true,
    dead_waiters_leave: true,
};

fn redis() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, RedisServer::start, RedisServer::url), REDIS)
}

fn redis_cluster() -> Subject {
    static CLUSTER: OnceLock<String> = OnceLock::new();
    let url = shared(&CLUSTER, || RedisCluster::start(3, 0), RedisCluster::url);
    by_url(url, REDIS)
}

const ETCD: Caps = Caps {
    shows_waiters: true,
    fifo: true,
    session_leases: false,
    short_ttl: Duration::from_secs(2),
    notified: true,
    dead_waiters_leave: true,
};

fn etcd1() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, EtcdServer::start, EtcdServer::url), ETCD)
}

fn etcd3() -> Subject {
    static CLUSTER: OnceLock<String> = OnceLock::new();
    let url = shared(&CLUSTER, || EtcdServer::cluster(3), EtcdServer::url);
    by_url(url, ETCD)
}

const ZK: Caps = Caps {
    shows_waiters: true,
    fifo: true,
    session_leases: true,
    short_ttl: Duration::from_secs(2),
    notified: true,
    dead_waiters_leave: true,
};

fn zk1() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, ZkServer::start, ZkServer::url), ZK)
}

fn zk3() -> Subject {
    static ENSEMBLE: OnceLock<String> = OnceLock::new();
    by_url(
        shared(&ENSEMBLE, || ZkServer::ensemble(3), ZkServer::url),
        ZK,
    )
}

/// The SQL stores keep waiter rows (shown by inspect), serve waiters by wake-up rather than
/// in queue order, and judge expiry by the server's clock in milliseconds.
const SQL: Caps = Caps {
    shows_waiters: true,
    fifo: false,
    session_leases: false,
    short_ttl: Duration::from_secs(2),
    notified: true,
    dead_waiters_leave: true,
};

fn postgres() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, PgServer::start, PgServer::url), SQL)
}

/// PostgreSQL behind PgBouncer in transaction mode: the contract must hold with no session
/// state, waiters being woken by looking again where LISTEN does not reach them.
fn pgbouncer() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    let caps = Caps {
        notified: false,
        ..SQL
    };
    by_url(shared(&SERVER, PgBouncer::start, PgBouncer::url), caps)
}

fn mariadb() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, MariaDb::start, MariaDb::url), SQL)
}

/// A runtime per test; the in-memory store's runs on a paused clock that jumps ahead
/// whenever every task waits, so its expiry properties take no real time.
fn runtime(paused: bool) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_all();
    if paused {
        b.start_paused(true);
    }
    b.build().unwrap()
}

/// One module per store with one test per property of the contract.
macro_rules! conformance {
    ($($store:ident (paused: $paused:expr) => $subject:expr;)*) => {$(
        mod $store {
            use super::*;
            conformance!(@properties $paused, $subject;
                grant_is_exclusive,
                concurrent_attempts_grant_one,
                expired_holders_are_dropped_inside_the_grant,
                force_release_drops_every_holder,
                release_checks_the_owner,
                renew_checks_the_owner,
                fences_rise,
                raise_fence_lifts_the_next_fence,
                previous_reads_released_then_expired,
                previous_tells_a_failed_end_and_its_status,
                a_withdrawn_attempt_leaves_the_previous_end,
                names_are_granted_all_or_none,
                mixed_modes_in_one_grant,
                queued_mixed_request_is_granted_in_its_modes,
                shared_mode,
                limit_mode,
                limit_holders_admit_only_their_own_k,
                release_removes_a_queued_entry,
                a_dead_waiter_leaves_within_its_ttl,
                a_release_after_a_cut_off_attempt_takes_only_its_own,
                listener_wakes_on_release,
                queued_writer_and_later_reader,
                inspect_and_list_show_the_live_holders,
                shard_list_is_written_once,
            );
        }
    )*};
    (@properties $paused:expr, $subject:expr; $($property:ident,)*) => {$(
        #[test]
        fn $property() {
            let subject = $subject;
            runtime($paused).block_on(dlock::store::conformance::$property(&subject));
        }
    )*};
}

conformance! {
    memory (paused: true) => memory();
    file (paused: false) => file();
    redis (paused: false) => redis();
    redis_cluster (paused: false) => redis_cluster();
    etcd1 (paused: false) => etcd1();
    etcd3 (paused: false) => etcd3();
    zk1 (paused: false) => zk1();
    zk3 (paused: false) => zk3();
    postgres (paused: false) => postgres();
    pgbouncer (paused: false) => pgbouncer();
    mariadb (paused: false) => mariadb();
}

/// `fence_after_the_store_forgot_is_higher` on the stores a test can wipe, each on a store of
/// its own (the wipe would pull the data from under the other properties).
mod forgetting {
    use std::sync::Mutex;

    use dlock::store::conformance::{Wipe, fence_after_the_store_forgot_is_higher};

    use super::*;

    #[test]
    fn memory() {
        let store = MemoryStore::new("memory");
        let wiped = store.clone();
        let wipe: Wipe = Box::new(move || {
            wiped.forget();
            // A restart takes time; the clock floor moves in whole milliseconds.
            std::thread::sleep(Duration::from_millis(2));
            Box::pin(async {})
        });
        let subject = Subject {
            open: Box::new(move |_| {
                let store: Arc<dyn Store> = Arc::new(store.clone());
                Box::pin(async move { store })
            }),
            caps: Caps::default(),
        };
        runtime(true).block_on(fence_after_the_store_forgot_is_higher(&subject, wipe));
    }

    #[test]
    fn file() {
        let dir = temp_dir();
        let root = dir.path().to_path_buf();
        let url: &'static str = Box::leak(format!("file://{}", root.display()).into_boxed_str());
        let wipe: Wipe = Box::new(move || {
            std::fs::remove_dir_all(&root).unwrap();
            std::fs::create_dir(&root).unwrap();
            // As for the memory store: no wipe and restart take less than a millisecond.
            std::thread::sleep(Duration::from_millis(2));
            Box::pin(async {})
        });
        let subject = by_url(url, Caps::default());
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(&subject, wipe));
    }

    #[test]
    fn redis() {
        let server = Arc::new(Mutex::new(RedisServer::start()));
        let url: &'static str = Box::leak(server.lock().unwrap().url().into_boxed_str());
        let wipe: Wipe = Box::new(move || {
            server.lock().unwrap().start_again_empty();
            Box::pin(async {})
        });
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(
            &by_url(url, REDIS),
            wipe,
        ));
    }
}
