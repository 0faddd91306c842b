//! The writes on a lease once granted: renew, release (which may hand the lock over, see
//! `handover`), force and raise the fence. Each is one etcd transaction guarded by the
//! revisions it read, as the grant is (see `grant`).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::conn::Resend;
use super::grant::ROUNDS;
use super::layout::{Entry, Record, encode, lease_secs};
use super::lease::Free;
use super::{Inner, Snapshot};
use crate::store::{ErrorKind, Outcome, Previous, StoreError, StoreResult};

/// How long what a grant read stays good enough for its release to act on without reading.
const FRESH: Duration = Duration::from_millis(20);

/// One round of a release: the transaction's compares and writes, whether `token` held any
/// name, and the leases its entries were on (with their ttl where they held).
#[derive(Default)]
struct ReleaseRound {
    cmps: Vec<Compare>,
    ops: Vec<TxnOp>,
    held: bool,
    leases: Vec<(i64, Option<i64>)>,
}

/// What the grant read, where it is good enough for the release to act on without a read: it
/// shows an heir, or every waiter queued by then and is fresh. When it shows no heir, one read
/// finds any that queued since: after a longer hold, or when a handover passed on too few
/// (the end of a run of handovers). Handing over saves the waiter behind a read and a write of
/// its own.
fn still_fresh(held: Option<super::Held>, names: &[String], token: &str) -> Option<Snapshot> {
    held.filter(|h| h.names == names)
        .filter(|h| {
            h.snap.queues.iter().any(|q| q.heir(token).is_some())
                || (h.whole && h.at.elapsed() < FRESH)
        })
        .map(|h| h.snap)
}

