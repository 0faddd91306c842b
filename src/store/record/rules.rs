//! The lock rules of the record stores, as pure functions over the records one transaction
//! loaded.
//!
//! A backend locks and loads each name's record, holders and waiters inside one
//! transaction, together with the server's clock reading (`Ctx::now`). These functions
//! decide, exactly as the Redis scripts do, and return the writes; the backend applies them
//! before it commits. Where stores differ (the clock's unit, how waiters stand in line,
//! whether records can be lost) the rules read it from `Rules`, data the backend gives.
//! Nothing here reads a clock or touches storage, so every rule is unit-tested on its own.

use std::collections::BTreeSet;

pub use super::line::{Ctx, Far, Line, Lives, Rules};
use super::line::{hand_over, join, leave, mode_of, seqs, verdict, wake};
// `End`: this module's `Outcome` is a grant's.
use crate::store::{
    Granted, Holder, LockState, Mode, Outcome as End, Previous, Recall, Waiter, fence_floor_now,
};

/// One holder row. `expires` is the server's clock, in ticks (`Rules::tick`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderRow {
    pub token: String,
    pub mode: String,
    pub fence: i64,
    pub expires: i64,
    pub meta: String,
}

/// One waiter row: `seq` is its place in line on this name (wake order). `expires` is
/// `i64::MAX` where waiters have no time to live (`Rules::waiter_ttl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterRow {
    pub token: String,
    pub mode: String,
    pub seq: i64,
    pub expires: i64,
    pub meta: String,
    /// Where a release rings to wake this waiter, on a database that must be told (MySQL:
    /// the id of the connection the waiter sleeps on); 0 where wake-ups go by token.
    pub bell: i64,
    /// The lease a release may hand this waiter (`Rules::hand_over`), in ticks: set only
    /// for a request of this one name, exclusive; 0 where the store keeps no such thing.
    pub ttl: i64,
}

/// Everything one name has in the store, as loaded under its lock. A backend builds it with
/// `..Rows::default()`, so fields its store does not keep stay at their defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rows {
    pub name: String,
    /// The last fence handed out on this name.
    pub fence: i64,
    pub previous: String,
    /// The waiters' arrival counter (`Line::Loose`).
    pub wseq: i64,
    pub holders: Vec<HolderRow>,
    pub waiters: Vec<WaiterRow>,
    /// The engine's marker (`Store::mark`), on a store that may lose its records.
    pub marked: bool,
    /// A fence the next grant must pass, though the record does not say it (a forgetful
    /// store that removed the record keeps the highest fence it had elsewhere).
    pub floor: i64,
}

/// A write the backend applies inside the same transaction. A backend that writes each
/// name's record whole may instead write `rows[i]` for every name a write names: the rules
/// leave the rows as the writes say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    Record {
        name: String,
        fence: i64,
        previous: String,
        wseq: i64,
    },
    /// Insert or replace the token's holder row.
    PutHolder {
        name: String,
        row: HolderRow,
    },
    DeleteHolder {
        name: String,
        token: String,
    },
    /// Insert or replace the token's waiter row.
    PutWaiter {
        name: String,
        row: WaiterRow,
    },
    DeleteWaiter {
        name: String,
        token: String,
    },
    /// Tell this waiter it is its turn to look (delivered on commit, or at once where the
    /// database cannot wait for the commit; a wake-up is only ever a hint to try again).
    Wake {
        token: String,
        bell: i64,
    },
}

/// A grant attempt as the rules see it.
pub struct GrantRequest<'a> {
    pub token: &'a str,
    /// The mode of each name, in the order of the rows.
    pub modes: &'a [Mode],
    /// In ticks.
    pub ttl: i64,
    pub meta: &'a str,
    /// Register as a waiter when busy.
    pub queue: bool,
    /// The waiter's bell (see `WaiterRow::bell`).
    pub bell: i64,
}

/// What a grant attempt decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(Vec<Granted>),
    /// Busy; the least time (ticks) a blocking holder has left, if holders alone block; and
    /// whether the waiter stands far back in line (`Rules::far`).
    Busy(Option<i64>, bool),
}

