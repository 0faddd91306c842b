//! The file store's grant, release and forced release, under the namespace's flock: each
//! reads the names' states, decides, commits, and says whom to wake once the flock is let go.

use std::time::Duration;

use super::{Dir, Record, State, now_ns, ns};
use crate::store::{
    Acquire, Attempt, Granted, Outcome, Previous, Recall, StoreResult, fence_floor_now,
};

/// Whom a change may admit: the bells of queued waiters, and the names whose watchers
/// without a queue entry should look (see `Dir::wake`).
#[derive(Default)]
pub(super) struct Wake {
    pub bells: Vec<String>,
    pub names: Vec<String>,
}

impl Wake {
    /// After a change to `st` that may admit someone: ring the waiters it lets in, or, with
    /// nobody queued, tell the watchers (a removed state file tells them by itself).
    fn after(&mut self, dir: &Dir, name: &str, st: &mut State, except: &str) {
        let (bells, _) = st.admitted_run(&dir.dir, except);
        self.bells.extend(bells);
        if st.queue.is_empty() && !st.forgettable() {
            self.names.push(name.to_string());
        }
    }
}

type Answer = (Attempt, Vec<Recall>);

impl Dir {
    /// A busy answer read without the flock, when the states as they stand certainly keep
    /// the request out and changing them could admit nobody: no lease ran out, no dead
    /// waiter decides it, and a queued attempt is queued already. Otherwise None, and the
    /// attempt takes the flock. Queued waiters look again after every `MAX_POLL` whatever
    /// they hear; under the flock, 300 of them parsing a 300-entry queue twice a second kept
    /// the releases that would serve them waiting for it (beyond the store timeout in a
    /// debug build). A busy answer is never unsafe, and the state files are replaced whole,
    /// so a read without the flock sees one state or the next (`inspect` reads so too).
    pub(super) fn busy_at_a_glance(&self, req: &Acquire, queue: bool) -> Option<Answer> {
        if queue && self.straight_in(&req.token) {
            return None;
        }
        let now = now_ns();
        let (mut recall, mut retry_after) = (Vec::new(), None::<u64>);
        let mut busy = false;
        for (name, mode) in req.each() {
            let mut st = self.read_settled(name).ok()?;
            let before = st.holders.len();
            st.purge(now, &self.boot);
            if st.holders.len() < before
                || (queue && !st.queue.iter().any(|e| e.token == req.token))
            {
                return None;
            }
            recall.push(st.recall(now));
            let v = st.verdict(&req.token, mode, &self.dir);
            if v.dropped {
                return None;
            }
            if !v.admitted {
                busy = true;
                if v.by_holder {
                    let soonest = st.holders.iter().map(|h| h.deadline - now).min();
                    retry_after = retry_after.min(soonest).or(soonest);
                }
            }
        }
        let retry_after = retry_after.map(Duration::from_nanos);
        busy.then_some((Attempt::Busy { retry_after }, recall))
    }

    /// One grant attempt for all of `req.names`, queuing it when `queue` and it is busy.
    pub(super) fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Answer, Wake)> {
        let now = now_ns();
        let mut states = Vec::with_capacity(req.names.len());
        let mut recall = Vec::with_capacity(req.names.len());
        let (mut busy, mut retry_after) = (false, None::<u64>);
        for (name, mode) in req.each() {
            let mut st = self.read(name)?;
            let before = st.holders.len();
            st.purge(now, &self.boot);
            recall.push(st.recall(now));
            let v = st.verdict(&req.token, mode, &self.dir);
            if !v.admitted {
                busy = true;
                if v.by_holder {
                    let soonest = st.holders.iter().map(|h| h.deadline - now).min();
                    retry_after = retry_after.min(soonest).or(soonest);
                }
            }
            let dirty = v.dropped || st.holders.len() < before;
            states.push((name.clone(), st, dirty));
        }
        if busy {
            if queue {
                self.enqueue(&mut states, req);
            }
            let mut wake = Wake::default();
            let mut changed = Vec::new();
            for (name, mut st, dirty) in states {
                if dirty {
                    wake.after(self, &name, &mut st, &req.token);
                    changed.push((name, st));
                }
            }
            self.commit(&changed)?;
            let busy = Attempt::Busy {
                retry_after: retry_after.map(Duration::from_nanos),
            };
            return Ok(((busy, recall), wake));
        }
        let mut granted = Vec::with_capacity(states.len());
        let mut changed = Vec::with_capacity(states.len());
        for ((name, mut st, _), (_, mode)) in states.into_iter().zip(req.each()) {
            st.dequeue(&req.token);
            // Floored at the wall clock, not CLOCK_BOOTTIME: that one starts again at every
            // boot, and an emptied directory must not take the fences back.
            st.fence = (st.fence + 1).max(fence_floor_now()).max(st.floor + 1);
            st.holders.push(Record {
                token: req.token.clone(),
                mode: mode.code(),
                fence: st.fence,
                deadline: now + ns(req.ttl),
                meta: req.meta.clone(),
            });
            granted.push(Granted {
                fence: st.fence,
                previous: Previous::parse(&st.previous),
                started: None,
            });
            changed.push((name, st));
        }
        self.commit(&changed)?;
        self.drop_bell(&req.token);
        Ok(((Attempt::Granted(granted), recall), Wake::default()))
    }

    /// Release whatever `token` holds or has queued on `names`, recording how its lease
    /// ended (`outcome`); true if it held any, live.
    pub(super) fn release(
        &self,
        names: &[String],
        token: &str,
        outcome: Outcome,
    ) -> StoreResult<(bool, Wake)> {
        let now = now_ns();
        let (mut any, mut wake, mut changed) = (false, Wake::default(), Vec::new());
        for name in names {
            let mut st = self.read(name)?;
            let this_boot = st.boot == self.boot;
            let before = st.holders.len();
            // The token's own lease out before the purge, which would take an expired one
            // for a job's lease that ran out: a withdrawn attempt was none.
            let (mine, others): (Vec<_>, _) = std::mem::take(&mut st.holders)
                .into_iter()
                .partition(|h| h.token == token);
            st.holders = others;
            st.purge(now, &self.boot);
            if let Some(h) = mine.first() {
                let live = this_boot && h.deadline > now;
                any |= live;
                if let Some(p) = outcome.ends(live) {
                    st.previous = p.text();
                }
            }
            let queued = st.dequeue(token);
            if st.holders.len() < before || queued {
                wake.after(self, name, &mut st, token);
                changed.push((name.clone(), st));
            }
        }
        self.commit(&changed)?;
        self.drop_bell(token);
        Ok((any, wake))
    }

    /// Drop every holder of `names`; true if there was any.
    pub(super) fn force_release(&self, names: &[String]) -> StoreResult<(bool, Wake)> {
        let now = now_ns();
        let (mut any, mut wake, mut changed) = (false, Wake::default(), Vec::new());
        for name in names {
            let mut st = self.read(name)?;
            st.purge(now, &self.boot);
            if !st.holders.is_empty() {
                st.holders.clear();
                // The holder did not finish by itself: its successor should know.
                st.previous = Previous::Expired.text();
                any = true;
                wake.after(self, name, &mut st, "");
                changed.push((name.clone(), st));
            }
        }
        self.commit(&changed)?;
        Ok((any, wake))
    }
}
