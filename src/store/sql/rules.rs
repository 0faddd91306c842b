//! The lock rules of the SQL stores, as pure functions over the rows one transaction loaded.
//!
//! A SQL backend locks and loads each name's record, holders and waiters inside one
//! transaction, together with the server's clock reading (`now`, milliseconds). These
//! functions decide, exactly as the Redis scripts do, and return the writes; the backend
//! applies them before COMMIT. Nothing here reads a clock or talks to a database, so every
//! rule is unit-tested on its own.

use std::collections::BTreeMap;

// `End`: this module's `Outcome` is a grant's.
use crate::store::{Granted, Holder, LockState, Mode, Outcome as End, Previous, Waiter};

/// One holder row. `expires` is the server's clock in ms since the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderRow {
    pub token: String,
    pub mode: String,
    pub fence: i64,
    pub expires: i64,
    pub meta: String,
}

/// One waiter row: `seq` is its arrival number on this name (wake order).
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

/// Everything one name has in the store, as loaded under its row lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rows {
    pub name: String,
    /// The last fence handed out on this name.
    pub fence: i64,
    pub previous: String,
    /// The waiters' arrival counter.
    pub wseq: i64,
    pub holders: Vec<HolderRow>,
    pub waiters: Vec<WaiterRow>,
}

/// A write the backend applies inside the same transaction.
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
    pub ttl_ms: i64,
    pub meta: &'a str,
    /// Register as a waiter when busy.
    pub queue: bool,
    /// How long a waiter row lives unless its waiter comes back.
    pub waiter_ttl_ms: i64,
    /// The waiter's bell (see `WaiterRow::bell`).
    pub bell: i64,
}

/// What a grant attempt decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(Vec<Granted>),
    /// Busy; the least time a blocking holder has left, if any.
    Busy(Option<i64>),
}

/// Collects writes, folding every change to a name's record into one write at the end.
struct Writes {
    out: Vec<Write>,
    dirty: BTreeMap<usize, ()>,
}