/// What a renewal found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The token does not hold every name (expired, released, never granted).
    Lost,
    /// Not held, and the record has no end of a lease: it was lost with the store's data.
    Forgotten,
}

/// Collects writes, folding every change to a name's record into one write at the end.
pub(super) struct Writes {
    pub out: Vec<Write>,
    dirty: BTreeSet<usize>,
}

impl Writes {
    fn new() -> Writes {
        Writes {
            out: Vec::new(),
            dirty: BTreeSet::new(),
        }
    }
    pub(super) fn touch(&mut self, i: usize) {
        self.dirty.insert(i);
    }
    fn finish(mut self, rows: &[Rows]) -> Vec<Write> {
        for &i in &self.dirty {
            let r = &rows[i];
            self.out.push(Write::Record {
                name: r.name.clone(),
                fence: r.fence,
                previous: r.previous.clone(),
                wseq: r.wseq,
            });
        }
        self.out
    }
}

/// Drop expired holders (and remember that one expired), and expired waiters. True if it
/// dropped any.
fn purge(i: usize, r: &mut Rows, now: i64, w: &mut Writes) -> bool {
    // Most often nothing expired: leave the rows (a fair line may be hundreds long) alone.
    if r.holders.iter().all(|h| h.expires > now) && r.waiters.iter().all(|x| x.expires > now) {
        return false;
    }
    let before = w.out.len();
    let (live, dead): (Vec<_>, Vec<_>) = r.holders.drain(..).partition(|h| h.expires > now);
    r.holders = live;
    if !dead.is_empty() {
        r.previous = Previous::Expired.text();
        w.touch(i);
    }
    for h in dead {
        w.out.push(Write::DeleteHolder {
            name: r.name.clone(),
            token: h.token,
        });
    }
    let (live, dead): (Vec<_>, Vec<_>) = r.waiters.drain(..).partition(|x| x.expires > now);
    r.waiters = live;
    for x in dead {
        w.out.push(Write::DeleteWaiter {
            name: r.name.clone(),
            token: x.token,
        });
    }
    w.out.len() > before
}

/// What the store still knows of each name for the engine (`Recall`), before an attempt.
pub fn recall(rows: &[Rows], now: i64, rules: &Rules) -> Vec<Recall> {
    rows.iter()
        .map(|r| Recall {
            marked: r.marked,
            horizon: rules.duration(r.holders.iter().map(|h| h.expires - now).max().unwrap_or(0)),
        })
        .collect()
}

/// One atomic grant attempt for every name in `rows` (all or none).
pub fn grant(rows: &mut [Rows], cx: &Ctx, req: &GrantRequest) -> (Outcome, Vec<Write>) {
    let now = cx.now;
    let mut w = Writes::new();
    let (mut busy, mut retry) = (false, None::<i64>);
    let mut changed = vec![false; rows.len()];
    for (i, r) in rows.iter_mut().enumerate() {
        let before = w.out.len();
        purge(i, r, now, &mut w);
        let v = verdict(r, req.token, req.modes[i], cx, &mut w);
        changed[i] = w.out.len() > before;
        if !v.admitted {
            busy = true;
            if v.by_holder {
                let soonest = r.holders.iter().map(|h| h.expires - now).min();
                retry = retry.min(soonest).or(retry).or(soonest);
            }
        }
    }
    let mut far = false;
    if busy {
        if req.queue {
            let rows_len = rows.len();
            let seqs = seqs(rows, req.token, cx, &mut w);
            far = far_back(rows, &seqs, cx);
            let factor = cx.rules.far.filter(|_| far).map_or(1, |f| f.factor);
            let expires = cx
                .rules
                .waiter_ttl
                .map_or(i64::MAX, |t| now.saturating_add(cx.rules.ticks(t * factor)));
            for (i, r) in rows.iter_mut().enumerate() {
                let row = WaiterRow {
                    token: req.token.to_string(),
                    mode: req.modes[i].code(),
                    seq: seqs[i],
                    expires,
                    meta: req.meta.to_string(),
                    bell: req.bell,
                    ttl: handed_ttl(req, rows_len),
                };
                join(r, row, &mut w);
            }
        }
        // On a fair line, a holder or waiter gone may let in those behind.
        if cx.rules.line == Line::Fair {
            for (r, _) in rows.iter_mut().zip(&changed).filter(|(_, c)| **c) {
                wake(r, cx, req.token, &mut w);
            }
        }
        let writes = w.finish(rows);
        return (Outcome::Busy(retry, far), writes);
    }
    let granted = rows
        .iter_mut()
        .enumerate()
        .map(|(i, r)| hold(i, r, cx, req, &mut w))
        .collect();
    let writes = w.finish(rows);
    (Outcome::Granted(granted), writes)
}

