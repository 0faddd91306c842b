//! A store whose server turned this process away at its connection limit when it opened
//! (issue 41): PostgreSQL's max_connections, MySQL's 1040, Redis's maxclients, ZooKeeper's
//! maxClientCnxns.
//!
//! A server that says it is full has answered: the URL is right and a wait rides the limit
//! out like any outage (`reached`). Until a connection is had, the process holds none: each
//! call dials once and fails as the server still says, and the engine's wait backs off with
//! jitter between its attempts (`Engine::ride_out`), so a crowd of waiters beyond the limit
//! polls without taking a connection from those that got one. The first dial that gets in
//! keeps its store for the rest of the process.

use std::sync::Arc;
use std::time::Duration;

use crate::store::{
    self, Acquire, Attempt, Health, HealthQuery, Listener, LockState, Outcome, Recall, Store,
    StoreError, StoreResult, StoreUrl, TagWrite,
};

pub(super) struct Reopen {
    pub(super) desc: String,
    pub(super) url: StoreUrl,
    pub(super) namespace: String,
    /// Bounds each dial, as the open did.
    pub(super) limit: Duration,
    pub(super) opened: tokio::sync::Mutex<Option<Arc<dyn Store>>>,
    /// Why the last dial failed (the open's own error before any).
    pub(super) last: std::sync::Mutex<StoreError>,
}

impl Reopen {
    pub(super) fn new(
        url: &StoreUrl,
        namespace: &str,
        limit: Duration,
        error: StoreError,
    ) -> Reopen {
        Reopen {
            desc: url.to_string(),
            url: url.clone(),
            namespace: namespace.to_string(),
            limit,
            opened: tokio::sync::Mutex::new(None),
            last: std::sync::Mutex::new(error),
        }
    }

    /// The store, dialled now if no dial got in yet.
    async fn store(&self) -> StoreResult<Arc<dyn Store>> {
        let mut slot = self.opened.lock().await;
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let opened = tokio::time::timeout(
            self.limit,
            store::open(&self.url, &self.namespace, self.limit),
        )
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::unavailable(format!(
                "no answer within {}",
                humantime::format_duration(self.limit)
            )))
        });
        match opened {
            Ok(s) => {
                *slot = Some(s.clone());
                Ok(s)
            }
            Err(e) => {
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = e.clone();
                Err(e)
            }
        }
    }
}

#[async_trait::async_trait]
impl Store for Reopen {
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
        // A waiter's withdrawn attempt on a store it never got into granted nothing: no dial
        // for it. Any other release may be of another process's lease (`unlock`): it dials.
        if outcome == Outcome::Withdrawn && self.opened.lock().await.is_none() {
            return Err(self.last.lock().unwrap_or_else(|p| p.into_inner()).clone());
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
    /// The server answered, if only to say it is full.
    fn reached(&self) -> bool {
        true
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
