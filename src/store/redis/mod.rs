//! The Redis store: one server (`redis://`, `rediss://`) or a Redis Cluster
//! (`redis+cluster://`, `rediss+cluster://`, seed nodes; the cluster client follows MOVED/ASK
//! and finds the new master after a failover).
//!
//! Every grant, renew, release and fence raise is one Lua script, so each is atomic and takes
//! one round trip (EVALSHA; the script is loaded once per server). Deadlines come from the
//! server's `TIME` inside the script, never from the client's wall clock, and expired holders
//! are dropped inside the script that finds them, which is how a grant learns that its
//! predecessor expired. Waiters stand in line in arrival order (a sorted set per name, kept by
//! the same scripts, so each grant is still one atomic step): a grant must admit every live
//! waiter ahead of it, and a release publishes only to the waiters at the front it lets in,
//! each on its own channel, never to the herd. A waiter's place lives on its polls
//! (`waiter_life`): one that dies leaves the line without anyone's help.
//!
//! `?wait_replicas=N` closes the hole a failover opens: after a grant or a renewal, `WAIT N`
//! must confirm that N replicas have the write, or the grant is withdrawn (and the renewal
//! counts as failed). It cannot help against a replica promoted while lagging behind a write
//! it never confirmed, nor against clock differences between the old and the new master.

mod cluster;
mod conn;
mod connect;
mod doctor;
mod handover;
mod redial;
mod shards;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};

use conn::{Conn, Lua};
use connect::{client, connection_info, nat_map};
use handover::Handovers;
use redial::{Redial, Retry};

use super::server::ServerUrl;
use super::{
    Acquire, Attempt, ErrorKind, Granted, Health, HealthQuery, Holder, Listener, LockState,
    MAX_POLL, Mode, Outcome, Previous, Recall, Store, StoreError, StoreResult, TagWrite, Waiter,
};

/// The script of `$file`, sent after common.lua, with its SHA-1 (`conn::sha::$sha`).
macro_rules! script {
    ($file:literal, $sha:ident) => {
        Lua {
            source: concat!(include_str!("common.lua"), include_str!($file)),
            sha: conn::sha::$sha,
        }
    };
}

struct Scripts {
    grant: Lua,
    renew: Lua,
    release: Lua,
    force: Lua,
    raise: Lua,
    inspect: Lua,
    mark: Lua,
    /// A server answered NOSCRIPT: send scripts whole from now on (see `Conn::eval`).
    cold: AtomicBool,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            grant: script!("grant.lua", GRANT),
            renew: script!("renew.lua", RENEW),
            release: script!("release.lua", RELEASE),
            force: script!("force.lua", FORCE),
            raise: script!("raise.lua", RAISE),
            inspect: script!("inspect.lua", INSPECT),
            mark: script!("mark.lua", MARK),
            cold: AtomicBool::new(false),
        }
    }
}

pub struct RedisStore {
    /// Clients for waiters' subscriptions: the server, or each seed of a cluster (a publish
    /// anywhere in a cluster reaches subscribers on every node).
    subscribe_via: Vec<Client>,
    conn: Conn,
    desc: String,
    namespace: String,
    scripts: Scripts,
    /// `?wait_replicas=N`: replicas that must confirm each grant and renewal.
    wait_replicas: Option<u32>,
    timeout: Duration,
    /// The URL gave a password (so the server was asked to authenticate at connect).
    has_password: bool,
    /// What this process's waiters were handed by a release (see `handover`).
    handovers: Arc<Handovers>,
}

/// How long a waiter's place in line is kept without its coming back. A waiter comes back at
/// least every `MAX_POLL`, so a live one keeps its place with room to spare even on a busy
/// host; one that died (SIGKILL) stops holding up the line within this: within its lease's
/// ttl, for any ttl of a second or more.
fn waiter_life(ttl: Duration) -> Duration {
    ttl.clamp(MAX_POLL * 2, MAX_POLL * 4)
}

