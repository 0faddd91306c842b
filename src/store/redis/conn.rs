//! One connection type for a single server and for a Redis Cluster, so the store's logic is
//! written once. Scripts run by EVALSHA (loaded on NOSCRIPT); every key of one lock shares a
//! hash tag, so in a cluster each script runs whole on the one master that owns the lock
//! (and `WAIT` after it, in the same round trip, as on one server).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, RedisResult, Value, cmd};

use super::cluster::Cluster;
use super::redial::{Redial, Retry};

/// The scripts' SHA-1, computed by build.rs: `GRANT` for grant.lua and so on.
pub mod sha {
    include!(concat!(env!("OUT_DIR"), "/lua_sha.rs"));
}

/// A Lua script with its SHA1, sent by hash and loaded when the server does not know it.
pub struct Lua {
    pub source: &'static str,
    pub sha: &'static str,
}

impl Lua {
    fn call(&self, by_hash: bool, keys: &[String], args: &[String]) -> Cmd {
        let mut c = if by_hash {
            let mut c = cmd("EVALSHA");
            c.arg(self.sha);
            c
        } else {
            let mut c = cmd("EVAL");
            c.arg(self.source);
            c
        };
        c.arg(keys.len()).arg(keys).arg(args);
        c
    }
}

pub enum Conn {
    /// Dialled again when it breaks.
    Single(Redial),
    /// Each node's connection is dialled again when it breaks; the slot map is read again
    /// when a slot moves or a master fails.
    Cluster(Cluster),
}

fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

impl Conn {
    /// Send a command about the server, not a key (any master of a cluster answers), that is
    /// safe to send again.
    pub(super) async fn query<T: redis::FromRedisValue>(&self, c: &Cmd) -> RedisResult<T> {
        let run = |mut s: MultiplexedConnection| async move { c.query_async(&mut s).await };
        match self {
            Conn::Single(r) => r.run(Retry::Safe, run).await,
            Conn::Cluster(cl) => cl.on_any(run).await,
        }
    }

    /// Send a command on `key` (to its slot's master in a cluster).
    pub(super) async fn query_key<T: redis::FromRedisValue>(
        &self,
        key: &str,
        c: &Cmd,
        retry: Retry,
    ) -> RedisResult<T> {
        let run = |mut s: MultiplexedConnection| async move { c.query_async(&mut s).await };
        match self {
            Conn::Single(r) => r.run(retry, run).await,
            Conn::Cluster(cl) => cl.on_key(key, retry, run).await,
        }
    }

    /// Run a script. With `wait`, also have `WAIT replicas timeout` confirm that the
    /// script's writes reached that many replicas, on the master that ran it; on one server
    /// both go in one pipeline (one round trip).
    ///
    /// `cold` is set once a server answered NOSCRIPT (it started with an empty script
    /// cache, so it may lack the others too); from then on scripts are sent whole. A script
    /// sent by hash needs its NOSCRIPT answer heard before it is sent again whole, so when
    /// answers are being lost (say a grant's, whose attempt is then released), a release
    /// sent by hash would never run at all.
    pub async fn eval(
        &self,
        lua: &Lua,
        keys: &[String],
        args: &[String],
        wait: Option<(u32, Duration)>,
        cold: &AtomicBool,
        retry: Retry,
    ) -> RedisResult<(Value, Option<i64>)> {
        let mut by_hash = !cold.load(Ordering::Relaxed);
        loop {
            let call = lua.call(by_hash, keys, args);
            let result = match wait {
                None => self
                    .query_key::<Value>(&keys[0], &call, retry)
                    .await
                    .map(|v| (v, None)),
                Some((n, t)) => {
                    let mut p = redis::pipe();
                    p.add_command(call)
                        .cmd("WAIT")
                        .arg(n)
                        .arg(t.as_millis() as u64);
                    let p = &p;
                    let run = |mut s: MultiplexedConnection| async move {
                        p.query_async::<(Value, i64)>(&mut s).await
                    };
                    match self {
                        Conn::Single(r) => r.run(retry, run).await,
                        Conn::Cluster(cl) => cl.on_key(&keys[0], retry, run).await,
                    }
                    .map(|(v, w)| (v, Some(w)))
                }
            };
            match result {
                Err(e) if by_hash && no_script(&e) => {
                    cold.store(true, Ordering::Relaxed);
                    by_hash = false;
                }
                other => return other,
            }
        }
    }

    /// Every key matching `pattern`, on every master.
    pub async fn scan(&self, pattern: &str) -> RedisResult<Vec<String>> {
        match self {
            Conn::Single(r) => r.run(Retry::Safe, |s| scan_node(s, pattern)).await,
            Conn::Cluster(cl) => Ok(cl
                .on_masters(|s| scan_node(s, pattern))
                .await?
                .into_iter()
                .flatten()
                .collect()),
        }
    }

    /// `CONFIG GET appendonly` of every master: "yes" or "no" each.
    pub async fn appendonly(&self) -> RedisResult<Vec<String>> {
        let get = |mut s: MultiplexedConnection| async move {
            let v: Vec<String> = cmd("CONFIG")
                .arg("GET")
                .arg("appendonly")
                .query_async(&mut s)
                .await?;
            Ok(v.get(1).cloned())
        };
        match self {
            Conn::Single(r) => Ok(r.run(Retry::Safe, get).await?.into_iter().collect()),
            Conn::Cluster(cl) => Ok(cl.on_masters(get).await?.into_iter().flatten().collect()),
        }
    }
}

async fn scan_node(mut s: MultiplexedConnection, pattern: &str) -> RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut s)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}
