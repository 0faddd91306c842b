//! Connecting to an etcd cluster: endpoints, TLS, credentials, and what errors mean.
//!
//! Requests go to one member at a time, the way ZooKeeper's client stays on one server: one
//! client per member (connected when first used), and the member that answered last gets
//! the next request. etcd-client's own balanced client spreads requests over every member,
//! and it counts a member that accepts connections but answers nothing (cut off by the
//! network) as ready: a third of the requests then wait out the whole store timeout, and a
//! renewal (a read and a keep-alive) failed often enough for a holder cut from one member of
//! three to lose its lock. Here a member that fails to answer is left for the next one:
//!
//! - A request that may be sent twice (`Resend::Yes`: reads, keep-alives, lease grants and
//!   revokes, guarded writes whose second copy finds the first done and changes nothing)
//!   waits half the store timeout on a member, then goes to the others with the other
//!   half, hedged (below) so that a second cut member costs only the hedge delay. So a
//!   renewal whose member was cut still ends inside the store timeout the engine gives it,
//!   even with two of three members cut, and the client's deadline (reckoned from before
//!   the call) never moves.
//! - Any other write (`Resend::No`: a grant, whose lost answer the caller must treat as
//!   maybe applied) is sent once and waits the whole store timeout; if it goes unanswered,
//!   the next request goes to the next member. An attempt reads before it writes, so a
//!   member cut before the attempt is left by the read.
//! - A request that found no connection (the member is down, or knows no leader) was not
//!   acted on, and goes to the next member at once.
//! - Until the member requests go to has answered once (a process's first requests, or the
//!   first after moving on), a request that may be sent twice is hedged: if its member has
//!   not answered within the hedge delay, a copy goes to the next member too, and so on; the
//!   first answer wins, and its member becomes the one requests go to. A frozen member
//!   (SIGSTOP, a paused VM) still accepts TCP connections, since the kernel completes the
//!   handshake, so the start picked at random among the members that accept one is that
//!   member for a third of processes of a cluster of three: without the hedge each of them
//!   waited out half the store timeout (or all of it, for a request sent once) before its
//!   first answer.
//!
//! Hedging every request (two copies at once) was not chosen: it doubles the load in the
//! normal case and races answers of writes. Hedging only until the member has answered once
//! costs nothing once it has (one copy of each request), and in the healthy case nothing at
//! all: the first answer comes well inside the delay, so no second copy is sent. Only
//! requests that may be sent twice are hedged.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tokio::sync::OnceCell;

use crate::store::server::{HostPort, ServerUrl};
use crate::store::{StoreError, StoreResult};

pub struct Endpoints {
    members: Vec<Member>,
    /// The member requests go to first: the one that answered last.
    current: AtomicUsize,
    /// The member that answered last (`NO_MEMBER` before any answer): while it is not
    /// `current`, requests that may be sent twice are hedged.
    proven: AtomicUsize,
    /// How long a hedged request waits on a member before a copy goes to the next one.
    hedge: Duration,
    options: ConnectOptions,
    /// How long a request that may be sent again waits on one member.
    patience: Duration,
    timeout: Duration,
}

struct Member {
    url: String,
    client: OnceCell<Client>,
}

const NO_MEMBER: usize = usize::MAX;

/// The least hedge delay: room for a process's own start-up jitter (a runtime, a loaded
/// machine) over a first answer that takes a millisecond or two on a healthy member nearby.
const HEDGE_FLOOR: Duration = Duration::from_millis(10);

/// Round trips a first answer takes on a fresh connection, twice over: the TCP handshake, the
/// HTTP/2 preface, the request (and TLS's two more), with room for the member's own work (a
/// follower asks its leader before it answers a read).
const HEDGE_TRIPS: u32 = 8;

/// Whether a request may be sent to another member when its member did not answer in time
/// (see the module's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resend {
    Yes,
    No,
}

/// etcd names each of its errors by one exact description (its Go client maps them back to
/// error values by equality, in `rpctypes`): the code alone does not tell a missing user
/// (InvalidArgument) from a request that is too large (InvalidArgument too). These are the
/// ones that mean the cluster refused us.
const AUTH_ERRORS: &[&str] = &[
    "etcdserver: user name is empty",
    "etcdserver: user name not found",
    "etcdserver: authentication failed, invalid user ID or password",
    "etcdserver: authentication is not enabled",
    "etcdserver: permission denied",
    "etcdserver: invalid auth token",
    "etcdserver: invalid auth management",
];

