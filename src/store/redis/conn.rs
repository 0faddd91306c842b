//! One connection type for a single server and for a Redis Cluster, so the store's logic is
//! written once. Scripts run by EVALSHA (loaded on NOSCRIPT); every key of one lock shares a
//! hash tag, so in a cluster each script runs whole on the one master that owns the lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;

use super::redial::{Redial, Retry};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, RedisResult, Value, cmd};

/// A Lua script with its SHA1, sent by hash and loaded when the server does not know it.
pub struct Lua {
    pub source: &'static str,
    pub sha: String,
}

impl Lua {
    pub fn new(source: &'static str) -> Lua {
        Lua {
            source,
            sha: redis::Script::new(source).get_hash().to_string(),
        }
    }

    fn call(&self, by_hash: bool, keys: &[String], args: &[String]) -> Cmd {
        let mut c = if by_hash {
            let mut c = cmd("EVALSHA");
            c.arg(&self.sha);
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
    /// The cluster client dials its nodes again itself, and refreshes its slot map when a
    /// node moves a slot or fails.
    Cluster(ClusterConnection),
}

fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

impl Conn {
    /// Send a command that is safe to send again (every caller's is: reads, and writes that
    /// are idempotent).
    pub(super) async fn query<T: redis::FromRedisValue>(&self, c: &Cmd) -> RedisResult<T> {
        self.query_once(c, Retry::Safe).await
    }

    async fn query_once<T: redis::FromRedisValue>(&self, c: &Cmd, retry: Retry) -> RedisResult<T> {
        match self {
            Conn::Single(r) => {
                r.run(retry, |mut s| async move { c.query_async(&mut s).await })
                    .await
            }
            Conn::Cluster(s) => c.query_async(&mut s.clone()).await,
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
            let result = match (self, wait) {
                (_, None) => self
                    .query_once::<Value>(&call, retry)
                    .await
                    .map(|v| (v, None)),
                (Conn::Single(r), Some((n, t))) => {
                    let mut p = redis::pipe();
                    p.add_command(call)
                        .cmd("WAIT")
                        .arg(n)
                        .arg(t.as_millis() as u64);
                    let p = &p;
                    r.run(retry, |mut s| async move {
                        p.query_async::<(Value, i64)>(&mut s).await
                    })
                    .await
                    .map(|(v, w)| (v, Some(w)))
                }
                (Conn::Cluster(s), Some((n, t))) => match self
                    .query_once::<Value>(&call, retry)
                    .await
                {
                    Ok(v) => {
                        let route =
                            Route::with_slot(Slot::for_key(keys[0].as_bytes()), SlotAddr::Master);
                        let mut wait_cmd = cmd("WAIT");
                        wait_cmd.arg(n).arg(t.as_millis() as u64);
                        let acked = s
                            .clone()
                            .route_command(
                                wait_cmd,
                                RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                            )
                            .await?;
                        Ok((v, Some(redis::from_redis_value(acked)?)))
                    }
                    Err(e) => Err(e),
                },
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
            Conn::Cluster(s) => {
                let nodes: String = self.query(&cmd("CLUSTER").arg("NODES").to_owned()).await?;
                let mut keys = Vec::new();
                for (host, port) in masters(&nodes) {
                    let mut cursor: u64 = 0;
                    loop {
                        let mut c = cmd("SCAN");
                        c.arg(cursor)
                            .arg("MATCH")
                            .arg(pattern)
                            .arg("COUNT")
                            .arg(1000);
                        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        });
                        let reply = s.clone().route_command(c, routing).await?;
                        let (next, batch): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                        keys.extend(batch);
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                }
                Ok(keys)
            }
        }
    }

    /// `CONFIG GET appendonly` of every master: "yes" or "no" each.
    pub async fn appendonly(&self) -> RedisResult<Vec<String>> {
        let mut get = cmd("CONFIG");
        get.arg("GET").arg("appendonly");
        match self {
            Conn::Single(_) => {
                let v: Vec<String> = self.query(&get).await?;
                Ok(v.get(1).cloned().into_iter().collect())
            }
            Conn::Cluster(s) => {
                let routing = RoutingInfo::MultiNode((
                    redis::cluster_routing::MultipleNodeRoutingInfo::AllMasters,
                    None,
                ));
                let reply = s.clone().route_command(get, routing).await?;
                Ok(collect_strings(reply)
                    .into_iter()
                    .filter(|s| s == "yes" || s == "no")
                    .collect())
            }
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

/// Masters' addresses from `CLUSTER NODES` (skipping failed ones).
fn masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = f.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let addr = f.get(1)?.split('@').next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .collect()
}

fn collect_strings(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Set(items) => {
            items.into_iter().flat_map(collect_strings).collect()
        }
        Value::Map(pairs) => pairs
            .into_iter()
            .flat_map(|(_, v)| collect_strings(v))
            .collect(),
        other => redis::from_redis_value::<String>(other)
            .into_iter()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460\n\
                     b2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922\n\
                     c3 127.0.0.1:7003@17003 slave b2 0 0 2 connected\n\
                     d4 127.0.0.1:7004@17004 master,fail - 0 0 3 disconnected\n";
        assert_eq!(
            masters(nodes),
            vec![("127.0.0.1".into(), 7001), ("127.0.0.1".into(), 7002)]
        );
    }
}
