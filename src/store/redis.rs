//! The Redis store: one server (`redis://`, `rediss://`).
//!
//! Every grant, renew, release and fence raise is one Lua script, so each is atomic and takes
//! one round trip (EVALSHA; the script is loaded once per server). Deadlines come from the
//! server's `TIME` inside the script, never from the client's wall clock, and expired holders
//! are dropped inside the script that finds them, which is how a grant learns that its
//! predecessor expired. A release publishes to the longest-waiting live waiter's own channel,
//! so one release wakes one waiter, not the herd.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, RedisError, Script, Value,
};

use super::url::ServerUrl;
use super::{
    Acquire, Attempt, Granted, Holder, Listener, LockState, Mode, Previous, Store, StoreError,
    StoreResult, Waiter,
};
use crate::engine::MAX_POLL;

macro_rules! script {
    ($file:literal) => {
        concat!(include_str!("redis/common.lua"), include_str!($file))
    };
}

struct Scripts {
    grant: Script,
    renew: Script,
    release: Script,
    force: Script,
    raise: Script,
    inspect: Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            grant: Script::new(script!("redis/grant.lua")),
            renew: Script::new(script!("redis/renew.lua")),
            release: Script::new(script!("redis/release.lua")),
            force: Script::new(script!("redis/force.lua")),
            raise: Script::new(script!("redis/raise.lua")),
            inspect: Script::new(script!("redis/inspect.lua")),
        }
    }
}

pub struct RedisStore {
    client: Client,
    conn: MultiplexedConnection,
    desc: String,
    namespace: String,
    scripts: Scripts,
}

/// Map a Redis client error to what it means for dlock (and its exit code).
pub fn classify(e: RedisError) -> StoreError {
    let code = e.code().unwrap_or("");
    // A server with a password answers a long first command from a client that has not
    // authenticated (dlock's first is a script) not with NOAUTH but with a protocol error
    // about an "unauthenticated" request, and hangs up: that is a refusal too.
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
        || e.to_string().contains("unauthenticated")
    {
        return StoreError::Refused(format!(
            "refused: {e} (check the user and password: in the URL, ?password_file=, \
             ?password_env= or DLOCK_PASSWORD)"
        ));
    }
    if e.is_io_error() || e.is_timeout() || e.is_connection_refusal() || e.is_connection_dropped() {
        return StoreError::Unavailable(format!("cannot reach the server: {e}"));
    }
    StoreError::Protocol(format!("unexpected answer: {e}"))
}

impl RedisStore {
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<RedisStore> {
        let mut url = url.clone();
        let client = client_for(&mut url)?;
        url.reject_unknown_params().map_err(StoreError::Invalid)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(classify)?;
        Ok(RedisStore {
            client,
            conn,
            desc: url.to_string(),
            namespace: namespace.to_string(),
            scripts: Scripts::new(),
        })
    }

    /// The four keys of a name, sharing one hash tag (see common.lua).
    fn keys(&self, name: &str) -> [String; 4] {
        let base = format!("dlock:{{{}:{}}}", self.namespace, name);
        [
            format!("{base}:h"),
            format!("{base}:f"),
            format!("{base}:w"),
            format!("{base}:wd"),
        ]
    }

    fn invocation<'a>(&self, script: &'a Script, names: &[String]) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        for name in names {
            for k in self.keys(name) {
                inv.key(k);
            }
        }
        inv
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        inv: redis::ScriptInvocation<'_>,
    ) -> StoreResult<T> {
        let mut conn = self.conn.clone();
        inv.invoke_async(&mut conn).await.map_err(classify)
    }

    fn state_from(&self, name: &str, snapshot: Vec<Value>) -> StoreResult<LockState> {
        let bad = || StoreError::Protocol("malformed inspect answer".into());
        let mut it = snapshot.into_iter();
        let now: u64 = redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        let holders: Vec<(String, String)> =
            redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        let record: Vec<(String, String)> =
            redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        let order: Vec<String> =
            redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        let details: Vec<(String, String)> =
            redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        let field = |k: &str| record.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
        let mut out = LockState {
            name: name.to_string(),
            fence: field("fence").and_then(|v| v.parse().ok()).unwrap_or(0),
            previous: Previous::parse(field("previous").unwrap_or("")),
            ..LockState::default()
        };
        for (token, v) in holders {
            let mut parts = v.splitn(4, '|');
            let deadline: u64 = parts.next().and_then(|d| d.parse().ok()).unwrap_or(0);
            if deadline <= now {
                continue;
            }
            out.holders.push(Holder {
                owner: crate::names::owner_id(&token),
                fence: parts.next().and_then(|d| d.parse().ok()).unwrap_or(0),
                mode: parts
                    .next()
                    .and_then(Mode::from_code)
                    .unwrap_or(Mode::Exclusive),
                ttl_left_ms: deadline - now,
                meta: crate::meta::parse(parts.next().unwrap_or("")),
            });
        }
        out.holders.sort_by_key(|h| h.fence);
        for token in order {
            let Some((_, d)) = details.iter().find(|(t, _)| *t == token) else {
                continue;
            };
            let (deadline, mode) = d.split_once('|').unwrap_or((d, "x"));
            if deadline.parse::<u64>().unwrap_or(0) > now {
                out.waiters.push(Waiter {
                    owner: crate::names::owner_id(&token),
                    mode: Mode::from_code(mode).unwrap_or(Mode::Exclusive),
                    meta: serde_json::Value::Null,
                });
            }
        }
        Ok(out)
    }
}

