//! The waiters' line of one name, as the rules see it: who may hold, how a waiter joins the
//! line, and whom a change wakes. How the line behaves is the store's `Line` (data, read
//! here), so the two kinds of line are one set of functions.

use std::time::Duration;

use super::rules::{Rows, WaiterRow, Write, Writes};
use crate::store::Mode;
use crate::store::queue::{Turn, turn};

/// How a store's waiters stand in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Waiters are hints: a grant looks at the holders only, and a change that frees a
    /// holder's place wakes the longest-waiting waiter (a sharer let in passes it on). Each
    /// name numbers its own waiters (`Rows::wseq`). The SQL stores and the memory store.
    Loose,
    /// First come, first served: a request may hold only when its mode admits every holder
    /// and every waiter ahead of it (`store::queue::turn`), so nobody passes an earlier
    /// waiter; a change wakes the run from the head it admits, nobody else. One request has
    /// one ticket on every name, the clock's reading when it joined (or just after the last
    /// ticket there), so two multi-name waiters stand in the same order on each name. The
    /// file store.
    Fair,
}

/// What the rules need to know of the store beyond its records: data, not code, except
/// `alive`, which only the backend can answer.
pub struct Ctx<'a> {
    /// The server's clock, in `Rules::tick`s.
    pub now: i64,
    pub rules: &'a Rules,
    /// Whether a waiter whose row has not expired still waits (the file store's waiter keeps
    /// a pipe open while it waits): asked only of the waiters that decide something.
    pub alive: &'a dyn Lives,
}

/// Tells whether a waiter still waits (`Backend::waiter_alive`).
pub trait Lives: Sync {
    fn alive(&self, row: &WaiterRow) -> bool;
}

impl<B: super::Backend> Lives for B {
    fn alive(&self, row: &WaiterRow) -> bool {
        self.waiter_alive(row)
    }
}

/// How one kind of store's records behave where stores differ.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// One unit of the backend's clock (`now`, `expires`).
    pub tick: Duration,
    pub line: Line,
    /// How long a waiter's row lives unless its waiter comes back; `None`: until the waiter
    /// goes (its release or grant, or `Ctx::alive` saying it died).
    pub waiter_ttl: Option<Duration>,
    /// The store may lose its records (a tmpfs emptied at boot, a test's `forget`): fences
    /// are floored at the wall clock (`fence_floor_now`) so they never go back, the engine's
    /// marker is kept (`Store::mark`), and a renewal that finds no lease and no record of
    /// its end says the lease was forgotten.
    pub forgetful: bool,
    /// Waiters far back in a loose line look less often (`None`: every waiter alike).
    pub far: Option<Far>,
    /// A release that leaves a loose line's name free grants it to the waiter at the head
    /// in the same write (`hand_over`), where the backend can tell that waiter so: the
    /// waiter then holds without a grant of its own, a handoff one write instead of three
    /// round trips.
    pub hand_over: bool,
}

/// A waiter with at least `ahead` live waiters before it, on every name it asks for, is far
/// back: its row lives `factor` times `Rules::waiter_ttl`, and it may look again `factor`
/// times later than `MAX_POLL` (`Attempt::Busy::patience`). A release wakes the head of the
/// line, which is near; a look of a waiter far back only finds a lock whose wake-up was
/// lost (a killed head waiter's), and the waiters near the head, who look as often as ever,
/// find it first. So a crowd of waiters asks the server a few times a second, not twice a
/// second each: at 300 PostgreSQL waiters, those looks were most of the server's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Far {
    pub ahead: usize,
    pub factor: u32,
}

impl Rules {
    /// The SQL stores': a server's clock in milliseconds, rows that survive a restart, and a
    /// waiter's row that lives two seconds unless it comes back (a waiter looks again at
    /// least every `MAX_POLL`), so a killed waiter leaves nothing behind for long.
    pub const SQL: Rules = Rules {
        tick: Duration::from_millis(1),
        line: Line::Loose,
        waiter_ttl: Some(Duration::from_secs(2)),
        forgetful: false,
        far: None,
        hand_over: false,
    };

