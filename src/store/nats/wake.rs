//! How a waiter learns that it may look again: a watch on the bucket (an ordered consumer
//! the server pushes to) over two kinds of keys.
//!
//! - Its own key (`NS.w.TOKEN`): a release rings the longest-waiting live waiter of the name
//!   by writing `wake` there (`record::rules` picks one: never the herd).
//! - The namespace's holder keys, for the server's marker of an expiry only: a holder that
//!   died is released by nobody. A release deletes its holder key, which the watch tells
//!   apart (a delete, and the marker its own expiry leaves a second later on a key the
//!   watch saw deleted), so releases wake no one but the one rung.
//!
//! A lost watch (the server restarted) leaves the waiter looking again every `MAX_POLL`.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::kv::{Operation, Store, Watch};
use async_trait::async_trait;
use futures_util::StreamExt;

use crate::store::Listener;

/// What a release writes to a waiter's key to wake it.
pub const RING: &[u8] = b"wake";
/// What a waiter writes to its key while it waits.
pub const WAITING: &[u8] = b"wait";

pub struct Bell {
    watch: Option<Watch>,
    own: String,
    /// Holder keys seen deleted (released), whose marker is not an expiry.
    deleted: HashSet<String>,
}

impl Bell {
    /// Watch `own` (the waiter's key) and every key under `holders` (a wildcard subject).
    pub async fn open(kv: &Store, own: String, holders: String) -> Bell {
        let watch = kv.watch_many([own.as_str(), holders.as_str()]).await.ok();
        Bell {
            watch,
            own,
            deleted: HashSet::new(),
        }
    }
}

#[async_trait]
impl Listener for Bell {
    async fn changed(&mut self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        let Some(watch) = self.watch.as_mut() else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        loop {
            match tokio::time::timeout_at(deadline, watch.next()).await {
                Err(_) => return,
                Ok(Some(Ok(e))) => {
                    let rung = e.operation == Operation::Put && e.value.as_ref() == RING;
                    if e.key == self.own {
                        if rung {
                            return;
                        }
                        continue;
                    }
                    // A released holder's key was deleted, and the delete's own expiry
                    // brings the server's marker a second later: that is no expiry of a
                    // lease (and would wake every waiter).
                    let expired = match e.operation {
                        Operation::Delete => {
                            self.deleted.insert(e.key);
                            false
                        }
                        Operation::Purge => !self.deleted.remove(&e.key),
                        Operation::Put => false,
                    };
                    if expired {
                        return;
                    }
                }
                Ok(_) => {
                    self.watch = None;
                    tokio::time::sleep_until(deadline).await;
                    return;
                }
            }
        }
    }
}
