//! In-process latency through the engine, with real servers on loopback started here:
//! - one uncontended acquire + release, per store setup: a single Redis, quorums of 3 and 5
//!   independent servers, 5 with one stopped (SIGSTOP), a 3-master Redis Cluster, the file
//!   store, etcd, ZooKeeper, PostgreSQL and MariaDB;
//! - handoff: 8 contenders in one process loop on one lock; the time from a holder starting
//!   its release to the next holder's grant (release, notification, grant). Once with no
//!   work under the lock, where each release overlaps the releaser queueing again, and once
//!   with each holder working 2 ms first, as a critical section does;
//! - the floor under an etcd handoff: one bare put, from its send until a watcher on another
//!   connection sees it. No lock on etcd can hand over faster, since the next holder may
//!   only learn of its grant from a committed write.
//!
//! Run: cargo bench --bench acquire [-- ROUNDS] [SETUP...]   (default 2000 rounds per setup;
//! SETUP: run only the setups whose name contains it, e.g. `etcd`)

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use common::etcd::EtcdServer;
use common::mysql::MariaDb;
use common::postgres::PgServer;
use common::redis::{RedisCluster, RedisServer};
use common::zk::ZkServer;
use dlock::engine::{Engine, Wait};
use dlock::store::url::{self, StoreUrl};
use dlock::store::{Acquire, Mode, Outcome};

/// A fresh request for `name`, exclusive, with a 30 s ttl.
fn exclusive(name: &str, meta: &str) -> Acquire {
    Acquire {
        names: vec![name.into()],
        token: dlock::names::new_token(),
        modes: vec![Mode::Exclusive],
        ttl: Duration::from_secs(30),
        meta: meta.into(),
        detached: false,
    }
}

fn measure(rt: &tokio::runtime::Runtime, urls: &[StoreUrl], rounds: usize) -> Vec<Duration> {
    rt.block_on(async {
        let engine = Engine::open(urls, "bench", Duration::from_millis(100))
            .await
            .unwrap();
        let mut times = Vec::with_capacity(rounds);
        for i in 0..rounds + rounds / 10 {
            let req = exclusive("x", "{\"bench\":true}");
            let start = Instant::now();
            engine
                .acquire(&req, Wait::No)
                .await
                .expect("uncontended acquire");
            engine
                .release(&req.names, &req.token, Outcome::Released)
                .await;
            // The first tenth warms connections and script caches.
            if i >= rounds / 10 {
                times.push(start.elapsed());
            }
        }
        times.sort();
        times
    })
}

