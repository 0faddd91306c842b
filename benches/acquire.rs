//! In-process latency of one acquire + release through the engine, per store setup: a single
//! Redis, quorums of 3 and 5 independent servers, 5 with one stopped (SIGSTOP), a 3-master
//! Redis Cluster, and the file store. Real servers on loopback, started here.
//!
//! Run: cargo bench --bench acquire [-- ROUNDS]   (default 2000 rounds per setup)

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::redis::{RedisCluster, RedisServer};
use dlock::engine::{Engine, Wait};
use dlock::store::{Acquire, Mode, StoreUrl, url};

fn measure(rt: &tokio::runtime::Runtime, urls: &[StoreUrl], rounds: usize) -> Vec<Duration> {
    rt.block_on(async {
        let engine = Engine::open(urls, "bench", Duration::from_millis(100))
            .await
            .unwrap();
        let mut times = Vec::with_capacity(rounds);
        for i in 0..rounds + rounds / 10 {
            let req = Acquire {
                names: vec!["x".into()],
                token: dlock::names::new_token(),
                mode: Mode::Exclusive,
                ttl: Duration::from_secs(30),
                meta: "{\"bench\":true}".into(),
                detached: false,
            };
            let start = Instant::now();
            engine
                .acquire(&req, Wait::No)
                .await
                .expect("uncontended acquire");
            engine.release(&req.names, &req.token).await;
            // The first tenth warms connections and script caches.
            if i >= rounds / 10 {
                times.push(start.elapsed());
            }
        }
        times.sort();
        times
    })
}

fn row(name: &str, t: &[Duration], base: Option<Duration>) -> Duration {
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
    q(0.5)
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
    let cluster = RedisCluster::start(3, 0);
    let parse = |u: String| url::parse(&u).unwrap();
    let all: Vec<StoreUrl> = servers.iter().map(|s| parse(s.url())).collect();
    let dir = common::temp_dir();
    println!("acquire + release, {rounds} rounds each (µs)\n");
    println!("| setup | min | median | p90 | max | median vs single |");
    println!("|---|---:|---:|---:|---:|---:|");
    let single = row("single Redis", &measure(&rt, &all[..1], rounds), None);
    row(
        "quorum of 3",
        &measure(&rt, &all[..3], rounds),
        Some(single),
    );
    row("quorum of 5", &measure(&rt, &all, rounds), Some(single));
    row(
        "Redis Cluster, 3 masters",
        &measure(&rt, &[parse(cluster.url())], rounds),
        Some(single),
    );
    let file = StoreUrl::File {
        dir: dir.path().to_path_buf(),
    };
    row("file store", &measure(&rt, &[file], rounds), Some(single));
    servers[4].pause();
    // A stopped server costs its store timeout only while connecting; each round then waits
    // for a majority, not for it (the fan-out returns when all answered or timed out).
    row(
        "quorum of 5, one stopped",
        &measure(&rt, &all, rounds / 10),
        Some(single),
    );
    servers[4].resume();
}
