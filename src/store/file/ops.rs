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
    /// holder), its waiters as gone.
    pub(super) fn rows(&self, name: &str, st: &State) -> Rows {
        let this_boot = st.boot.is_empty() || st.boot == self.boot;
        let holders = st.holders.iter().map(|h| HolderRow {
            token: h.token.clone(),
            mode: h.mode.clone(),
            fence: h.fence as i64,
            expires: if this_boot { h.deadline as i64 } else { 0 },
            meta: h.meta.clone(),
        });
        let waiters = st.queue.iter().filter(|_| this_boot).map(|e| WaiterRow {
            token: e.token.clone(),
            mode: e.mode.clone(),
            seq: e.ticket as i64,
            expires: i64::MAX,
            meta: e.meta.clone(),
            bell: 0,
        });
        Rows {
            name: name.to_string(),
            fence: st.fence as i64,
            previous: st.previous.clone(),
            holders: holders.collect(),
            waiters: waiters.collect(),
            marked: st.mark,
            floor: st.floor as i64,
            ..Rows::default()
        }
    }

    /// The state to write for rows the rules changed (`was`: the state they were read from).
    fn state(&self, r: &Rows, was: &State) -> State {
        State {
            fence: r.fence.max(0) as u64,
            previous: r.previous.clone(),
            boot: self.boot.clone(),
            holders: r
                .holders
                .iter()
                .map(|h| Record {
                    token: h.token.clone(),
                    mode: h.mode.clone(),
                    fence: h.fence.max(0) as u64,
                    deadline: h.expires.max(0) as u64,
                    meta: h.meta.clone(),
                })
                .collect(),
            queue: r
                .waiters
                .iter()
                .map(|x| Entry {
                    ticket: x.seq.max(0) as u64,
                    token: x.token.clone(),
                    mode: x.mode.clone(),
                    meta: String::new(),
                })
                .collect(),
            mark: r.marked,
            name: was.name.clone(),
            floor: was.floor,
        }
    }

    /// One transaction (under the flock): read, decide, commit; whom to wake after.
    pub(super) fn transact(&self, names: &[String], decide: Decide<'_>) -> StoreResult<Wake> {
        let states = names
            .iter()
            .map(|n| self.read(n))
            .collect::<StoreResult<Vec<State>>>()?;
        let mut rows: Vec<Rows> = names
            .iter()
            .zip(&states)
            .map(|(n, st)| self.rows(n, st))
            .collect();
        let writes = decide(now_ns() as i64, &mut rows).writes;
        let named = |name: &str| writes.iter().any(|w| written(w) == Some(name));
        // A holder or waiter gone, and no grant (a renewal frees nobody).
        let freed = |name: &str| {
            let mine = |w: &&Write| written(w) == Some(name);
            let gone =
                |w: &&Write| matches!(w, Write::DeleteHolder { .. } | Write::DeleteWaiter { .. });
            let held = |w: &&Write| matches!(w, Write::PutHolder { .. });
            writes.iter().filter(mine).any(|w| gone(&w))
                && !writes.iter().filter(mine).any(|w| held(&w))
        };
        let mut wake = Wake::default();
        let mut changed = Vec::new();
        for (r, was) in rows.iter().zip(&states) {
            if !named(&r.name) {
                continue;
            }
            let st = self.state(r, was);
            // Watchers without a queue entry look (a removed state file tells them by
            // itself; queued waiters hear their bells).
            if freed(&r.name) && st.queue.is_empty() && !st.forgettable() {
                wake.names.push(r.name.clone());
            }
            changed.push((r.name.clone(), st));
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

/// The name a write changes (none for a wake-up).
fn written(w: &Write) -> Option<&str> {
    match w {
        Write::Record { name, .. }
        | Write::PutHolder { name, .. }
        | Write::DeleteHolder { name, .. }
        | Write::PutWaiter { name, .. }
        | Write::DeleteWaiter { name, .. } => Some(name),
        Write::Wake { .. } => None,
    }
}
