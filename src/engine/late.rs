//! A store still being opened when a majority of the others already were (issue 41).
//!
//! A server that accepts the connection and never answers (SIGSTOP, a paused VM) used to hold
//! the whole engine's open for the store timeout, so every command paid it. Its open now goes on
//! in the background; each call waits for that open (within the caller's own per-store
//! timeout, so a majority's answers still decide) and then goes to the store it produced, or
//! fails as the open did. A store whose open was turned away at its server's connection limit
//! is dialled again call by call instead (`Reopen`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::reopen::Reopen;

use crate::store::{
    Acquire, Attempt, Health, HealthQuery, Listener, LockState, Outcome, Recall, Store, StoreError,
    StoreResult, TagWrite,
};

/// The outcome of one open, once it has one.
pub(super) type Opened = Option<Result<Arc<dyn Store>, StoreError>>;

pub(super) struct Late {
    pub(super) desc: String,
    /// Set once by the task that opens the store.
    pub(super) opened: watch::Receiver<Opened>,
    /// The open was turned away at the server's connection limit: each call dials again.
    pub(super) again: Option<Reopen>,
}

impl Late {
    async fn store(&self) -> StoreResult<Arc<dyn Store>> {
        if let Some(again) = &self.again {
            return again.store().await;
        }
        let mut rx = self.opened.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_else(|| unreachable!("waited for Some")),
            // The opening task ended without a word: only when the runtime shuts down.
            Err(_) => Err(StoreError::unavailable("the store was never opened")),
        }
    }
}

#[async_trait::async_trait]
impl Store for Late {
    fn describe(&self) -> &str {
        &self.desc
    }
    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        self.store().await?.try_acquire(req, queue).await
    }
    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        self.store().await?.attempt(req, queue).await
    }
    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        self.store().await?.mark(names).await
    }
    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.store().await?.listen(req).await
    }
    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        self.store().await?.renew(names, token, ttl).await
    }
    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        if let (Outcome::Withdrawn, Some(again)) = (outcome, &self.again)
            && let Some(e) = again.turned_away().await
        {
            return Err(e);
        }
        self.store().await?.release(names, token, outcome).await
    }
    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        self.store().await?.force_release(names).await
    }
    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.store().await?.raise_fence(names, fences).await
    }
    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        self.store().await?.inspect(name).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        self.store().await?.list(prefix).await
    }
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.store().await?.shard_list(tag, write).await
    }
    fn reached(&self) -> bool {
        // A server that said it is full answered, if only that.
        self.again.is_some() || matches!(&*self.opened.borrow(), Some(Ok(s)) if s.reached())
    }
    async fn warnings(&self) -> Vec<String> {
        match self.store().await {
            Ok(s) => s.warnings().await,
            Err(_) => Vec::new(),
        }
    }
    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.store().await?.health(query).await
    }
}
