//! The handover: a release that knows the waiter right behind it (an exclusive waiter for
//! that one name, with a spare lease on record) grants it the lock in the release's own
//! transaction, so a handoff costs one consensus write, not two. The heir learns of it from
//! its watch (`watch`) and holds without asking etcd; the waiters the release passed on let
//! the heir's own release hand over in turn without reading first.

use std::collections::HashSet;
use std::sync::Arc;

use etcd_client::{PutOptions, TxnOp};
use tokio::time::Instant;

use super::layout::{Entry, PASSED_ON, encode, granted_record};
use super::view::{Queue, Seen};
use super::{Inner, Snapshot};
use crate::store::{Acquire, Granted, Previous, StoreResult};

impl Inner {
    /// A release handed the lock to `req` and the listener saw it (see `watch`): nothing to
    /// ask etcd. The lease is the spare, so the engine reckons it from the spare's last
    /// renewal; the waiters the release passed on let this holder's own release hand over.
    /// When they name no heir, the queue is read while the lock is held (see `refresh`).
    pub(super) fn follow(self: &Arc<Self>, req: &Acquire) -> Option<Vec<Granted>> {
        let (seen, renewed) = self.token(&req.token, |t| {
            let seen = t.block.as_mut()?.handed.take()?;
            let renewed = t
                .spare
                .filter(|l| l.id == seen.lease && seen.entry.held)?
                .renewed?;
            t.spare = None;
            Some((seen, renewed))
        })?;
        self.granted_after_wait(&req.token);
        let name = &req.names[0];
        let mut entries: Vec<Seen> = seen
            .entry
            .behind
            .iter()
            .map(|b| Seen::passed_on(self.layout.entry(name, &b.token), b))
            .collect();
        // A handover before `handed_previous` existed was always a clean release.
        let previous = match seen.entry.handed_previous.as_str() {
            "" => Previous::Released,
            text => Previous::parse(text),
        };
        let granted = Granted {
            fence: seen.fence(),
            previous,
            started: Some(renewed),
        };
        let record = granted_record(&req.token, previous, seen.entry.offset);
        let (rev, lease) = (seen.modrev, seen.lease);
        entries.insert(0, seen);
        let queues = vec![Queue {
            entries,
            record: Some((record, rev)),
        }];
        let heirless = queues[0].heir(&req.token).is_none();
        // Only a few waiters were passed on: not the whole queue.
        self.hold(req, Snapshot { rev, queues }, false, Some((lease, renewed)));
        if heirless {
            let (inner, token) = (self.clone(), req.token.clone());
            tokio::spawn(async move { inner.refresh(&token, rev).await });
        }
        Some(vec![granted])
    }

    /// Read the queue behind a holder whose handover named no heir, so that its release
    /// need not read first: the read takes place while the lock is held instead of between
    /// holders. Nothing is read once the lock is released (a release that comes first reads
    /// for itself), and a read that comes back after the release is dropped. So is one that
    /// finds nobody to hand over to: the release then reads again, for whoever queued since.
    async fn refresh(&self, token: &str, rev: i64) {
        let names = self.token(token, |t| {
            let held = t.held.as_ref().filter(|h| h.snap.rev == rev)?;
            Some(held.names.clone())
        });
        let Some(names) = names else { return };
        let Ok(snap) = self.read(&names).await else {
            return;
        };
        if snap.queues.iter().all(|q| q.heir(token).is_none()) {
            return;
        }
        self.token(token, |t| {
            if let Some(h) = t.held.as_mut().filter(|h| h.snap.rev == rev) {
                (h.snap, h.at, h.whole) = (snap, Instant::now(), true);
            }
        });
    }

    /// The lock is `req`'s already, as read in `snap`: a release handed it over (see
    /// `release`), or the answer to an earlier grant was lost. That counts only once every
    /// lease it sits on was renewed within this attempt (`renewed`: the spare, renewed with
    /// the read), since the engine reckons the lease from the attempt's start.
    pub(super) async fn handed(
        &self,
        req: &Acquire,
        snap: &Snapshot,
        renewed: Option<i64>,
    ) -> StoreResult<Option<Vec<Granted>>> {
        let own: Option<Vec<&Seen>> = snap
            .queues
            .iter()
            .map(|q| q.find(&req.token).filter(|e| e.entry.held))
            .collect();
        let Some(own) = own else {
            return Ok(None);
        };
        let leases: HashSet<i64> = own.iter().map(|e| e.lease).collect();
        for &id in &leases {
            if Some(id) != renewed && !self.keep_alive(id).await? {
                return Ok(None);
            }
        }
        let granted = snap
            .queues
            .iter()
            .zip(own)
            .map(|(q, e)| Granted {
                fence: e.fence(),
                previous: q.previous(),
                started: None,
            })
            .collect();
        self.heard(&req.token, &leases);
        let used = self.token(&req.token, |t| t.spare.take());
        if let Some(l) = used.filter(|l| !leases.contains(&l.id)) {
            self.recycle(l);
        }
        self.granted_after_wait(&req.token);
        self.hold(req, snap.clone(), true, None);
        Ok(Some(granted))
    }

    /// The writes that grant `name` to `heir`, as its own grant would (fence: this revision
    /// plus `offset`), passing on the waiters of `q` behind it, and telling it how the lease
    /// before it ended (`previous`).
    pub(super) fn hand_to(
        &self,
        q: &Queue,
        heir: &Seen,
        name: &str,
        offset: u64,
        previous: Previous,
    ) -> [TxnOp; 2] {
        let behind = q
            .entries
            .iter()
            .filter(|e| e.create > heir.create && !e.entry.held)
            .take(PASSED_ON)
            .map(Seen::behind)
            .collect();
        let entry = Entry {
            held: true,
            offset,
            fence: None,
            lease_ttl: heir.entry.spare_ttl,
            spare: 0,
            spare_ttl: 0,
            behind,
            handed_previous: previous.text(),
            // Held from now, not from when it queued: "held for" counts from the grant.
            meta: crate::meta::restamped(&heir.entry.meta),
            ..heir.entry.clone()
        };
        [
            TxnOp::put(
                heir.key.clone(),
                encode(&entry),
                Some(PutOptions::new().with_lease(heir.entry.spare)),
            ),
            TxnOp::put(
                self.layout.record(name),
                encode(&granted_record(&heir.token, previous, offset)),
                None,
            ),
        ]
    }
}
