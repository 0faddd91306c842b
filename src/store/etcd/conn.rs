//! Connecting to an etcd cluster: endpoints, TLS, credentials, and what errors mean.
//!
//! The client balances requests over the cluster's endpoints, but it counts an endpoint that
//! refuses connections as ready and keeps sending requests there. So only endpoints that
//! accept a TCP connection are handed to it, and when a request fails for want of a
//! connection the endpoints are probed again and the request retried: one node down out of
//! three costs a retry, never the lock.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::store::url::{HostPort, ServerUrl};
use crate::store::{StoreError, StoreResult};

/// Retries of a request that found no connection, each after probing the endpoints again.
const RETRIES: u32 = 3;

pub struct Endpoints {
    pub client: Client,
    urls: Vec<(HostPort, String)>,
    /// The endpoints the client balances over now.
    live: Mutex<HashSet<String>>,
    probe_timeout: Duration,
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
        let (up, why) = probe(&urls, timeout).await;
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
        let live: Vec<String> = up.iter().cloned().collect();
        let client = tokio::time::timeout(timeout, Client::connect(&live, Some(options)))
            .await
            .map_err(|_| {
                StoreError::unavailable(format!(
                    "no answer from etcd within {}",
                    humantime::format_duration(timeout)
                ))
            })?
            .map_err(classify)?;
        Ok(Endpoints {
            client,
            urls,
            live: Mutex::new(up),
            probe_timeout: timeout.min(Duration::from_millis(300)),
        })
    }

    /// Run a request, retrying it (after re-probing) when it found no connection.
    pub async fn call<T, F, Fut>(&self, mut request: F) -> StoreResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut tries = 0;
        loop {
            match request().await {
                Err(e) if tries < RETRIES && no_connection(&e) => {
                    tries += 1;
                    self.heal().await;
                }
                r => return r.map_err(classify),
            }
        }
    }

    /// Hand the client the endpoints that accept connections now (keeping the old set if
    /// none does: then every request fails anyway, and says why).
    async fn heal(&self) {
        let (up, _) = probe(&self.urls, self.probe_timeout).await;
        if up.is_empty() {
            return;
        }
        let (add, remove): (Vec<String>, Vec<String>) = {
            let live = self.live.lock().unwrap();
            (
                up.difference(&live).cloned().collect(),
                live.difference(&up).cloned().collect(),
            )
        };
        for url in &add {
            let _ = self.client.add_endpoint(url).await;
        }
        for url in &remove {
            let _ = self.client.remove_endpoint(url).await;
        }
        *self.live.lock().unwrap() = up;
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
        None => tls.with_native_roots(),
    };
    if let Some((cert, key)) = files.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(Some(tls))
}

/// The endpoints whose host accepts a TCP connection within `timeout`, and why the others
/// do not.
async fn probe(urls: &[(HostPort, String)], timeout: Duration) -> (HashSet<String>, Vec<String>) {
    let tries = urls.iter().map(|(h, url)| async move {
        let addr = (h.host.as_str(), h.port);
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => Ok(url.clone()),
            Ok(Err(e)) => Err(format!("{h}: {e}")),
            Err(_) => Err(format!("{h}: no answer")),
        }
    });
    let mut up = HashSet::new();
    let mut why = Vec::new();
    for r in futures_util::future::join_all(tries).await {
        match r {
            Ok(url) => {
                up.insert(url);
            }
            Err(e) => why.push(e),
        }
    }
    (up, why)
}
