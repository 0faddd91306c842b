//! An in-memory store: every lock of one store behind one mutex, for the engine's unit tests
//! and as the reference the conformance suite is checked against.
//!
//! Time is `tokio::time::Instant`, the engine's own clock, so a test on a paused runtime
//! (`#[tokio::test(start_paused = true)]`, `tokio::time::advance`) moves leases, timeouts and
//! back-offs together and deterministically. Like the file store and Redis it keeps no queue:
//! a grant is the mode rule over the live holders, and a queued attempt only registers the
//! waiter (shown by `inspect`, removed by its release or its grant).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    Acquire, Attempt, Granted, Holder, Listener, LockState, Mode, Outcome, Previous, Recall, Store,
    StoreResult, TagWrite, Waiter, fence_floor_now,
};

/// A handle on one in-memory store; clones share the same locks (two clients of one store).
#[derive(Clone)]
pub struct MemoryStore {
    desc: String,
    /// One lock over every name, so a multi-name grant is atomic as the contract asks.
    locks: Arc<Mutex<BTreeMap<String, Lock>>>,
    /// Bumped on every release: listeners wake when it moves past what they saw.
    releases: Arc<watch::Sender<u64>>,
    /// The shard-list record (`Store::shard_list`), apart from the locks.
    shard_list: Arc<Mutex<Option<String>>>,
}

#[derive(Default)]
struct Lock {
    /// The last fence handed out (or raised to).
    fence: u64,
    previous: Previous,
    holders: Vec<Hold>,
    waiters: Vec<(String, Mode)>,
    /// The engine's marker (`Store::mark`): gone with everything else when the store forgets.
    marked: bool,
}

struct Hold {
    token: String,
    mode: Mode,
    fence: u64,
    deadline: Instant,
    meta: String,
}

impl Lock {
    /// Drop holders whose time is up, remembering that one expired (inside the grant).
    fn purge(&mut self, now: Instant) {
        let before = self.holders.len();
        self.holders.retain(|h| h.deadline > now);
        if self.holders.len() < before {
            self.previous = Previous::Expired;
        }
    }

    fn live(&self, now: Instant) -> impl Iterator<Item = &Hold> {
        self.holders.iter().filter(move |h| h.deadline > now)
    }

    fn recall(&self, now: Instant) -> Recall {
        Recall {
            marked: self.marked,
            horizon: self
                .live(now)
                .map(|h| h.deadline - now)
                .max()
                .unwrap_or_default(),
        }
    }
}

impl MemoryStore {
    pub fn new(desc: impl Into<String>) -> MemoryStore {
        MemoryStore {
            desc: desc.into(),
            locks: Arc::default(),
            releases: Arc::new(watch::channel(0).0),
            shard_list: Arc::default(),
        }
    }

