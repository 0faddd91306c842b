//! Connecting, and the KV bucket a lock needs: one value per key (history 1), per-message
//! TTL (`allow_msg_ttl`: without it no lease could expire) and delete markers
//! (`subject_delete_marker_ttl`: an expired key's own revision, which a renewal over the
//! revision its holder read loses to), and
//! direct gets (reads of a key's last message with its headers). `?create=1` creates a
//! missing bucket so, and switches the first two on in an existing one (NATS allows that,
//! never the reverse); without it a bucket that lacks them is refused (78). `?create=1` also
//! switches on atomic batches (`allow_atomic`, NATS 2.12), which make a multi-name grant one
//! write; a bucket without them still works, granting several names name by name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, Context, kv, stream};
use async_nats::{
    ConnectErrorKind, ConnectOptions, ReconnectToServer, Server, ServerAddr, ServerInfo,
};

use crate::store::server::ServerUrl;
use crate::store::{StoreError, StoreResult};

/// How long the server's own marker of an expiry (and a delete's tombstone) stays: its
/// shortest, so a key's next create finds it gone soon.
pub const MARKER_TTL: Duration = Duration::from_secs(1);

/// What a `nats://` URL says beyond its servers.
pub struct Options {
    pub bucket: String,
    pub create: bool,
}

/// Connect to the URL's servers (never to others they advertise: a URL through a proxy must
/// stay on it) with its credentials: `user:password`, a token (a password without a user, as
/// `nats://:TOKEN@host` or `DLOCK_PASSWORD`), or `?creds_file=`; TLS with `tls://`.
pub async fn connect(
    url: &mut ServerUrl,
    timeout: Duration,
) -> StoreResult<(async_nats::Client, Options)> {
    let create = match url.take_param("create").as_deref() {
        None | Some("0") => false,
        Some("1") => true,
        Some(v) => return Err(StoreError::invalid(format!("create={v:?}: use 1 or 0"))),
    };
    let creds = url.take_param("creds_file");
    let ca = url.take_param("ca_file");
    let identity = (url.take_param("cert_file"), url.take_param("key_file"));
    url.reject_unknown_params().map_err(StoreError::invalid)?;
    let bucket = url.path.trim_start_matches('/').to_string();
    if bucket.is_empty()
        || !bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(StoreError::invalid(format!(
            "{bucket:?} is not a NATS KV bucket name: write nats://host:4222/BUCKET (letters, \
             digits, - and _)"
        )));
    }
    let o = options(url, timeout, creds, ca, identity).await?;
    let scheme = if url.tls { "tls" } else { "nats" };
    let addrs = url
        .hosts
        .iter()
        .map(|h| format!("{scheme}://{h}").parse::<ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::invalid(format!("a NATS server address: {e}")))?;
    let client = async_nats::connect_with_options(addrs, o)
        .await
        .map_err(|e| match e.kind() {
            ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
                StoreError::refused(format!("NATS refused the credentials: {e}"))
            }
            ConnectErrorKind::Tls => StoreError::unavailable(format!("NATS TLS: {e}")),
            _ => {
                let why = crate::store::io_cause(&e).unwrap_or_else(|| e.to_string());
                StoreError::unavailable(format!("cannot reach NATS: {why}"))
            }
        })?;
    Ok((client, Options { bucket, create }))
}

