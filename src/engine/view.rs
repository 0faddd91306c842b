//! The quorum's view of a name (`inspect`, `list`, and whoever asks who holds a lock): each
//! store's answer, and the holders merged over them.

use std::collections::BTreeMap;

use serde::Serialize;

use super::error::{deciding_kind, one_of};
use super::fan::{Linger, majority_answered};
use super::{Engine, EngineError};
use crate::store::{Holder, LockState, Previous, StoreError, StoreResult, Waiter};

/// A holder as the quorum sees it: the owner's lease on how many stores.
#[derive(Serialize, Clone)]
pub struct QuorumHolder {
    #[serde(flatten)]
    pub holder: Holder,
    pub stores: usize,
}

/// One name's state over all stores that answered.
pub struct Merged {
    /// Owners that hold it on a majority (on one store: every holder).
    pub holders: Vec<QuorumHolder>,
    /// Owners that hold it on some stores but not a majority.
    pub partial: Vec<QuorumHolder>,
    pub waiters: Vec<Waiter>,
    pub fence: u64,
    pub previous: Previous,
}

/// The stores' states of one name merged, an owner counting as a holder where `need` stores
/// show its lease (the shortest time left and the highest fence of its leases).
pub fn merge(states: &[&LockState], need: usize) -> Merged {
    let mut by_owner: Vec<QuorumHolder> = Vec::new();
    for st in states {
        for h in &st.holders {
            match by_owner.iter_mut().find(|q| q.holder.owner == h.owner) {
                Some(q) => {
                    q.stores += 1;
                    q.holder.ttl_left_ms = q.holder.ttl_left_ms.min(h.ttl_left_ms);
                    q.holder.fence = q.holder.fence.max(h.fence);
                }
                None => by_owner.push(QuorumHolder {
                    holder: h.clone(),
                    stores: 1,
                }),
            }
        }
    }
    by_owner.sort_by_key(|q| q.holder.fence);
    let (holders, partial) = by_owner.into_iter().partition(|q| q.stores >= need);
    Merged {
        holders,
        partial,
        waiters: states
            .iter()
            .map(|s| &s.waiters)
            .find(|w| !w.is_empty())
            .cloned()
            .unwrap_or_default(),
        fence: states.iter().map(|s| s.fence).max().unwrap_or(0),
        previous: states.iter().map(|s| s.previous).max().unwrap_or_default(),
    }
}

/// Whether the states in hand settle who holds each name, whatever the `rest` stores yet to
/// answer say: every owner seen holds it on a majority already, or could not even with all of
/// the rest. A read decided sooner showed a lease held on two of three stores as not held
/// whenever its second store answered a little after a store that showed another owner (a
/// loaded machine's full run did); a read waits for the rest then, bounded by the store
/// timeout as always.
pub(super) fn settled<'a>(
    states: impl IntoIterator<Item = &'a LockState>,
    rest: usize,
    need: usize,
) -> bool {
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for st in states {
        for h in &st.holders {
            *seen.entry((&st.name, &h.owner)).or_default() += 1;
        }
    }
    seen.values().all(|&c| c >= need || c + rest < need)
}

/// One name as every store answered a read of it.
pub struct NameView {
    /// In store order: the store's description, what it knows of the name (or why it did not
    /// answer), and its setup warnings.
    pub stores: Vec<(String, StoreResult<LockState>, Vec<String>)>,
    /// How many stores make a majority.
    pub need: usize,
}

impl NameView {
    /// The states of the stores that answered.
    pub fn answered(&self) -> Vec<&LockState> {
        self.stores
            .iter()
            .filter_map(|(_, r, _)| r.as_ref().ok())
            .collect()
    }

    /// The name over a majority: its holders are those a majority shows.
    pub fn merged(&self) -> Merged {
        merge(&self.answered(), self.need)
    }

    /// The view where a majority answered; else why not, each failing store named.
    pub fn quorate(self) -> Result<NameView, EngineError> {
        if self.answered().len() >= self.need {
            return Ok(self);
        }
        let errors = self.stores.into_iter().filter_map(|(_, r, _)| r.err());
        Err(unanswered(errors.collect()))
    }
}

/// The error for a read that too few stores answered, of the kind a grant would fail with
/// (`deciding_kind`: a missing bucket is 78 to `inspect` as to `lock`); every failing store
/// named.
fn unanswered(errors: Vec<StoreError>) -> EngineError {
    let kind = deciding_kind(&errors);
    let msg: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    one_of(errors, kind, msg.join("; "))
}

impl Engine {
    /// What each store knows of `name`, in store order, with setup warnings. The warnings are
    /// read inside the same bounded fan-out: a store that stops answering after it connected
    /// shows as unreachable instead of holding the whole command up.
    pub async fn inspect(&self, name: &str) -> Vec<(String, StoreResult<LockState>, Vec<String>)> {
        let (need, n) = (self.majority(), self.stores.len());
        let states = self
            .fan_out_until(
                &self.all(),
                |s| async move {
                    let (st, w) = futures_util::join!(s.inspect(name), s.warnings());
                    st.map(|st| (st, w))
                },
                |done| {
                    let states = done.iter().filter_map(|(_, r)| r.as_ref().ok());
                    majority_answered(done, need)
                        && settled(states.map(|(st, _)| st), n - done.len(), need)
                },
                Linger::Pace,
            )
            .await;
        states
            .into_iter()
            .map(|(i, r)| {
                let (r, w) = match r {
                    Ok((st, w)) => (Ok(st), w),
                    Err(e) => (Err(e), Vec::new()),
                };
                (self.stores[i].describe().to_string(), r, w)
            })
            .collect()
    }

    /// `name` as each store answered a read of it (see `inspect`).
    pub async fn view(&self, name: &str) -> NameView {
        NameView {
            stores: self.inspect(name).await,
            need: self.majority(),
        }
    }

    /// The held names under `prefix`, each merged over the stores: an error where fewer than
    /// a majority answered.
    pub async fn held(&self, prefix: &str) -> Result<Vec<(String, Merged)>, EngineError> {
        let (need, n) = (self.majority(), self.stores.len());
        let results = self
            .fan_out_until(
                &self.all(),
                |s| s.list(prefix),
                |done| {
                    let states = done.iter().filter_map(|(_, r)| r.as_ref().ok()).flatten();
                    majority_answered(done, need) && settled(states, n - done.len(), need)
                },
                Linger::Pace,
            )
            .await;
        let mut errors = Vec::new();
        let mut by_name: BTreeMap<String, Vec<LockState>> = BTreeMap::new();
        let mut answered = 0;
        for (_, r) in results {
            match r {
                Ok(states) => {
                    answered += 1;
                    for st in states {
                        by_name.entry(st.name.clone()).or_default().push(st);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if answered < self.majority() {
            return Err(unanswered(errors));
        }
        let mut rows = Vec::new();
        for (name, states) in by_name {
            let m = merge(&states.iter().collect::<Vec<_>>(), self.majority());
            if !m.holders.is_empty() {
                rows.push((name, m));
            }
        }
        Ok(rows)
    }
}