    /// `d` in ticks.
    pub fn ticks(&self, d: Duration) -> i64 {
        i64::try_from(d.as_nanos() / self.tick.as_nanos().max(1)).unwrap_or(i64::MAX)
    }

    /// `ticks` as a duration (negative: zero).
    pub fn duration(&self, ticks: i64) -> Duration {
        let nanos = u64::try_from(self.tick.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos((ticks.max(0) as u64).saturating_mul(nanos))
    }
}

pub(super) fn mode_of(code: &str) -> Mode {
    // A mode this version cannot read blocks everyone: fail closed.
    Mode::from_code(code).unwrap_or(Mode::Exclusive)
}

/// Something ahead of a request: a holder or the waiter at that place in the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ahead {
    Holder,
    Waiter(usize),
}

/// What an attempt found on one name.
pub(super) struct Verdict {
    pub admitted: bool,
    /// Kept out by holders only (so it may look again when their leases run out).
    pub by_holder: bool,
}

fn dead(x: &WaiterRow, cx: &Ctx) -> bool {
    x.expires <= cx.now || !cx.alive.alive(x)
}

fn remove_waiter(r: &mut Rows, i: usize, w: &mut Writes) {
    let gone = r.waiters.remove(i);
    w.out.push(Write::DeleteWaiter {
        name: r.name.clone(),
        token: gone.token,
    });
}

/// The holders, then the first `pos` waiters, each with its mode.
fn ahead(r: &Rows, pos: usize) -> Vec<(Ahead, Option<Mode>)> {
    let holders = r
        .holders
        .iter()
        .map(|h| (Ahead::Holder, Some(mode_of(&h.mode))));
    let waiters = (0..pos).map(|i| (Ahead::Waiter(i), Some(mode_of(&r.waiters[i].mode))));
    holders.chain(waiters).collect()
}

/// Whether `mode` may hold now for `token` (after the purge). On a fair line a dead waiter
/// that decides it is dropped on the way (a dead waiter ahead can only keep it out).
pub(super) fn verdict(r: &mut Rows, token: &str, mode: Mode, cx: &Ctx, w: &mut Writes) -> Verdict {
    if cx.rules.line == Line::Loose {
        // Its own lease (a grant it did not hear, a lease handed to it) is no obstacle: it
        // is granted again, above it.
        let others = r.holders.iter().filter(|h| h.token != token);
        let admitted = mode.admits(others.map(|h| mode_of(&h.mode)));
        return Verdict {
            admitted,
            by_holder: true,
        };
    }
    r.waiters.sort_by_key(|x| x.seq);
    loop {
        let pos = r.waiters.iter().position(|x| x.token == token);
        let ahead = ahead(r, pos.unwrap_or(r.waiters.len()));
        let blockers: Vec<Ahead> = match turn(mode, &ahead) {
            Turn::Hold => {
                return Verdict {
                    admitted: true,
                    by_holder: false,
                };
            }
            Turn::After(who) => vec![*who],
            Turn::Slots(who) => who.into_iter().copied().collect(),
        };
        let dead = blockers.iter().rev().find_map(|b| match b {
            Ahead::Waiter(i) if dead(&r.waiters[*i], cx) => Some(*i),
            _ => None,
        });
        match dead {
            Some(i) => remove_waiter(r, i, w),
            None => {
                return Verdict {
                    admitted: false,
                    by_holder: blockers.iter().all(|b| *b == Ahead::Holder),
                };
            }
        }
    }
}

/// The waiter's place in line on every name of its request: its own where it stands
/// already, else the next (see `Line`).
pub(super) fn seqs(rows: &mut [Rows], token: &str, cx: &Ctx, w: &mut Writes) -> Vec<i64> {
    let mine = |r: &Rows| r.waiters.iter().find(|x| x.token == token).map(|x| x.seq);
    match cx.rules.line {
        Line::Loose => rows
            .iter_mut()
            .enumerate()
            .map(|(i, r)| {
                mine(r).unwrap_or_else(|| {
                    r.wseq += 1;
                    w.touch(i);
                    r.wseq
                })
            })
            .collect(),
        Line::Fair => {
            let ticket = rows.iter().find_map(mine).unwrap_or_else(|| {
                let last = rows
                    .iter()
                    .flat_map(|r| r.waiters.iter().map(|x| x.seq + 1));
                last.max().unwrap_or(0).max(cx.now)
            });
            vec![ticket; rows.len()]
        }
    }
}

