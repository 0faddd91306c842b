//! The writes: grant, enqueue, renew, release, force and raise, each one etcd transaction
//! guarded by the revisions it read.
//!
//! Every write follows one pattern: read the queues and records (one read transaction at
//! revision H), decide, then write in a transaction that compares exactly what the decision
//! rests on. A grant rests on two things: no entry was created ahead of ours since H (for a
//! new entry: nothing in the queue range was created after H; an existing entry can only lose
//! entries ahead of it, which never turns an admission into a refusal), and the record is
//! unchanged (so `previous` and the fence offset are the ones read). When a compare fails,
//! someone else wrote in between: read again. The read may be older than the write (what a
//! grant read, kept for its release; the waiters a handover passes on): a stale one only
//! fails the compares.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::layout::{Entry, PASSED_ON, Queue, Record, Seen, encode, granted_record, lease_secs};
use super::{Block, Free, Held, Inner, Snapshot, WAIT_RENEW, WAIT_TTL, Waiting};
use crate::store::{Acquire, Attempt, ErrorKind, Granted, Mode, Previous, StoreError, StoreResult};

/// What a grant writes for one name (see `Inner::holding`).
struct Written {
    key: String,
    record_key: String,
    created: Option<i64>,
    entry: Entry,
    record: Record,
    previous: Previous,
    lease: i64,
}

/// Rounds of read-decide-write before answering busy under heavy contention; the engine then
/// comes back after a short pause.
const ROUNDS: usize = 8;

/// How long what a grant read stays good enough for its release to act on without reading.
const FRESH: Duration = Duration::from_millis(20);

impl Inner {
    pub(super) async fn attempt(
        self: &Arc<Self>,
        req: &Acquire,
        queue: bool,
    ) -> StoreResult<Attempt> {
        // The holder's lease must run from no earlier than the engine's send time: it is
        // granted, or a kept one renewed, inside the attempt that uses it, or else reckoned
        // from its renewal (`follow`).
        if queue && let Some(granted) = self.follow(req) {
            return Ok(Attempt::Granted(granted));
        }
        // A waiter not queued yet queues at once (its untimed try found the lock taken): the
        // transaction that queues it reads as well.
        let unqueued = queue && !self.waiting.lock().unwrap().contains_key(&req.token);
        let (first, mut lease, is_spare) = if unqueued {
            let snap = match self.enqueue(req, None).await {
                Ok(Some(snap)) => Ok(snap),
                Ok(None) => self.read(&req.names).await,
                Err(e) => Err(e),
            };
            (snap, None, false)
        } else {
            self.read_with_lease(req, queue).await
        };
        let spare = lease.filter(|_| is_spare).map(|l| l.id);
        let mut snap = match first {
            Ok(snap) => snap,
            Err(e) => {
                if let Some(l) = lease.filter(|_| !is_spare) {
                    self.recycle(l);
                }
                return Err(e);
            }
        };
        if let Some(granted) = self.handed(req, &snap, spare).await? {
            if let Some(l) = lease.filter(|_| !is_spare) {
                self.recycle(l);
            }
            return Ok(Attempt::Granted(granted));
        }
        let mut outcome = Attempt::Busy {
            retry_after: Some(Duration::from_millis(5)),
        };
        let mut read_ahead = true;
        for _ in 0..ROUNDS {
            if !std::mem::take(&mut read_ahead) {
                snap = self.read(&req.names).await?;
            }
            if snap.queues.iter().all(|q| q.admits(&req.token, req.mode)) {
                let l = match lease {
                    Some(l) => l,
                    None => *lease.insert(self.new_lease(lease_secs(req.ttl)).await?),
                };
                let g = self.grant(req, &snap, l).await?;
                if let Some(granted) = g {
                    if Some(l.id) == spare {
                        self.spare.lock().unwrap().remove(&req.token);
                    }
                    self.granted_after_wait(&req.token);
                    return Ok(Attempt::Granted(granted));
                }
                continue;
            }
            let queued = snap.queues.iter().all(|q| q.find(&req.token).is_some());
            if !queue {
                outcome = Attempt::Busy { retry_after: None };
                break;
            }
            if !queued {
                if let Some(after) = self.enqueue(req, Some(&snap)).await? {
                    (snap, read_ahead) = (after, true);
                }
                continue;
            }
            self.keep_waiting(req, &snap).await?;
            outcome = Attempt::Busy { retry_after: None };
            break;
        }
        if let Some(l) = lease.filter(|l| Some(l.id) != spare) {
            self.recycle(l);
        }
        Ok(outcome)
    }

