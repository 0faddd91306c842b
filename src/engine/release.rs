//! Giving a held lease back when a store does not answer (issue 41).
//!
//! A release that gets no answer in time (a server busy with a crowd of waiters, a
//! connection reset, a server at its connection limit) would leave the lease held until its
//! ttl, and every waiter waiting for that. While the lease is still valid it is worth asking
//! again: the stores that gave no answer are, with backoff and jitter, until a majority has
//! decided, the lease's end (after which the stores let it go by themselves) or `MOST`.
//!
//! dlock exits only after this, so it is timed on the kernel's monotonic clock
//! (`sys::monotonic`, `sys::sleep_kernel`), never on the runtime's timers alone: under a
//! preloaded libfaketime (which a job's tests may use) those read a bent clock, and a clock
//! set back an hour once kept a release asked again, and dlock running, for that hour. With
//! a hard cap on the rounds as well, a bent clock can neither stretch nor stall it; and a
//! clock found bent (`sys::clock_bent`) is not asked again at all.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::fan::owner_decided;
use super::{Engine, Lease, Tally, name_store, timing};
use crate::store::{ErrorKind, Outcome, StoreError, StoreResult};
use crate::sys;

/// Told of each store whose release is asked again: its error, and how long the lease has
/// left.
pub type Failed<'a> = dyn Fn(&StoreError, Duration) + Send + Sync + 'a;

/// The first pause before asking again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The longest a release is asked again, whatever the lease has left: dlock exits after
/// it, and the lease runs out by its ttl on the stores that still hold it (which is safe).
const MOST: Duration = Duration::from_secs(10);

/// Rounds of asking again at most, whatever any clock says (about `MOST` at full backoff).
const MAX_ROUNDS: u32 = 12;

/// How much longer than the store timeout a try may take on the kernel's clock before it
/// is given up: the runtime's timeout ends it first on an honest clock.
const SLACK: Duration = Duration::from_millis(250);

/// When a release stops being asked again, on the kernel's monotonic clock.
struct Bounds {
    /// The lease's end at the latest.
    lease_end: Duration,
    /// No round begins after it.
    retry_end: Duration,
    /// The longest one try may take.
    per_try: Duration,
}

impl Bounds {
    fn new(lease: &Lease, store_timeout: Duration) -> Bounds {
        let now = sys::monotonic();
        // The deadline is on the runtime's clock: set back an hour, it shows the lease an
        // hour from its end. No lease outlives a ttl from now (a renewal grants no more), so
        // the ttl bounds what a bent clock can claim.
        let left = lease.deadline.saturating_duration_since(Instant::now());
        let left = left.min(lease.req.ttl);
        Bounds {
            lease_end: now + left,
            retry_end: now + left.min(MOST),
            per_try: store_timeout + SLACK,
        }
    }

    fn lease_left(&self) -> Duration {
        self.lease_end.saturating_sub(sys::monotonic())
    }

    /// Whether a round that would begin `after` from now begins in time.
    fn allow(&self, after: Duration) -> bool {
        sys::monotonic() + after < self.retry_end
    }
}

