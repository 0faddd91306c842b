//! `dlock wait`: until a name is free on a majority of stores, without taking it or joining
//! its queue.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::fan::Linger;
use super::{Engine, EngineError, Wait, wait_any};
use crate::store::{self, Acquire, Listener, LockState, MAX_POLL, StoreResult};

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
        let need = self.majority();
        let give_up_at = wait.give_up_at();
        let probe = probe(name);
        let mut listeners: Option<Vec<Box<dyn Listener>>> = None;
        let mut erred: Vec<usize> = Vec::new();
        let mut rode_out = false;
        loop {
            let results = self
                .fan_out_until(
                    &self.all(),
                    |s| s.inspect(name),
                    |done| free_decided(done, need),
                    Linger::No,
                )
                .await;
            let (mut free, mut held, mut errors) = (0, 0, Vec::new());
            let mut retry_after: Option<Duration> = None;
            for (i, r) in results {
                if r.is_ok() {
                    self.reach.served(i);
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
            if free >= need {
                return Ok(());
            }
            let back = erred.iter().any(|i| !errors.iter().any(|(j, _)| j == i));
            erred = errors.iter().map(|(i, _)| *i).collect();
            if free + held < need {
                if let Some(pause) = self.ride_out(wait, give_up_at, &errors) {
                    rode_out = true;
                    sleep(pause).await;
                    continue;
                }
                return Err(self.unreachable_after(errors, rode_out, wait));
            }
            let now = Instant::now();
            if matches!(wait, Wait::No) || give_up_at.is_some_and(|g| now >= g) {
                return Err(EngineError::NotAcquired);
            }
            if let Some(b) = busy {
                b.send_modify(|n| *n = n.wrapping_add(1));
            }
            if back {
                listeners = None;
            }
            let Some(ls) = listeners.as_mut() else {
                // Listen before reading again, so no release slips between the two.
                listeners = Some(self.listen_all(&probe).await);
                continue;
            };
            let mut pause = retry_after.map_or(MAX_POLL, |r| r.min(MAX_POLL));
            if let Some(g) = give_up_at {
                pause = pause.min(g - now);
            }
            wait_any(ls, pause).await;
        }
    }
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