    /// A release handed the lock to `req` and the listener saw it (see `watch`): nothing to
    /// ask etcd. The lease is the spare, so the engine reckons it from the spare's last
    /// renewal; the waiters the release passed on let this holder's own release hand over.
    /// When they name no heir, the queue is read while the lock is held (see `refresh`).
    fn follow(self: &Arc<Self>, req: &Acquire) -> Option<Vec<Granted>> {
        let seen = self
            .blocks
            .lock()
            .unwrap()
            .get_mut(&req.token)?
            .handed
            .take()?;
        let mut spare = self.spare.lock().unwrap();
        let renewed = spare
            .get(&req.token)
            .filter(|l| l.id == seen.lease && seen.entry.h)?
            .renewed?;
        spare.remove(&req.token);
        drop(spare);
        self.granted_after_wait(&req.token);
        let name = &req.names[0];
        let mut entries: Vec<Seen> = seen
            .entry
            .q
            .iter()
            .map(|b| Seen::passed_on(self.layout.entry(name, &b.k), b))
            .collect();
        let granted = Granted {
            fence: seen.fence(),
            previous: Previous::Released,
            started: Some(renewed),
        };
        let record = granted_record(&req.token, Previous::Released, seen.entry.o);
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
        let names = {
            let held = self.held.lock().unwrap();
            match held.get(token).filter(|h| h.snap.rev == rev) {
                Some(h) => h.names.clone(),
                None => return,
            }
        };
        let Ok(snap) = self.read(&names).await else {
            return;
        };
        if snap.queues.iter().all(|q| q.heir(token).is_none()) {
            return;
        }
        if let Some(h) = self.held.lock().unwrap().get_mut(token)
            && h.snap.rev == rev
        {
            (h.snap, h.at, h.whole) = (snap, Instant::now(), true);
        }
    }

    /// The lock is `req`'s already, as read in `snap`: a release handed it over (see
    /// `release`), or the answer to an earlier grant was lost. That counts only once every
    /// lease it sits on was renewed within this attempt (`renewed`: the spare, renewed with
    /// the read), since the engine reckons the lease from the attempt's start.
    async fn handed(
        &self,
        req: &Acquire,
        snap: &Snapshot,
        renewed: Option<i64>,
    ) -> StoreResult<Option<Vec<Granted>>> {
        let own: Option<Vec<&Seen>> = snap
            .queues
            .iter()
            .map(|q| q.find(&req.token).filter(|e| e.entry.h))
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
        let used = self.spare.lock().unwrap().remove(&req.token);
        if let Some(l) = used.filter(|l| !leases.contains(&l.id)) {
            self.recycle(l);
        }
        self.granted_after_wait(&req.token);
        self.hold(req, snap.clone(), true, None);
        Ok(Some(granted))
    }

    /// The first read of an attempt, and at the same time the lease a grant would use: the
    /// waiter's spare, renewed by a keep-alive; or, for a first try, a pooled lease renewed
    /// so or else a new one (a queued waiter without a spare takes a lease only when it is
    /// admitted: its tries are many). The third value says it is the spare; a lease a busy
    /// attempt leaves unused goes to the pool.
    async fn read_with_lease(
        &self,
        req: &Acquire,
        queue: bool,
    ) -> (StoreResult<Snapshot>, Option<Free>, bool) {
        let spare = self.spare.lock().unwrap().get(&req.token).copied();
        let is_spare = spare.is_some();
        let lease = async {
            if let Some(l) = spare {
                let sent = Instant::now();
                if matches!(self.keep_alive(l.id).await, Ok(true)) {
                    return Some(Free {
                        renewed: Some(sent),
                        ..l
                    });
                }
                self.spare.lock().unwrap().remove(&req.token);
                return None;
            }
            if queue {
                return None;
            }
            let secs = lease_secs(req.ttl).max(self.min_ttl.load(Ordering::Relaxed));
            if let Some(l) = self.pool.take(secs, None) {
                let sent = Instant::now();
                if matches!(self.keep_alive(l.id).await, Ok(true)) {
                    return Some(Free {
                        renewed: Some(sent),
                        ..l
                    });
                }
            }
            self.new_lease(secs).await.ok()
        };
        let (snap, lease) = tokio::join!(self.read(&req.names), lease);
        let is_spare = is_spare && lease.is_some();
        (snap, lease, is_spare)
    }