/// Handoff gaps: `contenders` tasks take the lock `rounds` times in all, each holding it
/// for `hold` before it releases.
fn handoff(
    rt: &tokio::runtime::Runtime,
    urls: &[StoreUrl],
    contenders: usize,
    rounds: usize,
    hold: Duration,
) -> Vec<Duration> {
    rt.block_on(async {
        let engine = Arc::new(
            Engine::open(urls, "handoff", Duration::from_millis(500))
                .await
                .unwrap(),
        );
        let released: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let gaps: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..contenders)
            .map(|_| {
                let (engine, released, gaps) = (engine.clone(), released.clone(), gaps.clone());
                tokio::spawn(async move {
                    while gaps.lock().unwrap().len() < rounds {
                        let req = exclusive("h", "{}");
                        engine.acquire(&req, Wait::Forever).await.unwrap();
                        if let Some(t) = released.lock().unwrap().take() {
                            gaps.lock().unwrap().push(t.elapsed());
                        }
                        if !hold.is_zero() {
                            tokio::time::sleep(hold).await;
                        }
                        *released.lock().unwrap() = Some(Instant::now());
                        engine
                            .release(&req.names, &req.token, Outcome::Released)
                            .await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let mut g = gaps.lock().unwrap().clone();
        g.sort();
        g
    })
}

const ETCD_FLOOR: &str = "etcd floor: one put, seen by a watcher";

/// The etcd floor: `rounds` puts of one key by one client, each timed from its send until a
/// watch on a second connection delivers it.
fn etcd_floor(rt: &tokio::runtime::Runtime, url: &str, rounds: usize) -> Vec<Duration> {
    rt.block_on(async {
        let url = url.replacen("etcd://", "http://", 1);
        let mut writer = etcd_client::Client::connect([url.as_str()], None)
            .await
            .unwrap();
        let mut watcher = etcd_client::Client::connect([url.as_str()], None)
            .await
            .unwrap();
        let mut events = watcher.watch("floor", None).await.unwrap();
        events.message().await.unwrap();
        let mut times = Vec::with_capacity(rounds);
        for i in 0..rounds {
            let start = Instant::now();
            let (put, seen) =
                tokio::join!(writer.put("floor", i.to_string(), None), events.message());
            put.unwrap();
            assert!(seen.unwrap().is_some_and(|r| !r.events().is_empty()));
            times.push(start.elapsed());
        }
        times.sort();
        times
    })
}

/// Setups named on the command line (any argument that is not a number) run alone.
fn wanted(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.parse::<usize>().is_err() && !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

fn row(
    name: &str,
    run: impl FnOnce() -> Vec<Duration>,
    base: Option<Duration>,
) -> Option<Duration> {
    if !wanted(name) {
        return None;
    }
    let t = run();
    let q = |p: f64| t[((t.len() - 1) as f64 * p) as usize];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let rel = base.map_or("1.00".into(), |b| format!("{:.2}", us(q(0.5)) / us(b)));
    println!(
        "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {rel} |",
        us(t[0]),
        us(q(0.5)),
        us(q(0.9)),
        us(t[t.len() - 1])
    );
    Some(q(0.5))
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let cluster = wanted("Redis Cluster, 3 masters").then(|| RedisCluster::start(3, 0));
    let parse = |u: String| url::parse(&u).unwrap();
    let all: Vec<StoreUrl> = servers.iter().map(|s| parse(s.url())).collect();
    let dir = common::temp_dir();
    let file = StoreUrl::file(dir.path().to_path_buf(), false);
    let etcd = (wanted("etcd, one node") || wanted(ETCD_FLOOR)).then(EtcdServer::start);
    let zk = wanted("ZooKeeper, standalone").then(ZkServer::start);
    let pg = wanted("PostgreSQL").then(PgServer::start);
    let my = wanted("MariaDB").then(MariaDb::start);
    let pg_url = || vec![parse(pg.as_ref().unwrap().url())];
    let my_url = || vec![parse(my.as_ref().unwrap().url())];
    let etcd_url = || vec![parse(etcd.as_ref().unwrap().url())];
    let zk_url = || vec![parse(zk.as_ref().unwrap().url())];

    println!("acquire + release, {rounds} rounds each (µs)\n");
    println!("| setup | min | median | p90 | max | median vs single |");
    println!("|---|---:|---:|---:|---:|---:|");
    let m = |urls: &[StoreUrl], n: usize| measure(&rt, urls, n);
    let single = row("single Redis", || m(&all[..1], rounds), None);
    row("quorum of 3", || m(&all[..3], rounds), single);
    row("quorum of 5", || m(&all, rounds), single);
    row(
        "Redis Cluster, 3 masters",
        || m(&[parse(cluster.as_ref().unwrap().url())], rounds),
        single,
    );
    row(
        "file store",
        || m(std::slice::from_ref(&file), rounds),
        single,
    );
    row("etcd, one node", || m(&etcd_url(), rounds / 4), single);
    row("ZooKeeper, standalone", || m(&zk_url(), rounds / 4), single);
    row("PostgreSQL", || m(&pg_url(), rounds / 4), single);
    row("MariaDB", || m(&my_url(), rounds / 4), single);
    // A stopped server costs its store timeout only while connecting; each round then waits
    // for a majority, not for it (the fan-out returns when all answered or timed out).
    row(
        "quorum of 5, one stopped",
        || {
            servers[4].pause();
            let t = m(&all, rounds / 10);
            servers[4].resume();
            t
        },
        single,
    );

    let h = rounds / 4;
    for (hold, what) in [(0, ""), (2, " that each hold the lock 2 ms")] {
        println!("\nhandoff between 8 contenders{what}, {h} handoffs each (µs)\n");
        println!("| setup | min | median | p90 | max | median vs single Redis |");
        println!("|---|---:|---:|---:|---:|---:|");
        let hold = Duration::from_millis(hold);
        let hand = |urls: &[StoreUrl]| handoff(&rt, urls, 8, h, hold);
        let single = row("single Redis", || hand(&all[..1]), None);
        row("quorum of 3", || hand(&all[..3]), single);
        row("file store", || hand(std::slice::from_ref(&file)), single);
        row("etcd, one node", || hand(&etcd_url()), single);
        // The floor has no holder: it belongs with the handoffs that do no work.
        if hold.is_zero() {
            row(
                ETCD_FLOOR,
                || etcd_floor(&rt, &etcd.as_ref().unwrap().url(), h),
                single,
            );
        }
        row("ZooKeeper, standalone", || hand(&zk_url()), single);
        row("PostgreSQL", || hand(&pg_url()), single);
        row("MariaDB", || hand(&my_url()), single);
    }
}
