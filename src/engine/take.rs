//! The wait loop's driver that takes the lock: each look is one grant attempt on every store,
//! judged by the amnesia rule and settled by the bakery rule; whatever an attempt that did
//! not become a lease was granted is given back at once.

use std::time::Duration;

use tokio::time::Instant;

use super::fan::Linger;
use super::wait::{Driver, End, Look, Pace, Round, Then};
use super::{Engine, Lease, amnesia, fence, timing};
use crate::store::{Acquire, Attempt, Granted, MAX_POLL, StoreError, StoreResult};

pub(super) struct Take<'r> {
    req: &'r Acquire,
    /// The last attempt's request, stamped when it was sent (None before the first).
    sent: Option<Acquire>,
    /// The stores the last attempt gave back to (they granted, erred or abstained).
    dirty: Vec<usize>,
    /// The wait may look again: a split vote need not wait for a member still opening.
    again: bool,
}

impl Take<'_> {
    pub(super) fn new(req: &Acquire, again: bool) -> Take<'_> {
        Take {
            req,
            sent: None,
            dirty: Vec::new(),
            again,
        }
    }
}

/// One attempt's answers, sorted: the grants (by store), how many were busy, the soonest
/// retry a busy store asked for, and the errors (by store).
struct Answers {
    granted: Vec<(usize, Vec<Granted>)>,
    busy: usize,
    retry_after: Option<Duration>,
    /// The least patience of the busy stores (`Attempt::Busy`), if any was busy.
    patience: Option<Duration>,
    errors: Vec<(usize, StoreError)>,
}

impl Driver for Take<'_> {
    type Done = Lease;
    const KEEPS_PLACE: bool = true;

    async fn look(&mut self, engine: &Engine, queued: bool) -> Round<Lease> {
        let need = engine.majority();
        let req = &*self.sent.insert(stamped(self.req));
        let t0 = Instant::now();
        let again = self.again;
        let results = engine
            .fan_out_until(
                &engine.all(),
                |s| s.attempt(req, queued),
                |done| {
                    amnesia::decided(done, need)
                        || (amnesia::split(done, need) && engine.only_silent_left(done, again))
                },
                Linger::No,
            )
            .await;
        // Members that lost their data while others remember a live lease abstain.
        let (results, verdict) = amnesia::judge(results);
        let a = sort(engine, results);
        if a.granted.len() >= need
            && let Some(lease) = engine.settle(req, t0, &a.granted).await
        {
            // One store alone: no other member could outvote what it forgot, so its marker
            // would never be read (a name's first use would pay a write for nothing).
            if !verdict.to_mark.is_empty() && engine.stores().len() > 1 {
                engine.mark(&verdict.to_mark, &req.names).await;
            }
            return Round {
                look: Look::Done(lease),
                errors: a.errors,
            };
        }
        // Not held: give back what was granted, and whatever an erroring store may have
        // granted without our hearing it. Busy stores granted nothing; but after a split
        // vote the request leaves their lines too. Each member's line is in its own arrival
        // order: two contenders each first on some members would otherwise split again at
        // every try, each taking the other's place where it gave back, until one's life ran
        // out. Both now queue again behind the others, after pauses of their own.
        self.dirty = if a.busy > 0 && !a.granted.is_empty() {
            engine.all()
        } else {
            a.granted
                .iter()
                .map(|(i, _)| *i)
                .chain(a.errors.iter().map(|(i, _)| *i))
                .chain(verdict.abstained.iter().copied())
                .collect()
        };
        if !self.dirty.is_empty() {
            engine.release_on(&self.dirty, req).await;
        }
        let look = if a.granted.len() + a.busy < need {
            Look::TooFew
        } else {
            let then = if !verdict.abstained.is_empty() {
                Then::Pause
            } else if !a.granted.is_empty() {
                Then::BackOff
            } else {
                Then::Listen
            };
            Look::Busy(Pace {
                retry_after: a.retry_after,
                patience: a.patience.unwrap_or(MAX_POLL),
                then,
            })
        };
        Round {
            look,
            errors: a.errors,
        }
    }

    fn listens_for(&self) -> &Acquire {
        self.sent.as_ref().unwrap_or(self.req)
    }

    async fn end(&mut self, engine: &Engine, why: End) {
        let req = self.sent.as_ref().unwrap_or(self.req);
        match why {
            // The stores that granted or erred were just given back to; a busy one may still
            // hold our queue entry. (Not all again: a store that gave no answer would cost
            // another whole store timeout for nothing.)
            End::Unreachable => {
                let rest: Vec<usize> = engine
                    .all()
                    .into_iter()
                    .filter(|i| !self.dirty.contains(i))
                    .collect();
                if !rest.is_empty() {
                    engine.release_on(&rest, req).await;
                }
            }
            // Halted between two looks: any of them may have queued.
            End::GaveUp { queued: true } | End::Halted => {
                engine.release_on(&engine.all(), req).await
            }
            End::GaveUp { queued: false } => {}
        }
    }
}

/// Sort one attempt's answers; a store that answered has served this process.
fn sort(engine: &Engine, results: Vec<(usize, StoreResult<Attempt>)>) -> Answers {
    let mut a = Answers {
        granted: Vec::new(),
        busy: 0,
        retry_after: None,
        patience: None,
        errors: Vec::new(),
    };
    for (i, r) in results {
        if r.is_ok() {
            engine.reach.served(i);
        }
        match r {
            Ok(Attempt::Granted(g)) => a.granted.push((i, g)),
            Ok(Attempt::Busy {
                retry_after: ra,
                patience,
            }) => {
                a.busy += 1;
                let p = patience.unwrap_or(MAX_POLL);
                a.patience = Some(a.patience.map_or(p, |q: Duration| q.min(p)));
                if let Some(ra) = ra {
                    a.retry_after = Some(a.retry_after.map_or(ra, |r: Duration| r.min(ra)));
                }
            }
            Err(e) => a.errors.push((i, e)),
        }
    }
    a
}

impl Engine {
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
}

/// `req` as one grant attempt sends it: its metadata stamped now, so that a grant says when
/// it was made, not when dlock started to wait for it.
fn stamped(req: &Acquire) -> Acquire {
    Acquire {
        meta: crate::meta::restamped(&req.meta),
        ..req.clone()
    }
}