    /// The grant transaction. `None`: something changed since the read.
    async fn grant(
        &self,
        req: &Acquire,
        snap: &Snapshot,
        lease: Free,
    ) -> StoreResult<Option<Vec<Granted>>> {
        let mut cmps = Vec::new();
        let mut ops = Vec::new();
        let mut written = Vec::new();
        for (name, q) in req.names.iter().zip(&snap.queues) {
            let created = q.find(&req.token).map(|e| e.create);
            let w = self.holding(req, name, created, q.offset(), q.previous(), lease);
            cmps.push(match created {
                Some(c) => Compare::create_revision(w.key.clone(), CompareOp::Equal, c),
                None => {
                    Compare::create_revision(self.layout.queue(name), CompareOp::Less, snap.rev + 1)
                        .with_prefix()
                }
            });
            cmps.push(self.record_unchanged(name, q));
            ops.extend(self.puts(&w));
            written.push(w);
        }
        let resp = self.txn(Txn::new().when(cmps).and_then(ops)).await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let rev = resp.header().map_or(0, |h| h.revision()).max(0);
        Ok(Some(self.remember_grant(req, rev, written, snap, lease)))
    }

    /// What a grant of `name` to `req` writes: the holder's entry (the waiting one, created at
    /// `created`, or a new one) under `lease`, and the record.
    fn holding(
        &self,
        req: &Acquire,
        name: &str,
        created: Option<i64>,
        offset: u64,
        previous: Previous,
        lease: Free,
    ) -> Written {
        Written {
            key: self.layout.entry(name, &req.token),
            record_key: self.layout.record(name),
            created,
            entry: Entry {
                m: req.mode.code(),
                h: true,
                o: offset,
                f: None,
                t: lease.ttl,
                n: req.names.clone(),
                meta: req.meta.clone(),
                s: 0,
                st: 0,
                q: Vec::new(),
            },
            record: granted_record(&req.token, previous, offset),
            previous,
            lease: lease.id,
        }
    }

    /// The two puts of a grant.
    fn puts(&self, w: &Written) -> [TxnOp; 2] {
        [
            TxnOp::put(
                w.key.clone(),
                encode(&w.entry),
                Some(PutOptions::new().with_lease(w.lease)),
            ),
            TxnOp::put(w.record_key.clone(), encode(&w.record), None),
        ]
    }

    /// Keep what a grant wrote at revision `rev` over what it read, for `release` (see
    /// `Held`), and tell the engine what it got.
    fn remember_grant(
        &self,
        req: &Acquire,
        rev: i64,
        written: Vec<Written>,
        read: &Snapshot,
        lease: Free,
    ) -> Vec<Granted> {
        let granted = written
            .iter()
            .map(|w| Granted {
                fence: (rev.max(0) as u64).saturating_add(w.entry.o),
                previous: w.previous,
                started: None,
            })
            .collect();
        let queues = written
            .into_iter()
            .zip(&read.queues)
            .map(|(w, q)| {
                let mut entries: Vec<Seen> = q
                    .entries
                    .iter()
                    .filter(|e| e.token != req.token)
                    .cloned()
                    .collect();
                entries.push(Seen {
                    key: w.key.into_bytes(),
                    token: req.token.clone(),
                    entry: w.entry,
                    create: w.created.unwrap_or(rev),
                    modrev: rev,
                    lease: w.lease,
                });
                entries.sort_by_key(|e| e.create);
                Queue {
                    entries,
                    record: Some((w.record, rev)),
                }
            })
            .collect();
        let renewed = lease.renewed.map(|r| (lease.id, r));
        self.hold(req, Snapshot { rev, queues }, true, renewed);
        granted
    }

    /// Keep `snap` for `req`'s release (see `Held`).
    fn hold(&self, req: &Acquire, snap: Snapshot, whole: bool, renewed: Option<(i64, Instant)>) {
        let held = Held {
            names: req.names.clone(),
            snap,
            at: Instant::now(),
            whole,
            renewed,
        };
        self.held.lock().unwrap().insert(req.token.clone(), held);
    }

