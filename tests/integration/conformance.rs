//! The store contract (`dlock::store::conformance`) run on every store: in memory, the file
//! store, Redis, Redis Cluster, etcd (1 and 3 members), ZooKeeper (standalone and a
//! 3-member ensemble), PostgreSQL (direct and behind PgBouncer), MariaDB, S3 (SeaweedFS) and DynamoDB (DynamoDB Local). One module per store, one test per property, so each run shows by name
//! (`conformance::etcd3::fences_rise`). Each store's servers start once for the whole binary;
//! every property works in its own namespace, so they run in parallel on them.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dlock::store::conformance::{Caps, PROPERTIES, Subject};
use dlock::store::memory::MemoryStore;
use dlock::store::{Store, registry, url};

use crate::common::dynamodb::DynamoServer;
use crate::common::etcd::EtcdServer;
use crate::common::mysql::MariaDb;
use crate::common::nats::NatsServer;
use crate::common::pgbouncer::PgBouncer;
use crate::common::postgres::PgServer;
use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::s3::S3Server;
use crate::common::zk::ZkServer;
use crate::common::{shared, temp_dir};

/// Clients of the store a URL names, one per call, as separate processes would have; what
/// the store offers beyond the contract is what the registry says of its kind.
fn by_url(url: &'static str) -> Subject {
    let parsed = url::parse(url).expect("a valid store URL");
    Subject {
        caps: parsed.kind.caps,
        open: Box::new(move |namespace| {
            let (namespace, parsed) = (namespace.to_string(), parsed.clone());
            Box::pin(async move {
                parsed
                    .open(&namespace, Duration::from_secs(5))
                    .await
                    .unwrap_or_else(|e| panic!("open {url}: {e}"))
            })
        }),
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
    by_url(shared(&DIR, temp_dir, |d| {
        format!("file://{}", d.path().display())
    }))
}

fn redis() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, RedisServer::start, RedisServer::url))
}

fn redis_cluster() -> Subject {
    static CLUSTER: OnceLock<String> = OnceLock::new();
    by_url(shared(
        &CLUSTER,
        || RedisCluster::start(3, 0),
        RedisCluster::url,
    ))
}

fn etcd1() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, EtcdServer::start, EtcdServer::url))
}

fn etcd3() -> Subject {
    static CLUSTER: OnceLock<String> = OnceLock::new();
    by_url(shared(&CLUSTER, || EtcdServer::cluster(3), EtcdServer::url))
}

fn zk1() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, ZkServer::start, ZkServer::url))
}

fn zk3() -> Subject {
    static ENSEMBLE: OnceLock<String> = OnceLock::new();
    by_url(shared(&ENSEMBLE, || ZkServer::ensemble(3), ZkServer::url))
}

fn postgres() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, PgServer::start, PgServer::url))
}

/// PostgreSQL behind PgBouncer in transaction mode: the contract must hold with no session
/// state, waiters being woken by looking again where LISTEN does not reach them.
fn pgbouncer() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    let mut subject = by_url(shared(&SERVER, PgBouncer::start, PgBouncer::url));
    subject.caps.notified = false;
    subject
}

fn mariadb() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, MariaDb::start, MariaDb::url))
}

/// SeaweedFS's S3 gateway, signatures checked. S3 notifies nobody: waiters poll, and are
/// rung by a release on their host (the suite's two clients share one).
fn s3() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, S3Server::start, S3Server::url))
}

fn nats() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, NatsServer::start, NatsServer::url))
}

