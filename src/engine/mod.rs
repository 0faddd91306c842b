//! The majority-quorum expiring lease, generic over store adapters.
//!
//! One engine for every backend and for N = 1 as much as for N = 5: fan out to all stores in
//! parallel with a per-store timeout, count a majority, keep a conservative client deadline,
//! fence with the bakery rule, and wait for notifications between attempts. The engine knows
//! stores only through `crate::store::Store`.

mod amnesia;
mod behind;
mod down;
mod error;
mod fan;
pub mod fence;
mod free;
mod late;
mod mark;
mod open;
mod reach;
mod release;
mod reopen;
pub mod session;
mod take;
pub mod timing;
mod view;
mod wait;

#[cfg(test)]
mod amnesia_tests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod view_tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fan::{Linger, owner_decided};

use reach::Reach;
pub use reach::{Outage, show as show_outage};
pub use release::Failed;
pub use session::{Health, Keeper, Session};
pub use view::{Merged, NameView, QuorumHolder, merge};
pub use wait::{Budget, Halt};

pub use error::{EngineError, NOT_WAITED};
use error::{gone_message, unreachable};

use crate::store::url::StoreUrl;
use crate::store::{
    Acquire, ErrorKind, Granted, Outcome, Previous, Store, StoreError, StoreResult, TagWrite,
};

/// How long `acquire` may wait for a busy lock.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    No,
    For(Duration),
    Forever,
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
    /// Per store, the give-backs sent it in the background (see `behind`).
    behind: Vec<behind::Behind>,
    /// Members whose amnesia marker did not take when they voted for a lease (`mark`).
    pending: mark::Pending,
}

impl Engine {
    /// Connect to every store in parallel, waiting for a majority rather than the slowest
    /// (see `open::all`).
    pub async fn open(
        urls: &[StoreUrl],
        namespace: &str,
        store_timeout: Duration,
    ) -> Result<Engine, StoreError> {
        let (stores, opening) = open::all(urls, namespace, store_timeout).await?;
        let engine = Engine::from_stores(stores, store_timeout);
        for i in opening {
            engine.reach.opening(i);
        }
        Ok(engine)
    }

    pub fn from_stores(stores: Vec<Arc<dyn Store>>, store_timeout: Duration) -> Engine {
        Engine {
            reach: Reach::new(stores.len()),
            behind: stores.iter().map(|_| behind::Behind::default()).collect(),
            pending: mark::Pending::default(),
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
        self.acquire_reporting(req, Budget::start(wait), None).await
    }

    /// `acquire` within `budget` (a wait of its own, or one shared with the other parts of
    /// a wait), counting up `busy` each time an attempt finds the lock busy and the engine
    /// is about to wait: what the waiting line and the `waiting` event follow. It changes
    /// nothing in how the engine waits.
    pub async fn acquire_reporting(
        &self,
        req: &Acquire,
        budget: Budget,
        busy: Option<&tokio::sync::watch::Sender<u32>>,
    ) -> Result<Lease, EngineError> {
        self.acquire_until(req, budget, busy, std::future::pending())
            .await
    }

    /// `acquire_reporting` that ends, as if its budget ran out, once `stop` is done (the
    /// shard router's earlier group lost; `run --any`'s race won by another). Nothing of it
    /// is left queued: the engine gives back what the wait may have been granted.
    pub async fn acquire_until(
        &self,
        req: &Acquire,
        budget: Budget,
        busy: Option<&tokio::sync::watch::Sender<u32>>,
        stop: impl std::future::Future<Output = ()> + Send,
    ) -> Result<Lease, EngineError> {
        self.wait_with(
            &mut take::Take::new(req, budget.waits()),
            budget,
            busy,
            stop,
        )
        .await
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
        let yes: Vec<usize> = answers
            .iter()
            .filter(|(_, r)| matches!(r, Ok(true)))
            .map(|(i, _)| *i)
            .collect();
        let tally = self.tally(answers);
        if tally.yes >= need && timing::validity(req.ttl, t0.elapsed()).is_some() {
            lease.deadline = lease.deadline.max(t0 + req.ttl - timing::drift(req.ttl));
            self.mark_renewed(&req.names, &yes).await;
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
    /// queued entry or a grant whose answer was lost is cleaned up too), recording `outcome`:
    /// one try, from a process that does not hold the `Lease` (`unlock`), or to withdraw. A
    /// held lease is given back by `release_held`, which asks again.
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

fn name_store(s: &dyn Store, e: StoreError) -> StoreError {
    e.context(s.describe())
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
