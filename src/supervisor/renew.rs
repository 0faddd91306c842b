//! Keeping the lease renewed while the command runs.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep};

use crate::engine::{EngineError, Lease, timing};
use crate::events::{self, Events};
use crate::shard::Shards;

/// What the renewal task last learned.
#[derive(Clone, Debug)]
pub struct Health {
    pub deadline: Instant,
    /// Set once the lease is known to be gone: stop the child now.
    pub lost: Option<String>,
    /// The last renewal failure, while it is not yet fatal.
    pub trouble: Option<String>,
}

/// Renew every ttl/3 (jittered); after a failed renewal try again sooner, for as long as the
/// lease may still be saved; `now` asks for a renewal at once (before a suspended job's dlock
/// stops). Ends after reporting a definite loss.
pub async fn keep_alive(
    shards: Arc<Shards>,
    mut lease: Lease,
    tx: watch::Sender<Health>,
    events: Events,
    now: Arc<Notify>,
) {
    let ttl = lease.req.ttl;
    let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
    let mut pause = timing::jitter(timing::renew_period(ttl), 0.1);
    loop {
        tokio::select! {
            _ = sleep(pause) => {}
            _ = now.notified() => {}
        }
        match shards.renew(&mut lease).await {
            Ok(()) => {
                tx.send_replace(Health {
                    deadline: lease.deadline,
                    lost: None,
                    trouble: None,
                });
                events.emit(
                    "renewed",
                    &lease.req.names,
                    events::with(
                        events::fences(&fences),
                        json!({ "ttl_ms": ttl.as_millis() as u64 }),
                    ),
                );
                pause = timing::jitter(timing::renew_period(ttl), 0.1);
            }
            Err(EngineError::Lost(why)) => {
                tx.send_modify(|h| {
                    h.lost = Some(format!(
                        "the lease on {} was lost: {why}",
                        lease.req.names.join(", ")
                    ))
                });
                return;
            }
            Err(e) => {
                let left = lease.deadline.saturating_duration_since(Instant::now());
                events.emit(
                    "renew-failed",
                    &lease.req.names,
                    events::with(
                        events::fences(&fences),
                        json!({ "error": e.to_string(), "lease_left_ms": left.as_millis() as u64 }),
                    ),
                );
                tx.send_modify(|h| h.trouble = Some(e.to_string()));
                pause = timing::jitter(ttl / 10, 0.2);
            }
        }
    }
}
