//! The file store as a backend of the record engine (`store::record`): one transaction is
//! the namespace's flock held while the names' state files are read as the rules' rows,
//! decided on, and written back whole; whom to wake is rung once the flock is let go.

use super::waiters::{Entry, bell_name, remove_bell};
use super::{Dir, Record, State, now_ns};
use crate::store::StoreResult;
use crate::store::record::Decide;
use crate::store::record::rules::{HolderRow, Rows, WaiterRow, Write};

/// Whom a change may admit: the bells of queued waiters, and the names whose watchers
/// without a queue entry should look (see `Dir::wake`).
#[derive(Default)]
pub(super) struct Wake {
    pub bells: Vec<String>,
    pub names: Vec<String>,
}

impl Dir {
    /// A name's state as the rules' rows. A state from an earlier boot has no live holder
    /// and nobody waiting: its holders read as expired (so the rules say so to the next
    /// holder), its waiters as gone. (Moved, not copied: a herd's queue is hundreds long.)
    pub(super) fn rows(&self, name: &str, st: State) -> Rows {
        let this_boot = st.boot.is_empty() || st.boot == self.boot;
        let holders = st.holders.into_iter().map(|h| HolderRow {
            token: h.token,
            mode: h.mode,
            fence: h.fence as i64,
            expires: if this_boot { h.deadline as i64 } else { 0 },
            meta: h.meta,
        });
        let waiters = st
            .queue
            .into_iter()
            .filter(|_| this_boot)
            .map(|e| WaiterRow {
                token: e.token,
                mode: e.mode,
                seq: e.ticket as i64,
                expires: i64::MAX,
                meta: e.meta,
                bell: 0,
                ttl: 0,
            });
        Rows {
            name: name.to_string(),
            fence: st.fence as i64,
            previous: st.previous,
            holders: holders.collect(),
            waiters: waiters.collect(),
            marked: st.mark,
            floor: st.floor as i64,
            ..Rows::default()
        }
    }

    /// The state to write for rows the rules changed; `kept`: what the state read had
    /// beyond the rows (its lock name, its fence floor).
    fn state(&self, r: Rows, kept: (String, u64)) -> State {
        State {
            fence: r.fence.max(0) as u64,
            previous: r.previous,
            boot: self.boot.clone(),
            holders: r
                .holders
                .into_iter()
                .map(|h| Record {
                    token: h.token,
                    mode: h.mode,
                    fence: h.fence.max(0) as u64,
                    deadline: h.expires.max(0) as u64,
                    meta: h.meta,
                })
                .collect(),
            queue: r
                .waiters
                .into_iter()
                .map(|x| Entry {
                    ticket: x.seq.max(0) as u64,
                    token: x.token,
                    mode: x.mode,
                    meta: String::new(),
                })
                .collect(),
            mark: r.marked,
            name: kept.0,
            floor: kept.1,
        }
    }

    /// One transaction (under the flock): read, decide, commit; whom to wake after.
    pub(super) fn transact(&self, names: &[String], decide: Decide<'_>) -> StoreResult<Wake> {
        let states = names
            .iter()
            .map(|n| self.read(n))
            .collect::<StoreResult<Vec<State>>>()?;
        let kept: Vec<(String, u64)> = states.iter().map(|s| (s.name.clone(), s.floor)).collect();
        let mut rows: Vec<Rows> = names
            .iter()
            .zip(states)
            .map(|(n, st)| self.rows(n, st))
            .collect();
        let writes = decide(now_ns() as i64, &mut rows).writes;
        let mut wake = Wake::default();
        let mut changed = Vec::new();
        for (r, kept) in rows.into_iter().zip(kept) {
            let t = Touched::of(&writes, &r.name);
            if !t.written {
                continue;
            }
            let name = r.name.clone();
            let st = self.state(r, kept);
            // A holder or waiter gone, and no grant: watchers without a queue entry look (a
            // removed state file tells them by itself; queued waiters hear their bells).
            if t.freed && !t.held && st.queue.is_empty() && !st.forgettable() {
                wake.names.push(name.clone());
            }
            changed.push((name, st));
        }
        self.commit(&changed)?;
        for w in &writes {
            match w {
                Write::Wake { token, .. } => wake.bells.push(bell_name(token)),
                // A waiter of another process dropped from the line is dead: its bell goes.
                Write::DeleteWaiter { token, .. } if !self.has_bell(token) => {
                    remove_bell(&self.dir, &bell_name(token));
                }
                _ => {}
            }
        }
        Ok(wake)
    }
}

/// What a transaction's writes did to one name.
#[derive(Default)]
struct Touched {
    written: bool,
    /// A holder or a waiter went.
    freed: bool,
    /// A holder was written: a grant or a renewal.
    held: bool,
}

impl Touched {
    fn of(writes: &[Write], name: &str) -> Touched {
        let mut t = Touched::default();
        for w in writes {
            let on = match w {
                Write::Record { name: n, .. } | Write::PutWaiter { name: n, .. } => n,
                Write::PutHolder { name: n, .. } => {
                    t.held |= n == name;
                    n
                }
                Write::DeleteHolder { name: n, .. } | Write::DeleteWaiter { name: n, .. } => {
                    t.freed |= n == name;
                    n
                }
                Write::Wake { .. } => continue,
            };
            t.written |= on == name;
        }
        t
    }
}
