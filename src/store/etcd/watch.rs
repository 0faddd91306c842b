//! A waiter's wake-up: an etcd watch on the one key that blocks it, and on the same stream
//! (for a waiter a release may hand the lock to) on its own key, whose put is the handover.
//!
//! Each queued attempt notes what blocks the waiter and the revision it read that at. Only
//! the waiter right behind a release hears of it (limit slots excepted: there any holder
//! leaving makes room, so those waiters watch the queue). A watch that fails costs one
//! bounded poll, never a wrong answer: the engine always reads again.
//!
//! A watch that starts from a past revision is "unsynced" in etcd and gets its events only
//! from a catch-up pass that runs every 100 ms, which would put up to 100 ms on a handoff
//! whenever anyone wrote between the read and the watch. So the key watch starts at the
//! present, and the gap from the read to the watch's creation is closed by a read of the key:
//! if it changed in between, the waiter wakes at once. The queue watch (limit slots) keeps
//! the start revision: a gap there cannot be closed by reading one key.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream};

use super::Inner;
use super::conn::Resend;
use super::view::{Blocker, Seen};
use crate::store::Listener;

pub struct Predecessor {
    inner: Arc<Inner>,
    token: String,
    watching: Option<(Blocker, WatchStream)>,
    /// The own entry also watched on that stream, and the spare a handover puts it on.
    own: Option<(Vec<u8>, i64)>,
}

/// How long a waiter that saw the key ahead deleted waits for the event of a handover to it,
/// which etcd sends right after (same revision, same stream) if there was one.
const HANDOVER_GRACE: Duration = Duration::from_millis(1);

impl Predecessor {
    pub fn new(inner: Arc<Inner>, token: &str) -> Predecessor {
        Predecessor {
            inner,
            token: token.to_string(),
            watching: None,
            own: None,
        }
    }

    /// Until the blocker is deleted (or the watch ends).
    async fn deleted(&mut self) {
        let block = self.inner.token(&self.token, |t| t.block.clone());
        let Some(block) = block else {
            // Nothing known to wait for: the caller's bound turns this into a poll.
            return std::future::pending().await;
        };
        if self.watching.as_ref().map(|(b, _)| b) != Some(&block.what) {
            self.watching = None;
            let (key, options) = match &block.what {
                Blocker::Key(k) => (k.clone(), WatchOptions::new()),
                Blocker::Queue(k) => (
                    k.clone(),
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(block.rev + 1),
                ),
            };
            let options = options.with_filters([WatchFilterType::NoPut]);
            let Ok(client) = self.inner.conn.client().await else {
                return std::future::pending().await;
            };
            let mut watch = client.watch_client();
            let Ok(mut stream) = watch.watch(key.clone(), Some(options)).await else {
                return std::future::pending().await;
            };
            if let Blocker::Key(_) = block.what {
                let created = match stream.message().await {
                    Ok(Some(resp)) if resp.created() && !resp.canceled() => {
                        resp.header().map_or(i64::MAX, |h| h.revision())
                    }
                    _ => return std::future::pending().await,
                };
                if created > block.rev && !self.unchanged_since(&key, block.rev).await {
                    return;
                }
            }
            self.own = None;
            if let Some((own, spare)) = block.own.clone() {
                // Only puts: the one that matters is a handover's. A handover between the read
                // and this watch shows as the deletion ahead, and the engine then reads.
                let options = WatchOptions::new().with_filters([WatchFilterType::NoDelete]);
                if stream.watch(own.clone(), Some(options)).await.is_ok() {
                    self.own = Some((own, spare));
                }
            }
            self.watching = Some((block.what, stream));
        }
        let Some((_, stream)) = self.watching.as_mut() else {
            return;
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) if resp.canceled() => break,
                Ok(Some(resp)) if !resp.events().is_empty() => {
                    let (inner, token, own) = (&self.inner, &self.token, &self.own);
                    if own.is_some() && !note_handover(inner, token, own, &resp) {
                        let next = tokio::time::timeout(HANDOVER_GRACE, stream.message()).await;
                        if let Ok(Ok(Some(resp))) = next {
                            note_handover(inner, token, own, &resp);
                        }
                    }
                    return;
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        // Cancelled (e.g. the revision was compacted) or broken: start afresh next time.
        self.watching = None;
    }

    /// The key still exists as it was at revision `rev` (an error counts as changed: the
    /// engine then reads again, which is always safe).
    async fn unchanged_since(&self, key: &[u8], rev: i64) -> bool {
        let got = self
            .inner
            .conn
            .call(Resend::Yes, |client| async move {
                client.kv_client().get(key.to_vec(), None).await
            })
            .await;
        match got {
            Ok(resp) => resp
                .kvs()
                .first()
                .is_some_and(|kv| kv.mod_revision() <= rev),
            Err(_) => false,
        }
    }
}

/// `resp` holds the put of a handover to this waiter: keep the entry for the next attempt,
/// which then holds without asking etcd (see `handover::follow`).
fn note_handover(
    inner: &Inner,
    token: &str,
    own: &Option<(Vec<u8>, i64)>,
    resp: &WatchResponse,
) -> bool {
    let Some((own, spare)) = own else {
        return false;
    };
    let handed = resp
        .events()
        .iter()
        .filter(|e| e.event_type() == EventType::Put)
        .filter_map(|e| e.kv())
        .filter(|kv| kv.key() == own.as_slice())
        .filter_map(Seen::from_kv)
        .find(|s| s.entry.held && s.lease == *spare);
    let Some(handed) = handed else {
        return false;
    };
    inner.token(token, |t| match t.block.as_mut() {
        Some(b) => {
            b.handed = Some(handed);
            true
        }
        None => false,
    })
}

#[async_trait]
impl Listener for Predecessor {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.deleted()).await;
    }
}