impl Engine {
    /// Owner-checked release of a held lease on every store (also those where it was not
    /// granted: a queued entry or a grant whose answer was lost is cleaned up too),
    /// recording `outcome`. While no majority has decided it, the stores that gave no
    /// answer are asked again within `Bounds`; `failed` hears of each before it is.
    pub async fn release_held(
        &self,
        lease: &Lease,
        outcome: Outcome,
        failed: &Failed<'_>,
    ) -> Tally {
        let bounds = Bounds::new(lease, self.store_timeout);
        let (names, token) = (&lease.req.names, &lease.req.token);
        let first = self.fan_out_owner(|s| s.release(names, token, outcome));
        let mut results = match within(bounds.per_try, first).await {
            Some(results) => results,
            None => self
                .all()
                .into_iter()
                .map(|i| (i, self.silent(i)))
                .collect(),
        };
        let (need, n) = (self.majority(), self.stores.len());
        let mut pause = FIRST_PAUSE;
        // On a bent clock every try is cut off at once by the runtime's timers, after its
        // first message went out: on PostgreSQL a cut-off transaction keeps the records'
        // row locks until this process ends, so asking again would only keep the name from
        // the next holder for longer. Left to the lease's expiry, as without the retry.
        let rounds = if sys::clock_bent() { 0 } else { MAX_ROUNDS };
        for _ in 0..rounds {
            let again = unanswered(&results);
            let wait = timing::jitter(pause, 0.5);
            if owner_decided(&results, need, n) || again.is_empty() || !bounds.allow(wait) {
                break;
            }
            for (_, r) in results.iter().filter(|(i, _)| again.contains(i)) {
                if let Err(e) = r {
                    failed(e, bounds.lease_left());
                }
            }
            sys::sleep_kernel(wait).await;
            let call = self.fan_out(&again, |s| s.release(names, token, outcome));
            let Some(answers) = within(bounds.per_try, call).await else {
                break;
            };
            for (i, r) in answers {
                results.retain(|(j, _)| *j != i);
                results.push((i, r));
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
        self.tally(results)
    }

    /// What store `i` answered a try that the kernel's clock cut short.
    fn silent(&self, i: usize) -> StoreResult<bool> {
        let e = StoreError::unavailable("no answer to the release in time");
        Err(name_store(self.stores[i].as_ref(), e))
    }
}

/// `call`, unless `limit` passes first on the kernel's clock.
async fn within<T>(limit: Duration, call: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        r = call => Some(r),
        _ = sys::sleep_kernel(limit) => None,
    }
}

/// The stores whose last answer was none (an outage), worth asking again.
fn unanswered(results: &[(usize, StoreResult<bool>)]) -> Vec<usize> {
    results
        .iter()
        .filter(|(_, r)| matches!(r, Err(e) if e.kind() == ErrorKind::Unavailable))
        .map(|(i, _)| *i)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Bounds, MAX_ROUNDS};
    use crate::engine::down::Down;
    use crate::engine::tests::request;
    use crate::engine::{Engine, Lease};
    use crate::store::{Outcome, StoreError};
    use crate::sys;

    /// A store that never answers, and a lease whose deadline the runtime's clock shows an
    /// hour away, as it does once libfaketime sets that clock back an hour: the release is
    /// asked again, but no longer than the ttl (on the kernel's clock) and at most
    /// `MAX_ROUNDS` times, and then it ends.
    #[tokio::test]
    async fn a_clock_set_back_cannot_stretch_the_retry() {
        let down = Down {
            desc: "s0".into(),
            error: StoreError::unavailable("connection refused"),
            local: false,
        };
        let e = Engine::from_stores(vec![Arc::new(down)], Duration::from_millis(100));
        let ttl = Duration::from_millis(600);
        let lease = Lease {
            req: request(ttl),
            grants: Vec::new(),
            deadline: Instant::now() + Duration::from_secs(3600),
        };
        let told = Mutex::new(Vec::new());
        let start = sys::monotonic();
        let failed = |_: &StoreError, left: Duration| told.lock().unwrap().push(left);
        let release = e.release_held(&lease, Outcome::Released, &failed);
        // A safety bound only: the retry it guards against would run for the hour.
        let tally = tokio::time::timeout(Duration::from_secs(60), release)
            .await
            .expect("the release was asked again past its bounds");
        let took = sys::monotonic() - start;
        let told = told.into_inner().unwrap();
        assert_eq!(tally.yes, 0);
        assert!(!told.is_empty(), "never asked again");
        assert!(told.len() <= MAX_ROUNDS as usize, "{} rounds", told.len());
        assert!(told.iter().all(|left| *left <= ttl), "{told:?}");
        let most = ttl + Bounds::new(&lease, e.store_timeout).per_try;
        assert!(took <= most, "took {took:?}, more than {most:?}");
    }
}