/// The client's options: its name and timeouts, the URL's credentials and TLS files.
async fn options(
    url: &ServerUrl,
    timeout: Duration,
    creds: Option<String>,
    ca: Option<String>,
    identity: (Option<String>, Option<String>),
) -> StoreResult<ConnectOptions> {
    if !url.tls && (ca.is_some() || identity.0.is_some() || identity.1.is_some()) {
        return Err(StoreError::invalid(
            "ca_file, cert_file and key_file need a tls:// URL",
        ));
    }
    crate::store::tls::install_provider();
    let mut o = ConnectOptions::new()
        .name("dlock")
        .connection_timeout(timeout)
        .request_timeout(Some(timeout))
        .ignore_discovered_servers()
        // The client calls this before its first dial too (n = 1): no pause then. After
        // that, back soon after a restart (a waiter rides it out by looking again).
        .reconnect_delay_callback(|n| match n {
            0 | 1 => Duration::ZERO,
            n => Duration::from_millis(25u64 << (n - 2).min(4)),
        });
    if url.hosts.len() == 1 {
        o = o.reconnect_to_server_callback(first_dial_now());
    }
    o = match (url.user.clone(), url.password.clone()) {
        (Some(u), Some(p)) => o.user_and_password(u, p),
        (None, Some(token)) => o.token(token),
        (Some(_), None) => {
            return Err(StoreError::invalid(
                "a NATS user needs a password (nats://user:pass@host); a token is given as \
                 nats://:TOKEN@host, ?password_file= or DLOCK_PASSWORD",
            ));
        }
        (None, None) => o,
    };
    if let Some(path) = creds {
        o = o
            .credentials_file(&path)
            .await
            .map_err(|e| StoreError::invalid(format!("cannot read creds_file {path:?}: {e}")))?;
    }
    if url.tls {
        o = o.require_tls(true);
        if let Some(ca) = ca {
            o = o.add_root_certificates(ca.into());
        }
        match identity {
            (Some(c), Some(k)) => o = o.add_client_certificate(c.into(), k.into()),
            (None, None) => {}
            _ => return Err(StoreError::invalid("cert_file and key_file go together")),
        }
    }
    Ok(o)
}

/// The first dial of a one-server URL, at once. async-nats sleeps before every dial, the
/// first too, and tokio rounds a sleep of nothing up to its 1 ms tick: a millisecond of every
/// process's start. Later dials (reconnects), and every dial of a URL with several servers
/// (the first must try them all), take the usual path and its delay.
fn first_dial_now() -> impl Fn(Vec<Server>, ServerInfo) -> FirstDial + Send + Sync + 'static {
    let first = AtomicBool::new(true);
    move |servers, _| {
        let now = first.swap(false, Ordering::Relaxed) && servers.len() == 1;
        let target = servers.into_iter().next().filter(|_| now);
        std::future::ready(target.map(|s| ReconnectToServer {
            addr: s.addr,
            delay: Some(Duration::ZERO),
        }))
    }
}

type FirstDial = std::future::Ready<Option<ReconnectToServer>>;

/// The bucket's stream configuration; None when there is no such bucket.
pub async fn stream_config(js: &Context, bucket: &str) -> StoreResult<Option<stream::Config>> {
    let found = stream_of(js, bucket).await?;
    Ok(found.map(|s| s.cached_info().config.clone()))
}

/// The bucket's stream; None when there is no such bucket.
async fn stream_of(js: &Context, bucket: &str) -> StoreResult<Option<stream::Stream>> {
    match js.get_stream(format!("KV_{bucket}")).await {
        Ok(s) => Ok(Some(s)),
        Err(e) => match e.kind() {
            jetstream::context::GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(None)
            }
            _ => Err(StoreError::unavailable(format!(
                "NATS JetStream did not answer (is JetStream enabled, -js?): {e}"
            ))),
        },
    }
}

