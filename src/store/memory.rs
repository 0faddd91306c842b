//! An in-memory store: every lock of one store behind one mutex, for the engine's unit tests
//! and as the reference the conformance suite is checked against. A backend of the record
//! engine (`store::record`), so it keeps the same rules as the file and SQL stores.
//!
//! Time is `tokio::time::Instant`, the engine's own clock, so a test on a paused runtime
//! (`#[tokio::test(start_paused = true)]`, `tokio::time::advance`) moves leases, timeouts and
//! back-offs together and deterministically. Its waiters stand in a loose line (or a fair one,
//! `MemoryStore::fair`) and never expire: a queued attempt only registers the waiter (shown by
//! `inspect`, removed by its release or its grant).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use super::record::rules::{Line, Rows, Rules, Write};
use super::record::{Backend, Decide, RecordStore};
use super::{Acquire, Attempt, Listener, LockState, Outcome, Recall, Store, StoreResult, TagWrite};

/// A handle on one in-memory store; clones share the same locks (two clients of one store).
#[derive(Clone)]
pub struct MemoryStore(Arc<RecordStore<Memory>>);

/// The records of one in-memory store.
pub struct Memory {
    desc: String,
    /// The clock's zero: `now` is the nanoseconds since.
    base: Instant,
    /// One lock over every name, so a multi-name grant is atomic as the contract asks.
    records: Mutex<BTreeMap<String, Rows>>,
    /// Bumped on every change that may admit someone: listeners wake when it moves past
    /// what they saw.
    releases: watch::Sender<u64>,
    /// The shard-list record (`Store::shard_list`), apart from the locks.
    shard_list: Mutex<Option<String>>,
    line: Line,
}

impl MemoryStore {
    pub fn new(desc: impl Into<String>) -> MemoryStore {
        MemoryStore::with_line(desc.into(), Line::Loose)
    }

    /// One whose waiters stand in a fair line, first come first served, as on the file store
    /// and Redis: a grant passes no earlier waiter.
    pub fn fair(desc: impl Into<String>) -> MemoryStore {
        MemoryStore::with_line(desc.into(), Line::Fair)
    }

    fn with_line(desc: String, line: Line) -> MemoryStore {
        MemoryStore(Arc::new(RecordStore::new(Memory {
            desc,
            base: Instant::now(),
            records: Mutex::default(),
            releases: watch::channel(0).0,
            shard_list: Mutex::default(),
            line,
        })))
    }

    fn records(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Rows>> {
        // A panic in one test must not hide the state from the next assertion.
        self.0
            .backend
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The same store with the engine's marker set on `name`, as a store in use for a while
    /// has it (tests of the engine's other rules start from there).
    pub fn remembering(self, name: &str) -> MemoryStore {
        self.records()
            .entry(name.to_string())
            .or_insert_with(|| empty(name))
            .marked = true;
        self
    }

    /// Lose every lock, fence counter and marker at once, as a server restarted without its
    /// data would (the shard-list record too). For tests of what a store that forgot does.
    pub fn forget(&self) {
        self.records().clear();
        *self
            .0
            .backend
            .shard_list
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.0.backend.releases.send_modify(|n| *n += 1);
    }
}

fn empty(name: &str) -> Rows {
    Rows {
        name: name.to_string(),
        ..Rows::default()
    }
}

#[async_trait]
impl Backend for Memory {
    fn describe(&self) -> &str {
        &self.desc
    }

    fn rules(&self) -> Rules {
        Rules {
            tick: Duration::from_nanos(1),
            line: self.line,
            waiter_ttl: None,
            forgetful: true,
            far: None,
            hand_over: false,
        }
    }

    fn reached(&self) -> bool {
        false
    }

    async fn transact(
        &self,
        names: &[String],
        _create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        let now = i64::try_from((Instant::now() - self.base).as_nanos()).unwrap_or(i64::MAX);
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<Rows> = names
            .iter()
            .map(|n| records.get(n).cloned().unwrap_or_else(|| empty(n)))
            .collect();
        let decision = decide(now, &mut rows);
        let mut wake = false;
        for w in &decision.writes {
            let name = match w {
                Write::Wake { .. } => {
                    wake = true;
                    continue;
                }
                Write::DeleteHolder { name, .. } | Write::DeleteWaiter { name, .. } => {
                    wake = true;
                    name
                }
                Write::Record { name, .. }
                | Write::PutHolder { name, .. }
                | Write::PutWaiter { name, .. } => name,
            };
            if let Some(r) = rows.iter().find(|r| &r.name == name) {
                records.insert(name.clone(), r.clone());
            }
        }
        if wake {
            self.releases.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    async fn listen(&self, _token: &str) -> StoreResult<Box<dyn Listener>> {
        // A new receiver has seen the current count: only later changes wake it.
        Ok(Box::new(Released(self.releases.subscribe())))
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        let mut record = self.shard_list.lock().unwrap_or_else(|p| p.into_inner());
        if write == TagWrite::Read {
            return Ok(record.clone().unwrap_or_default());
        }
        if write == TagWrite::Replace || record.is_none() {
            *record = Some(tag.to_string());
        }
        Ok(record.clone().unwrap_or_default())
    }

    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        Ok(records
            .iter()
            .filter(|(n, r)| n.starts_with(prefix) && !r.holders.is_empty())
            .map(|(n, _)| n.clone())
            .collect())
    }
}

/// Wakes on the next change anywhere in the store (spurious wake-ups are allowed).
struct Released(watch::Receiver<u64>);

#[async_trait]
impl Listener for Released {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.0.changed()).await;
    }
}

/// The record engine's store, shared by the clones.
#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> &str {
        self.0.describe()
    }
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.0.shard_list(tag, write).await
    }
    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        self.0.try_acquire(req, queue).await
    }
    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        self.0.attempt(req, queue).await
    }
    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        self.0.mark(names).await
    }
    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.0.listen(req).await
    }
    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        self.0.renew(names, token, ttl).await
    }
    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        self.0.release(names, token, outcome).await
    }
    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        self.0.force_release(names).await
    }
    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.0.raise_fence(names, fences).await
    }
    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        self.0.inspect(name).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        self.0.list(prefix).await
    }
}
