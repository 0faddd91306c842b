//! The majority-quorum expiring lease, generic over store adapters.
//!
//! One engine for every backend and for N = 1 as much as for N = 5: fan out to all stores in
//! parallel with a per-store timeout, count a majority, keep a conservative client deadline,
//! fence with the bakery rule, and wait for notifications between attempts. The engine knows
//! stores only through `crate::store::Store`.

mod amnesia;
mod down;
mod error;
mod fan;
pub mod fence;
mod free;
mod late;
mod open;
mod reach;
mod reopen;
pub mod session;
pub mod timing;
mod view;

#[cfg(test)]
mod amnesia_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;
use tokio::time::{Instant, sleep};

use fan::{Linger, owner_decided};

use reach::Reach;
pub use reach::{Outage, show as show_outage};
pub use session::{Health, Keeper, Session};
pub use view::{Merged, NameView, QuorumHolder, merge};

pub use error::{EngineError, NOT_WAITED};
use error::{gone_message, unreachable};

use crate::store::url::StoreUrl;
use crate::store::{
    Acquire, Attempt, ErrorKind, Granted, Listener, MAX_POLL, Outcome, Previous, Store, StoreError,
    StoreResult, TagWrite,
};

/// How long `acquire` may wait for a busy lock.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    No,
    For(Duration),
    Forever,
}

impl Wait {
    /// When a wait that starts now runs out, if it ever does.
    fn give_up_at(self) -> Option<Instant> {
        match self {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        }
    }
}

/// A lease held by a majority.
#[derive(Clone, Debug)]
pub struct Lease {
    pub req: Acquire,
    /// Per name, in `req.names` order.
    pub grants: Vec<Granted>,
    /// The client's conservative deadline: before any store lets the lease expire.
    pub deadline: Instant,
}

/// Tally of an owner-checked operation (release, extend) over all stores.
#[derive(Debug, Default)]
pub struct Tally {
    pub yes: usize,
    pub no: usize,
    /// Why some of the `no` said so, where a store could tell (`store::FORGOTTEN`).
    pub gone: Vec<StoreError>,
    pub errors: Vec<StoreError>,
}

pub struct Engine {
    stores: Vec<Arc<dyn Store>>,
    store_timeout: Duration,
    /// Which stores have answered this process, and which are unreachable now.
    reach: Reach,
    /// Per store, the give-backs sent it in the background (see `fan::Behind`).
    behind: Vec<fan::Behind>,
}

impl Engine {
    /// Connect to every store in parallel, waiting for a majority rather than the slowest
    /// (see `open::all`).
    pub async fn open(
        urls: &[StoreUrl],
        namespace: &str,
        store_timeout: Duration,
    ) -> Result<Engine, StoreError> {
        let stores = open::all(urls, namespace, store_timeout).await?;
        Ok(Engine::from_stores(stores, store_timeout))
    }

    pub fn from_stores(stores: Vec<Arc<dyn Store>>, store_timeout: Duration) -> Engine {
        Engine {
            reach: Reach::new(stores.len()),
            behind: stores.iter().map(|_| fan::Behind::default()).collect(),
            stores,
            store_timeout,
        }
    }

    /// The stores that are unreachable now, each with the time it went away and why.
    pub fn outages(&self) -> Vec<Outage> {
        self.reach.outages()
    }

