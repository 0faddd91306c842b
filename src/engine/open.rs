//! Opening a store when the process starts: a server that refuses the connection (one
//! restarting at this moment) is dialled again within the store timeout, unless a majority of
//! the engine's other stores opened without it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep};

use super::timing;
use crate::store::{self, ErrorKind, Store, StoreError, StoreUrl};

/// How many of an engine's stores opened so far, of the majority it needs.
pub(super) struct Opening {
    opened: AtomicUsize,
    need: usize,
    enough: Notify,
}

impl Opening {
    /// For an engine of `n` stores.
    pub(super) fn new(n: usize) -> Opening {
        Opening {
            opened: AtomicUsize::new(0),
            need: n / 2 + 1,
            enough: Notify::new(),
        }
    }
}

/// Open one store within `limit`. A server that refuses the connection is asked again until
/// then, every 20 ms or so, unless a majority of the others opened (a member that stays down
/// costs a quorum nothing): a single server restarting at this moment (down for some 50 ms) is
/// then opened, where a URL that names nothing still fails within the same bound as a frozen
/// server always did, with the error it last gave.
pub(super) async fn within(
    url: &StoreUrl,
    namespace: &str,
    limit: Duration,
    opening: &Opening,
) -> Result<Arc<dyn Store>, StoreError> {
    const AGAIN: Duration = Duration::from_millis(20);
    let deadline = Instant::now() + limit;
    // What the server last said: a refusal says more than a timeout on the next try.
    let mut last: Option<StoreError> = None;
    loop {
        let opened = tokio::time::timeout_at(deadline, store::open(url, namespace, limit)).await;
        let e = match opened {
            Ok(Ok(s)) => {
                if opening.opened.fetch_add(1, Ordering::SeqCst) + 1 >= opening.need {
                    opening.enough.notify_waiters();
                }
                return Ok(s);
            }
            Ok(Err(e))
                if e.kind() == ErrorKind::Unavailable && Instant::now() + AGAIN < deadline =>
            {
                e
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(last.unwrap_or_else(|| {
                    StoreError::unavailable(format!(
                        "no answer within {}",
                        humantime::format_duration(limit)
                    ))
                }));
            }
        };
        // Registered before the count is read, so a majority reached in between still wakes it.
        let enough = opening.enough.notified();
        tokio::pin!(enough);
        enough.as_mut().enable();
        if opening.opened.load(Ordering::SeqCst) >= opening.need {
            return Err(e);
        }
        tokio::select! {
            _ = sleep(timing::jitter(AGAIN, 0.5)) => last = Some(e),
            _ = enough => return Err(e),
        }
    }
}
