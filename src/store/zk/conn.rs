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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zookeeper_client::{Client, Error};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::store::{ErrorKind, StoreError, StoreResult};

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
    /// A server of the ensemble has let this process connect (`Store::reached`).
    reached: Arc<AtomicBool>,
    /// The longest session timeout a lease asked for so far: a session made again after the
    /// last one expired (say by a renewal, which asks for none) must still carry every `run`
    /// lease this process may take on it.
    longest: std::sync::Mutex<Duration>,
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
            reached: Arc::new(AtomicBool::new(false)),
            longest: std::sync::Mutex::new(Duration::ZERO),
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
                return self.client(None, fallback).await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The session, connected if there is none (or it has ended) with the session timeout
    /// `want` (a lease's ttl), or when none is wanted the longest a lease wanted so far, or
    /// `default`.
    pub async fn client(&self, want: Option<Duration>, default: Duration) -> StoreResult<Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.state().is_terminated()
        {
            return Ok(c.clone());
        }
        *slot = None;
        let session_timeout = {
            let mut longest = self.longest.lock().unwrap_or_else(|p| p.into_inner());
            match want {
                Some(w) => {
                    *longest = (*longest).max(w);
                    *longest
                }
                None if longest.is_zero() => default,
                None => *longest,
            }
        };
        self.probe();
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
            Ok(Err(e)) => {
                let e = classify(e, "connect");
                if e.kind() == ErrorKind::Unavailable && full(&self.hosts).await {
                    self.reached.store(true, Ordering::Relaxed);
                    return Err(StoreError::at_limit(
                        "maxClientCnxns",
                        "ZooKeeper closes every new connection from this host at once: it is \
                         at its connection limit (maxClientCnxns)",
                    ));
                }
                return Err(e);
            }
            Err(_) => {
                return Err(StoreError::unavailable(format!(
                    "no session within {}",
                    humantime::format_duration(self.connect_timeout)
                )));
            }
        };
        self.reached.store(true, Ordering::Relaxed);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Whether a server has let this process connect (a session, or a TCP connection while
    /// no session could be had).
    pub fn reached(&self) -> bool {
        self.reached.load(Ordering::Relaxed)
    }

    /// Does any server accept a connection at all? During an election (the leader lost)
    /// the servers accept and then close, as they serve no sessions without a leader: the
    /// address is right, and a wait rides that out. Asked beside the session's connect,
    /// until a server was reached, on the session's runtime, so that the engine's timeout
    /// cutting the connect short does not cut the answer short too.
    fn probe(&self) {
        if self.reached() {
            return;
        }
        let (hosts, reached, limit) = (
            self.hosts.clone(),
            self.reached.clone(),
            self.connect_timeout,
        );
        self.handle.spawn(async move {
            let tries = hosts.split(',').map(|h| async move {
                tokio::time::timeout(limit, tokio::net::TcpStream::connect(h))
                    .await
                    .is_ok_and(|r| r.is_ok())
            });
            if futures_util::future::join_all(tries).await.contains(&true) {
                reached.store(true, Ordering::Relaxed);
            }
        });
    }

    /// Give the session up: the server closes it once the last clone is dropped (the crate
    /// then sends CloseSession, a request that needs no answer to act), and with it goes
    /// every ephemeral node it holds. The next call opens a new session.
    pub async fn abandon(&self) {
        self.client.lock().await.take();
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

/// Whether a server of the ensemble takes a TCP connection from this host and closes it
/// before reading a word: what ZooKeeper does to every connection beyond maxClientCnxns (a
/// four-letter word included). A server without a leader, or one that does not allow the
/// word, still answers it with a line.
async fn full(hosts: &str) -> bool {
    let tries = hosts.split(',').map(|h| async move {
        let ask = async {
            let mut s = tokio::net::TcpStream::connect(h).await.ok()?;
            let _ = s.write_all(b"srvr").await;
            let mut buf = [0u8; 64];
            Some(!matches!(s.read(&mut buf).await, Ok(n) if n > 0))
        };
        tokio::time::timeout(FULL_PROBE, ask).await.ok().flatten() == Some(true)
    });
    futures_util::future::join_all(tries).await.contains(&true)
}

/// How long the probe for a full server waits for its answer: a server beyond its limit
/// closes at once.
const FULL_PROBE: Duration = Duration::from_millis(500);

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
        | Error::Throttled
        // The client's own I/O errors on the connection (a reset by a server that restarts,
        // a broken pipe) and its "no response from connection": an outage, not an answer.
        | Error::Custom(_) => StoreError::unavailable(format!("cannot {doing}: {e}")),
        other => StoreError::protocol(format!("cannot {doing}: unexpected answer: {other}")),
    };
    error.with_source(e)
}
