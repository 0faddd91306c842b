//! Giving a held lease back when a store does not answer (issue 41).
//!
//! A release that gets no answer in time (a server busy with a crowd of waiters, a
//! connection reset, a server at its connection limit) would leave the lease held until its
//! ttl, and every waiter waiting for that. While the lease is still valid it is worth asking
//! again: the stores that gave no answer are, with backoff and jitter, until a majority has
//! decided or the lease's own end (after which the stores let it go by themselves).

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};

use super::fan::owner_decided;
use super::{Engine, Tally, timing};
use crate::store::{ErrorKind, Outcome, StoreError, StoreResult};

/// Told of each release try that left the outcome open: a store's error, and how long the
/// lease has left (it is tried again).
pub type Failed<'a> = dyn Fn(&StoreError, Duration) + Send + Sync + 'a;

/// The first pause before asking again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

impl Engine {
    /// Owner-checked release on every store (also those where the lease was not granted: a
    /// queued entry or a grant whose answer was lost is cleaned up too), recording
    /// `outcome`. While no majority has decided it and `until` (the lease's deadline) has
    /// not passed, the stores that gave no answer are asked again; `failed` hears of each
    /// try that left it open. With `until` passed, one try.
    pub async fn release_within(
        &self,
        names: &[String],
        token: &str,
        outcome: Outcome,
        until: Instant,
        failed: &Failed<'_>,
    ) -> Tally {
        let mut results = self
            .fan_out_owner(|s| s.release(names, token, outcome))
            .await;
        let (need, n) = (self.majority(), self.stores.len());
        let mut pause = FIRST_PAUSE;
        while !owner_decided(&results, need, n) {
            let again = unanswered(&results);
            let left = until.saturating_duration_since(Instant::now());
            let wait = timing::jitter(pause, 0.5);
            if again.is_empty() || left <= wait {
                break;
            }
            for (_, r) in &results {
                if let Err(e) = r {
                    failed(e, left);
                }
            }
            sleep(wait).await;
            let call = self.fan_out(&again, |s| s.release(names, token, outcome));
            // Never past the lease's end: the stores let it go by then themselves.
            let Ok(answers) = timeout(until - Instant::now().min(until), call).await else {
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
}

/// The stores whose last answer was none (an outage), worth asking again.
fn unanswered(results: &[(usize, StoreResult<bool>)]) -> Vec<usize> {
    results
        .iter()
        .filter(|(_, r)| matches!(r, Err(e) if e.kind() == ErrorKind::Unavailable))
        .map(|(i, _)| *i)
        .collect()
}