/// Map an etcd client error to what it means for dlock (and its exit code).
pub fn classify(e: etcd_client::Error) -> StoreError {
    use tonic::Code;
    let error = match &e {
        etcd_client::Error::GRpcStatus(s) => {
            let msg = s.message();
            match s.code() {
                _ if AUTH_ERRORS.contains(&msg) => refused(msg),
                Code::Unauthenticated | Code::PermissionDenied => refused(msg),
                // etcd answers NotFound only for a lease it no longer has (ErrGRPCLeaseNotFound):
                // dlock names no other missing thing in its requests.
                Code::NotFound => StoreError::lease_gone(format!("etcd: {msg}")),
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted
                | Code::Unknown => StoreError::unavailable(format!("cannot reach etcd: {msg}")),
                _ => StoreError::protocol(format!("unexpected answer from etcd: {msg}")),
            }
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::WatchError(_)
        | etcd_client::Error::LeaseKeepAliveError(_) => {
            StoreError::unavailable(format!("cannot reach etcd: {e}"))
        }
        _ => StoreError::protocol(format!("etcd: {e}")),
    };
    error.with_source(e)
}

fn refused(msg: &str) -> StoreError {
    StoreError::refused(format!(
        "refused: {msg} (check the user and password: in the URL, ?password_file=, \
         ?password_env= or DLOCK_PASSWORD)"
    ))
}

/// An error of a request that may not have reached any server.
fn no_connection(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic::Code::Unavailable,
        _ => false,
    }
}

impl Endpoints {
    /// Connect to the cluster a URL names (its parameters are taken out of it).
    pub async fn connect(url: &mut ServerUrl, timeout: Duration) -> StoreResult<Endpoints> {
        let tls = tls_options(url)?;
        if let Some((k, _)) = url.params.first() {
            return Err(StoreError::invalid(format!(
                "unknown parameter {k:?}; an etcd URL takes ca_file, cert_file, key_file, \
                 password_file and password_env"
            )));
        }
        if !url.path.is_empty() && url.path != "/" {
            return Err(StoreError::invalid(format!(
                "{url}: an etcd URL has no path; use --namespace to keep locks apart"
            )));
        }
        let scheme = if url.tls { "https" } else { "http" };
        let urls: Vec<(HostPort, String)> = url
            .hosts
            .iter()
            .map(|h| (h.clone(), format!("{scheme}://{h}")))
            .collect();
        let (up, why, trip) = probe(&urls, timeout).await;
        if up.is_empty() {
            return Err(StoreError::unavailable(format!(
                "cannot reach etcd: {}",
                why.join(", ")
            )));
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_require_leader(true);
        if let Some(tls) = tls {
            options = options.with_tls(tls);
        }
        // etcd has no password without a user; a password alone (say DLOCK_PASSWORD meant for
        // a Redis store of the same quorum) is not used here.
        if let Some(user) = &url.user {
            options = options
                .with_user(user, url.password.clone().unwrap_or_default())
                .with_auto_token_refresh(true);
        }
        // Start on a member that accepts connections, picked at random so that many
        // clients spread over the cluster.
        let start = up[crate::sys::random_below(up.len())];
        let conn = Endpoints {
            members: urls
                .into_iter()
                .map(|(_, url)| Member {
                    url,
                    client: OnceCell::new(),
                })
                .collect(),
            current: AtomicUsize::new(start),
            proven: AtomicUsize::new(NO_MEMBER),
            // Well past a healthy member's first answer (so that, healthy, only one copy is
            // sent), reckoned from the slowest TCP handshake of the probe; and well inside
            // the patience a request has on one member.
            hedge: (HEDGE_FLOOR + trip * HEDGE_TRIPS).min(timeout / 8),
            options,
            patience: timeout / 2,
            timeout,
        };
        // Connected now, so that a wrong password is told at once.
        tokio::time::timeout(timeout, conn.client_of(start))
            .await
            .map_err(|_| {
                StoreError::unavailable(format!(
                    "no answer from etcd within {}",
                    humantime::format_duration(timeout)
                ))
            })?
            .map_err(classify)?;
        Ok(conn)
    }

    /// The client of member `i`, connected on first use. (Connecting does no I/O unless
    /// credentials are given: then it signs in.)
    async fn client_of(&self, i: usize) -> Result<Client, etcd_client::Error> {
        let m = &self.members[i];
        m.client
            .get_or_try_init(|| Client::connect([&m.url], Some(self.options.clone())))
            .await
            .cloned()
    }

    /// The client of the member requests go to now, connected on first use (for a watch).
    pub async fn client(&self) -> StoreResult<Client> {
        self.client_of(self.current.load(Ordering::Relaxed))
            .await
            .map_err(classify)
    }

    /// The client of the member requests go to now, if it is connected (for a request sent
    /// without waiting for it: if there is none, nothing is sent).
    pub fn connected(&self) -> Option<Client> {
        let i = self.current.load(Ordering::Relaxed);
        self.members[i].client.get().cloned()
    }

    /// Requests go to the member after `i`, unless another request has moved them already.
    fn move_on(&self, i: usize) {
        let next = (i + 1) % self.members.len();
        let _ = self
            .current
            .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Run a request on the current member, and on the next ones as `resend` allows (see the
    /// module's comment). Each member is tried at most once.
    pub async fn call<T, F, Fut>(&self, resend: Resend, mut request: F) -> StoreResult<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let start = self.current.load(Ordering::Relaxed);
        if resend == Resend::Yes && self.proven.load(Ordering::Relaxed) != start {
            return self.hedged(start, self.members.len(), request).await;
        }
        let mut last = None;
        for _ in 0..self.members.len() {
            let i = self.current.load(Ordering::Relaxed);
            // Dropped unanswered (by the timeout below or the engine's): move on.
            let mut tried = Try {
                conn: self,
                member: i,
                answered: false,
            };
            let attempt = async {
                let client = self.client_of(i).await?;
                request(client).await
            };
            let r = match resend {
                Resend::No => attempt.await,
                Resend::Yes => match tokio::time::timeout(self.patience, attempt).await {
                    Ok(r) => r,
                    // The member stopped answering: the others are hedged, so that with two
                    // of three cut the one left still answers inside the store timeout.
                    Err(_) => {
                        drop(tried);
                        let n = self.members.len();
                        return self.hedged((i + 1) % n, n - 1, request).await;
                    }
                },
            };
            match r {
                Err(e) if no_connection(&e) => last = Some(classify(e)),
                r => {
                    tried.answered = true;
                    self.proven.store(i, Ordering::Relaxed);
                    return r.map_err(classify);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            StoreError::unavailable(format!(
                "cannot reach etcd within {}",
                humantime::format_duration(self.timeout)
            ))
        }))
    }
}

impl Endpoints {
    /// Run a request that may be sent twice on `start`, and after each hedge delay without an
    /// answer on the next member too (at once if a member refused it unsent), up to `count`
    /// members; the first answer wins and its member becomes the current one. Each member
    /// waits at most `patience`.
    async fn hedged<T, F, Fut>(&self, start: usize, count: usize, request: F) -> StoreResult<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        // Each copy calls `request` once, and the future it gets back owns what it needs:
        // the borrow ends before the copy awaits anything.
        let request = Mutex::new(request);
        let attempt = |i: usize| {
            let request = &request;
            async move {
                let r = tokio::time::timeout(self.patience, async {
                    let client = self.client_of(i).await?;
                    let answer = (request.lock().unwrap_or_else(|e| e.into_inner()))(client);
                    answer.await
                })
                .await;
                (i, r)
            }
        };
        let n = self.members.len();
        let (mut pending, mut sent) = (FuturesUnordered::new(), 0);
        let send = |pending: &mut FuturesUnordered<_>, sent: &mut usize| {
            if *sent < count {
                pending.push(attempt((start + *sent) % n));
                *sent += 1;
            }
        };
        send(&mut pending, &mut sent);
        let mut last = None;
        loop {
            tokio::select! {
                Some((i, r)) = pending.next() => match r {
                    Ok(Err(e)) if no_connection(&e) => {
                        last = Some(classify(e));
                        send(&mut pending, &mut sent);
                    }
                    Err(_) => {
                        last = Some(self.no_answer(i));
                        send(&mut pending, &mut sent);
                    }
                    Ok(r) => {
                        self.current.store(i, Ordering::Relaxed);
                        self.proven.store(i, Ordering::Relaxed);
                        return r.map_err(classify);
                    }
                },
                _ = tokio::time::sleep(self.hedge), if sent < count => send(&mut pending, &mut sent),
                else => break,
            }
        }
        self.move_on(start);
        Err(last.unwrap_or_else(|| self.no_answer(start)))
    }

    fn no_answer(&self, i: usize) -> StoreError {
        StoreError::unavailable(format!(
            "cannot reach etcd: no answer from {} within {}",
            self.members[i].url,
            humantime::format_duration(self.patience)
        ))
    }
}

/// One request on one member: if it ends without an answer (no connection, or dropped by a
/// timeout), requests go to the next member.
struct Try<'a> {
    conn: &'a Endpoints,
    member: usize,
    answered: bool,
}

