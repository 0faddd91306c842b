//! A Redis Cluster as dlock uses it: every request names one slot (each lock's keys share a
//! hash tag), so it goes to that slot's master, on a connection of that node's own that is
//! dialled again when it breaks (`Redial`).
//!
//! The slot map is asked of every known node and seed at once, and the first answer is used:
//! one frozen or dead seed costs nothing while another answers. It is asked again when a node
//! answers MOVED (the request did not run, so it is sent again, a grant too) and when a
//! master's connection breaks (a failover: a request that may be sent again goes to the new
//! master; a grant does not, as its answer may be lost after it took effect).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::cluster::NodeAddress;
use redis::{Client, RedisError, RedisResult, Value, cmd};

use super::redial::{Redial, Retry, broken};

/// Builds a client for a node's address (the URL's credentials and TLS, any `nat_map`).
pub type Dialer = Box<dyn Fn(&NodeAddress) -> RedisResult<Client> + Send + Sync>;

pub struct Cluster {
    seeds: Vec<NodeAddress>,
    dial: Dialer,
    config: redis::AsyncConnectionConfig,
    nat_map: HashMap<NodeAddress, NodeAddress>,
    timeout: Duration,
    nodes: Mutex<HashMap<NodeAddress, Arc<Redial>>>,
    /// Slot ranges (inclusive) and their masters, as last read.
    slots: Mutex<Vec<(u16, u16, NodeAddress)>>,
}

fn error(what: String) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, what))
}

impl Cluster {
    /// Read the slot map from the first seed that answers (within `timeout`).
    pub async fn open(
        seeds: Vec<NodeAddress>,
        dial: Dialer,
        config: redis::AsyncConnectionConfig,
        nat_map: HashMap<NodeAddress, NodeAddress>,
        timeout: Duration,
    ) -> RedisResult<Cluster> {
        let c = Cluster {
            seeds,
            dial,
            config,
            nat_map,
            timeout,
            nodes: Mutex::new(HashMap::new()),
            slots: Mutex::new(Vec::new()),
        };
        c.refresh().await?;
        Ok(c)
    }

