//! `dlock wait`: until a name is free on a majority of stores, without taking it or joining
//! its queue. The wait loop's driver that only reads.

use std::time::Duration;

use super::fan::Linger;
use super::wait::{Budget, Driver, End, Look, Pace, Round, Then};
use super::{Engine, EngineError, Wait};
use crate::store::{self, Acquire, LockState, MAX_POLL, StoreResult};

impl Engine {
    /// Until `name` is free on a majority of stores (no live holder of any mode), without
    /// taking it or joining its queue: `dlock wait`. Woken by the stores' listeners where they
    /// tell a watcher that holds no queue entry (the file store's inotify), and otherwise by
    /// a bounded poll (`MAX_POLL`, or the holders' expiry if sooner). `busy` counts the reads
    /// that found it held, as for `acquire_reporting`.
    pub async fn wait_free(
        &self,
        name: &str,
        wait: Wait,
        busy: Option<&tokio::sync::watch::Sender<u32>>,
    ) -> Result<(), EngineError> {
        let mut free = Free {
            name,
            probe: probe(name),
        };
        self.wait_with(&mut free, Budget::start(wait), busy, std::future::pending())
            .await
    }
}

struct Free<'n> {
    name: &'n str,
    /// What the listeners are opened for.
    probe: Acquire,
}

impl Driver for Free<'_> {
    type Done = ();
    const KEEPS_PLACE: bool = false;

    async fn look(&mut self, engine: &Engine, _queued: bool) -> Round<()> {
        let need = engine.majority();
        let name = self.name;
        let results = engine
            .fan_out_until(
                &engine.all(),
                |s| s.inspect(name),
                |done| free_decided(done, need),
                Linger::No,
            )
            .await;
        let (mut free, mut held, mut errors) = (0, 0, Vec::new());
        let mut retry_after: Option<Duration> = None;
        for (i, r) in results {
            if r.is_ok() {
                engine.reach.served(i);
            }
            match r {
                Ok(st) if st.holders.is_empty() => free += 1,
                Ok(st) => {
                    held += 1;
                    // Free on this store when its last holder's lease runs out.
                    let left = st.holders.iter().map(|h| h.ttl_left_ms).max().unwrap_or(0);
                    let left = Duration::from_millis(left + 1);
                    retry_after = Some(retry_after.map_or(left, |r: Duration| r.min(left)));
                }
                Err(e) => errors.push((i, e)),
            }
        }
        let look = if free >= need {
            Look::Done(())
        } else if free + held < need {
            Look::TooFew
        } else {
            Look::Busy(Pace {
                retry_after,
                patience: MAX_POLL,
                then: Then::Listen,
            })
        };
        Round { look, errors }
    }

    fn listens_for(&self) -> &Acquire {
        &self.probe
    }

    /// Nothing to give back: a read neither queues nor takes.
    async fn end(&mut self, _: &Engine, _: End) {}
}

/// What `wait_free` listens with: listeners are opened for a request; this one is never sent
/// as an attempt.
fn probe(name: &str) -> Acquire {
    Acquire {
        names: vec![name.to_string()],
        modes: vec![store::Mode::Exclusive],
        token: crate::names::new_token(),
        ttl: Duration::from_secs(30),
        meta: String::new(),
        detached: false,
    }
}

/// For `wait_free`'s reads: decided once a majority says the name is free, or a majority
/// says it is held (the rest cannot make it free).
fn free_decided(done: &[(usize, StoreResult<LockState>)], need: usize) -> bool {
    let free = done
        .iter()
        .filter(|(_, r)| r.as_ref().is_ok_and(|st| st.holders.is_empty()))
        .count();
    let held = done
        .iter()
        .filter(|(_, r)| r.as_ref().is_ok_and(|st| !st.holders.is_empty()))
        .count();
    free >= need || held >= need
}
