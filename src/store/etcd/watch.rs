//! A waiter's wake-up: an etcd watch on the one key that blocks it.
//!
//! Each queued attempt notes what blocks the waiter and the revision it read that at; the
//! listener watches deletions of that key from the next revision on, so a release between
//! the read and the watch is replayed rather than missed. Only the waiter right behind a
//! release hears of it (limit slots excepted: there any holder leaving makes room, so those
//! waiters watch the queue). A watch that fails costs one bounded poll, never a wrong answer:
//! the engine always reads again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{WatchFilterType, WatchOptions, WatchStream};

use super::Inner;
use super::layout::Blocker;
use crate::store::Listener;

pub struct Predecessor {
    inner: Arc<Inner>,
    token: String,
    watching: Option<(Blocker, WatchStream)>,
}

impl Predecessor {
    pub fn new(inner: Arc<Inner>, token: &str) -> Predecessor {
        Predecessor {
            inner,
            token: token.to_string(),
            watching: None,
        }
    }

    /// Until the blocker is deleted (or the watch ends).
    async fn deleted(&mut self) {
        let block = self.inner.blocks.lock().unwrap().get(&self.token).cloned();
        let Some(block) = block else {
            // Nothing known to wait for: the caller's bound turns this into a poll.
            return std::future::pending().await;
        };
        if self.watching.as_ref().map(|(b, _)| b) != Some(&block.what) {
            self.watching = None;
            let (key, options) = match &block.what {
                Blocker::Key(k) => (k.clone(), WatchOptions::new()),
                Blocker::Queue(k) => (k.clone(), WatchOptions::new().with_prefix()),
            };
            let options = options
                .with_start_revision(block.rev + 1)
                .with_filters([WatchFilterType::NoPut]);
            let mut watch = self.inner.conn.client.watch_client();
            match watch.watch(key, Some(options)).await {
                Ok(stream) => self.watching = Some((block.what, stream)),
                Err(_) => return std::future::pending().await,
            }
        }
        let Some((_, stream)) = self.watching.as_mut() else {
            return;
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) if resp.canceled() => break,
                Ok(Some(resp)) if !resp.events().is_empty() => return,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        // Cancelled (e.g. the revision was compacted) or broken: start afresh next time.
        self.watching = None;
    }
}

#[async_trait]
impl Listener for Predecessor {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.deleted()).await;
    }
}
