//! Lock records kept as versioned objects, for the stores with conditional writes and no
//! server-side expiry or notification: S3 (an object per name, its ETag the version) and
//! DynamoDB (an item per name, a random version attribute).
//!
//! One record per lock name (`record`) holds the name's fence counter, how its last lease
//! ended, and its holders: the same rows the SQL stores keep, decided by the same rules
//! (`record::rules`), so the grant rule exists once. A transaction (`backend`) reads each record
//! with its version, decides, and writes each changed record only if its version is still the
//! one read: the store's conditional write makes each grant one atomic step per name; a lost
//! race (any refused condition) is "not granted, read again", never success. Where the store
//! can write several records in one atomic request (DynamoDB's TransactWriteItems), a
//! multi-name grant, renewal or release is that one request, all or nothing even if this
//! process dies mid-way; elsewhere (S3) it is written name by name, and a grant that loses a
//! later name takes back the names it wrote.
//!
//! **Fences never go back.** A release writes a free record and never deletes it, so its
//! counter survives; and a grant lifts the counter to `fence_floor` of the server's clock (or
//! this host's, if ahead), so a deleted record or an emptied or recreated bucket or table still
//! hands out higher fences.
//!
//! **Expiry never depends on this host's clock.** A lease's expiry is written in the server's
//! clock: the `Date` of the reads that preceded the grant (or renewal), plus the ttl, plus one
//! second (`backend::PAD_MS`). A lease is judged expired only when the `Date` of a later read
//! has reached that expiry. The argument, with `Date` being the server's time cut down to the
//! whole second (so the true time is always at or after `Date`, and less than a second past it):
//! - the holder's conservative deadline is reckoned from the instant `s` it sent its attempt,
//!   on its own monotonic clock: `s + ttl - drift`;
//! - the grant's reads happened after `s`, at a true server time `g >= s`, so their
//!   `Date >= g - 1 s`, and the written expiry is `Date + ttl + 1 s >= g + ttl > s + ttl`;
//! - a waiter judges the lease expired only from a read whose `Date` reached the expiry, whose
//!   true time is at or after its `Date`, so after `s + ttl`: after the holder's deadline.
//!
//! This holds whatever any client's wall clock says (a waiter one hour fast reads the same
//! `Date`s). It assumes what every store assumes of its own clock: it does not step back, its
//! rate is within the drift allowance, and the front ends answering keep time within a second
//! of each other (AWS's do; one local server is one clock). This host's clock matters only to
//! AWS itself, which refuses requests signed 15 minutes off (78, saying so).
//!
//! **Waiting.** Neither store notifies anybody: a waiter looks again on its own pace (`poll`),
//! about min(1 s, ttl/4) plus jitter, and sooner only when a release on this host rings it
//! (`store::hostbell`: one waiter per release). Waiters keep no row in the record (each
//! would be a paid write per look, and a conflict for the holder's renewals), so `inspect`
//! shows none.

pub mod backend;
pub mod poll;
pub mod record;
pub mod written;
#[cfg(test)]
mod written_tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::hostbell::HostBells;
use crate::store::record::RecordStore;
use crate::store::{
    Acquire, Attempt, Health, HealthQuery, Listener, LockState, Outcome, Recall, Store,
    StoreResult, TagWrite,
};
pub use backend::Records;

/// A record as read: its body and version (none where it is absent) and the server's clock.
pub struct Object {
    pub body: Option<(Bytes, String)>,
    pub date_ms: i64,
}

/// A conditional write's condition: the record must be absent, or carry this version.
#[derive(Clone, Copy, Debug)]
pub enum Cond<'a> {
    Absent,
    Match(&'a str),
}

/// One record of an atomic multi-record write (`Objects::put_all`).
pub struct Put<'a> {
    pub key: String,
    pub body: Vec<u8>,
    pub cond: Cond<'a>,
}

/// What a store of versioned records offers the transaction.
#[async_trait]
pub trait Objects: Send + Sync + 'static {
    /// The record at `key`, or its absence, with the server's `Date`.
    async fn get(&self, key: &str) -> StoreResult<Object>;
    /// Write `body` at `key` if `cond` holds: `Ok(Some(version))` written, `Ok(None)` the
    /// condition failed (or the store refused it as a conflict): read again.
    async fn put(&self, key: &str, body: Vec<u8>, cond: Cond<'_>) -> StoreResult<Option<String>>;
    /// How many records `put_all` writes in one atomic request (DynamoDB's
    /// TransactWriteItems: 100); 1, the default, where the store has no such request (S3).
    fn atomic_limit(&self) -> usize {
        1
    }
    /// Write every one of `puts` if every condition holds, in one atomic request: `Ok(true)`
    /// all written, `Ok(false)` none written (a condition failed or the store refused it as a
    /// conflict): read again. Only called with 2 to `atomic_limit` records.
    async fn put_all(&self, _puts: Vec<Put<'_>>) -> StoreResult<bool> {
        Err(crate::store::StoreError::protocol(
            "this store has no atomic write of several records",
        ))
    }
    /// Every key that starts with `prefix`.
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>>;
    /// `dlock doctor`'s findings; `probe` is a key to read (present or not).
    async fn health(&self, probe: &str, query: HealthQuery) -> StoreResult<Health>;
}

