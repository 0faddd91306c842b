//! The stand-in for a store that could not be opened, so a quorum keeps counting it.

use std::time::Duration;

use crate::store::{
    Acquire, Attempt, Listener, LockState, Outcome, Store, StoreError, StoreResult, TagWrite,
};

/// A store that could not be opened: every call fails with the reason it could not.
pub(super) struct Down {
    pub(super) desc: String,
    pub(super) error: StoreError,
    /// A file store: its failure to open is this host's answer, not a silence.
    pub(super) local: bool,
}

impl Down {
    fn err<T>(&self) -> StoreResult<T> {
        Err(self.error.clone())
    }
}

#[async_trait::async_trait]
impl Store for Down {
    fn describe(&self) -> &str {
        &self.desc
    }
    fn local(&self) -> bool {
        self.local
    }
    async fn try_acquire(&self, _: &Acquire, _: bool) -> StoreResult<Attempt> {
        self.err()
    }
    async fn listen(&self, _: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.err()
    }
    async fn renew(&self, _: &[String], _: &str, _: Duration) -> StoreResult<bool> {
        self.err()
    }
    async fn release(&self, _: &[String], _: &str, _: Outcome) -> StoreResult<bool> {
        self.err()
    }
    async fn force_release(&self, _: &[String]) -> StoreResult<bool> {
        self.err()
    }
    async fn raise_fence(&self, _: &[String], _: &[u64]) -> StoreResult<()> {
        self.err()
    }
    async fn inspect(&self, _: &str) -> StoreResult<LockState> {
        self.err()
    }
    async fn list(&self, _: &str) -> StoreResult<Vec<LockState>> {
        self.err()
    }
    async fn shard_list(&self, _: &str, _: TagWrite) -> StoreResult<String> {
        self.err()
    }
}
