//! The ZooKeeper session: its own runtime thread, a lazy connection, and a clean close.
//!
//! The client crate runs its session as a task on the runtime that connected it. dlock's own
//! runtime stops polling tasks as soon as the command returns, which would leave the session
//! open until the server times it out, and with it every ephemeral node (a released `run` lock
//! would look held for a whole session timeout after a crash of the close). So the session
//! lives on a small runtime thread of its own, which outlives dlock's, and dropping the store
//! closes the session there and waits (briefly) until the server has confirmed it.
//!
//! The connection is made on first use because the session timeout must follow the ttl of the
//! first lease (a `run` lease lives exactly as long as the session), which `open` is not told.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zookeeper_client::{Client, Error};

use crate::store::{StoreError, StoreResult};

/// How long dropping the store waits for the server to confirm the session's close.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

pub struct Conn {
    handle: Handle,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// `host:port,host:port`, as the client crate wants it.
    hosts: String,
    /// `user:password` for digest authentication.
    auth: Option<Vec<u8>>,
    connect_timeout: Duration,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl Conn {
    pub fn start(
        hosts: String,
        auth: Option<Vec<u8>>,
        connect_timeout: Duration,
    ) -> StoreResult<Conn> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("dlock-zookeeper".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = tx.send(Ok(rt.handle().clone()));
                rt.block_on(async move {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| StoreError::unavailable(format!("cannot start a thread: {e}")))?;
        let handle = rx
            .recv()
            .map_err(|_| StoreError::unavailable("the ZooKeeper thread did not start"))?
            .map_err(|e| StoreError::unavailable(format!("cannot start a runtime: {e}")))?;
        Ok(Conn {
            handle,
            stop: Mutex::new(Some(stop)),
            hosts,
            auth,
            connect_timeout,
            client: tokio::sync::Mutex::new(None),
        })
    }

    /// Run `fut` on the session's runtime. Dropping the returned future (the engine's per-store
    /// timeout) aborts it, so no request of an abandoned call is sent after a later one.
    pub fn spawn<T, F>(&self, fut: F) -> impl Future<Output = StoreResult<T>> + Send + 'static
    where
        T: Send + 'static,
        F: Future<Output = StoreResult<T>> + Send + 'static,
    {
        Abort(self.handle.spawn(fut))
    }

    /// The session another request opens (it picks the timeout), waiting up to `wait` for
    /// it; then, if there is still none, one connected with `fallback`.
    pub async fn shared_client(&self, wait: Duration, fallback: Duration) -> StoreResult<Client> {
        let until = tokio::time::Instant::now() + wait;
        loop {
            if let Some(c) = self.client.lock().await.as_ref()
                && !c.state().is_terminated()
            {
                return Ok(c.clone());
            }
            if tokio::time::Instant::now() >= until {
                return self.client(fallback).await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The session, connected with `session_timeout` if there is none (or it has ended).
    pub async fn client(&self, session_timeout: Duration) -> StoreResult<Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.state().is_terminated()
        {
            return Ok(c.clone());
        }
        *slot = None;
        let mut connector = Client::connector()
            .with_session_timeout(session_timeout)
            .with_fail_eagerly();
        if let Some(auth) = &self.auth {
            connector = connector.with_auth("digest", auth);
        }
        let c = match tokio::time::timeout(self.connect_timeout, connector.connect(&self.hosts))
            .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(classify(e, "connect")),
            Err(_) => {
                return Err(StoreError::unavailable(format!(
                    "no session within {}",
                    humantime::format_duration(self.connect_timeout)
                )));
            }
        };
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Close the session (its ephemeral nodes go at once) and stop the thread. Blocks for at
    /// most `CLOSE_WAIT`: it runs when dlock is done.
    pub fn close(&self) {
        let client = self.client.try_lock().ok().and_then(|mut s| s.take());
        if let Some(client) = client {
            let mut state = client.state_watcher();
            // The crate sends CloseSession once the last clone is gone; none outlives a call.
            drop(client);
            let (tx, rx) = std::sync::mpsc::channel();
            self.handle.spawn(async move {
                let _ = tokio::time::timeout(CLOSE_WAIT, async {
                    while !state.peek_state().is_terminated() {
                        state.changed().await;
                    }
                })
                .await;
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(CLOSE_WAIT + Duration::from_millis(100));
        }
        if let Some(stop) = self.stop.lock().ok().and_then(|mut s| s.take()) {
            let _ = stop.send(());
        }
    }
}

struct Abort<T>(JoinHandle<StoreResult<T>>);

impl<T> Future for Abort<T> {
    type Output = StoreResult<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|r| match r {
            Ok(r) => r,
            Err(e) if e.is_panic() => Err(StoreError::protocol(
                "internal error in the ZooKeeper store",
            )),
            Err(_) => Err(StoreError::unavailable("the ZooKeeper session was closed")),
        })
    }
}

impl<T> Drop for Abort<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Map a client error to what it means for dlock (and its exit code). `doing` completes
/// "cannot ...".
pub fn classify(e: Error, doing: &str) -> StoreError {
    let error = match &e {
        Error::NoAuth => StoreError::refused(format!(
            "refused: not allowed to {doing}: the lock's nodes belong to another identity (check \
             the user and password: in the URL, ?password_file=, ?password_env= or DLOCK_PASSWORD)"
        )),
        Error::AuthFailed => StoreError::refused(format!(
            "refused: authentication failed while trying to {doing} (check the user and password)"
        )),
        Error::InvalidAcl => StoreError::refused(format!(
            "refused: the server rejected the ACL while trying to {doing}"
        )),
        Error::Unimplemented => StoreError::config(format!(
            "cannot {doing}: the server does not implement the request; `lock` needs TTL nodes: \
             set extendedTypesEnabled=true in zoo.cfg (ZooKeeper 3.6 or later) and restart it"
        )),
        Error::ConnectionLoss
        | Error::Timeout
        | Error::NoHosts
        | Error::SessionExpired
        | Error::SessionMoved
        | Error::ClientClosed
        | Error::Throttled => StoreError::unavailable(format!("cannot {doing}: {e}")),
        other => StoreError::protocol(format!("cannot {doing}: unexpected answer: {other}")),
    };
    error.with_source(e)
}
