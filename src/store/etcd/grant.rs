//! Taking the lock: the grant transaction, queueing, and what a waiter does while queued
//! (its leases come from `lease`; a lock handed over by a release is taken in `handover`).
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

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::conn::Resend;
use super::layout::{Entry, Record, encode, granted_record, lease_secs};
use super::lease::{Free, Keyless, wait_secs};
use super::view::{Queue, Seen};
use super::{Block, Held, Inner, Snapshot};
use crate::store::{Acquire, Attempt, ErrorKind, Granted, Mode, Previous, StoreResult};

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
pub(super) const ROUNDS: usize = 8;

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
        let (first, lease, is_spare) = self.first_read(req, queue).await;
        // The lease a grant would use: the spare (kept with the token), or one taken for
        // this attempt, which goes back to the pool however the attempt ends unless a grant
        // may have put keys on it.
        let spare = lease.filter(|_| is_spare);
        let mut taken = Keyless::new(self, lease.filter(|_| !is_spare));
        let mut snap = first?;
        if let Some(granted) = self.handed(req, &snap, spare.map(|l| l.id)).await? {
            return Ok(Attempt::Granted(granted));
        }
        let mut outcome = Attempt::busy(Some(Duration::from_millis(5)));
        let mut read_ahead = true;
        for _ in 0..ROUNDS {
            if !std::mem::take(&mut read_ahead) {
                snap = self.read(&req.names).await?;
            }
            let admitted = snap.queues.iter().zip(&req.modes);
            if admitted.into_iter().all(|(q, m)| q.admits(&req.token, *m)) {
                let l = match spare.or(taken.get()) {
                    Some(l) => l,
                    None => taken.set(self.new_lease(lease_secs(req.ttl)).await?),
                };
                // From here the lease may hold this grant's keys (even if the answer is
                // lost): only a grant known to have failed its compares gives it back. Until
                // the answer comes, the token's release revokes the lease, with no read
                // first: a grant that errs or times out is given back as soon as the engine
                // releases it, not a ttl later (design rule 4).
                let spent = taken.spend();
                self.token(&req.token, |t| t.unheard = Some(l.id));
                let g = self.grant(req, &snap, l).await;
                if g.is_ok() {
                    self.token(&req.token, |t| t.unheard = None);
                }
                let g = g?;
                if let Some(granted) = g {
                    if spare.is_some_and(|s| s.id == l.id) {
                        self.token(&req.token, |t| t.spare = None);
                    }
                    self.granted_after_wait(&req.token);
                    return Ok(Attempt::Granted(granted));
                }
                if let Some(l) = spent {
                    taken.set(l);
                }
                continue;
            }
            let queued = snap.queues.iter().all(|q| q.find(&req.token).is_some());
            if !queue {
                outcome = Attempt::busy(None);
                break;
            }
            if !queued {
                if let Some(after) = self.enqueue(req, Some(&snap)).await? {
                    (snap, read_ahead) = (after, true);
                }
                continue;
            }
            self.keep_waiting(req, &snap).await?;
            outcome = Attempt::busy(None);
            break;
        }
        Ok(outcome)
    }

    /// The first read of an attempt, and the lease a grant would use (see `read_with_lease`).
    /// A waiter not queued yet queues at once (its untimed try found the lock taken): the
    /// transaction that queues it reads as well.
    async fn first_read(
        &self,
        req: &Acquire,
        queue: bool,
    ) -> (StoreResult<Snapshot>, Option<Free>, bool) {
        let unqueued = queue && self.token(&req.token, |t| t.waiting.is_none());
        if !unqueued {
            return self.read_with_lease(req, queue).await;
        }
        let snap = match self.enqueue(req, None).await {
            Ok(Some(snap)) => Ok(snap),
            Ok(None) => self.read(&req.names).await,
            Err(e) => Err(e),
        };
        (snap, None, false)
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
        let spare = self.token(&req.token, |t| t.spare);
        let is_spare = spare.is_some();
        let lease = async {
            if let Some(l) = spare {
                let sent = Instant::now();
                match self.keep_alive(l.id).await {
                    Ok(true) => {
                        return Some(Free {
                            renewed: Some(sent),
                            ..l
                        });
                    }
                    Ok(false) => self.token(&req.token, |t| t.spare = None),
                    // Unanswered, it is kept: a release may have handed the lock over on it,
                    // and this token's release must then revoke it.
                    Err(_) => {}
                }
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
        for ((name, mode), q) in req.each().zip(&snap.queues) {
            let created = q.find(&req.token).map(|e| e.create);
            let w = self.holding(req, (name, mode), created, q.offset(), q.previous(), lease);
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
        let resp = self
            .txn(Txn::new().when(cmps).and_then(ops), Resend::No)
            .await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let rev = resp.header().map_or(0, |h| h.revision()).max(0);
        Ok(Some(self.remember_grant(req, rev, written, snap, lease)))
    }

    /// What a grant of `name` (in `mode`) to `req` writes: the holder's entry (the waiting
    /// one, created at `created`, or a new one) under `lease`, and the record.
    fn holding(
        &self,
        req: &Acquire,
        (name, mode): (&str, Mode),
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
                mode: mode.code(),
                held: true,
                offset,
                fence: None,
                lease_ttl: lease.ttl,
                names: req.names.clone(),
                meta: req.meta.clone(),
                spare: 0,
                spare_ttl: 0,
                behind: Vec::new(),
                handed_previous: String::new(),
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
                fence: (rev.max(0) as u64).saturating_add(w.entry.offset),
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
    pub(super) fn hold(
        &self,
        req: &Acquire,
        snap: Snapshot,
        whole: bool,
        renewed: Option<(i64, Instant)>,
    ) {
        let held = Held {
            names: req.names.clone(),
            snap,
            at: Instant::now(),
            whole,
            renewed,
        };
        self.token(&req.token, |t| t.held = Some(held));
    }

    pub(super) fn record_unchanged(&self, name: &str, q: &Queue) -> Compare {
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
    pub(super) async fn enqueue(
        &self,
        req: &Acquire,
        snap: Option<&Snapshot>,
    ) -> StoreResult<Option<Snapshot>> {
        let (lease, ()) = tokio::join!(
            self.waiting_lease(&req.token, wait_secs(req.ttl)),
            self.grant_spare(req)
        );
        let (lease, lease_ttl) = lease?;
        let spare = self.token(&req.token, |t| t.spare);
        let mut cmps = Vec::new();
        let mut ops = Vec::new();
        for (i, (name, mode)) in req.each().enumerate() {
            if snap.is_some_and(|s| s.queues[i].find(&req.token).is_some()) {
                continue;
            }
            let key = self.layout.entry(name, &req.token);
            cmps.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
            let entry = Entry {
                mode: mode.code(),
                lease_ttl,
                names: req.names.clone(),
                meta: req.meta.clone(),
                spare: spare.map_or(0, |l| l.id),
                spare_ttl: spare.map_or(0, |l| l.ttl),
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
        // Sent again if unanswered: a second copy finds the entries the first put, and only
        // reads.
        match self.txn(txn, Resend::Yes).await {
            Ok(resp) => super::snapshot(&resp, &req.names).map(Some),
            // The waiting lease ran out (this process stalled): take a new one next round.
            Err(e) if e.kind() == ErrorKind::LeaseGone => {
                self.token(&req.token, |t| t.waiting = None);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Still queued: renew the waiting lease when due, and tell the listener what to watch.
    async fn keep_waiting(&self, req: &Acquire, snap: &Snapshot) -> StoreResult<()> {
        let spare = self.token(&req.token, |t| t.spare.map(|l| l.id));
        let own = snap.queues[0]
            .find(&req.token)
            .filter(|_| req.names.len() == 1 && req.modes[0] == Mode::Exclusive)
            .filter(|e| e.entry.spare != 0 && Some(e.entry.spare) == spare)
            .map(|e| (e.key.clone(), e.entry.spare));
        for ((name, mode), q) in req.each().zip(&snap.queues) {
            if let Some(what) = q.blocker(&req.token, mode, &self.layout.queue(name)) {
                let block = Block {
                    what,
                    rev: snap.rev,
                    own,
                    handed: None,
                };
                self.token(&req.token, |t| t.block = Some(block));
                break;
            }
        }
        self.keep_spare(&req.token).await;
        let Some(lease) = snap.queues[0].find(&req.token).map(|e| e.lease) else {
            return Ok(());
        };
        self.keep_waiting_lease(&req.token, lease).await?;
        Ok(())
    }
}
