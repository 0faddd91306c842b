//! The quorum engine through the library: over 1000 grants with servers killed and restarted
//! (with `appendfsync always`, which the README asks of quorum members for fences) between
//! them, every holder sees a higher fence than the one before.

use std::time::Duration;

use crate::common::redis::RedisServer;
use dlock::engine::{Engine, Wait};
use dlock::store::{Acquire, Mode, Outcome, url};

#[test]
fn a_thousand_grants_through_kills_and_restarts_have_rising_fences() {
    let mut servers: Vec<RedisServer> = (0..5)
        .map(|_| RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]))
        .collect();
    let urls: Vec<_> = servers
        .iter()
        .map(|s| url::parse(&s.url()).unwrap())
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut fences: Vec<u64> = Vec::new();
    let mut down: Vec<usize> = Vec::new();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut faults = 0;
    for i in 0..1000 {
        if i % 25 == 0 {
            // Bring everyone back, then take down a random minority (0 to 2 servers).
            for d in down.drain(..) {
                servers[d].restart();
            }
            for _ in 0..(next() % 3) {
                let victim = (next() % 5) as usize;
                if !down.contains(&victim) {
                    servers[victim].kill();
                    down.push(victim);
                    faults += 1;
                }
            }
        }
        let fence = rt.block_on(async {
            let engine = Engine::open(&urls, "default", Duration::from_millis(200))
                .await
                .unwrap();
            let req = Acquire {
                names: vec!["f".into()],
                token: dlock::names::new_token(),
                modes: vec![Mode::Exclusive],
                ttl: Duration::from_secs(5),
                meta: "{}".into(),
                detached: false,
            };
            let lease = engine
                .acquire(&req, Wait::For(Duration::from_secs(5)))
                .await
                .unwrap();
            engine
                .release(&req.names, &req.token, Outcome::Released)
                .await;
            lease.grants[0].fence
        });
        if let Some(&last) = fences.last() {
            assert!(
                fence > last,
                "grant {i}: fence {fence} after {last} (down: {down:?})"
            );
        }
        fences.push(fence);
    }
    assert_eq!(fences.len(), 1000);
    assert!(faults > 20, "only {faults} faults were injected");
}
