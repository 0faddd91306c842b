//! Setting the amnesia marker (`amnesia`) on the members that voted for a lease, until it
//! takes.
//!
//! The marker is what lets a member that remembers a live lease outvote members that forgot
//! it. A mark that failed (a member slow for a moment, right after it granted) leaves that
//! member looking like a first use: if two others then forget, nobody remembers the lease, and
//! a second holder would get a majority. So a failed mark is tried again at once, and the
//! members it still did not reach are marked after the renewals they answer yes to, for as
//! long as this process renews the lease.

use std::sync::Mutex;

use super::Engine;

/// Names whose marker some members still lack: (names, members).
#[derive(Default)]
pub(super) struct Pending(Mutex<Vec<(Vec<String>, Vec<usize>)>>);

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Vec<String>, Vec<usize>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Tries of a mark while the lease is taken (the first, and one more at once).
const TRIES: usize = 2;

impl Engine {
    /// Mark `names` on the members `idx`, which just voted for a lease on them. The members
    /// that no try reached are left to `mark_renewed`.
    pub(super) async fn mark(&self, idx: &[usize], names: &[String]) {
        let mut left = idx.to_vec();
        for _ in 0..TRIES {
            left = self.unmarked_after(&left, names).await;
            if left.is_empty() {
                return;
            }
        }
        self.pending.lock().push((names.to_vec(), left));
    }

    /// After a renewal of `names` that the members `yes` answered yes to (they hold the
    /// lease, so they voted for it): mark those of them the grant's marks did not reach.
    pub(super) async fn mark_renewed(&self, names: &[String], yes: &[usize]) {
        let due: Vec<usize> = {
            let pending = self.pending.lock();
            let Some((_, members)) = pending.iter().find(|(n, _)| n.as_slice() == names) else {
                return;
            };
            members
                .iter()
                .copied()
                .filter(|i| yes.contains(i))
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let failed = self.unmarked_after(&due, names).await;
        let mut pending = self.pending.lock();
        if let Some(at) = pending.iter().position(|(n, _)| n.as_slice() == names) {
            pending[at]
                .1
                .retain(|i| !due.contains(i) || failed.contains(i));
            if pending[at].1.is_empty() {
                pending.remove(at);
            }
        }
    }

    /// Mark `names` on `idx`; the members whose mark failed.
    async fn unmarked_after(&self, idx: &[usize], names: &[String]) -> Vec<usize> {
        self.fan_out(idx, |s| s.mark(names))
            .await
            .into_iter()
            .filter(|(_, r)| r.is_err())
            .map(|(i, _)| i)
            .collect()
    }
}