    /// Changes whenever a store goes away or comes back (then read `outages`).
    pub fn reach_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reach.subscribe()
    }

    pub fn stores(&self) -> &[Arc<dyn Store>] {
        &self.stores
    }

    /// How long one store may take to answer one request.
    pub fn store_timeout(&self) -> Duration {
        self.store_timeout
    }

    /// Who to tell, once per store, that a store was found slow: a call was decided by the
    /// others' answers before it answered (`-v`).
    pub fn on_slow(&self, tell: impl Fn(&str) + Send + Sync + 'static) {
        self.reach.on_slow(Box::new(tell));
    }

    /// N/2 + 1: two majorities always share a store.
    pub fn majority(&self) -> usize {
        self.stores.len() / 2 + 1
    }

    fn all(&self) -> Vec<usize> {
        (0..self.stores.len()).collect()
    }

    /// Take the lease for all of `req.names`, waiting as `wait` allows.
    pub async fn acquire(&self, req: &Acquire, wait: Wait) -> Result<Lease, EngineError> {
        self.acquire_reporting(req, wait, None).await
    }

    /// `acquire`, counting up `busy` each time an attempt finds the lock busy and the engine
    /// is about to wait: what the waiting line and the `waiting` event follow. It changes
    /// nothing in how the engine waits.
    pub async fn acquire_reporting(
        &self,
        req: &Acquire,
        wait: Wait,
        report_busy: Option<&tokio::sync::watch::Sender<u32>>,
    ) -> Result<Lease, EngineError> {
        let need = self.majority();
        let give_up_at = wait.give_up_at();
        let mut listeners: Option<Vec<Box<dyn Listener>>> = None;
        // The stores that failed the last attempt, and whether this wait rode out an outage.
        let mut erred: Vec<usize> = Vec::new();
        let mut rode_out = false;
        let initial = req;
        loop {
            let stamped = stamped(initial);
            let req = &stamped;
            let queued = listeners.is_some();
            let t0 = Instant::now();
            let results = self
                .fan_out_until(
                    &self.all(),
                    |s| s.attempt(req, queued),
                    |done| amnesia::decided(done, need),
                    Linger::No,
                )
                .await;
            // Members that lost their data while others remember a live lease abstain.
            let (results, verdict) = amnesia::judge(results);
            let (mut granted, mut busy, mut errors) = (Vec::new(), 0, Vec::new());
            let mut retry_after: Option<Duration> = None;
            for (i, r) in results {
                if r.is_ok() {
                    self.reach.served(i);
                }
                match r {
                    Ok(Attempt::Granted(g)) => granted.push((i, g)),
                    Ok(Attempt::Busy { retry_after: ra }) => {
                        busy += 1;
                        if let Some(ra) = ra {
                            retry_after = Some(retry_after.map_or(ra, |r: Duration| r.min(ra)));
                        }
                    }
                    Err(e) => errors.push((i, e)),
                }
            }
            if granted.len() >= need
                && let Some(lease) = self.settle(req, t0, &granted).await
            {
                if !verdict.to_mark.is_empty() {
                    self.fan_out(&verdict.to_mark, |s| s.mark(&req.names)).await;
                }
                return Ok(lease);
            }
            // Not held: give back what was granted, and whatever an erroring store may have
            // granted without our hearing it. Busy stores granted nothing.
            let dirty: Vec<usize> = granted
                .iter()
                .map(|(i, _)| *i)
                .chain(errors.iter().map(|(i, _)| *i))
                .chain(verdict.abstained.iter().copied())
                .collect();
            let split_vote = !granted.is_empty();
            if !dirty.is_empty() {
                self.release_on(&dirty, req).await;
            }
            let back = erred.iter().any(|i| !errors.iter().any(|(j, _)| j == i));
            erred = errors.iter().map(|(i, _)| *i).collect();
            if granted.len() + busy < need {
                // A wait rides out an outage (a restart, a failover, an election) for its
                // whole budget, once the stores have answered this process.
                if let Some(pause) = self.ride_out(wait, give_up_at, &errors) {
                    rode_out = true;
                    sleep(pause).await;
                    continue;
                }
                // The stores that granted or erred were just released; a busy one may still
                // hold our queue entry. (Not all again: a store that gave no answer would
                // cost another whole store timeout for nothing.)
                let rest: Vec<usize> = self
                    .all()
                    .into_iter()
                    .filter(|i| !dirty.contains(i))
                    .collect();
                if !rest.is_empty() {
                    self.release_on(&rest, req).await;
                }
                return Err(self.unreachable_after(errors, rode_out, wait));
            }
            let now = Instant::now();
            if matches!(wait, Wait::No) || give_up_at.is_some_and(|g| now >= g) {
                if queued {
                    self.release_on(&self.all(), req).await;
                }
                return Err(EngineError::NotAcquired);
            }
            if let Some(b) = report_busy {
                b.send_modify(|n| *n = n.wrapping_add(1));
            }
            // A store that came back lost what it was telling us on the old connection:
            // listen again, on all, before the next attempt.
            if back && listeners.is_some() {
                listeners = Some(self.listen_all(req).await);
                continue;
            }
            let Some(ls) = listeners.as_mut() else {
                // Listen before the next (queued) attempt, so no release slips between them.
                listeners = Some(self.listen_all(req).await);
                continue;
            };
            let mut pause = retry_after.map_or(MAX_POLL, |r| r.min(MAX_POLL));
            if let Some(g) = give_up_at {
                pause = pause.min(g - now);
            }
            if !verdict.abstained.is_empty() {
                // Our own give-backs wake the listeners: look again after the pause instead.
                sleep(pause).await;
            } else if split_vote {
                // Contenders that split the stores between them back off by different amounts.
                sleep(timing::jitter(
                    pause.min(self.store_timeout).min(Duration::from_millis(20)),
                    1.0,
                ))
                .await;
            } else {
                wait_any(ls, pause).await;
            }
        }
    }

    /// A majority granted: apply the bakery rule, then check the lease is still worth having.
    async fn settle(
        &self,
        req: &Acquire,
        t0: Instant,
        granted: &[(usize, Vec<Granted>)],
    ) -> Option<Lease> {
        let answers: Vec<&[Granted]> = granted.iter().map(|(_, g)| g.as_slice()).collect();
        let merged = fence::merge(&answers);
        let lagging: Vec<usize> = granted
            .iter()
            .filter(|(_, g)| fence::behind(g, &merged))
            .map(|(i, _)| *i)
            .collect();
        if !lagging.is_empty() {
            let fences: Vec<u64> = merged.iter().map(|g| g.fence).collect();
            let raised = self
                .fan_out(&lagging, |s| s.raise_fence(&req.names, &fences))
                .await
                .into_iter()
                .filter(|(_, r)| r.is_ok())
                .count();
            if granted.len() - lagging.len() + raised < self.majority() {
                return None;
            }
        }
        // A store that handed over a lease renewed before this attempt reckons it from then.
        let t0 = merged
            .iter()
            .filter_map(|g| g.started)
            .fold(t0, Instant::min);
        timing::validity(req.ttl, t0.elapsed())?;
        Some(Lease {
            req: req.clone(),
            grants: merged,
            deadline: t0 + req.ttl - timing::drift(req.ttl),
        })
    }

    /// Whether a wait that found too few stores answering keeps trying, and if so the pause
    /// before it tries again. It does when it may wait (not `-n`, budget left), every failure
    /// was an outage, and a majority of the stores are known to this process (they answered
    /// when opened, or served an attempt or a read since): then this is the stores' own life
    /// (a restart, a failover, an election), not a wrong URL.
    fn ride_out(
        &self,
        wait: Wait,
        give_up_at: Option<Instant>,
        errors: &[(usize, StoreError)],
    ) -> Option<Duration> {
        let known = self.known();
        // Only an outage is ridden out: not a refusal, a usage error or an answer this
        // version cannot read (a URL naming some other service).
        let outage = errors
            .iter()
            .all(|(_, e)| matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::LeaseGone));
        if matches!(wait, Wait::No) || !outage || known < self.majority() {
            return None;
        }
        let pause = match self.full_for(errors) {
            // A server at its connection limit is asked again sooner at first, then less
            // often the longer it stays full, each waiter at its own pace: a crowd beyond the
            // limit must not keep it full with its own dials.
            Some(full) => timing::jitter(
                (full / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)),
                0.5,
            ),
            None => timing::jitter(self.store_timeout.min(MAX_POLL), 0.5),
        };
        match give_up_at {
            None => Some(pause),
            Some(g) => {
                let left = g.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| pause.min(left))
            }
        }
    }

    /// How long the longest of the stores that turned us away at their connection limit
    /// has been doing so, if any did.
    fn full_for(&self, errors: &[(usize, StoreError)]) -> Option<Duration> {
        errors
            .iter()
            .filter(|(_, e)| e.limit().is_some())
            .map(|(i, _)| {
                self.reach
                    .down_since(*i)
                    .map_or(Duration::ZERO, |t| t.elapsed())
            })
            .max()
    }

    /// The error for too few stores answering; after riding out an outage, each store that
    /// is still unreachable says for how long.
    fn unreachable_after(
        &self,
        errors: Vec<(usize, StoreError)>,
        rode_out: bool,
        wait: Wait,
    ) -> EngineError {
        // A wait that was not ridden out because the stores never answered this process (a
        // wrong URL fails fast by contract) says so: `-w` did not apply.
        let unheard = !rode_out
            && !matches!(wait, Wait::No)
            && self.known() < self.majority()
            && errors
                .iter()
                .all(|(_, e)| e.kind() == ErrorKind::Unavailable)
            // A local file store's error is its answer: nothing was left unheard.
            && !errors.iter().all(|(i, _)| self.stores[*i].local());
        let errors = errors
            .into_iter()
            .map(|(i, e)| match self.reach.down_since(i) {
                Some(since) if rode_out => {
                    let desc = self.stores[i].describe();
                    let what = match e.limit() {
                        Some(_) => "turned away",
                        None => "unreachable",
                    };
                    e.reworded(|m| {
                        let why = m.strip_prefix(desc).unwrap_or(m);
                        let why = why.strip_prefix(": ").unwrap_or(why);
                        let down = reach::show(since.elapsed());
                        format!("{desc}: {what} for {down}: {why}")
                    })
                }
                _ => e,
            })
            .collect();
        match unreachable(errors, self.stores.len(), self.majority()) {
            EngineError::Stores(e) if unheard && e.kind() == ErrorKind::Unavailable => {
                EngineError::Stores(e.reworded(|m| format!("{m} ({NOT_WAITED})")))
            }
            other => other,
        }
    }

    /// Whether a wait on these stores rides out an outage now: a majority of them has
    /// answered this process (see `ride_out`). If not, a wait that finds them unreachable
    /// ends at once, and nobody should be told it is retrying.
    pub fn rides_out(&self) -> bool {
        self.known() >= self.majority()
    }

    /// How many stores have answered this process.
    fn known(&self) -> usize {
        (0..self.stores.len())
            .filter(|&i| self.reach.has_served(i) || self.stores[i].reached())
            .count()
    }

    /// Give back an attempt that did not become a lease (too few grants, granted too late,
    /// given up): no job ran under it, so each store keeps its record of the last holder's
    /// end as it was (`Outcome::Withdrawn`).
    /// A store found slow (a call was just decided without it) is not waited for: it is
    /// given back in the background (`give_back_later`).
    async fn release_on(&self, idx: &[usize], req: &Acquire) {
        let (slow, live): (Vec<usize>, Vec<usize>) =
            idx.iter().partition(|&&i| self.reach.is_slow(i));
        for i in slow {
            self.give_back_later(i, &req.names, &req.token);
        }
        self.fan_out(&live, |s| {
            s.release(&req.names, &req.token, Outcome::Withdrawn)
        })
        .await;
    }

    /// Listen on every store; the listeners of a majority are enough (any live store tells
    /// of a release, and a missed one costs a bounded poll).
    async fn listen_all(&self, req: &Acquire) -> Vec<Box<dyn Listener>> {
        self.fan_out_majority(|s| s.listen(req), Linger::Pace)
            .await
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .collect()
    }

    /// Renew a held lease. Ok: the deadline moved. Err(Lost): a majority can no longer hold
    /// it. Err(Unavailable): too few answered; the caller tries again while time is left.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), EngineError> {
        let t0 = Instant::now();
        if t0 >= lease.deadline {
            return Err(EngineError::Lost(
                "the lease ran out before it could be renewed".into(),
            ));
        }
        let req = &lease.req;
        let (need, n) = (self.majority(), self.stores.len());
        let answers = self
            .fan_out_until(
                &self.all(),
                |s| s.renew(&req.names, &req.token, req.ttl),
                |done| owner_decided(done, need, n),
                Linger::No,
            )
            .await;
        let tally = self.tally(answers);
        if tally.yes >= need && timing::validity(req.ttl, t0.elapsed()).is_some() {
            lease.deadline = lease.deadline.max(t0 + req.ttl - timing::drift(req.ttl));
            return Ok(());
        }
        if tally.no > self.stores.len() - need {
            let why: Vec<String> = tally.gone.iter().map(|e| e.to_string()).collect();
            return Err(EngineError::Lost(gone_message(
                &why,
                tally.no,
                self.stores.len(),
            )));
        }
        Err(unreachable(tally.errors, self.stores.len(), need))
    }

    fn tally(&self, results: Vec<(usize, StoreResult<bool>)>) -> Tally {
        let mut t = Tally::default();
        for (_, r) in results {
            match r {
                Ok(true) => t.yes += 1,
                Ok(false) => t.no += 1,
                // A store that says why the lease is gone (it lost its data) answered "no"
                // as surely as one that only says it is not there.
                Err(e) if e.kind() == ErrorKind::LeaseGone => {
                    t.no += 1;
                    t.gone.push(e);
                }
                Err(e) => t.errors.push(e),
            }
        }
        t
    }

    /// Owner-checked renewal by token, from a process that does not hold the `Lease` (`extend`).
    pub async fn extend(&self, names: &[String], token: &str, ttl: Duration) -> Tally {
        self.tally(self.fan_out_owner(|s| s.renew(names, token, ttl)).await)
    }

    /// Owner-checked release on every store (also those where the lease was not granted: a
    /// queued entry or a grant whose answer was lost is cleaned up too), recording `outcome`.
    pub async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> Tally {
        self.tally(
            self.fan_out_owner(|s| s.release(names, token, outcome))
                .await,
        )
    }

    pub async fn force_release(&self, names: &[String]) -> Tally {
        self.tally(
            self.fan_out_majority(|s| s.force_release(names), Linger::Yield)
                .await,
        )
    }

    /// Every store's shard-list record (`Store::shard_list`), written as `write` says, in
    /// store order. A majority's answers are enough: the records are only ever judged by
    /// majorities (see `crate::shard::record`), and a store that does not answer in time is
    /// left out either way.
    pub async fn shard_lists(&self, tag: &str, write: TagWrite) -> Vec<StoreResult<String>> {
        self.fan_out_majority(|s| s.shard_list(tag, write), Linger::No)
            .await
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    /// Decide an owner-checked operation's outcome from its tally: done by a majority, or by
    /// some store when the rest could not be asked.
    pub fn verdict(&self, tally: Tally) -> Result<usize, EngineError> {
        let need = self.majority();
        if tally.yes >= need || (tally.yes > 0 && tally.yes + tally.errors.len() >= need) {
            return Ok(tally.yes);
        }
        if tally.yes + tally.no < need && !tally.errors.is_empty() && tally.yes == 0 {
            return Err(unreachable(tally.errors, self.stores.len(), need));
        }
        Err(EngineError::NotHolder)
    }
}

/// `req` as one grant attempt sends it: its metadata stamped now, so that a grant says when
/// it was made, not when dlock started to wait for it.
fn stamped(req: &Acquire) -> Acquire {
    Acquire {
        meta: crate::meta::restamped(&req.meta),
        ..req.clone()
    }
}

fn name_store(s: &dyn Store, e: StoreError) -> StoreError {
    e.context(s.describe())
}

/// Until any listener reports a change, or `max` passes.
async fn wait_any(listeners: &mut [Box<dyn Listener>], max: Duration) {
    if listeners.is_empty() {
        sleep(max).await;
        return;
    }
    select_all(listeners.iter_mut().map(|l| l.changed(max))).await;
}

/// How the lease before this one ended, over all names of a lease (the worst answer wins).
pub fn previous(lease: &Lease) -> Previous {
    lease
        .grants
        .iter()
        .map(|g| g.previous)
        .max()
        .unwrap_or_default()
}