impl Drop for Try<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.conn.move_on(self.member);
        }
    }
}

/// TLS settings from `?ca_file=`, `?cert_file=`, `?key_file=` (taken out of the URL).
fn tls_options(url: &mut ServerUrl) -> StoreResult<Option<TlsOptions>> {
    let Some(files) = crate::store::tls::take_files(url, "an etcds:// URL")? else {
        return Ok(None);
    };
    let mut tls = TlsOptions::new();
    tls = match files.ca {
        Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
        None => tls.trust_anchors(crate::store::tls::system_roots()?),
    };
    if let Some((cert, key)) = files.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(Some(tls))
}

/// The members whose host accepts a TCP connection within `timeout`, why the others do
/// not, and the longest a connection took (about a round trip: a frozen member's kernel
/// answers as fast as a live one's).
async fn probe(
    urls: &[(HostPort, String)],
    timeout: Duration,
) -> (Vec<usize>, Vec<String>, Duration) {
    let tries = urls.iter().map(|(h, _)| async move {
        let addr = (h.host.as_str(), h.port);
        let began = tokio::time::Instant::now();
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => Ok(began.elapsed()),
            Ok(Err(e)) => Err(format!("{h}: {e}")),
            Err(_) => Err(format!("{h}: no answer")),
        }
    });
    let mut up = Vec::new();
    let mut why = Vec::new();
    let mut trip = Duration::ZERO;
    for (i, r) in futures_util::future::join_all(tries)
        .await
        .into_iter()
        .enumerate()
    {
        match r {
            Ok(took) => {
                up.push(i);
                trip = trip.max(took);
            }
            Err(e) => why.push(e),
        }
    }
    (up, why, trip)
}