/// Map a Redis client error to what it means for dlock (and its exit code).
fn classify_is_refusal(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

pub fn classify(e: RedisError) -> StoreError {
    // Redis says only this, as a plain ERR, before it closes the connection.
    let error = if e.to_string().contains("max number of clients reached") {
        StoreError::at_limit(
            "maxclients",
            format!("Redis is at its connection limit (maxclients): {e}"),
        )
    } else if classify_is_refusal(&e) {
        StoreError::refused(format!(
            "refused: {e} (check the user and password: in the URL, ?password_file=, \
             ?password_env= or DLOCK_PASSWORD)"
        ))
    } else if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
    {
        StoreError::unavailable(format!("cannot reach the server: {e}"))
    } else if matches!(
        e.code(),
        Some("LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "MOVED" | "ASK")
    ) {
        // The server's own life: loading its data after a restart, a cluster mid-failover.
        StoreError::unavailable(format!("the server is not ready: {e}"))
    } else {
        StoreError::protocol(format!("unexpected answer: {e}"))
    };
    error.with_source(e)
}

impl RedisStore {
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<RedisStore> {
        Self::open(url, namespace, timeout, false).await
    }

    pub async fn connect_cluster(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<RedisStore> {
        Self::open(url, namespace, timeout, true).await
    }

    async fn open(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
        cluster: bool,
    ) -> StoreResult<RedisStore> {
        let mut url = url.clone();
        let wait_replicas = match url.take_param("wait_replicas") {
            None => None,
            Some(n) => Some(n.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                StoreError::invalid(format!(
                    "wait_replicas={n:?} is not a number of replicas (1 or more)"
                ))
            })?),
        };
        let nat_map = match url.take_param("nat_map") {
            None => None,
            Some(_) if !cluster => {
                return Err(StoreError::invalid(
                    "nat_map applies to a Redis Cluster (redis+cluster://), whose nodes \
                     announce their own addresses; a redis:// URL names the server to reach",
                ));
            }
            Some(m) => Some(nat_map(&m)?),
        };
        let tls = crate::store::tls::take_files(&mut url, "a rediss:// URL")?;
        url.reject_unknown_params().map_err(StoreError::invalid)?;
        let infos = url
            .hosts
            .iter()
            .map(|h| connection_info(&url, h, cluster))
            .collect::<StoreResult<Vec<_>>>()?;
        let subscribe_via = infos
            .iter()
            .map(|info| client(tls.as_ref(), info.clone()))
            .collect::<StoreResult<Vec<_>>>()?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None);
        let conn = if cluster {
            let seeds = url
                .hosts
                .iter()
                .map(|h| redis::cluster::NodeAddress::new(h.host.clone(), h.port))
                .collect();
            let template = url.clone();
            let dial: cluster::Dialer = Box::new(move |a| {
                let host = crate::store::server::HostPort {
                    host: a.host().to_string(),
                    port: a.port(),
                };
                connection_info(&template, &host, true)
                    .and_then(|info| client(tls.as_ref(), info))
                    .map_err(|e| RedisError::from(std::io::Error::other(format!("{a}: {e}"))))
            });
            let map = nat_map.unwrap_or_default();
            Conn::Cluster(
                cluster::Cluster::open(seeds, dial, config, map, timeout)
                    .await
                    .map_err(classify)?,
            )
        } else {
            Conn::Single(
                Redial::open(subscribe_via[0].clone(), config)
                    .await
                    .map_err(classify)?,
            )
        };
        Ok(RedisStore {
            subscribe_via,
            conn,
            desc: url.to_string(),
            namespace: namespace.to_string(),
            scripts: Scripts::new(),
            wait_replicas,
            timeout,
            has_password: url.password.is_some(),
            handovers: Arc::default(),
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

    /// Names that one script may touch together: all of them on one server; in a cluster,
    /// those whose keys hash to the same slot (indices into `names`, in order).
    fn groups(&self, names: &[String]) -> Vec<Vec<usize>> {
        if !matches!(self.conn, Conn::Cluster(_)) || names.len() < 2 {
            return vec![(0..names.len()).collect()];
        }
        let mut out: Vec<(redis::cluster_routing::Slot, Vec<usize>)> = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let slot = redis::cluster_routing::Slot::for_key(self.keys(n)[0].as_bytes());
            match out.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, idx)) => idx.push(i),
                None => out.push((slot, vec![i])),
            }
        }
        out.into_iter().map(|(_, idx)| idx).collect()
    }

    /// Run a script per slot group; `args` builds each group's arguments.
    async fn each<T: redis::FromRedisValue>(
        &self,
        lua: &Lua,
        names: &[String],
        args: impl Fn(&[usize]) -> Vec<String>,
    ) -> StoreResult<Vec<T>> {
        let mut out = Vec::new();
        for idx in self.groups(names) {
            let group: Vec<String> = idx.iter().map(|&i| names[i].clone()).collect();
            out.push(self.run(lua, &group, &args(&idx)).await?);
        }
        Ok(out)
    }

    /// One grant script for names that share a slot, each in its mode; with what the server
    /// remembered of each name before it (`Recall`).
    async fn grant(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        let names = &req.names;
        let modes: Vec<String> = req.modes.iter().map(|m| m.code()).collect();
        // Not in a cluster: a waiter subscribes on any node, the release sees its own only.
        let single = matches!(self.conn, Conn::Single(_));
        let heir = single && Handovers::offered(req, queue, self.wait_replicas.is_some());
        let args = [
            req.token.clone(),
            modes.join(" "),
            req.ttl.as_millis().to_string(),
            req.meta.clone(),
            if queue { "1" } else { "0" }.to_string(),
            waiter_life(req.ttl).as_millis().to_string(),
            if heir { "1" } else { "0" }.to_string(),
        ];
        let sent = tokio::time::Instant::now();
        let (reply, replicated) = self
            .run_replicated(&self.scripts.grant, names, &args, Retry::Never)
            .await?;
        let reply: Vec<Value> = redis::from_redis_value(reply)
            .map_err(|e| StoreError::protocol(format!("unexpected answer: {e}")))?;
        let bad = || StoreError::protocol("malformed grant answer");
        let mut reply = reply;
        // The last two values per name: its marker and horizon.
        let memo = reply.split_off(reply.len().saturating_sub(2 * names.len()));
        let recall = memo
            .chunks(2)
            .map(|c| {
                let int = |v: &Value| redis::from_redis_value::<i64>(v.clone()).map_err(|_| bad());
                Ok(Recall {
                    marked: int(&c[0])? == 1,
                    horizon: Duration::from_millis(int(&c[1])?.max(0) as u64),
                })
            })
            .collect::<StoreResult<Vec<Recall>>>()?;
        let mut it = reply.into_iter();
        let ok: i64 = redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
        if ok == 0 {
            let retry: i64 =
                redis::from_redis_value(it.next().ok_or_else(bad)?).map_err(|_| bad())?;
            let busy = Attempt::busy((retry >= 0).then(|| Duration::from_millis(retry as u64)));
            let seq = it
                .next()
                .and_then(|v| redis::from_redis_value::<i64>(v).ok());
            if let Some(seq) = seq.filter(|&s| heir && s >= 0) {
                self.handovers.queued(&req.token, seq as u64, sent);
            }
            return Ok((busy, recall));
        }
        self.handovers.forget(&req.token);
        let mut granted = Vec::with_capacity(names.len());
        while let (Some(f), Some(p)) = (it.next(), it.next()) {
            let fence: u64 = redis::from_redis_value(f).map_err(|_| bad())?;
            let previous: String = redis::from_redis_value(p).map_err(|_| bad())?;
            granted.push(Granted {
                fence,
                previous: Previous::parse(&previous),
                started: None,
            });
        }
        if granted.len() != names.len() || recall.len() != names.len() {
            return Err(bad());
        }
        if !replicated {
            // A failover now could lose this grant: withdraw it rather than hand it out.
            let _ = self.release(names, &req.token, Outcome::Withdrawn).await;
            return Err(StoreError::unavailable(format!(
                "the grant did not reach {} replica(s) in time (wait_replicas)",
                self.wait_replicas.unwrap_or(0)
            )));
        }
        Ok((Attempt::Granted(granted), recall))
    }

    fn keys_of(&self, names: &[String]) -> Vec<String> {
        names.iter().flat_map(|n| self.keys(n)).collect()
    }

    /// `classify`, and for a failure that may be a refusal in disguise, ask the server. A
    /// server that wants a password answers a short command from a client that has not
    /// authenticated with NOAUTH, but a long one (a grant script has more than ten arguments)
    /// with a bare protocol error and a hang-up. So when a URL without a password gets such an
    /// error, a PING on a new connection tells by its code whether it was a refusal. Only a
    /// failure pays for it: asking up front would cost every process a round trip, and a
    /// frozen quorum member its whole store timeout.
    async fn explain(&self, e: RedisError) -> StoreError {
        let error = classify(e);
        if self.has_password || error.kind() == ErrorKind::Refused {
            return error;
        }
        let ping = async {
            let mut c = self.subscribe_via[0]
                .get_multiplexed_async_connection()
                .await?;
            redis::cmd("PING").query_async::<Value>(&mut c).await
        };
        match tokio::time::timeout(self.timeout, ping).await {
            Ok(Err(e)) if classify_is_refusal(&e) => classify(e),
            _ => error,
        }
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        lua: &Lua,
        names: &[String],
        args: &[String],
    ) -> StoreResult<T> {
        let keys = self.keys_of(names);
        let cold = &self.scripts.cold;
        let (v, _) = match self
            .conn
            .eval(lua, &keys, args, None, cold, Retry::Safe)
            .await
        {
            Ok(r) => r,
            Err(e) => return Err(self.explain(e).await),
        };
        redis::from_redis_value(v)
            .map_err(|e| StoreError::protocol(format!("unexpected answer: {e}")))
    }

    /// Like `run`, but with `?wait_replicas` the writes must reach that many replicas.
    /// Returns the reply and whether the replicas confirmed (always true without the option).
    async fn run_replicated(
        &self,
        lua: &Lua,
        names: &[String],
        args: &[String],
        retry: Retry,
    ) -> StoreResult<(Value, bool)> {
        // WAIT may use most of the per-store time; the engine's own timeout still bounds it.
        // WAIT's timeout is checked on Redis's 100 ms cron, so it may run that much over: keep
        // it to a quarter of the per-store time.
        let wait = self.wait_replicas.map(|n| (n, self.timeout / 4));
        let keys = self.keys_of(names);
        let cold = &self.scripts.cold;
        let (v, acked) = match self.conn.eval(lua, &keys, args, wait, cold, retry).await {
            Ok(r) => r,
            Err(e) => return Err(self.explain(e).await),
        };
        let ok = match (self.wait_replicas, acked) {
            (Some(n), Some(got)) => got >= n as i64,
            _ => true,
        };
        Ok((v, ok))
    }

    fn state_from(&self, name: &str, snapshot: Vec<Value>) -> StoreResult<LockState> {
        let bad = || StoreError::protocol("malformed inspect answer");
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
            let (deadline, rest) = d.split_once('|').unwrap_or((d, "x"));
            // The mode, then (from a waiter that may be handed the lock) its ttl and meta.
            let mode = rest.split('|').next().unwrap_or("x");
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

#[async_trait]
impl Store for RedisStore {
    fn describe(&self) -> &str {
        &self.desc
    }

    /// A cluster's slot map was read from a node at open: an answer. A single server's open
    /// only connects (no request), which a frozen server (SIGSTOP) still accepts: it counts
    /// once it answers an attempt or a read (the engine's own count).
    fn reached(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write).await
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        Ok(self.attempt(req, queue).await?.0)
    }

    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        // Handed the lock by a release: held already, nothing to ask.
        if req.names.len() == 1
            && let Some((granted, recall)) = self.handovers.take(&req.token, req.ttl)
        {
            return Ok((Attempt::Granted(vec![granted]), vec![recall]));
        }
        let groups = self.groups(&req.names);
        if groups.len() == 1 {
            return self.grant(req, queue).await;
        }
        // Names on different cluster slots: one group at a time in canonical order, giving
        // back every earlier group when a later one is busy or fails (all or none).
        let mut granted = vec![None; req.names.len()];
        let mut recall = vec![Recall::DURABLE; req.names.len()];
        let mut taken: Vec<String> = Vec::new();
        for idx in groups {
            let group: Vec<String> = idx.iter().map(|&i| req.names[i].clone()).collect();
            let attempt = self.grant(&req.part(&group), queue).await;
            match attempt {
                Ok((Attempt::Granted(g), rc)) => {
                    for ((&i, g), rc) in idx.iter().zip(g).zip(rc) {
                        granted[i] = Some(g);
                        recall[i] = rc;
                    }
                    taken.extend(group);
                }
                other => {
                    if !taken.is_empty() {
                        let _ = self.release(&taken, &req.token, Outcome::Withdrawn).await;
                    }
                    // A busy group's names are told as its answer has them; the rest as
                    // remembered, which only ever makes the engine wait longer.
                    return other.map(|(a, rc)| {
                        for (&i, rc) in idx.iter().zip(rc) {
                            recall[i] = rc;
                        }
                        (a, recall)
                    });
                }
            }
        }
        let granted = granted
            .into_iter()
            .map(|g| g.expect("every group granted"))
            .collect();
        Ok((Attempt::Granted(granted), recall))
    }

    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        self.each::<i64>(&self.scripts.mark, names, |_| Vec::new())
            .await
            .map(|_| ())
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        // In a cluster a publish reaches subscribers on every node: subscribe on every
        // candidate at once and keep the first that answers, so a frozen seed costs nothing.
        let candidates: Vec<StoreResult<Client>> = match &self.conn {
            Conn::Cluster(c) => c
                .subscribe_candidates(&self.keys(&req.names[0])[0])
                .into_iter()
                .map(|r| r.map_err(classify))
                .collect(),
            Conn::Single(_) => vec![Ok(self.subscribe_via[0].clone())],
        };
        let channel = format!("dlock:wake:{}", req.token);
        let mut pending: futures_util::stream::FuturesUnordered<_> = candidates
            .into_iter()
            .map(|c| {
                let channel = channel.clone();
                async move {
                    let mut pubsub = c?.get_async_pubsub().await.map_err(classify)?;
                    pubsub.subscribe(channel).await.map_err(classify)?;
                    Ok::<_, StoreError>(pubsub)
                }
            })
            .collect();
        let mut last = None;
        while let Some(r) = pending.next().await {
            match r {
                Ok(pubsub) => {
                    return Ok(Box::new(Wakeup {
                        pubsub,
                        ended: false,
                        token: req.token.clone(),
                        handovers: self.handovers.clone(),
                    }));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| StoreError::unavailable("no node to subscribe on")))
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let args = [token.to_string(), ttl.as_millis().to_string()];
        for idx in self.groups(names) {
            let group: Vec<String> = idx.iter().map(|&i| names[i].clone()).collect();
            let (reply, replicated) = self
                .run_replicated(&self.scripts.renew, &group, &args, Retry::Safe)
                .await?;
            match redis::from_redis_value::<i64>(reply)
                .map_err(|e| StoreError::protocol(e.to_string()))?
            {
                1 => {}
                -1 => return Err(StoreError::lease_gone(super::FORGOTTEN)),
                _ => return Ok(false),
            }
            if !replicated {
                // Not "lost": the lease is still ours, but the new deadline might not survive
                // a failover, so the client must not count on it.
                return Err(StoreError::unavailable(
                    "the renewal did not reach its replicas in time (wait_replicas)",
                ));
            }
        }
        Ok(true)
    }

    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        let ended = outcome.previous().map_or(String::new(), Previous::text);
        self.handovers.forget(token);
        Ok(self
            .each::<i64>(&self.scripts.release, names, |_| {
                vec![token.to_string(), ended.clone()]
            })
            .await?
            .into_iter()
            .max()
            .unwrap_or(0)
            == 1)
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let held = self
            .each::<i64>(&self.scripts.force, names, |_| Vec::new())
            .await?;
        Ok(held.contains(&1))
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.each::<i64>(&self.scripts.raise, names, |idx| {
            idx.iter().map(|&i| fences[i].to_string()).collect()
        })
        .await
        .map(|_| ())
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let snapshot: Vec<Value> = self
            .run(&self.scripts.inspect, &[name.to_string()], &[])
            .await?;
        self.state_from(name, snapshot)
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let pattern = format!("dlock:{{{}:{}*}}:h", self.namespace, prefix);
        let head = format!("dlock:{{{}:", self.namespace);
        let keys = self.conn.scan(&pattern).await.map_err(classify)?;
        let names: Vec<String> = keys
            .iter()
            .filter_map(|k| Some(k.strip_prefix(&head)?.strip_suffix("}:h")?.to_string()))
            .collect();
        super::held_states(self, names).await
    }

    async fn warnings(&self) -> Vec<String> {
        match self.conn.appendonly().await {
            Ok(v) if v.iter().any(|a| a == "no") => vec![
                "runs without appendonly: a restart forgets its holders (a quorum keeps such a \
                 member out of the vote until the others' leases have run out; a lone server \
                 cannot); fences go on from its clock; set appendonly yes with appendfsync always"
                    .to_string(),
            ],
            _ => Vec::new(),
        }
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query).await
    }
}