impl Writes {
    fn new() -> Writes {
        Writes {
            out: Vec::new(),
            dirty: BTreeMap::new(),
        }
    }
    fn touch(&mut self, i: usize) {
        self.dirty.insert(i, ());
    }
    fn finish(mut self, rows: &[Rows]) -> Vec<Write> {
        for &i in self.dirty.keys() {
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

fn mode_of(code: &str) -> Mode {
    // A mode this version cannot read blocks everyone: fail closed.
    Mode::from_code(code).unwrap_or(Mode::Exclusive)
}

/// Drop expired holders (and remember that one expired), and dead waiters.
fn purge(i: usize, r: &mut Rows, now: i64, w: &mut Writes) {
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
}

fn unwait(r: &mut Rows, token: &str, w: &mut Writes) {
    let before = r.waiters.len();
    r.waiters.retain(|x| x.token != token);
    if r.waiters.len() < before {
        w.out.push(Write::DeleteWaiter {
            name: r.name.clone(),
            token: token.to_string(),
        });
    }
}

/// Wake the longest-waiting live waiter (one, not the herd), dropping dead ones on the way.
fn wake(r: &mut Rows, now: i64, w: &mut Writes) {
    r.waiters.sort_by_key(|x| x.seq);
    while let Some(first) = r.waiters.first() {
        if first.expires > now {
            w.out.push(Write::Wake {
                token: first.token.clone(),
                bell: first.bell,
            });
            return;
        }
        let dead = r.waiters.remove(0);
        w.out.push(Write::DeleteWaiter {
            name: r.name.clone(),
            token: dead.token,
        });
    }
}

/// One atomic grant attempt for every name in `rows` (all or none).
pub fn grant(rows: &mut [Rows], now: i64, req: &GrantRequest) -> (Outcome, Vec<Write>) {
    let mut w = Writes::new();
    let mut busy = false;
    let mut retry: Option<i64> = None;
    for (i, r) in rows.iter_mut().enumerate() {
        purge(i, r, now, &mut w);
        if !req.modes[i].admits(r.holders.iter().map(|h| mode_of(&h.mode))) {
            busy = true;
            let soonest = r.holders.iter().map(|h| h.expires - now).min();
            retry = match (retry, soonest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    if busy {
        if req.queue {
            for (i, r) in rows.iter_mut().enumerate() {
                let seq = match r.waiters.iter().find(|x| x.token == req.token) {
                    Some(x) => x.seq,
                    None => {
                        r.wseq += 1;
                        w.touch(i);
                        r.wseq
                    }
                };
                let row = WaiterRow {
                    token: req.token.to_string(),
                    mode: req.modes[i].code(),
                    seq,
                    expires: now + req.waiter_ttl_ms,
                    meta: req.meta.to_string(),
                    bell: req.bell,
                };
                r.waiters.retain(|x| x.token != req.token);
                r.waiters.push(row.clone());
                w.out.push(Write::PutWaiter {
                    name: r.name.clone(),
                    row,
                });
            }
        }
        let writes = w.finish(rows);
        return (Outcome::Busy(retry), writes);
    }
    let mut granted = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter_mut().enumerate() {
        r.fence += 1;
        w.touch(i);
        let row = HolderRow {
            token: req.token.to_string(),
            mode: req.modes[i].code(),
            fence: r.fence,
            expires: now + req.ttl_ms,
            meta: req.meta.to_string(),
        };
        r.holders.retain(|h| h.token != req.token);
        r.holders.push(row.clone());
        w.out.push(Write::PutHolder {
            name: r.name.clone(),
            row,
        });
        unwait(r, req.token, &mut w);
        // A sharer let in may make room for the next sharer: pass the wake-up along.
        if req.modes[i] != Mode::Exclusive {
            wake(r, now, &mut w);
        }
        granted.push(Granted {
            fence: r.fence as u64,
            previous: Previous::parse(&r.previous),
            started: None,
        });
    }
    let writes = w.finish(rows);
    (Outcome::Granted(granted), writes)
}

/// Push the token's expiry to `ttl_ms` from now if it still holds every name.
pub fn renew(rows: &mut [Rows], now: i64, token: &str, ttl_ms: i64) -> (bool, Vec<Write>) {
    let mut w = Writes::new();
    for r in rows.iter() {
        if !r
            .holders
            .iter()
            .any(|h| h.token == token && h.expires > now)
        {
            return (false, Vec::new());
        }
    }
    for r in rows.iter_mut() {
        if let Some(h) = r.holders.iter_mut().find(|h| h.token == token) {
            h.expires = now + ttl_ms;
            w.out.push(Write::PutHolder {
                name: r.name.clone(),
                row: h.clone(),
            });
        }
    }
    (true, w.finish(rows))
}

/// Release what the token holds and withdraw it as a waiter, recording how the lease ended
/// (a withdrawn attempt leaves the record's `previous` as it was). True if it held any name.
pub fn release(rows: &mut [Rows], now: i64, token: &str, outcome: End) -> (bool, Vec<Write>) {
    let mut w = Writes::new();
    let mut held = false;
    for (i, r) in rows.iter_mut().enumerate() {
        unwait(r, token, &mut w);
        let Some(pos) = r.holders.iter().position(|h| h.token == token) else {
            continue;
        };
        let h = r.holders.remove(pos);
        w.out.push(Write::DeleteHolder {
            name: r.name.clone(),
            token: token.to_string(),
        });
        held |= h.expires > now;
        if let Some(p) = outcome.ends(h.expires > now) {
            r.previous = p.text();
            w.touch(i);
        }
        wake(r, now, &mut w);
    }
    (held, w.finish(rows))
}

/// Drop every live holder. True if there was any.
pub fn force(rows: &mut [Rows], now: i64) -> (bool, Vec<Write>) {
    let mut w = Writes::new();
    let mut any = false;
    for (i, r) in rows.iter_mut().enumerate() {
        purge(i, r, now, &mut w);
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
        wake(r, now, &mut w);
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

/// What `inspect` shows: the live holders (in fence order) and live waiters (in queue order).
pub fn view(r: &Rows, now: i64) -> LockState {
    let mut holders: Vec<&HolderRow> = r.holders.iter().filter(|h| h.expires > now).collect();
    holders.sort_by_key(|h| h.fence);
    let mut waiters: Vec<&WaiterRow> = r.waiters.iter().filter(|x| x.expires > now).collect();
    waiters.sort_by_key(|x| x.seq);
    LockState {
        name: r.name.clone(),
        holders: holders
            .into_iter()
            .map(|h| Holder {
                owner: crate::names::owner_id(&h.token),
                mode: mode_of(&h.mode),
                fence: h.fence.max(0) as u64,
                ttl_left_ms: (h.expires - now).max(0) as u64,
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
            ttl_ms: 1000,
            meta: "{}",
            queue,
            waiter_ttl_ms: 2000,
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
        let (o, w) = grant(&mut rs, 100, &req("t1", Mode::Exclusive, false));
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
        let (o, _) = grant(&mut rs, 200, &req("t2", Mode::Exclusive, false));
        assert_eq!(o, Outcome::Busy(Some(900)));
    }

    #[test]
    fn an_expired_holder_is_dropped_inside_the_grant_and_reported() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        let (o, w) = grant(&mut rs, 1000, &req("t2", Mode::Exclusive, false));
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
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        let (held, w) = release(&mut rs, 10, "stale", End::Released);
        assert!(!held);
        assert!(w.is_empty());
        let (held, _) = release(&mut rs, 10, "t1", End::Released);
        assert!(held);
        let (o, _) = grant(&mut rs, 20, &req("t2", Mode::Exclusive, false));
        let Outcome::Granted(g) = o else { panic!() };
        assert_eq!(g[0].previous, Previous::Released);
    }

    #[test]
    fn a_failed_end_is_recorded_and_a_withdrawal_leaves_it() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        release(&mut rs, 10, "t1", End::Failed(Some(2)));
        assert_eq!(rs[0].previous, "failed:2");
        grant(&mut rs, 20, &req("w", Mode::Exclusive, false));
        let (held, w) = release(&mut rs, 30, "w", End::Withdrawn);
        assert!(held);
        assert!(
            !w.iter().any(|w| matches!(w, Write::Record { .. })),
            "{w:?}"
        );
        let (o, _) = grant(&mut rs, 40, &req("t2", Mode::Exclusive, false));
        let Outcome::Granted(g) = o else { panic!() };
        assert_eq!(g[0].previous, Previous::Failed(Some(2)));
    }

    #[test]
    fn renew_needs_every_name_held_and_live() {
        let mut rs = vec![rows("a"), rows("b")];
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        assert!(!renew(&mut rs, 10, "t2", 1000).0);
        let (ok, w) = renew(&mut rs, 10, "t1", 5000);
        assert!(ok);
        assert_eq!(w.len(), 2);
        assert!(rs.iter().all(|r| r.holders[0].expires == 5010));
        assert!(!renew(&mut rs, 5010, "t1", 1000).0, "expired: no renewal");
    }

    #[test]
    fn several_names_are_granted_all_or_none() {
        let mut rs = vec![rows("a"), rows("b")];
        let mut b_only = vec![rows("b")];
        grant(&mut b_only, 0, &req("t0", Mode::Exclusive, false));
        rs[1] = b_only.pop().unwrap();
        let (o, w) = grant(&mut rs, 10, &req("t1", Mode::Exclusive, false));
        assert!(matches!(o, Outcome::Busy(_)));
        assert!(!w.iter().any(|w| matches!(w, Write::PutHolder { .. })));
        assert!(rs[0].holders.is_empty());
    }

    #[test]
    fn sharers_share_limits_count_and_exclusive_waits() {
        let mut rs = vec![rows("a")];
        for t in ["s1", "s2"] {
            assert!(matches!(
                grant(&mut rs, 0, &req(t, Mode::Shared, false)).0,
                Outcome::Granted(_)
            ));
        }
        assert!(matches!(
            grant(&mut rs, 0, &req("x", Mode::Exclusive, false)).0,
            Outcome::Busy(_)
        ));
        let mut rs = vec![rows("b")];
        for (t, ok) in [("l1", true), ("l2", true), ("l3", false)] {
            let o = grant(&mut rs, 0, &req(t, Mode::Limit(2), false)).0;
            assert_eq!(matches!(o, Outcome::Granted(_)), ok, "{t}");
        }
    }

    #[test]
    fn a_queued_waiter_is_woken_by_release_and_leaves_no_row() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        let (_, w) = grant(&mut rs, 1, &req("w1", Mode::Exclusive, true));
        assert!(w.iter().any(|w| matches!(w, Write::PutWaiter { .. })));
        grant(&mut rs, 2, &req("w2", Mode::Exclusive, true));
        grant(&mut rs, 3, &req("w1", Mode::Exclusive, true));
        assert_eq!(rs[0].waiters.len(), 2);
        assert_eq!(rs[0].wseq, 2, "a waiter coming back keeps its place");
        let (_, w) = release(&mut rs, 4, "t1", End::Released);
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
        grant(&mut rs, 5, &req("w1", Mode::Exclusive, true));
        assert_eq!(rs[0].waiters.len(), 1);
        let (_, w) = release(&mut rs, 6, "w2", End::Released);
        assert!(w.contains(&Write::DeleteWaiter {
            name: "a".into(),
            token: "w2".into()
        }));
        assert!(rs[0].waiters.is_empty());
    }

    #[test]
    fn a_dead_waiter_is_skipped_and_dropped() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        grant(&mut rs, 1, &req("dead", Mode::Exclusive, true));
        grant(&mut rs, 500, &req("live", Mode::Exclusive, true));
        let (_, w) = release(&mut rs, 2100, "t1", End::Released);
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
        grant(&mut rs, 0, &req("t1", Mode::Exclusive, false));
        assert!(force(&mut rs, 1).0);
        assert!(!force(&mut rs, 1).0);
        assert_eq!(rs[0].previous, "expired");
        assert_eq!(raise(&mut rs, &[10]).len(), 1);
        assert!(raise(&mut rs, &[5]).is_empty());
        let Outcome::Granted(g) = grant(&mut rs, 2, &req("t2", Mode::Exclusive, false)).0 else {
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
        let o = grant(&mut rs, 0, &req("s", Mode::Shared, false)).0;
        assert!(matches!(o, Outcome::Busy(_)));
    }

    #[test]
    fn view_shows_only_the_live() {
        let mut rs = vec![rows("a")];
        grant(&mut rs, 0, &req("t1", Mode::Shared, false));
        grant(&mut rs, 500, &req("t2", Mode::Shared, false));
        let v = view(&rs[0], 1200);
        assert_eq!(v.holders.len(), 1);
        assert_eq!(v.holders[0].ttl_left_ms, 300);
        assert_eq!(v.fence, 2);
    }
}
