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

pub use super::line::{Ctx, Line, Lives, Rules};
use super::line::{join, leave, mode_of, seqs, verdict, wake};
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
    /// Busy; the least time (ticks) a blocking holder has left, if holders alone block.
    Busy(Option<i64>),
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
    if busy {
        if req.queue {
            let seqs = seqs(rows, req.token, cx, &mut w);
            let expires = cx
                .rules
                .waiter_ttl
                .map_or(i64::MAX, |t| now.saturating_add(cx.rules.ticks(t)));
            for (i, r) in rows.iter_mut().enumerate() {
                let row = WaiterRow {
                    token: req.token.to_string(),
                    mode: req.modes[i].code(),
                    seq: seqs[i],
                    expires,
                    meta: req.meta.to_string(),
                    bell: req.bell,
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
        return (Outcome::Busy(retry), writes);
    }
    let granted = rows
        .iter_mut()
        .enumerate()
        .map(|(i, r)| hold(i, r, cx, req, &mut w))
        .collect();
    let writes = w.finish(rows);
    (Outcome::Granted(granted), writes)
}

/// The grant on one name: the next fence, the holder's row, out of the line.
fn hold(i: usize, r: &mut Rows, cx: &Ctx, req: &GrantRequest, w: &mut Writes) -> Granted {
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
        if !r
            .holders
            .iter()
            .any(|h| h.token == token && h.expires > now)
        {
            // Every end of a lease writes `previous`: none written, and no lease of ours,
            // means the record was lost under us.
            let lost = match Previous::parse(&r.previous) {
                Previous::None => Renewal::Forgotten,
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
            wake(r, cx, token, &mut w);
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
mod tests {
    use super::*;

    fn rows(name: &str) -> Rows {
        Rows {
            name: name.into(),
            previous: "none".into(),
            ..Rows::default()
        }
    }

    struct Yes;
    impl Lives for Yes {
        fn alive(&self, _: &WaiterRow) -> bool {
            true
        }
    }

    /// The SQL stores' rules at `now`.
    fn cx(now: i64) -> Ctx<'static> {
        Ctx {
            now,
            rules: &Rules::SQL,
            alive: &Yes,
        }
    }

    fn req<'a>(token: &'a str, mode: Mode, queue: bool) -> GrantRequest<'a> {
        // As many as any test's rows, all in the one mode.
        let modes: &'static [Mode] = match mode {
            Mode::Exclusive => &[Mode::Exclusive; 3],
            Mode::Shared => &[Mode::Shared; 3],
            Mode::Limit(k) => Vec::leak(vec![Mode::Limit(k); 3]),
        };
        GrantRequest {
            token,
            modes,
            ttl: 1000,
            meta: "{}",
            queue,
            bell: 7,
        }
    }

    /// The rules change `rows` in place; the writes they return must say the same.
    fn assert_writes_match(rows: &[Rows], writes: &[Write]) {
        for wr in writes {
            match wr {
                Write::PutHolder { name, row } => {
                    let r = rows.iter().find(|r| &r.name == name).unwrap();
                    assert!(r.holders.contains(row), "{wr:?}");
                }
                Write::DeleteHolder { name, token } => {
                    let r = rows.iter().find(|r| &r.name == name).unwrap();
                    assert!(!r.holders.iter().any(|h| &h.token == token), "{wr:?}");
                }
                _ => {}
            }
        }
    }

    #[test]
    fn exclusive_grant_bumps_the_fence_and_blocks_the_next() {
        let mut rs = vec![rows("a")];
        let (o, w) = grant(&mut rs, &cx(100), &req("t1", Mode::Exclusive, false));
        assert_writes_match(&rs, &w);
        let Outcome::Granted(g) = o else { panic!() };
        assert_eq!(g[0].fence, 1);
        assert_eq!(g[0].previous, Previous::None);
        assert!(w.contains(&Write::Record {
            name: "a".into(),
            fence: 1,
            previous: "none".into(),
            wseq: 0
        }));
        let (o, _) = grant(&mut rs, &cx(200), &req("t2", Mode::Exclusive, false));
        assert_eq!(o, Outcome::Busy(Some(900)));
    }

    #[test]
    fn an_expired_holder_is_dropped_inside_the_grant_and_reported() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        let (o, w) = grant(&mut rs, &cx(1000), &req("t2", Mode::Exclusive, false));
        let Outcome::Granted(g) = o else { panic!() };
        assert_eq!((g[0].fence, g[0].previous), (2, Previous::Expired));
        assert!(w.contains(&Write::DeleteHolder {
            name: "a".into(),
            token: "t1".into()
        }));
    }

    #[test]
    fn release_checks_the_owner_and_says_released() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        let (held, w) = release(&mut rs, &cx(10), "stale", End::Released);
        assert!(!held);
        assert!(w.is_empty());
        let (held, _) = release(&mut rs, &cx(10), "t1", End::Released);
        assert!(held);
        let (o, _) = grant(&mut rs, &cx(20), &req("t2", Mode::Exclusive, false));
        let Outcome::Granted(g) = o else { panic!() };
        assert_eq!(g[0].previous, Previous::Released);
    }

    #[test]
    fn a_failed_end_is_recorded_and_a_withdrawal_leaves_it() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        release(&mut rs, &cx(10), "t1", End::Failed(Some(2)));
        assert_eq!(rs[0].previous, "failed:2");
        grant(&mut rs, &cx(20), &req("w", Mode::Exclusive, false));
        let (held, w) = release(&mut rs, &cx(30), "w", End::Withdrawn);
        assert!(held);
        assert!(
            !w.iter().any(|w| matches!(w, Write::Record { .. })),
            "{w:?}"
        );
        let (o, _) = grant(&mut rs, &cx(40), &req("t2", Mode::Exclusive, false));
        let Outcome::Granted(g) = o else { panic!() };
        assert_eq!(g[0].previous, Previous::Failed(Some(2)));
    }

    #[test]
    fn renew_needs_every_name_held_and_live() {
        let mut rs = vec![rows("a"), rows("b")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        assert_ne!(renew(&mut rs, 10, "t2", 1000).0, Renewal::Renewed);
        let (ok, w) = renew(&mut rs, 10, "t1", 5000);
        assert_eq!(ok, Renewal::Renewed);
        assert_eq!(w.len(), 2);
        assert!(rs.iter().all(|r| r.holders[0].expires == 5010));
        assert_ne!(
            renew(&mut rs, 5010, "t1", 1000).0,
            Renewal::Renewed,
            "expired: no renewal"
        );
    }

    #[test]
    fn several_names_are_granted_all_or_none() {
        let mut rs = vec![rows("a"), rows("b")];
        let mut b_only = vec![rows("b")];
        grant(&mut b_only, &cx(0), &req("t0", Mode::Exclusive, false));
        rs[1] = b_only.pop().unwrap();
        let (o, w) = grant(&mut rs, &cx(10), &req("t1", Mode::Exclusive, false));
        assert!(matches!(o, Outcome::Busy(_)));
        assert!(!w.iter().any(|w| matches!(w, Write::PutHolder { .. })));
        assert!(rs[0].holders.is_empty());
    }

    #[test]
    fn sharers_share_limits_count_and_exclusive_waits() {
        let mut rs = vec![rows("a")];
        for t in ["s1", "s2"] {
            assert!(matches!(
                grant(&mut rs, &cx(0), &req(t, Mode::Shared, false)).0,
                Outcome::Granted(_)
            ));
        }
        assert!(matches!(
            grant(&mut rs, &cx(0), &req("x", Mode::Exclusive, false)).0,
            Outcome::Busy(_)
        ));
        let mut rs = vec![rows("b")];
        for (t, ok) in [("l1", true), ("l2", true), ("l3", false)] {
            let o = grant(&mut rs, &cx(0), &req(t, Mode::Limit(2), false)).0;
            assert_eq!(matches!(o, Outcome::Granted(_)), ok, "{t}");
        }
    }

    #[test]
    fn a_queued_waiter_is_woken_by_release_and_leaves_no_row() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        let (_, w) = grant(&mut rs, &cx(1), &req("w1", Mode::Exclusive, true));
        assert!(w.iter().any(|w| matches!(w, Write::PutWaiter { .. })));
        grant(&mut rs, &cx(2), &req("w2", Mode::Exclusive, true));
        grant(&mut rs, &cx(3), &req("w1", Mode::Exclusive, true));
        assert_eq!(rs[0].waiters.len(), 2);
        assert_eq!(rs[0].wseq, 2, "a waiter coming back keeps its place");
        let (_, w) = release(&mut rs, &cx(4), "t1", End::Released);
        let wakes: Vec<_> = w
            .iter()
            .filter(|w| matches!(w, Write::Wake { .. }))
            .collect();
        assert_eq!(
            wakes,
            vec![&Write::Wake {
                token: "w1".into(),
                bell: 7
            }]
        );
        grant(&mut rs, &cx(5), &req("w1", Mode::Exclusive, true));
        assert_eq!(rs[0].waiters.len(), 1);
        let (_, w) = release(&mut rs, &cx(6), "w2", End::Released);
        assert!(w.contains(&Write::DeleteWaiter {
            name: "a".into(),
            token: "w2".into()
        }));
        assert!(rs[0].waiters.is_empty());
    }

    #[test]
    fn a_dead_waiter_is_skipped_and_dropped() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        grant(&mut rs, &cx(1), &req("dead", Mode::Exclusive, true));
        grant(&mut rs, &cx(500), &req("live", Mode::Exclusive, true));
        let (_, w) = release(&mut rs, &cx(2100), "t1", End::Released);
        assert!(w.contains(&Write::Wake {
            token: "live".into(),
            bell: 7
        }));
        assert!(w.contains(&Write::DeleteWaiter {
            name: "a".into(),
            token: "dead".into()
        }));
    }

    #[test]
    fn force_drops_holders_and_says_expired_raise_only_lifts() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Exclusive, false));
        assert!(force(&mut rs, &cx(1)).0);
        assert!(!force(&mut rs, &cx(1)).0);
        assert_eq!(rs[0].previous, "expired");
        assert_eq!(raise(&mut rs, &[10]).len(), 1);
        assert!(raise(&mut rs, &[5]).is_empty());
        let Outcome::Granted(g) = grant(&mut rs, &cx(2), &req("t2", Mode::Exclusive, false)).0
        else {
            panic!()
        };
        assert_eq!(g[0].fence, 11);
    }

    #[test]
    fn an_unreadable_mode_blocks_everyone() {
        let mut rs = vec![rows("a")];
        rs[0].holders.push(HolderRow {
            token: "odd".into(),
            mode: "?".into(),
            fence: 1,
            expires: 100,
            meta: String::new(),
        });
        let o = grant(&mut rs, &cx(0), &req("s", Mode::Shared, false)).0;
        assert!(matches!(o, Outcome::Busy(_)));
    }

    #[test]
    fn view_shows_only_the_live() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("t1", Mode::Shared, false));
        grant(&mut rs, &cx(500), &req("t2", Mode::Shared, false));
        let v = view(&rs[0], &cx(1200));
        assert_eq!(v.holders.len(), 1);
        assert_eq!(v.holders[0].ttl_left_ms, 300);
        assert_eq!(v.fence, 2);
    }

    /// A release records its own end first, then drops whatever else expired, as the
    /// Redis script does: a sharer that ran out is what the next holder hears of.
    #[test]
    fn a_release_then_drops_the_expired_and_says_so() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, &cx(0), &req("s1", Mode::Shared, false));
        grant(&mut rs, &cx(900), &req("s2", Mode::Shared, false));
        let (held, w) = release(&mut rs, &cx(1500), "s2", End::Released);
        assert!(held);
        assert!(w.contains(&Write::DeleteHolder {
            name: "a".into(),
            token: "s1".into()
        }));
        assert_eq!(rs[0].previous, "expired");
    }
}
