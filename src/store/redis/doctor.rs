//! What `dlock doctor` asks a Redis server: its version, its clock (`TIME`, the clock every
//! lease is timed by), the persistence settings a restart's safety depends on, and
//! `maxclients`.

use redis::{Value, cmd};

use super::{RedisStore, classify};
use crate::store::conns::ConnLimit;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult, clock_finding, wall_ms};

impl RedisStore {
    pub(super) async fn doctor(&self, q: HealthQuery) -> StoreResult<Health> {
        let mut h = Health::default();
        // A cluster answers INFO from every node, as a map by node: any one tells the version.
        let info: Value = self
            .conn
            .query(cmd("INFO").arg("server"))
            .await
            .map_err(classify)?;
        let info = first_text(info);
        let info = info.as_deref();
        h.version = info
            .and_then(|i| field(i, "redis_version"))
            .map(|v| format!("Redis {v}"));
        // A cross-check of a restart: a new run_id, and a short uptime.
        if let (Some(up), Some(id)) = (
            info.and_then(|i| field(i, "uptime_in_seconds")),
            info.and_then(|i| field(i, "run_id")),
        ) {
            let id: String = id.chars().take(8).collect();
            h.findings.push(Finding::new(
                "uptime",
                Severity::Ok,
                format!("up for {up}s (run_id {id}...)"),
            ));
        }
        let before = wall_ms();
        let (secs, micros): (i64, i64) = self.conn.query(&cmd("TIME")).await.map_err(classify)?;
        let after = wall_ms();
        clock_finding(&mut h, secs * 1000 + micros / 1000, before, after);
        h.findings.push(self.persistence(q).await);
        self.connections(&mut h).await;
        Ok(h)
    }

    /// `maxclients`, where CONFIG GET is allowed. A waiter holds its connection and its
    /// subscription's (in a cluster, the limit is each node's).
    async fn connections(&self, h: &mut Health) {
        let got: Result<Vec<String>, _> = self
            .conn
            .query(cmd("CONFIG").arg("GET").arg("maxclients"))
            .await;
        match got.as_deref().map(|v| v.get(1).map(|n| n.parse::<u64>())) {
            Ok(Some(Ok(n))) => {
                let limit = ConnLimit::new("maxclients", Some(n), 2);
                h.findings.push(limit.finding(&format!("maxclients {n}")));
                h.connections = Some(limit);
            }
            Ok(_) => h.findings.push(ConnLimit::unread(
                "maxclients",
                "no answer to CONFIG GET",
                2,
            )),
            Err(e) => h
                .findings
                .push(ConnLimit::unread("maxclients", &e.to_string(), 2)),
        }
    }

    /// A server that restarts empty forgets its holders and its fence counters. Its fences
    /// go on from its clock all the same; in a quorum the engine keeps it out of the vote
    /// until the leases the other members hold have run out (`engine::amnesia`), which a
    /// majority restarting empty at once defeats; alone, a new holder may enter before the
    /// old one learns of it at its next renewal.
    async fn persistence(&self, q: HealthQuery) -> Finding {
        let appendonly = match self.conn.appendonly().await {
            Ok(v) => v,
            Err(e) => {
                return Finding::new(
                    "persistence",
                    Severity::Warn,
                    format!("cannot read the persistence settings (CONFIG GET): {e}"),
                );
            }
        };
        if appendonly.iter().any(|a| a == "no") {
            let (severity, text) = if q.in_quorum {
                (
                    Severity::Warn,
                    "appendonly no in a quorum: after a restart without its data this server \
                     stays out of the vote until the other members' leases have run out, and \
                     its fences go on from its clock; a majority restarting empty at once is \
                     beyond that: set appendonly yes with appendfsync always",
                )
            } else {
                (
                    Severity::Warn,
                    "appendonly no: a restart forgets the holders (a new holder may enter before \
                     the old one learns it at its next renewal); fences go on from the server's \
                     clock; set appendonly yes with appendfsync always",
                )
            };
            return Finding::new("persistence", severity, text);
        }
        let fsync: Vec<String> = self
            .conn
            .query(cmd("CONFIG").arg("GET").arg("appendfsync"))
            .await
            .unwrap_or_default();
        match fsync.get(1).map(String::as_str) {
            Some("always") => Finding::new(
                "persistence",
                Severity::Ok,
                "appendonly yes, appendfsync always: holders and fences survive a restart",
            ),
            Some(other) => Finding::new(
                "persistence",
                Severity::Note,
                format!(
                    "appendonly yes, appendfsync {other}: a crash of the host may lose the last \
                     second of grants and fence raises; appendfsync always closes that"
                ),
            ),
            None => Finding::new(
                "persistence",
                Severity::Note,
                "appendonly yes (appendfsync could not be read)",
            ),
        }
    }
}

/// The text of a reply, or of the first node's reply in a cluster's map of them.
fn first_text(v: Value) -> Option<String> {
    match v {
        Value::Map(entries) => entries.into_iter().find_map(|(_, v)| first_text(v)),
        v => redis::from_redis_value::<String>(v).ok(),
    }
}

/// `key:value` from an `INFO` reply.
fn field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(field(info, "redis_mode"), None);
    }
}
