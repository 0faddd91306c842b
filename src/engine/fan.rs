//! Calling every store at once, and deciding on the answers of a majority, never on the
//! slowest member (issue 41).
//!
//! A store that accepts requests and never answers (SIGSTOP, a paused VM, a network path that
//! drops packets) would cost every call the whole store timeout. Each call says when the
//! answers in hand decide it (`decided`); stragglers then get only a `Linger` more. A
//! straggler's answer is lost, never its effect: a request it already received is applied
//! when it answers again (a grant there is one the lease's renewals and release cover, on a
//! minority of stores, or that its ttl ends), and the engine gives back in the background
//! what it asked of it (`Engine::give_back_later`).

use std::future::Future;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::time::{Instant, timeout};

use super::{Engine, name_store};
use crate::store::{ErrorKind, Store, StoreError, StoreResult};

/// How long stragglers get once the answers in hand decide a call.
#[derive(Clone, Copy, Debug)]
pub(super) enum Linger {
    /// Not at all: the decision is made (a grant attempt, a renewal). Answers already in
    /// hand are still taken.
    No,
    /// One turn of the runtime, which takes in the answers already on the wire: a live
    /// store a little behind the others is still heard (a release, an extension), where a
    /// timer would cost every call with a slow member a millisecond or two.
    Yield,
    /// As long again as the deciding answers took, and at least `PACE_MIN`: what a read
    /// shows of a live store at the others' pace is its own answer, not "no answer yet".
    Pace,
}

/// The least a read waits for stragglers once a majority answered: a timer's granularity.
const PACE_MIN: Duration = Duration::from_millis(1);

impl Linger {
    fn after(self, took: Duration) -> Duration {
        match self {
            Linger::No | Linger::Yield => Duration::ZERO,
            Linger::Pace => took.max(PACE_MIN),
        }
    }
}

/// What a store that was not waited for answers in its place.
pub(super) fn not_waited_for() -> StoreError {
    StoreError::unavailable("no answer yet (a majority answered first)")
}