    fn record_shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        let mut record = self.shard_list.lock().unwrap_or_else(|p| p.into_inner());
        if write == TagWrite::Read {
            return Ok(record.clone().unwrap_or_default());
        }
        if write == TagWrite::Replace || record.is_none() {
            *record = Some(tag.to_string());
        }
        Ok(record.clone().unwrap_or_default())
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Lock>) -> T) -> T {
        // A panic in one test must not hide the state from the next assertion.
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut locks)
    }

    /// The same store with the engine's marker set on `name`, as a store in use for a while
    /// has it (tests of the engine's other rules start from there).
    pub fn remembering(self, name: &str) -> MemoryStore {
        self.with(|locks| locks.entry(name.to_string()).or_default().marked = true);
        self
    }

    /// Lose every lock, fence counter and marker at once, as a server restarted without its
    /// data would (the shard-list record too). For tests of what a store that forgot does.
    pub fn forget(&self) {
        self.with(|locks| locks.clear());
        *self.shard_list.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.woke();
    }

    fn woke(&self) {
        self.releases.send_modify(|n| *n += 1);
    }

    fn state(name: &str, l: &Lock, now: Instant) -> LockState {
        let mut holders: Vec<Holder> = l
            .live(now)
            .map(|h| Holder {
                owner: crate::names::owner_id(&h.token),
                mode: h.mode,
                fence: h.fence,
                ttl_left_ms: (h.deadline - now).as_millis() as u64,
                meta: crate::meta::parse(&h.meta),
            })
            .collect();
        holders.sort_by_key(|h| h.fence);
        LockState {
            name: name.to_string(),
            holders,
            waiters: l
                .waiters
                .iter()
                .map(|(t, m)| Waiter {
                    owner: crate::names::owner_id(t),
                    mode: *m,
                    meta: serde_json::Value::Null,
                })
                .collect(),
            fence: l.fence,
            previous: l.previous,
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> &str {
        &self.desc
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write)
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        Ok(self.attempt(req, queue).await?.0)
    }

    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        let now = Instant::now();
        Ok(self.with(|locks| {
            let mut soonest: Option<Duration> = None;
            let mut busy = false;
            let mut recall = Vec::with_capacity(req.names.len());
            for (name, mode) in req.each() {
                let l = locks.entry(name.clone()).or_default();
                l.purge(now);
                recall.push(l.recall(now));
                if !mode.admits(l.holders.iter().map(|h| h.mode)) {
                    busy = true;
                    if let Some(left) = l.holders.iter().map(|h| h.deadline - now).min() {
                        soonest = Some(soonest.map_or(left, |s| s.min(left)));
                    }
                }
            }
            if busy {
                if queue {
                    for (name, mode) in req.each() {
                        let l = locks.get_mut(name).expect("entered above");
                        if !l.waiters.iter().any(|(t, _)| *t == req.token) {
                            l.waiters.push((req.token.clone(), mode));
                        }
                    }
                }
                let busy = Attempt::Busy {
                    retry_after: soonest,
                };
                return (busy, recall);
            }
            let granted = req
                .each()
                .map(|(name, mode)| {
                    let l = locks.get_mut(name).expect("entered above");
                    l.waiters.retain(|(t, _)| *t != req.token);
                    l.fence = (l.fence + 1).max(fence_floor_now());
                    l.holders.push(Hold {
                        token: req.token.clone(),
                        mode,
                        fence: l.fence,
                        deadline: now + req.ttl,
                        meta: req.meta.clone(),
                    });
                    Granted {
                        fence: l.fence,
                        previous: l.previous,
                        started: None,
                    }
                })
                .collect();
            (Attempt::Granted(granted), recall)
        }))
    }

    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        self.with(|locks| {
            for n in names {
                locks.entry(n.clone()).or_default().marked = true;
            }
        });
        Ok(())
    }

    async fn listen(&self, _req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        // A new receiver has seen the current count: only later releases wake it.
        Ok(Box::new(Released(self.releases.subscribe())))
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let now = Instant::now();
        Ok(self.with(|locks| {
            let holds = |l: &Lock| l.live(now).any(|h| h.token == token);
            if !names.iter().all(|n| locks.get(n).is_some_and(holds)) {
                return false;
            }
            for n in names {
                let l = locks.get_mut(n).expect("checked above");
                for h in l.holders.iter_mut().filter(|h| h.token == token) {
                    h.deadline = now + ttl;
                }
            }
            true
        }))
    }

    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        let now = Instant::now();
        let held = self.with(|locks| {
            let mut held = false;
            for n in names {
                let Some(l) = locks.get_mut(n) else { continue };
                l.waiters.retain(|(t, _)| t != token);
                // The token's own lease out before the purge, which would take an expired
                // one for a job's lease that ran out: a withdrawn attempt was none.
                let (mine, others): (Vec<Hold>, _) = std::mem::take(&mut l.holders)
                    .into_iter()
                    .partition(|h| h.token == token);
                l.holders = others;
                l.purge(now);
                if let Some(h) = mine.first() {
                    held |= h.deadline > now;
                    if let Some(p) = outcome.ends(h.deadline > now) {
                        l.previous = p;
                    }
                }
            }
            held
        });
        self.woke();
        Ok(held)
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let now = Instant::now();
        let held = self.with(|locks| {
            let mut held = false;
            for n in names {
                let Some(l) = locks.get_mut(n) else { continue };
                l.purge(now);
                if !l.holders.is_empty() {
                    l.holders.clear();
                    // The holder did not finish by itself: its successor should know.
                    l.previous = Previous::Expired;
                    held = true;
                }
            }
            held
        });
        self.woke();
        Ok(held)
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.with(|locks| {
            for (n, &f) in names.iter().zip(fences) {
                let l = locks.entry(n.clone()).or_default();
                l.fence = l.fence.max(f);
            }
        });
        Ok(())
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let now = Instant::now();
        Ok(self.with(|locks| match locks.get(name) {
            Some(l) => Self::state(name, l, now),
            None => LockState {
                name: name.to_string(),
                ..LockState::default()
            },
        }))
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let now = Instant::now();
        Ok(self.with(|locks| {
            locks
                .iter()
                .filter(|(n, l)| n.starts_with(prefix) && l.live(now).next().is_some())
                .map(|(n, l)| Self::state(n, l, now))
                .collect()
        }))
    }
}

/// Wakes on the next release anywhere in the store (spurious wake-ups are allowed).
struct Released(watch::Receiver<u64>);

#[async_trait]
impl Listener for Released {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.0.changed()).await;
    }
}