    fn record_unchanged(&self, name: &str, q: &super::Queue) -> Compare {
        match &q.record {
            Some((_, modrev)) => {
                Compare::mod_revision(self.layout.record(name), CompareOp::Equal, *modrev)
            }
            None => Compare::create_revision(self.layout.record(name), CompareOp::Equal, 0),
        }
    }

    /// Put `req`'s waiting entries at the back of the queues (those `snap` does not show, or
    /// all), all in one transaction, so they share one create revision and every name orders
    /// the waiters alike. The same transaction reads the queues, whether it put or not: the
    /// snapshot it returns shows where the waiter stands. `None`: the waiting lease was gone.
    async fn enqueue(
        &self,
        req: &Acquire,
        snap: Option<&Snapshot>,
    ) -> StoreResult<Option<Snapshot>> {
        let (lease, ()) = tokio::join!(self.waiting_lease(&req.token), self.grant_spare(req));
        let lease = lease?;
        let spare = self.spare.lock().unwrap().get(&req.token).copied();
        let mut cmps = Vec::new();
        let mut ops = Vec::new();
        for (i, name) in req.names.iter().enumerate() {
            if snap.is_some_and(|s| s.queues[i].find(&req.token).is_some()) {
                continue;
            }
            let key = self.layout.entry(name, &req.token);
            cmps.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
            let entry = Entry {
                m: req.mode.code(),
                t: WAIT_TTL,
                n: req.names.clone(),
                meta: req.meta.clone(),
                s: spare.map_or(0, |l| l.id),
                st: spare.map_or(0, |l| l.ttl),
                ..Entry::default()
            };
            ops.push(TxnOp::put(
                key,
                encode(&entry),
                Some(PutOptions::new().with_lease(lease)),
            ));
        }
        let reads = self.reads(&req.names);
        ops.extend(reads.iter().cloned());
        let txn = Txn::new().when(cmps).and_then(ops).or_else(reads);
        match self.txn(txn).await {
            Ok(resp) => super::snapshot(&resp, &req.names).map(Some),
            // The waiting lease ran out (this process stalled): take a new one next round.
            Err(e) if e.kind() == ErrorKind::LeaseGone => {
                self.waiting.lock().unwrap().remove(&req.token);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The lease `token` queues under, granted once and renewed by its attempts.
    async fn waiting_lease(&self, token: &str) -> StoreResult<i64> {
        let cached = self.waiting.lock().unwrap().get(token).map(|w| w.lease);
        if let Some(id) = cached {
            return Ok(id);
        }
        // Only a lease with most of its ttl left will do: `keep_waiting` renews it on time
        // reckoned from `renewed`, and a lapse would cost the waiter its place in the queue.
        let l = self.lease_for(WAIT_TTL, Some(WAIT_RENEW)).await?;
        self.waiting.lock().unwrap().insert(
            token.to_string(),
            Waiting {
                lease: l.id,
                ttl: l.ttl,
                renewed: l.renewed.unwrap_or_else(Instant::now),
            },
        );
        Ok(l.id)
    }

    /// Grant a waiter's spare holder lease, unless it has one. Without it (say the grant
    /// failed) the grant that ends the wait takes a lease of its own.
    async fn grant_spare(&self, req: &Acquire) {
        if self.spare.lock().unwrap().contains_key(&req.token) {
            return;
        }
        // A pooled lease may be near its end; the keep-alive before its use renews it.
        if let Ok(l) = self.lease_for(lease_secs(req.ttl), None).await {
            let old = self.spare.lock().unwrap().insert(req.token.clone(), l);
            if let Some(old) = old {
                self.recycle(old);
            }
        }
    }

    /// Still queued: renew the waiting lease when due, and tell the listener what to watch.
    async fn keep_waiting(&self, req: &Acquire, snap: &Snapshot) -> StoreResult<()> {
        let spare = self.spare.lock().unwrap().get(&req.token).map(|l| l.id);
        let own = snap.queues[0]
            .find(&req.token)
            .filter(|_| req.names.len() == 1 && req.mode == Mode::Exclusive)
            .filter(|e| e.entry.s != 0 && Some(e.entry.s) == spare)
            .map(|e| (e.key.clone(), e.entry.s));
        for (name, q) in req.names.iter().zip(&snap.queues) {
            if let Some(what) = q.blocker(&req.token, req.mode, &self.layout.queue(name)) {
                self.blocks.lock().unwrap().insert(
                    req.token.clone(),
                    Block {
                        what,
                        rev: snap.rev,
                        own,
                        handed: None,
                    },
                );
                break;
            }
        }
        self.keep_spare(&req.token).await;
        let Some(lease) = snap.queues[0].find(&req.token).map(|e| e.lease) else {
            return Ok(());
        };
        let due = {
            let waiting = self.waiting.lock().unwrap();
            waiting
                .get(&req.token)
                .is_none_or(|w| w.lease != lease || w.renewed.elapsed() >= WAIT_RENEW)
        };
        if due {
            let sent = Instant::now();
            let mut waiting = if self.keep_alive(lease).await? {
                self.waiting.lock().unwrap()
            } else {
                // A lost waiting lease takes the entries with it; the next round queues again.
                self.waiting.lock().unwrap().remove(&req.token);
                return Ok(());
            };
            let ttl = waiting.get(&req.token).map_or(WAIT_TTL, |w| w.ttl);
            waiting.insert(
                req.token.clone(),
                Waiting {
                    lease,
                    ttl,
                    renewed: sent,
                },
            );
        }
        Ok(())
    }

    /// Renew a queued waiter's spare every third of its ttl, so that a release handing the
    /// lock over on it leaves most of a ttl to the heir. A spare found gone is forgotten: a
    /// release that names it fails on it and then releases without handing over.
    async fn keep_spare(&self, token: &str) {
        let due = self.spare.lock().unwrap().get(token).copied().filter(|l| {
            let third = Duration::from_secs(l.ttl.max(1) as u64) / 3;
            l.renewed.is_none_or(|r| r.elapsed() >= third)
        });
        let Some(l) = due else { return };
        let sent = Instant::now();
        let alive = self.keep_alive(l.id).await;
        let mut spare = self.spare.lock().unwrap();
        match alive {
            Ok(true) => {
                if let Some(kept) = spare.get_mut(token).filter(|k| k.id == l.id) {
                    kept.renewed = Some(sent);
                }
            }
            Ok(false) => {
                spare.remove(token);
            }
            Err(_) => {}
        }
    }

    pub(super) async fn renew(
        &self,
        names: &[String],
        token: &str,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let seen = self.entries(names, token).await?;
        let Some(seen) = seen
            .into_iter()
            .map(|s| s.filter(|s| s.entry.h))
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
        let want = lease_secs(ttl).max(self.min_ttl.load(Ordering::Relaxed));
        if seen.iter().all(|s| s.entry.t == want) {
            return Ok(true);
        }
        // Another ttl: move the keys to a lease of that ttl, if they are still ours.
        self.held.lock().unwrap().remove(token);
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
                f: Some(s.fence()),
                t: granted,
                ..s.entry.clone()
            };
            ops.push(TxnOp::put(
                s.key.clone(),
                encode(&entry),
                Some(PutOptions::new().with_lease(id)),
            ));
        }
        let resp = self.txn(Txn::new().when(cmps).and_then(ops)).await?;
        if !resp.succeeded() {
            self.revoke_later(id);
            return Ok(false);
        }
        // The old lease may be dropped only if no other name of its grant still hangs on it.
        for lease in leases {
            let on_it = seen.iter().filter(|s| s.lease == lease);
            if on_it.flat_map(|s| &s.entry.n).all(|n| names.contains(n)) {
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
    /// record is marked released, for its successor to report.
    pub(super) async fn release(&self, names: &[String], token: &str) -> StoreResult<bool> {
        let spare = self.done_waiting(token);
        let held = self.held.lock().unwrap().remove(token);
        let renewed = held.as_ref().and_then(|h| h.renewed);
        // What the grant read shows the waiters queued by then. When it shows no heir, one
        // read finds any that queued since: after a longer hold, or when a handover passed on
        // too few (the end of a run of handovers). Handing over saves the waiter behind a
        // read and a write of its own.
        let mut cached = held
            .filter(|h| h.names == names)
            .filter(|h| {
                h.snap.queues.iter().any(|q| q.heir(token).is_some())
                    || (h.whole && h.at.elapsed() < FRESH)
            })
            .map(|h| h.snap);
        let mut hand_over = true;
        for _ in 0..ROUNDS {
            let snap = match cached.take() {
                Some(snap) => snap,
                None => self.read(names).await?,
            };
            let mut cmps = Vec::new();
            let mut ops = Vec::new();
            let mut held = false;
            let mut leases = Vec::new();
            for (name, q) in names.iter().zip(&snap.queues) {
                let Some(e) = q.find(token) else { continue };
                cmps.push(Compare::create_revision(
                    e.key.clone(),
                    CompareOp::Equal,
                    e.create,
                ));
                ops.push(TxnOp::delete(e.key.clone(), None));
                if e.entry.n.iter().all(|n| names.contains(n))
                    && !leases.iter().any(|(l, _)| *l == e.lease)
                {
                    leases.push((e.lease, e.entry.h.then_some(e.entry.t)));
                }
                if !e.entry.h {
                    continue;
                }
                held = true;
                let Some((rec, _)) = q.record.as_ref().filter(|(r, _)| r.t == token) else {
                    continue;
                };
                cmps.push(self.record_unchanged(name, q));
                match q.heir(token).filter(|_| hand_over) {
                    Some(heir) => {
                        cmps.push(Compare::mod_revision(
                            heir.key.clone(),
                            CompareOp::Equal,
                            heir.modrev,
                        ));
                        ops.extend(self.hand_to(q, heir, name, rec.o));
                    }
                    // The last lease granted ends cleanly: its successor will be told so.
                    None => {
                        let rec = Record {
                            r: true,
                            f: Some(e.fence()),
                            ..rec.clone()
                        };
                        ops.push(TxnOp::put(self.layout.record(name), encode(&rec), None));
                    }
                }
            }
            if ops.is_empty() {
                if let Some(l) = spare {
                    self.recycle(l);
                }
                return Ok(false);
            }
            let resp = match self.txn(Txn::new().when(cmps).and_then(ops)).await {
                // The heir's spare ran out (its process stalled or ended): it takes the lock
                // itself, if it is still there.
                Err(e) if hand_over && e.kind() == ErrorKind::LeaseGone => {
                    hand_over = false;
                    continue;
                }
                r => r?,
            };
            if resp.succeeded() {
                // The delete above is what frees the lock (and wakes the next waiter). A
                // holder's lease has no keys left and is kept for the next waiter; a waiting
                // lease, whose ttl is not on record, is revoked without holding up the caller.
                if let Some(l) = spare.filter(|l| !leases.iter().any(|(id, _)| *id == l.id)) {
                    self.recycle(l);
                }
                for (id, ttl) in leases {
                    match ttl {
                        Some(ttl) => self.recycle(Free {
                            id,
                            ttl,
                            renewed: renewed.filter(|(l, _)| *l == id).map(|(_, r)| r),
                        }),
                        None => self.revoke_later(id),
                    }
                }
                return Ok(held);
            }
        }
        Err(contended("release"))
    }

    /// The writes that grant `name` to `heir`, as its own grant would (fence: this revision
    /// plus `offset`), passing on the waiters of `q` behind it.
    fn hand_to(&self, q: &Queue, heir: &Seen, name: &str, offset: u64) -> [TxnOp; 2] {
        let behind = q
            .entries
            .iter()
            .filter(|e| e.create > heir.create && !e.entry.h)
            .take(PASSED_ON)
            .map(Seen::behind)
            .collect();
        let entry = Entry {
            h: true,
            o: offset,
            f: None,
            t: heir.entry.st,
            s: 0,
            st: 0,
            q: behind,
            ..heir.entry.clone()
        };
        [
            TxnOp::put(
                heir.key.clone(),
                encode(&entry),
                Some(PutOptions::new().with_lease(heir.entry.s)),
            ),
            TxnOp::put(
                self.layout.record(name),
                encode(&granted_record(&heir.token, Previous::Released, offset)),
                None,
            ),
        ]
    }

    pub(super) async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        for _ in 0..ROUNDS {
            let snap = self.read(names).await?;
            let mut cmps = Vec::new();
            let mut ops = Vec::new();
            for e in snap.queues.iter().flat_map(|q| &q.entries) {
                if e.entry.h {
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
            let resp = self.txn(Txn::new().when(cmps).and_then(ops)).await?;
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
                rec.o = fence - rev;
                rec.f = Some(q.last_fence().max(fence));
                cmps.push(self.record_unchanged(name, q));
                ops.push(TxnOp::put(self.layout.record(name), encode(&rec), None));
            }
            if ops.is_empty() {
                return Ok(());
            }
            let resp = self.txn(Txn::new().when(cmps).and_then(ops)).await?;
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