impl Engine {
    /// Call every store of `idx` at once, each bounded by the per-store timeout, and wait for
    /// all of them; errors name the store.
    pub(super) async fn fan_out<'a, T, F, Fut>(
        &'a self,
        idx: &[usize],
        f: F,
    ) -> Vec<(usize, StoreResult<T>)>
    where
        F: Fn(&'a dyn Store) -> Fut,
        Fut: Future<Output = StoreResult<T>> + 'a,
    {
        self.fan_out_until(idx, f, |_| false, Linger::No).await
    }

    /// Like `fan_out`, but once `decided` holds for the answers so far, stragglers get only
    /// `linger` more; the ones cut off answer `not_waited_for` and are marked slow (`-v`
    /// names each once).
    pub(super) async fn fan_out_until<'a, T, F, Fut>(
        &'a self,
        idx: &[usize],
        f: F,
        decided: impl Fn(&[(usize, StoreResult<T>)]) -> bool,
        linger: Linger,
    ) -> Vec<(usize, StoreResult<T>)>
    where
        F: Fn(&'a dyn Store) -> Fut,
        Fut: Future<Output = StoreResult<T>> + 'a,
    {
        let t0 = Instant::now();
        let mut pending: FuturesUnordered<_> = idx
            .iter()
            .map(|&i| self.call_one(i, f(self.stores[i].as_ref())))
            .collect();
        let mut out = Vec::with_capacity(idx.len());
        let mut cutoff: Option<Instant> = None;
        loop {
            let next = match cutoff {
                None => pending.next().await,
                Some(c) => match tokio::time::timeout_at(c, pending.next()).await {
                    Ok(n) => n,
                    Err(_) => break,
                },
            };
            let Some(answer) = next else { break };
            out.push(answer);
            if cutoff.is_none() && decided(&out) {
                let now = Instant::now();
                let more = linger.after(now - t0);
                if more.is_zero() {
                    // A timer, even one already due, would cost a tick of the clock.
                    if matches!(linger, Linger::Yield) {
                        tokio::task::yield_now().await;
                    }
                    while let Some(Some(answer)) = pending.next().now_or_never() {
                        out.push(answer);
                    }
                    break;
                }
                cutoff = Some(now + more);
            }
        }
        for &i in idx {
            if !out.iter().any(|(j, _)| *j == i) {
                let s = self.stores[i].as_ref();
                self.reach.cut_off(i, s.describe());
                out.push((i, Err(name_store(s, not_waited_for()))));
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out
    }
}

impl Engine {
    /// One store's call, bounded by the store timeout, after the give-backs sent it before
    /// (taken now: only those); its error names the store, and `reach` hears how it went.
    fn call_one<'a, T>(
        &'a self,
        i: usize,
        call: impl Future<Output = StoreResult<T>> + 'a,
    ) -> impl Future<Output = (usize, StoreResult<T>)> + 'a {
        let (s, limit, reach) = (self.stores[i].as_ref(), self.store_timeout, &self.reach);
        let (behind, before) = (&self.behind[i], self.behind[i].last());
        async move {
            let call = async move {
                if let Some(b) = before {
                    b.await;
                }
                behind.sent();
                call.await
            };
            let r = match timeout(limit, call).await {
                Ok(r) => r,
                Err(_) => {
                    reach.silent(i);
                    Err(StoreError::unavailable(format!(
                        "no answer within {} (raise --store-timeout if the store is slow)",
                        humantime::format_duration(limit)
                    )))
                }
            };
            let r = r.map_err(|e| name_store(s, e));
            match &r {
                Ok(_) => reach.answered(i),
                Err(e) => reach.failed(i, e),
            }
            (i, r)
        }
    }

    /// Every store for an owner-checked call (renew by token, release): decided by
    /// `owner_decided`, then one turn for the answers already on the wire.
    pub(super) async fn fan_out_owner<'a, F, Fut>(&'a self, f: F) -> Vec<(usize, StoreResult<bool>)>
    where
        F: Fn(&'a dyn Store) -> Fut,
        Fut: Future<Output = StoreResult<bool>> + 'a,
    {
        let (need, n) = (self.majority(), self.stores.len());
        let all: Vec<usize> = (0..n).collect();
        self.fan_out_until(&all, f, |done| owner_decided(done, need, n), Linger::Yield)
            .await
    }

    /// Every store, decided once a majority answered (a read, or a call whose every answer
    /// counts alike).
    pub(super) async fn fan_out_majority<'a, T, F, Fut>(
        &'a self,
        f: F,
        linger: Linger,
    ) -> Vec<(usize, StoreResult<T>)>
    where
        F: Fn(&'a dyn Store) -> Fut,
        Fut: Future<Output = StoreResult<T>> + 'a,
    {
        let need = self.majority();
        let all: Vec<usize> = (0..self.stores.len()).collect();
        self.fan_out_until(&all, f, |done| majority_answered(done, need), linger)
            .await
    }

    /// Whether every store yet to answer is silent (`Reach::is_silent`, counting the ones
    /// still opening with `opening`).
    pub(super) fn only_silent_left<T>(
        &self,
        done: &[(usize, StoreResult<T>)],
        opening: bool,
    ) -> bool {
        (0..self.stores.len())
            .filter(|i| !done.iter().any(|(j, _)| j == i))
            .all(|i| self.reach.is_silent(i, opening))
    }
}

/// For an owner-checked call (renew, release, extend): decided once a majority said yes, or
/// so many said no (or that the lease is gone) that a majority can no longer say yes.
pub(super) fn owner_decided(done: &[(usize, StoreResult<bool>)], need: usize, n: usize) -> bool {
    let yes = done.iter().filter(|(_, r)| matches!(r, Ok(true))).count();
    let no = done
        .iter()
        .filter(|(_, r)| match r {
            Ok(false) => true,
            Err(e) => e.kind() == ErrorKind::LeaseGone,
            Ok(true) => false,
        })
        .count();
    yes >= need || no > n - need
}

/// Decided once a majority answered.
pub(super) fn majority_answered<T>(done: &[(usize, StoreResult<T>)], need: usize) -> bool {
    done.iter().filter(|(_, r)| r.is_ok()).count() >= need
}