/// Put `row` in line: where the waiter stands already, written again only if its row
/// expires (coming back keeps it alive).
pub(super) fn join(r: &mut Rows, row: WaiterRow, w: &mut Writes) {
    let there = r.waiters.iter().position(|x| x.token == row.token);
    if there.is_some() && row.expires == i64::MAX {
        return;
    }
    r.waiters.retain(|x| x.token != row.token);
    let at = r.waiters.partition_point(|x| x.seq <= row.seq);
    r.waiters.insert(at, row.clone());
    w.out.push(Write::PutWaiter {
        name: r.name.clone(),
        row,
    });
}

/// Wake whom a change on this name may admit (see `Line`), dropping dead waiters on the way;
/// `except` (the request making the change) needs no wake-up.
pub(super) fn wake(r: &mut Rows, cx: &Ctx, except: &str, w: &mut Writes) {
    r.waiters.sort_by_key(|x| x.seq);
    let mut i = 0;
    while i < r.waiters.len() {
        if cx.rules.line == Line::Fair
            && turn(mode_of(&r.waiters[i].mode), &ahead(r, i)) != Turn::Hold
        {
            return;
        }
        if dead(&r.waiters[i], cx) {
            remove_waiter(r, i, w);
            continue;
        }
        let x = &r.waiters[i];
        if x.token != except {
            w.out.push(Write::Wake {
                token: x.token.clone(),
                bell: x.bell,
            });
        }
        if cx.rules.line == Line::Loose {
            return;
        }
        i += 1;
    }
}

/// Grant the name to the waiter at the head of a loose line, where a release left it
/// without a holder (`Rules::hand_over`), dropping dead waiters on the way as `wake` does;
/// the waiter is rung as well, to learn of it. Only a waiter that asked for this one name
/// alone, exclusively (`WaiterRow::ttl` set): a part of what it asks for would be a lease it
/// does not know it holds. False (nothing done) if there is no such waiter at the head.
pub(super) fn hand_over(r: &mut Rows, cx: &Ctx, w: &mut Writes) -> bool {
    if cx.rules.line != Line::Loose || !r.holders.is_empty() {
        return false;
    }
    r.waiters.sort_by_key(|x| x.seq);
    while r.waiters.first().is_some_and(|x| dead(x, cx)) {
        remove_waiter(r, 0, w);
    }
    let Some(x) = r.waiters.first().cloned() else {
        return false;
    };
    if x.ttl <= 0 || mode_of(&x.mode) != Mode::Exclusive {
        return false;
    }
    let modes = [Mode::Exclusive];
    let req = super::rules::GrantRequest {
        token: &x.token,
        modes: &modes,
        ttl: x.ttl,
        meta: &x.meta,
        queue: false,
        bell: x.bell,
    };
    super::rules::hold(0, r, cx, &req, w);
    w.out.push(Write::Wake {
        token: x.token,
        bell: x.bell,
    });
    true
}