/// DynamoDB Local. DynamoDB notifies nobody either: waiters poll.
fn dynamodb() -> Subject {
    static SERVER: OnceLock<String> = OnceLock::new();
    by_url(shared(&SERVER, DynamoServer::start, DynamoServer::url))
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

/// One module per store with one test per property of the contract (the suite's own list,
/// `with_conformance_properties!`).
macro_rules! conformance {
    ($($store:ident (paused: $paused:expr) => $subject:expr;)*) => {
        /// The subjects' names, for `every_registered_kind_has_a_subject`.
        const SUBJECTS: &[&str] = &[$(stringify!($store)),*];
        $(conformance!(@store $store, $paused, $subject);)*
    };
    (@store $store:ident, $paused:expr, $subject:expr) => {
        mod $store {
            use super::*;
            dlock::with_conformance_properties!(properties!($paused, $subject;));
        }
    };
}

macro_rules! properties {
    ($paused:expr, $subject:expr; $($property:ident,)*) => {$(
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
    s3 (paused: false) => s3();
    nats (paused: false) => nats();
    dynamodb (paused: false) => dynamodb();
}

/// Every property of the suite runs: each `pub async fn` in it is on its list (and so a test
/// of every store above) or is the one run by hand below.
#[test]
fn every_property_of_the_suite_is_run() {
    let suite = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/store/conformance.rs"
    ));
    let defined: BTreeSet<&str> = suite
        .lines()
        .filter_map(|l| l.strip_prefix("pub async fn "))
        .filter_map(|l| l.split('(').next())
        .collect();
    let mut run: BTreeSet<&str> = PROPERTIES.iter().copied().collect();
    assert_eq!(run.len(), PROPERTIES.len(), "a property listed twice");
    run.insert("fence_after_the_store_forgot_is_higher");
    let never_run: Vec<_> = defined.difference(&run).collect();
    assert!(
        never_run.is_empty(),
        "not on with_conformance_properties!, so never run: {never_run:?}"
    );
    let unknown: Vec<_> = run.difference(&defined).collect();
    assert!(
        unknown.is_empty(),
        "listed but not in the suite: {unknown:?}"
    );
}

/// Every kind of store the registry lists runs the contract: a subject is named after one of
/// its kind's schemes (`+` written `_`), with the number of servers after it where there are
/// several subjects of a kind (`etcd3`).
#[test]
fn every_registered_kind_has_a_subject() {
    for kind in registry::KINDS {
        // A scheme may end in a digit itself (`s3`).
        let named = |subject: &&str| {
            let bare = subject.trim_end_matches(|c: char| c.is_ascii_digit());
            kind.schemes.iter().any(|s| {
                let s = s.name.replace('+', "_");
                *subject == s || bare == s
            })
        };
        assert!(
            SUBJECTS.iter().any(named),
            "no conformance subject for {}:// (subjects: {SUBJECTS:?})",
            kind.scheme()
        );
    }
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
        let subject = by_url(url);
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(&subject, wipe));
    }

    #[test]
    fn nats() {
        let server = Arc::new(Mutex::new(NatsServer::start()));
        let url: &'static str = Box::leak(server.lock().unwrap().url().into_boxed_str());
        let wipe: Wipe = Box::new(move || {
            server.lock().unwrap().start_again_empty();
            Box::pin(async {})
        });
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(&by_url(url), wipe));
    }

    #[test]
    fn redis() {
        let server = Arc::new(Mutex::new(RedisServer::start()));
        let url: &'static str = Box::leak(server.lock().unwrap().url().into_boxed_str());
        let wipe: Wipe = Box::new(move || {
            server.lock().unwrap().start_again_empty();
            Box::pin(async {})
        });
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(&by_url(url), wipe));
    }

    /// The bucket deleted with every record in it, and created again by the next client
    /// (`?create=1`): the counters start again, the clock floor does not.
    #[test]
    fn s3() {
        let server = Arc::new(S3Server::start());
        let url: &'static str = Box::leak(server.url_in("wiped", "&create=1").into_boxed_str());
        let wipe: Wipe = Box::new(move || {
            server.delete("/buckets/wiped");
            Box::pin(async {})
        });
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(&by_url(url), wipe));
    }

    /// The table deleted with every item in it, and created again by the next client
    /// (`?create=1`): the counters start again, the clock floor does not.
    #[test]
    fn dynamodb() {
        let server = Arc::new(DynamoServer::start());
        let url: &'static str = Box::leak(server.url_in("wiped", "&create=1").into_boxed_str());
        let wipe: Wipe = Box::new(move || {
            server.delete_table("wiped");
            Box::pin(async {})
        });
        runtime(false).block_on(fence_after_the_store_forgot_is_higher(&by_url(url), wipe));
    }
}