/// A waiter's own channel: a release publishes there when it is this waiter's turn.
struct Wakeup {
    pubsub: redis::aio::PubSub,
    /// The subscription's connection ended (the server went away). The engine listens
    /// again when the server is back; until then this waits out each `max`, so a waiter
    /// polls at its usual pace rather than in a tight loop.
    ended: bool,
    token: String,
    handovers: Arc<Handovers>,
}

#[async_trait]
impl Listener for Wakeup {
    async fn changed(&mut self, max: Duration) {
        let until = tokio::time::Instant::now() + max;
        if !self.ended {
            match tokio::time::timeout(max, self.pubsub.on_message().next()).await {
                Ok(Some(message)) => {
                    if let Ok(text) = message.get_payload::<String>() {
                        self.handovers.heard(&self.token, &text);
                    }
                }
                Ok(None) => self.ended = true,
                Err(_) => {}
            }
        }
        if self.ended {
            tokio::time::sleep_until(until).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Scripts;

    /// build.rs hashed each script as it is sent: what a server names it by (redis-rs
    /// hashes as Redis does).
    #[test]
    fn each_script_goes_by_its_own_sha1() {
        let s = Scripts::new();
        let all = [
            &s.grant, &s.renew, &s.release, &s.force, &s.raise, &s.inspect, &s.mark,
        ];
        for lua in all {
            let sha = redis::Script::new(lua.source).get_hash().to_string();
            assert_eq!(lua.sha, sha, "{}", &lua.source[lua.source.len() - 200..]);
        }
        let mut shas: Vec<_> = all.iter().map(|l| l.sha).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), 7);
    }
}