/// Take `token` out of the line; true if it stood in it.
pub(super) fn leave(r: &mut Rows, token: &str, w: &mut Writes) -> bool {
    match r.waiters.iter().position(|x| x.token == token) {
        Some(i) => {
            remove_waiter(r, i, w);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::rules::{GrantRequest, Outcome, grant, release};
    use super::*;
    use crate::store::Outcome as End;

    /// The file store's rules, with the waiters in `dead` gone.
    struct Dead(&'static [&'static str]);
    impl Lives for Dead {
        fn alive(&self, row: &WaiterRow) -> bool {
            !self.0.contains(&row.token.as_str())
        }
    }

    const FAIR: Rules = Rules {
        tick: Duration::from_nanos(1),
        line: Line::Fair,
        waiter_ttl: None,
        forgetful: true,
        far: None,
        hand_over: false,
    };

    fn cx<'a>(rules: &'a Rules, now: i64, dead: &'a Dead) -> Ctx<'a> {
        Ctx {
            now,
            rules,
            alive: dead,
        }
    }

    fn ask<'a>(token: &'a str, modes: &'a [Mode]) -> GrantRequest<'a> {
        GrantRequest {
            token,
            modes,
            ttl: 1000,
            meta: "{}",
            queue: true,
            bell: 0,
        }
    }

    fn rows(names: &[&str]) -> Vec<Rows> {
        let row = |n: &&str| Rows {
            name: n.to_string(),
            ..Rows::default()
        };
        names.iter().map(row).collect()
    }

    fn granted(o: &Outcome) -> bool {
        matches!(o, Outcome::Granted(_))
    }

    const X: &[Mode] = &[Mode::Exclusive];
    const S: &[Mode] = &[Mode::Shared];

    /// The one difference of the lines, as data: a sharer after a queued writer passes it
    /// on a loose line, and waits behind it on a fair one.
    #[test]
    fn a_sharer_waits_behind_a_queued_writer_only_on_a_fair_line() {
        for (rules, passes) in [(Rules::SQL, true), (FAIR, false)] {
            let none = Dead(&[]);
            let mut rs = rows(&["a"]);
            assert!(granted(
                &grant(&mut rs, &cx(&rules, 10, &none), &ask("s1", S)).0
            ));
            assert!(!granted(
                &grant(&mut rs, &cx(&rules, 11, &none), &ask("w", X)).0
            ));
            let o = grant(&mut rs, &cx(&rules, 12, &none), &ask("s2", S)).0;
            assert_eq!(granted(&o), passes, "{:?}", rules.line);
        }
    }

    /// A release on a fair line wakes the run from the head it admits, nobody behind it.
    #[test]
    fn a_release_wakes_the_run_it_admits() {
        let none = Dead(&[]);
        let mut rs = rows(&["a"]);
        grant(&mut rs, &cx(&FAIR, 1, &none), &ask("x", X));
        for (i, (t, m)) in [("r1", S), ("r2", S), ("w", X), ("r3", S)]
            .iter()
            .enumerate()
        {
            grant(&mut rs, &cx(&FAIR, 2 + i as i64, &none), &ask(t, m));
        }
        let (_, w) = release(&mut rs, &cx(&FAIR, 10, &none), "x", End::Released);
        let woken: Vec<&str> = w
            .iter()
            .filter_map(|w| match w {
                Write::Wake { token, .. } => Some(token.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(woken, ["r1", "r2"]);
    }

    /// One request stands at one ticket on every name, past the last ticket of each.
    #[test]
    fn a_request_has_one_ticket_on_every_name() {
        let none = Dead(&[]);
        let mut rs = rows(&["a", "b"]);
        let both = [Mode::Exclusive, Mode::Exclusive];
        grant(&mut rs, &cx(&FAIR, 1, &none), &ask("x", &both));
        grant(&mut rs[1..], &cx(&FAIR, 50, &none), &ask("early", X));
        grant(&mut rs, &cx(&FAIR, 20, &none), &ask("w", &both));
        let seq = |r: &Rows| r.waiters.iter().find(|x| x.token == "w").unwrap().seq;
        assert_eq!((seq(&rs[0]), seq(&rs[1])), (51, 51));
    }

    /// A dead waiter ahead is dropped by the attempt it would keep out.
    #[test]
    fn a_dead_waiter_that_decides_is_dropped() {
        let none = Dead(&[]);
        let mut rs = rows(&["a"]);
        grant(&mut rs, &cx(&FAIR, 1, &none), &ask("x", X));
        grant(&mut rs, &cx(&FAIR, 2, &none), &ask("d", X));
        release(&mut rs, &cx(&FAIR, 3, &none), "x", End::Released);
        let dead = Dead(&["d"]);
        let (o, w) = grant(&mut rs, &cx(&FAIR, 4, &dead), &ask("y", X));
        assert!(granted(&o), "{o:?}");
        assert!(w.contains(&Write::DeleteWaiter {
            name: "a".into(),
            token: "d".into()
        }));
    }
}