/// Build the client for a URL, taking the parameters it understands out of it.
fn client_for(url: &mut ServerUrl) -> StoreResult<Client> {
    let host = url.hosts[0].clone();
    let db = match url.path.trim_start_matches('/') {
        "" => 0,
        d => d.parse::<i64>().map_err(|_| {
            StoreError::Invalid(format!("the database {d:?} is not a number; write e.g. /0"))
        })?,
    };
    let ca = url.take_param("ca_file");
    let cert = url.take_param("cert_file");
    let key = url.take_param("key_file");
    let addr = if url.tls {
        ConnectionAddr::TcpTls {
            host: host.host.clone(),
            port: host.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.host.clone(), host.port)
    };
    let mut settings = redis::RedisConnectionInfo::default()
        .set_db(db)
        .set_skip_set_lib_name();
    if let Some(u) = &url.user {
        settings = settings.set_username(u);
    }
    if let Some(p) = &url.password {
        settings = settings.set_password(p);
    }
    let info = addr
        .into_connection_info()
        .map_err(classify)?
        .set_redis_settings(settings);
    if !url.tls {
        if ca.is_some() || cert.is_some() {
            return Err(StoreError::Invalid(
                "ca_file, cert_file and key_file need a rediss:// URL".into(),
            ));
        }
        return Client::open(info).map_err(classify);
    }
    crate::tls::install_provider();
    let read = |p: &str| {
        std::fs::read(p).map_err(|e| StoreError::Invalid(format!("cannot read {p}: {e}")))
    };
    let client_tls = match (cert, key) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read(&c)?,
            client_key: read(&k)?,
        }),
        (None, None) => None,
        _ => {
            return Err(StoreError::Invalid(
                "cert_file and key_file go together".into(),
            ));
        }
    };
    let root_cert = ca.as_deref().map(read).transpose()?;
    Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(classify)
}

#[async_trait]
impl Store for RedisStore {
    fn describe(&self) -> &str {
        &self.desc
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        let mut inv = self.invocation(&self.scripts.grant, &req.names);
        inv.arg(&req.token)
            .arg(req.mode.code())
            .arg(req.ttl.as_millis() as u64)
            .arg(&req.meta)
            .arg(if queue { 1 } else { 0 })
            .arg((MAX_POLL * 4).as_millis() as u64);
        let reply: Vec<Value> = self.run(inv).await?;
        let bad = || StoreError::Protocol("malformed grant answer".into());
        let mut it = reply.into_iter();
        let ok: i64 = redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        if ok == 0 {
            let retry: i64 =
                redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
            return Ok(Attempt::Busy {
                retry_after: (retry >= 0).then(|| Duration::from_millis(retry as u64)),
            });
        }
        let mut granted = Vec::with_capacity(req.names.len());
        while let (Some(f), Some(p)) = (it.next(), it.next()) {
            let fence: u64 = redis::from_redis_value(f).map_err(|_| bad())?;
            let previous: String = redis::from_redis_value(p).map_err(|_| bad())?;
            granted.push(Granted {
                fence,
                previous: Previous::parse(&previous),
            });
        }
        if granted.len() != req.names.len() {
            return Err(bad());
        }
        Ok(Attempt::Granted(granted))
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        let mut pubsub = self.client.get_async_pubsub().await.map_err(classify)?;
        pubsub
            .subscribe(format!("dlock:wake:{}", req.token))
            .await
            .map_err(classify)?;
        Ok(Box::new(Wakeup { pubsub }))
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let mut inv = self.invocation(&self.scripts.renew, names);
        inv.arg(token).arg(ttl.as_millis() as u64);
        Ok(self.run::<i64>(inv).await? == 1)
    }

    async fn release(&self, names: &[String], token: &str) -> StoreResult<bool> {
        let mut inv = self.invocation(&self.scripts.release, names);
        inv.arg(token);
        Ok(self.run::<i64>(inv).await? == 1)
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let inv = self.invocation(&self.scripts.force, names);
        Ok(self.run::<i64>(inv).await? == 1)
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        let mut inv = self.invocation(&self.scripts.raise, names);
        for f in fences {
            inv.arg(*f);
        }
        self.run::<i64>(inv).await.map(|_| ())
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let inv = self.invocation(
            &self.scripts.inspect,
            std::slice::from_ref(&name.to_string()),
        );
        let snapshot: Vec<Value> = self.run(inv).await?;
        self.state_from(name, snapshot)
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let pattern = format!("dlock:{{{}:{}*}}:h", self.namespace, prefix);
        let head = format!("dlock:{{{}:", self.namespace);
        let mut conn = self.conn.clone();
        let mut names = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            names.extend(
                keys.iter()
                    .filter_map(|k| Some(k.strip_prefix(&head)?.strip_suffix("}:h")?.to_string())),
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            let st = self.inspect(&name).await?;
            if !st.holders.is_empty() {
                out.push(st);
            }
        }
        Ok(out)
    }

    async fn warnings(&self) -> Vec<String> {
        let mut conn = self.conn.clone();
        let cfg: Result<Vec<String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async(&mut conn)
            .await;
        match cfg {
            Ok(v) if v.get(1).map(String::as_str) == Some("no") => vec![
                "runs without appendonly: after a restart its fence counters start again, so \
                 in a quorum keep it out for longer than the ttl, or set appendonly yes and \
                 appendfsync always"
                    .to_string(),
            ],
            _ => Vec::new(),
        }
    }
}

/// A waiter's own channel: a release publishes there when it is this waiter's turn.
struct Wakeup {
    pubsub: redis::aio::PubSub,
}

#[async_trait]
impl Listener for Wakeup {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.pubsub.on_message().next()).await;
    }
}
