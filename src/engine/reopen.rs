//! A store whose server turned this process away at its connection limit when it opened
//! (issue 41): PostgreSQL's max_connections, MySQL's 1040, Redis's maxclients, ZooKeeper's
//! maxClientCnxns.
//!
//! A server that says it is full has answered: the URL is right and a wait rides the limit
//! out like any outage (`Late::reached`). Until a connection is had, the process holds none:
//! each call dials once and fails as the server still says, and the engine's wait backs off
//! with jitter between its attempts (`Engine::ride_out`), so a crowd of waiters beyond the
//! limit polls without taking a connection from those that got one. The first dial that gets
//! in keeps its store for the rest of the process.

use std::sync::Arc;
use std::time::Duration;

use crate::store::url::StoreUrl;
use crate::store::{Store, StoreError, StoreResult};

pub(super) struct Reopen {
    url: StoreUrl,
    namespace: String,
    /// Bounds each dial, as the open did.
    limit: Duration,
    opened: tokio::sync::Mutex<Option<Arc<dyn Store>>>,
    /// Why the last dial failed (the open's own error before any).
    last: std::sync::Mutex<StoreError>,
}

impl Reopen {
    pub(super) fn new(
        url: &StoreUrl,
        namespace: &str,
        limit: Duration,
        error: StoreError,
    ) -> Reopen {
        Reopen {
            url: url.clone(),
            namespace: namespace.to_string(),
            limit,
            opened: tokio::sync::Mutex::new(None),
            last: std::sync::Mutex::new(error),
        }
    }

    /// The store, dialled now if no dial got in yet.
    pub(super) async fn store(&self) -> StoreResult<Arc<dyn Store>> {
        let mut slot = self.opened.lock().await;
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let opened = tokio::time::timeout(self.limit, self.url.open(&self.namespace, self.limit))
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

    /// Why the server turns us away, while no dial got in: a waiter's withdrawn attempt on
    /// it granted nothing and needs no dial to give back.
    pub(super) async fn turned_away(&self) -> Option<StoreError> {
        if self.opened.lock().await.is_some() {
            return None;
        }
        Some(self.last.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}