/// Whether a waiter standing at `seqs` has at least `Far::ahead` live waiters before it on
/// every name (never where the rules have no `far`).
fn far_back(rows: &[Rows], seqs: &[i64], cx: &Ctx) -> bool {
    let Some(far) = cx.rules.far else {
        return false;
    };
    rows.iter().zip(seqs).all(|(r, &mine)| {
        let ahead = r
            .waiters
            .iter()
            .filter(|x| x.seq < mine && x.expires > cx.now);
        ahead.count() >= far.ahead
    })
}

/// The lease a release may hand a waiter of `req` (`WaiterRow::ttl`): one name, exclusive.
fn handed_ttl(req: &GrantRequest, names: usize) -> i64 {
    match names == 1 && req.modes.first() == Some(&Mode::Exclusive) {
        true => req.ttl,
        false => 0,
    }
}

/// The grant on one name: the next fence, the holder's row, out of the line.
pub(super) fn hold(
    i: usize,
    r: &mut Rows,
    cx: &Ctx,
    req: &GrantRequest,
    w: &mut Writes,
) -> Granted {
    let mode = req.modes[i];
    r.fence = (r.fence + 1).max(r.floor + 1);
    if cx.rules.forgetful {
        // Floored at the wall clock, not at the store's own: that one may start again (at
        // every boot), and a store that lost its records must not take the fences back.
        let floor = i64::try_from(fence_floor_now()).unwrap_or(i64::MAX);
        r.fence = r.fence.max(floor);
    }
    w.touch(i);
    let row = HolderRow {
        token: req.token.to_string(),
        mode: mode.code(),
        fence: r.fence,
        expires: cx.now.saturating_add(req.ttl),
        meta: req.meta.to_string(),
    };
    r.holders.retain(|h| h.token != req.token);
    r.holders.push(row.clone());
    w.out.push(Write::PutHolder {
        name: r.name.clone(),
        row,
    });
    leave(r, req.token, w);
    // A sharer let in may make room for the next sharer: pass the wake-up along (a fair
    // line woke the whole run it admits already).
    if mode != Mode::Exclusive && cx.rules.line == Line::Loose {
        wake(r, cx, req.token, w);
    }
    Granted {
        fence: r.fence as u64,
        previous: Previous::parse(&r.previous),
        started: None,
    }
}

/// Push the token's expiry to `ttl` ticks from now if it still holds every name.
pub fn renew(rows: &mut [Rows], now: i64, token: &str, ttl: i64) -> (Renewal, Vec<Write>) {
    let mut w = Writes::new();
    for r in rows.iter() {
        let ours = r.holders.iter().find(|h| h.token == token);
        if ours.is_none_or(|h| h.expires <= now) {
            // Every end of a lease writes `previous`, and a lease that ran out keeps its row
            // until a purge writes it: no row of ours and none written means the record was
            // lost under us.
            let lost = match (ours, Previous::parse(&r.previous)) {
                (None, Previous::None) => Renewal::Forgotten,
                _ => Renewal::Lost,
            };
            return (lost, Vec::new());
        }
    }
    for r in rows.iter_mut() {
        if let Some(h) = r.holders.iter_mut().find(|h| h.token == token) {
            h.expires = now.saturating_add(ttl);
            w.out.push(Write::PutHolder {
                name: r.name.clone(),
                row: h.clone(),
            });
        }
    }
    (Renewal::Renewed, w.finish(rows))
}

