//! Opening a store when the process starts: a server that refuses the connection (one
//! restarting at this moment) is dialled again within the store timeout, unless a majority of
//! the engine's other stores opened without it. The engine waits for a majority, never for
//! the slowest: a store still opening then goes on opening in the background (`Late`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::select_all;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep};

use super::down::Down;
use super::late::{Late, Opened};
use super::reopen::Reopen;
use super::timing;
use crate::store::url::StoreUrl;
use crate::store::{ErrorKind, Store, StoreError};

/// Open every store at once and answer once each has opened or failed, or a majority has
/// opened: a store that accepts the connection and never answers then costs nothing, and its
/// open goes on in the background. A store that could not be opened stays in the list as one
/// that errors on every call (`Down`), so a quorum survives a minority being down. A URL
/// that asks for something its store cannot do fails the whole open (a usage error): that is
/// found before any I/O, so it is in hand before any store can have opened. Also answers
/// which stores were still opening (their server has not answered this process yet).
pub(super) async fn all(
    urls: &[StoreUrl],
    namespace: &str,
    limit: Duration,
) -> Result<(Vec<Arc<dyn Store>>, Vec<usize>), StoreError> {
    let opening = Arc::new(Opening::new(urls.len()));
    let mut slots: Vec<watch::Receiver<Opened>> = urls
        .iter()
        .map(|url| {
            let (tx, rx) = watch::channel(None);
            let (url, namespace, opening) = (url.clone(), namespace.to_string(), opening.clone());
            tokio::spawn(async move {
                let opened = within(&url, &namespace, limit, &opening).await;
                tx.send_replace(Some(opened.map_err(|e| match e.kind() {
                    ErrorKind::Invalid => e.context(&url),
                    _ => e,
                })));
            });
            rx
        })
        .collect();
    loop {
        let states: Vec<Opened> = slots.iter().map(state).collect();
        if let Some(Some(Err(e))) = states
            .iter()
            .find(|s| matches!(s, Some(Err(e)) if e.kind() == ErrorKind::Invalid))
        {
            return Err(e.clone());
        }
        let opened = states.iter().filter(|s| matches!(s, Some(Ok(_)))).count();
        if opened >= opening.need || states.iter().all(Option::is_some) {
            let still = (0..states.len()).filter(|&i| states[i].is_none()).collect();
            let stores = urls
                .iter()
                .zip(states)
                .zip(slots)
                .map(|((url, state), rx)| match state {
                    Some(Ok(s)) => s,
                    // Full, not gone: dialled again on each call (see `Reopen`).
                    Some(Err(error)) if error.limit().is_some() => Arc::new(Late {
                        desc: url.to_string(),
                        opened: rx,
                        again: Some(Reopen::new(url, namespace, limit, error)),
                    }),
                    Some(Err(error)) => Arc::new(Down {
                        desc: url.to_string(),
                        local: url.kind.local(),
                        error,
                    }) as Arc<dyn Store>,
                    None => Arc::new(Late {
                        desc: url.to_string(),
                        opened: rx,
                        again: None,
                    }),
                })
                .collect();
            return Ok((stores, still));
        }
        let pending = slots
            .iter_mut()
            .filter(|s| state(s).is_none())
            .map(|s| Box::pin(s.changed()));
        let _ = select_all(pending).await;
    }
}

/// What one open has come to; an opening task that ended without a word (it panicked) failed.
fn state(slot: &watch::Receiver<Opened>) -> Opened {
    match slot.borrow().clone() {
        None if slot.has_changed().is_err() => Some(Err(StoreError::unavailable(
            "the store's open ended without an answer",
        ))),
        s => s,
    }
}

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
        let opened = tokio::time::timeout_at(deadline, url.open(namespace, limit)).await;
        let e = match opened {
            Ok(Ok(s)) => {
                if opening.opened.fetch_add(1, Ordering::SeqCst) + 1 >= opening.need {
                    opening.enough.notify_waiters();
                }
                return Ok(s);
            }
            // A server at its connection limit is not dialled again in a tight loop: the
            // store is dialled again call by call, as the engine's wait backs off (`Reopen`).
            Ok(Err(e)) if e.limit().is_some() => return Err(e),
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