/// What the bucket lacks for a lock, said for a person; None when it has everything.
pub fn lacks(c: &stream::Config) -> Option<String> {
    let mut missing = Vec::new();
    if !c.allow_message_ttl {
        missing.push("per-message TTL (allow_msg_ttl)");
    }
    if c.subject_delete_marker_ttl.is_none() {
        missing.push("delete markers (subject_delete_marker_ttl)");
    }
    if !c.allow_direct {
        missing.push("direct gets (allow_direct)");
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

pub fn no_ttl(bucket: &str) -> StoreError {
    StoreError::config(format!(
        "the NATS KV bucket {bucket:?} has no per-message TTL (allow_msg_ttl), so no lease \
         could expire; add ?create=1 to the store URL to switch it on"
    ))
}

/// The bucket, created or set up as a lock needs with `create`, else refused when it is
/// missing or lacks what a lock needs.
pub async fn ensure(js: &Context, bucket: &str, create: bool) -> StoreResult<kv::Store> {
    let found = stream_of(js, bucket).await?;
    let config = found.as_ref().map(|s| s.cached_info().config.clone());
    // Taken as it is when it has what a lock needs, and atomic batches unless `?create=1`
    // may switch them on (a bucket without them grants several names name by name).
    let ready = |c: &stream::Config| lacks(c).is_none() && (c.allow_atomic_publish || !create);
    if let Some(stream) = found.filter(|s| ready(&s.cached_info().config)) {
        // As `get_key_value` makes it, without asking the server again (one round trip less
        // for every process). dlock writes to `$KV.BUCKET.` itself: a mirror is no lock store.
        return Ok(kv::Store {
            name: bucket.to_string(),
            stream_name: format!("KV_{bucket}"),
            prefix: format!("$KV.{bucket}."),
            put_prefix: None,
            use_jetstream_prefix: false,
            stream,
        });
    }
    match config {
        None if create => {
            let made = js
                .create_key_value(kv::Config {
                    bucket: bucket.to_string(),
                    history: 1,
                    limit_markers: Some(MARKER_TTL),
                    ..kv::Config::default()
                })
                .await;
            match stream_config(js, bucket).await? {
                // Made here, or by another dlock first, as this one would have.
                Some(c) => switch_on(js, c, bucket).await?,
                None => {
                    let e = made.err().map(|e| e.to_string()).unwrap_or_default();
                    return Err(StoreError::unavailable(format!(
                        "cannot create the KV bucket: {e}"
                    )));
                }
            }
        }
        None => {
            return Err(StoreError::config(format!(
                "the NATS KV bucket {bucket:?} does not exist; add ?create=1 to the store URL \
                 to create it (with per-message TTL and delete markers)"
            )));
        }
        Some(c) if create => switch_on(js, c, bucket).await?,
        Some(c) => {
            if let Some(what) = lacks(&c) {
                return Err(StoreError::config(format!(
                    "the NATS KV bucket {bucket:?} lacks {what}: leases would never expire or \
                     waiters never see it; add ?create=1 to the store URL to switch it on"
                )));
            }
        }
    }
    js.get_key_value(bucket)
        .await
        .map_err(|e| StoreError::unavailable(format!("NATS KV bucket {bucket:?}: {e}")))
}

/// Switch on in the bucket `c` what a lock needs, and atomic batches (`allow_atomic`, NATS
/// 2.12: a multi-name grant in one batch). A server that cannot take the batches leaves
/// them off: grants of several names then go name by name.
async fn switch_on(js: &Context, c: stream::Config, bucket: &str) -> StoreResult<()> {
    let lacking = lacks(&c);
    if lacking.is_none() && c.allow_atomic_publish {
        return Ok(());
    }
    let mut u = c;
    u.allow_message_ttl = true;
    u.allow_direct = true;
    u.subject_delete_marker_ttl.get_or_insert(MARKER_TTL);
    u.allow_atomic_publish = true;
    match (js.update_stream(u).await, lacking) {
        (Ok(_), _) | (Err(_), None) => Ok(()),
        (Err(e), Some(what)) => Err(StoreError::config(format!(
            "the NATS KV bucket {bucket:?} lacks {what}, and switching it on failed: {e}"
        ))),
    }
}

/// A JetStream context whose requests wait at most `timeout`.
pub fn context(client: async_nats::Client, timeout: Duration) -> Context {
    let mut js = jetstream::new(client);
    js.set_timeout(timeout);
    js
}
