//! A fault-injecting wrapper around any store, for the engine's unit tests: each operation can
//! be made slow, fail, hang, or apply and then lose its reply (the case a quorum must clean
//! up after: a grant the client never heard of). Faults are switched while a test runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::{
    Acquire, Attempt, ErrorKind, Listener, LockState, Outcome, Recall, Store, StoreError,
    StoreResult, TagWrite,
};

/// What happens to a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Passed straight through.
    None,
    /// Passed through after this long.
    Delay(Duration),
    /// Fails with this kind, without reaching the store.
    Error(ErrorKind),
    /// Reaches the store and takes effect, but the answer is lost on the way back.
    LoseReply,
    /// Never answers (the caller's timeout has to end it).
    Hang,
}

/// The trait's operations, to aim a fault at one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Acquire,
    Listen,
    Renew,
    Release,
    Force,
    Raise,
    /// The amnesia marker (`Store::mark`).
    Mark,
    Inspect,
    List,
    ShardList,
}

pub struct FaultyStore {
    inner: Arc<dyn Store>,
    /// Per operation; an operation not in the map gets `all`.
    faults: Mutex<(Fault, HashMap<Op, Fault>)>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>) -> FaultyStore {
        FaultyStore {
            inner,
            faults: Mutex::new((Fault::None, HashMap::new())),
        }
    }

    /// The same fault for every operation (clears the per-operation ones).
    pub fn set(&self, fault: Fault) {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = (fault, HashMap::new());
    }

    /// A fault for one operation only.
    pub fn set_for(&self, op: Op, fault: Fault) {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.1.insert(op, fault);
    }

    fn fault(&self, op: Op) -> Fault {
        let f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.1.get(&op).copied().unwrap_or(f.0)
    }

    async fn call<T>(
        &self,
        op: Op,
        f: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        match self.fault(op) {
            Fault::None => f.await,
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                f.await
            }
            Fault::Error(kind) => Err(StoreError::new(kind, "injected fault")),
            Fault::LoseReply => {
                let _ = f.await;
                Err(StoreError::unavailable(
                    "injected fault: the reply was lost",
                ))
            }
            Fault::Hang => std::future::pending().await,
        }
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn describe(&self) -> &str {
        self.inner.describe()
    }

    fn local(&self) -> bool {
        self.inner.local()
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        self.call(Op::Acquire, self.inner.try_acquire(req, queue))
            .await
    }

    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        self.call(Op::Acquire, self.inner.attempt(req, queue)).await
    }

    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        self.call(Op::Mark, self.inner.mark(names)).await
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.call(Op::Listen, self.inner.listen(req)).await
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        self.call(Op::Renew, self.inner.renew(names, token, ttl))
            .await
    }

    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        self.call(Op::Release, self.inner.release(names, token, outcome))
            .await
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        self.call(Op::Force, self.inner.force_release(names)).await
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.call(Op::Raise, self.inner.raise_fence(names, fences))
            .await
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        self.call(Op::Inspect, self.inner.inspect(name)).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        self.call(Op::List, self.inner.list(prefix)).await
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.call(Op::ShardList, self.inner.shard_list(tag, write))
            .await
    }
}
