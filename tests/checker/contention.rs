//! The delay fault: a few extra clients reach the servers through fault proxies, one server
//! of which (one store of a quorum, one member of an etcd cluster or ZooKeeper ensemble, the
//! master of the name in a Redis Cluster, the only server of a single store) delays every chunk each way by 2/5 of the store timeout
//! (shared among the round trips of a grant where it takes several), so that a grant takes
//! 4/5 of it, for two ttls while they contend with the other clients.
//! Their sections go in the record with everyone's: no overlap, no fence regression.

use std::thread;
use std::time::{Duration, Instant};

use crate::common::proxy::Mode;
use crate::partition::Proxied;
use crate::{Fault, Injected, Run, Setup};

/// How many delayed clients contend with the others.
const DELAYED: usize = 3;

impl Run {
    pub(crate) fn delay_fault(&self, n: usize, setup: &Setup) -> Injected {
        let ttl = self.cfg.ttl;
        let timeout = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let way = Proxied::new(setup);
        let slow = setup.delayed_server(n, way.proxies.len());
        // A grant of several round trips would never fit: the delay is shared among them.
        let delay = timeout * 2 / 5 / setup.round_trips();
        way.proxies[slow].set(Mode::Delay(delay));
        let until = Instant::now() + ttl * 2;
        let codes: Vec<i32> = thread::scope(|s| {
            let runs: Vec<_> = (0..DELAYED)
                .map(|i| {
                    let (way, client) = (&way, format!("d{n}-{i}"));
                    s.spawn(move || {
                        let mut codes = Vec::new();
                        while Instant::now() < until {
                            let mut c = self
                                .dlock_run_on(&way.env, &client, self.cfg.hold)
                                .spawn()
                                .expect("spawn dlock");
                            codes.push(self.finish(&mut c, Duration::from_secs(120)));
                        }
                        codes
                    })
                })
                .collect();
            runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
        });
        let ok = codes.iter().filter(|&&c| c == 0).count();
        Injected {
            fault: Fault::Delay,
            victim: None,
            at: None,
            exit: None,
            outcome: format!(
                "server {slow} of {} delayed {} ms each way for {} ms: {} runs, {ok} exit 0",
                way.proxies.len(),
                delay.as_millis(),
                (ttl * 2).as_millis(),
                codes.len()
            ),
        }
    }
}