/// A listening waiter's names, and where its bell is to hang (gone with its listener).
type Listening = (Vec<String>, Weak<poll::Slot>);

/// A store of versioned records as a dlock store.
pub struct ObjectStore<O: Objects> {
    inner: RecordStore<Records<O>>,
    /// A release here wakes a waiter here at once (`poll::Rung`).
    bells: HostBells,
    /// The listening waiters, by token: each one's bell is hung by its first queued attempt,
    /// before that attempt reads, so no release after the read goes unheard. A `dlock wait`
    /// watcher never queues, so hangs none: as the host's oldest bell it would take a
    /// release's ring from the waiters behind it.
    listening: Mutex<HashMap<String, Listening>>,
}

impl<O: Objects> ObjectStore<O> {
    /// Keys of this store start with `base` (`PREFIX/NAMESPACE/`).
    pub fn new(objects: O, base: String, describe: String) -> ObjectStore<O> {
        ObjectStore {
            bells: HostBells::new(format!("{describe}\0{base}")),
            listening: Default::default(),
            inner: RecordStore::new(Records {
                objects,
                base,
                describe,
                written: Default::default(),
            }),
        }
    }

    /// An attempt made while its waiter listens: the waiter's bell hangs, once (see
    /// `listening`); after a ring that carried the record the release wrote, the attempt
    /// decides on that record without reading it (`Records::rung`).
    fn queue(&self, req: &Acquire, queue: bool) {
        if !queue {
            return;
        }
        let mut listening = self.listening.lock().unwrap();
        let Some((names, slot)) = listening.get(&req.token) else {
            return;
        };
        match slot.upgrade() {
            Some(slot) => {
                slot.hang_once(|| self.bells.hang(names));
                if let (Some(ring), [name]) = (slot.take_ring(), names.as_slice()) {
                    self.inner.backend.rung(name, &ring);
                }
            }
            None => {
                listening.remove(&req.token);
            }
        }
    }

    /// Ring the next waiter of each of `names` on this host after a release here, with the
    /// record the release wrote where there is one name: that waiter writes its grant on
    /// condition of that record's version, without reading it first.
    fn ring(&self, names: &[String]) {
        self.bells.ring(names, || match names {
            [name] => self.inner.backend.ring(name),
            _ => None,
        });
    }
}

/// A lock's state as its holders reckon it: the time left of each lease without the second
/// of padding its stored expiry carries (`backend::PAD_MS`).
fn unpadded(mut state: LockState) -> LockState {
    for h in &mut state.holders {
        h.ttl_left_ms = h.ttl_left_ms.saturating_sub(backend::PAD_MS as u64);
    }
    state
}

/// The SQL stores' `Store` over the records' transaction, but for waiting: a waiter keeps no
/// row (`try_acquire` never queues) and is paced by the lease's ttl (`listen`).
#[async_trait]
impl<O: Objects> Store for ObjectStore<O> {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn reached(&self) -> bool {
        true
    }
    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        self.queue(req, queue);
        self.inner.try_acquire(req, false).await
    }
    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        self.queue(req, queue);
        self.inner.attempt(req, false).await
    }
    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        self.inner.mark(names).await
    }
    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        let slot = Arc::new(poll::Slot::default());
        let mut listening = self.listening.lock().unwrap();
        listening.retain(|_, (_, s)| s.strong_count() > 0);
        listening.insert(
            req.token.clone(),
            (req.names.clone(), Arc::downgrade(&slot)),
        );
        let poll = poll::Poll::new(poll::interval(req.ttl));
        Ok(Box::new(poll::Rung::new(poll, slot)))
    }
    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        self.inner.renew(names, token, ttl).await
    }
    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        let released = self.inner.release(names, token, outcome).await?;
        if released {
            self.ring(names);
        }
        Ok(released)
    }
    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let released = self.inner.force_release(names).await?;
        if released {
            self.ring(names);
        }
        Ok(released)
    }
    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.inner.raise_fence(names, fences).await
    }
    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        Ok(unpadded(self.inner.inspect(name).await?))
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        Ok(self
            .inner
            .list(prefix)
            .await?
            .into_iter()
            .map(unpadded)
            .collect())
    }
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.inner.shard_list(tag, write).await
    }
    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.inner.health(query).await
    }
}