impl Inner {
    pub(super) async fn renew(
        &self,
        names: &[String],
        token: &str,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let seen = self.entries(names, token).await?;
        let Some(seen) = seen
            .into_iter()
            .map(|s| s.filter(|s| s.entry.held))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(false);
        };
        let leases: HashSet<i64> = seen.iter().map(|s| s.lease).collect();
        for &lease in &leases {
            if !self.keep_alive(lease).await? {
                return Ok(false);
            }
        }
        self.heard(token, &leases);
        let want = lease_secs(ttl).max(self.min_ttl.load(Ordering::Relaxed));
        if seen.iter().all(|s| s.entry.lease_ttl == want) {
            return Ok(true);
        }
        // Another ttl: move the keys to a lease of that ttl, if they are still ours.
        self.token(token, |t| t.held = None);
        let Free {
            id, ttl: granted, ..
        } = self.new_lease(want).await?;
        let mut cmps = Vec::new();
        let mut ops = Vec::new();
        for s in &seen {
            cmps.push(Compare::create_revision(
                s.key.clone(),
                CompareOp::Equal,
                s.create,
            ));
            let entry = Entry {
                fence: Some(s.fence()),
                lease_ttl: granted,
                ..s.entry.clone()
            };
            ops.push(TxnOp::put(
                s.key.clone(),
                encode(&entry),
                Some(PutOptions::new().with_lease(id)),
            ));
        }
        let resp = self
            .txn(Txn::new().when(cmps).and_then(ops), Resend::No)
            .await?;
        if !resp.succeeded() {
            self.revoke_later(id);
            return Ok(false);
        }
        // The old lease may be dropped only if no other name of its grant still hangs on it.
        for lease in leases {
            let on_it = seen.iter().filter(|s| s.lease == lease);
            if on_it
                .flat_map(|s| &s.entry.names)
                .all(|n| names.contains(n))
            {
                self.revoke(lease).await;
            }
        }
        Ok(true)
    }

    /// Delete `token`'s entries, owner-checked. The last exclusive grant of one name hands
    /// the lock to the waiter right behind it in the same transaction (see `Queue::heir`):
    /// it puts that waiter's entry, as held, on the waiter's spare lease, and writes the
    /// record as that waiter's grant would. The heir learns it holds from its watch, so a
    /// handoff costs one consensus write, not two. Without an heir, the last grant's
    /// record is marked with how it ended (`outcome`), for its successor to report.
    pub(super) async fn release(
        &self,
        names: &[String],
        token: &str,
        outcome: Outcome,
    ) -> StoreResult<bool> {
        let spare = self.done_waiting(token);
        let held = self.token(token, |t| t.held.take());
        let unheard = self.token(token, |t| t.unheard.take());
        // Leases that may hold this token's keys without this process knowing: a grant whose
        // answer was lost, and, for a token not known to hold, the spare a release may have
        // handed the lock over on while its listener heard nothing. A revoke deletes their
        // keys with no read first, so it works even when no answer comes back (while the
        // replies are lost, the read below never does); it is sent alongside the read.
        let (spare, blind): (Option<Free>, Vec<i64>) = match spare {
            Some(l) if held.is_none() => (None, unheard.into_iter().chain([l.id]).collect()),
            spare => (spare, unheard.into_iter().collect()),
        };
        if blind.is_empty() {
            return self
                .release_entries(names, token, outcome, spare, held, &[])
                .await;
        }
        let revoked = futures_util::future::join_all(blind.iter().map(|&id| self.revoke(id)));
        let (released, _) = tokio::join!(
            self.release_entries(names, token, outcome, spare, held, &blind),
            revoked
        );
        released
    }

    /// `release` by what the grant read or a read now: one transaction, guarded by the
    /// revisions read. Leases in `revoked` are being revoked: never pooled.
    async fn release_entries(
        &self,
        names: &[String],
        token: &str,
        outcome: Outcome,
        spare: Option<Free>,
        held: Option<super::Held>,
        revoked: &[i64],
    ) -> StoreResult<bool> {
        let renewed = held.as_ref().and_then(|h| h.renewed);
        let mut cached = still_fresh(held, names, token);
        let mut hand_over = true;
        for _ in 0..ROUNDS {
            let snap = match cached.take() {
                Some(snap) => snap,
                None => self.read(names).await?,
            };
            let round = self.release_round(names, token, outcome, &snap, hand_over);
            if round.ops.is_empty() {
                if let Some(l) = spare {
                    self.recycle(l);
                }
                return Ok(false);
            }
            // Sent again if unanswered: a second copy after the first was applied fails its
            // compares (the entries are gone), and the read of the next round finds nothing
            // left to release.
            let txn = Txn::new().when(round.cmps).and_then(round.ops);
            let resp = match self.txn(txn, Resend::Yes).await {
                // The heir's spare ran out (its process stalled or ended): it takes the lock
                // itself, if it is still there.
                Err(e) if hand_over && e.kind() == ErrorKind::LeaseGone => {
                    hand_over = false;
                    continue;
                }
                r => r?,
            };
            if resp.succeeded() {
                self.released_leases(spare, round.leases, revoked, renewed);
                return Ok(round.held);
            }
        }
        Err(contended("release"))
    }

    /// One round's transaction of `release_entries` on what `snap` shows: delete `token`'s
    /// entries, and for each name it held, hand the lock over to the heir (while `hand_over`)
    /// or write how the last lease ended.
    fn release_round(
        &self,
        names: &[String],
        token: &str,
        outcome: Outcome,
        snap: &Snapshot,
        hand_over: bool,
    ) -> ReleaseRound {
        let mut round = ReleaseRound::default();
        for (name, q) in names.iter().zip(&snap.queues) {
            let Some(e) = q.find(token) else { continue };
            round.cmps.push(Compare::create_revision(
                e.key.clone(),
                CompareOp::Equal,
                e.create,
            ));
            round.ops.push(TxnOp::delete(e.key.clone(), None));
            if e.entry.names.iter().all(|n| names.contains(n))
                && !round.leases.iter().any(|(l, _)| *l == e.lease)
            {
                let ttl = e.entry.held.then_some(e.entry.lease_ttl);
                round.leases.push((e.lease, ttl));
            }
            if !e.entry.held {
                continue;
            }
            round.held = true;
            let Some((rec, _)) = q.record.as_ref().filter(|(r, _)| r.holder == token) else {
                continue;
            };
            round.cmps.push(self.record_unchanged(name, q));
            // A withdrawn attempt passes on what it was told itself.
            let ended = outcome
                .previous()
                .unwrap_or_else(|| Previous::parse(&rec.previous));
            match q.heir(token).filter(|_| hand_over) {
                Some(heir) => {
                    round.cmps.push(Compare::mod_revision(
                        heir.key.clone(),
                        CompareOp::Equal,
                        heir.modrev,
                    ));
                    round
                        .ops
                        .extend(self.hand_to(q, heir, name, rec.offset, ended));
                }
                // The last lease granted ends: its successor will be told how.
                None => {
                    let rec = Record {
                        released: ended == Previous::Released,
                        ended: ended.text(),
                        fence: Some(e.fence()),
                        ..rec.clone()
                    };
                    let key = self.layout.record(name);
                    round.ops.push(TxnOp::put(key, encode(&rec), None));
                }
            }
        }
        round
    }

    /// After a release: the delete is what freed the lock (and woke the next waiter). A
    /// holder's lease has no keys left and is kept for the next waiter; a waiting lease, whose
    /// ttl is not on record, is revoked without holding up the caller.
    fn released_leases(
        &self,
        spare: Option<Free>,
        leases: Vec<(i64, Option<i64>)>,
        revoked: &[i64],
        renewed: Option<(i64, Instant)>,
    ) {
        if let Some(l) = spare.filter(|l| !leases.iter().any(|(id, _)| *id == l.id)) {
            self.recycle(l);
        }
        for (id, ttl) in leases.into_iter().filter(|(id, _)| !revoked.contains(id)) {
            match ttl {
                Some(ttl) => self.recycle(Free {
                    id,
                    ttl,
                    renewed: renewed.filter(|(l, _)| *l == id).map(|(_, r)| r),
                }),
                None => self.revoke_later(id),
            }
        }
    }

    pub(super) async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        for _ in 0..ROUNDS {
            let snap = self.read(names).await?;
            let mut cmps = Vec::new();
            let mut ops = Vec::new();
            for e in snap.queues.iter().flat_map(|q| &q.entries) {
                if e.entry.held {
                    cmps.push(Compare::create_revision(
                        e.key.clone(),
                        CompareOp::Equal,
                        e.create,
                    ));
                    ops.push(TxnOp::delete(e.key.clone(), None));
                }
            }
            if ops.is_empty() {
                return Ok(false);
            }
            // The record is left as it is: the next grant sees that its predecessor did not
            // release, and reports it expired.
            let resp = self
                .txn(Txn::new().when(cmps).and_then(ops), Resend::No)
                .await?;
            if resp.succeeded() {
                return Ok(true);
            }
        }
        Err(contended("force release"))
    }

    /// Make every later fence of `names` exceed `fences`: a later grant's revision is above
    /// the revision of this write, so an offset of (fence - the revision read) is enough.
    pub(super) async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        for _ in 0..ROUNDS {
            let snap = self.read(names).await?;
            let rev = snap.rev.max(0) as u64;
            let mut cmps = Vec::new();
            let mut ops = Vec::new();
            for ((name, q), &fence) in names.iter().zip(&snap.queues).zip(fences) {
                if rev + 1 + q.offset() > fence {
                    continue;
                }
                let mut rec = q
                    .record
                    .as_ref()
                    .map(|(r, _)| r.clone())
                    .unwrap_or_default();
                rec.offset = fence - rev;
                rec.fence = Some(q.last_fence().max(fence));
                cmps.push(self.record_unchanged(name, q));
                ops.push(TxnOp::put(self.layout.record(name), encode(&rec), None));
            }
            if ops.is_empty() {
                return Ok(());
            }
            let resp = self
                .txn(Txn::new().when(cmps).and_then(ops), Resend::No)
                .await?;
            if resp.succeeded() {
                return Ok(());
            }
        }
        Err(contended("raise the fence"))
    }
}

fn contended(what: &str) -> StoreError {
    StoreError::unavailable(format!(
        "etcd: could not {what}: the lock changed on every try"
    ))
}