    /// The node's connection (made on first use).
    fn node(&self, addr: &NodeAddress) -> RedisResult<Arc<Redial>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(addr) {
            return Ok(n.clone());
        }
        let n = Arc::new(Redial::lazy((self.dial)(addr)?, self.config.clone()));
        nodes.insert(addr.clone(), n.clone());
        Ok(n)
    }

    /// Where to connect for an address a node announced.
    fn reachable(&self, announced: NodeAddress) -> NodeAddress {
        self.nat_map.get(&announced).cloned().unwrap_or(announced)
    }

    /// Ask every master known and every seed for the slot map at once; keep the first answer.
    pub async fn refresh(&self) -> RedisResult<()> {
        let mut ask: Vec<NodeAddress> = self.masters();
        for s in &self.seeds {
            if !ask.contains(s) {
                ask.push(s.clone());
            }
        }
        let mut pending: FuturesUnordered<_> = ask
            .into_iter()
            .map(|addr| async move {
                let node = self.node(&addr)?;
                let read = node.run(Retry::Safe, |mut c| async move {
                    cmd("CLUSTER")
                        .arg("SLOTS")
                        .query_async::<Value>(&mut c)
                        .await
                });
                match tokio::time::timeout(self.timeout, read).await {
                    Ok(r) => r.and_then(|v| self.parse_slots(&addr, v)),
                    Err(_) => Err(error(format!("{addr}: no answer to CLUSTER SLOTS"))),
                }
            })
            .collect();
        let mut last = None;
        while let Some(r) = pending.next().await {
            match r {
                Ok(map) if !map.is_empty() => {
                    *self.slots.lock().unwrap_or_else(|p| p.into_inner()) = map;
                    return Ok(());
                }
                Ok(_) => last = Some(error("a node knows no slots yet".into())),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| error("no cluster node to ask".into())))
    }

    /// `CLUSTER SLOTS`: [[start, end, [host, port, ...] (the master), replicas...], ...].
    fn parse_slots(
        &self,
        from: &NodeAddress,
        v: Value,
    ) -> RedisResult<Vec<(u16, u16, NodeAddress)>> {
        let ranges: Vec<Vec<Value>> = redis::from_redis_value(v)?;
        let mut out = Vec::new();
        for r in ranges {
            let mut it = r.into_iter();
            let (Some(a), Some(b), Some(m)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let (a, b): (u16, u16) = (redis::from_redis_value(a)?, redis::from_redis_value(b)?);
            let m: Vec<Value> = redis::from_redis_value(m)?;
            let mut m = m.into_iter();
            let (Some(host), Some(port)) = (m.next(), m.next()) else {
                continue;
            };
            let host: String = redis::from_redis_value(host)?;
            let port: u16 = redis::from_redis_value(port)?;
            // An empty or unknown host means the node that answered.
            let host = match host.as_str() {
                "" | "?" => from.host().to_string(),
                _ => host,
            };
            out.push((a, b, self.reachable(NodeAddress::new(host, port))));
        }
        Ok(out)
    }

    /// Every master, each once.
    pub fn masters(&self) -> Vec<NodeAddress> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<NodeAddress> = Vec::new();
        for (_, _, m) in slots.iter() {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }

    fn master_of(&self, slot: u16) -> Option<NodeAddress> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .find(|(a, b, _)| *a <= slot && slot <= *b)
            .map(|(_, _, m)| m.clone())
    }

    /// Run `f` on the master of `key`'s slot, following the cluster as it changes.
    pub async fn on_key<T, F, Fut>(&self, key: &str, retry: Retry, f: F) -> RedisResult<T>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let slot = slot(key.as_bytes());
        let mut target = match self.master_of(slot) {
            Some(m) => m,
            None => {
                self.refresh().await?;
                self.master_of(slot)
                    .ok_or_else(|| error(format!("no master serves slot {slot}")))?
            }
        };
        let mut tries = 0;
        loop {
            tries += 1;
            let r = self.node(&target)?.run(retry, &f).await;
            let Err(e) = r else { return r };
            if tries >= 3 {
                return Err(e);
            }
            if let Some((addr, _)) = e.redirect_node()
                && e.code() == Some("MOVED")
            {
                // It did not run: send it again where the slot is now.
                let moved = NodeAddress::try_from(addr).map_err(|_| e.clone())?;
                let _ = self.refresh().await;
                target = self
                    .master_of(slot)
                    .unwrap_or_else(|| self.reachable(moved));
                continue;
            }
            if broken(&e) {
                // The master may have failed over: look, and send it again if it may be sent.
                let _ = self.refresh().await;
                match self.master_of(slot) {
                    Some(m) if m != target && retry == Retry::Safe => {
                        target = m;
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            return Err(e);
        }
    }

    /// Run `f` on every master.
    pub async fn on_masters<T, F, Fut>(&self, f: F) -> RedisResult<Vec<T>>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut out = Vec::new();
        for m in self.masters() {
            out.push(self.node(&m)?.run(Retry::Safe, &f).await?);
        }
        Ok(out)
    }

    /// Run `f` on some master (for a command about the server, not a key).
    pub async fn on_any<T, F, Fut>(&self, f: F) -> RedisResult<T>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let first = self
            .masters()
            .into_iter()
            .next()
            .ok_or_else(|| error("no master known".into()))?;
        self.node(&first)?.run(Retry::Safe, f).await
    }

    /// The nodes to subscribe on, best first: the master of `key`'s slot, then the seeds.
    pub fn subscribe_candidates(&self, key: &str) -> Vec<RedisResult<Client>> {
        let mut addrs: Vec<NodeAddress> =
            self.master_of(slot(key.as_bytes())).into_iter().collect();
        for s in &self.seeds {
            if !addrs.contains(s) {
                addrs.push(s.clone());
            }
        }
        addrs.iter().map(|a| (self.dial)(a)).collect()
    }
}

/// The cluster slot of a key: CRC16 (XMODEM) of its hash tag (the part between the first `{`
/// and the next `}`, if not empty) or of the whole key, modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::cluster_routing::Slot;

    #[test]
    fn slots_are_the_clusters_own() {
        for key in [
            "dlock:{default:job}:h",
            "foo",
            "{}x",
            "a{b}c",
            "{user1000}.following",
            "",
        ] {
            assert_eq!(
                Slot::new(slot(key.as_bytes())),
                Some(Slot::for_key(key.as_bytes())),
                "{key}"
            );
        }
        assert_eq!(slot(b"123456789"), 0x31C3, "the XMODEM check value");
    }
}