/// Release what the token holds and withdraw it as a waiter, recording how the lease ended
/// (a withdrawn attempt leaves the record's `previous` as it was); then, as the Redis script
/// does, drop whatever else expired. True if it held any name, live.
pub fn release(rows: &mut [Rows], cx: &Ctx, token: &str, outcome: End) -> (bool, Vec<Write>) {
    let mut w = Writes::new();
    let mut held = false;
    let single = rows.len() == 1;
    for (i, r) in rows.iter_mut().enumerate() {
        let waited = leave(r, token, &mut w);
        let pos = r.holders.iter().position(|h| h.token == token);
        if let Some(pos) = pos {
            let h = r.holders.remove(pos);
            w.out.push(Write::DeleteHolder {
                name: r.name.clone(),
                token: token.to_string(),
            });
            held |= h.expires > cx.now;
            if let Some(p) = outcome.ends(h.expires > cx.now) {
                r.previous = p.text();
                w.touch(i);
            }
        }
        let purged = purge(i, r, cx.now, &mut w);
        // A waiter leaving a loose line stood in nobody's way.
        if pos.is_some() || purged || (waited && cx.rules.line == Line::Fair) {
            let handed = single && cx.rules.hand_over && hand_over(r, cx, &mut w);
            if !handed {
                wake(r, cx, token, &mut w);
            }
        }
    }
    (held, w.finish(rows))
}

/// Drop every live holder. True if there was any.
pub fn force(rows: &mut [Rows], cx: &Ctx) -> (bool, Vec<Write>) {
    let mut w = Writes::new();
    let mut any = false;
    for (i, r) in rows.iter_mut().enumerate() {
        purge(i, r, cx.now, &mut w);
        if r.holders.is_empty() {
            continue;
        }
        any = true;
        for h in r.holders.drain(..) {
            w.out.push(Write::DeleteHolder {
                name: r.name.clone(),
                token: h.token,
            });
        }
        // The holder did not finish by itself: its successor should know.
        r.previous = Previous::Expired.text();
        w.touch(i);
        wake(r, cx, "", &mut w);
    }
    (any, w.finish(rows))
}

/// Make each name's fence counter at least the given value.
pub fn raise(rows: &mut [Rows], fences: &[u64]) -> Vec<Write> {
    let mut w = Writes::new();
    for (i, (r, &f)) in rows.iter_mut().zip(fences).enumerate() {
        let f = i64::try_from(f).unwrap_or(i64::MAX);
        if r.fence < f {
            r.fence = f;
            w.touch(i);
        }
    }
    w.finish(rows)
}

/// Set the engine's marker on each name (`Store::mark`).
pub fn mark(rows: &mut [Rows]) -> Vec<Write> {
    let mut w = Writes::new();
    for (i, r) in rows.iter_mut().enumerate() {
        if !r.marked {
            r.marked = true;
            w.touch(i);
        }
    }
    w.finish(rows)
}

/// What `inspect` shows: the live holders (in fence order) and live waiters (in line order).
pub fn view(r: &Rows, cx: &Ctx) -> LockState {
    let now = cx.now;
    let mut holders: Vec<&HolderRow> = r.holders.iter().filter(|h| h.expires > now).collect();
    holders.sort_by_key(|h| h.fence);
    let mut waiters: Vec<&WaiterRow> = r
        .waiters
        .iter()
        .filter(|x| x.expires > now && cx.alive.alive(x))
        .collect();
    waiters.sort_by_key(|x| x.seq);
    LockState {
        name: r.name.clone(),
        holders: holders
            .into_iter()
            .map(|h| Holder {
                owner: crate::names::owner_id(&h.token),
                mode: mode_of(&h.mode),
                fence: h.fence.max(0) as u64,
                ttl_left_ms: cx.rules.duration(h.expires - now).as_millis() as u64,
                meta: crate::meta::parse(&h.meta),
            })
            .collect(),
        waiters: waiters
            .into_iter()
            .map(|x| Waiter {
                owner: crate::names::owner_id(&x.token),
                mode: mode_of(&x.mode),
                meta: crate::meta::parse(&x.meta),
            })
            .collect(),
        fence: r.fence.max(0) as u64,
        previous: Previous::parse(&r.previous),
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
