//! What `dlock doctor` asks a ZooKeeper ensemble: the server version and session bounds (the
//! four-letter words `srvr` and `conf`, when the server allows them), its connection limit
//! per client host (`maxClientCnxns`, from `conf`), and its clock (the
//! mtime a write gets, the clock `lock`'s TTL nodes are judged by).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ZkStore;
use crate::store::conns::ConnLimit;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult, clock_finding, wall_ms};

/// Longest one four-letter word may take: they are answered from memory.
const WORD_TIMEOUT: Duration = Duration::from_secs(2);

impl ZkStore {
    pub(super) async fn doctor(&self, q: HealthQuery) -> StoreResult<Health> {
        let mut h = Health::default();
        let inner = self.inner.clone();
        let (server_ms, before, after) = self
            .inner
            .conn
            .spawn(async move {
                let c = inner.client(None).await?;
                let before = wall_ms();
                let t = inner.now(&c).await?;
                Ok((t, before, wall_ms()))
            })
            .await?;
        let hosts = hosts(&self.inner.desc);
        match word(&hosts, "srvr").await {
            Some(srvr) => {
                h.version = field(&srvr, "Zookeeper version: ")
                    .map(|v| format!("ZooKeeper {}", v.split(['-', ',']).next().unwrap_or(v)));
            }
            None => h.findings.push(Finding::new(
                "version",
                Severity::Note,
                "the server does not answer `srvr` (add srvr,conf to 4lw.commands.whitelist \
                 to let doctor see its version and session bounds)",
            )),
        }
        clock_finding(&mut h, server_ms, before, after);
        match word(&hosts, "conf").await {
            Some(conf) => {
                let num = |k: &str| field(&conf, k).and_then(|v| v.trim().parse::<u64>().ok());
                if let (Some(min), Some(max)) =
                    (num("minSessionTimeout="), num("maxSessionTimeout="))
                {
                    h.findings.push(sessions(
                        q.ttl,
                        Duration::from_millis(min),
                        Duration::from_millis(max),
                    ));
                }
                if let Some(n) = num("maxClientCnxns=") {
                    connections(&mut h, n);
                }
            }
            None => h.findings.push(ConnLimit::unread(
                "maxClientCnxns",
                "the server does not answer `conf`",
                1,
            )),
        }
        Ok(h)
    }
}

/// maxClientCnxns bounds the connections from one client host (0: no bound); a waiter holds
/// one, its session.
fn connections(h: &mut Health, n: u64) {
    let mut limit = ConnLimit::new("maxClientCnxns", (n > 0).then_some(n), 1);
    limit.per_host = true;
    h.findings
        .push(limit.finding(&format!("maxClientCnxns {n}")));
    h.connections = Some(limit);
}

/// A `run` lease lives in the session, whose timeout the server keeps within its bounds.
fn sessions(ttl: Duration, min: Duration, max: Duration) -> Finding {
    let f = |d: Duration| humantime::format_duration(d).to_string();
    if ttl > max {
        Finding::new(
            "sessions",
            Severity::Warn,
            format!(
                "sessions last at most {} (maxSessionTimeout), less than the ttl {}: `run` \
                 refuses that ttl; use --ttl {} or less, or raise maxSessionTimeout",
                f(max),
                f(ttl),
                f(max)
            ),
        )
    } else if ttl < min {
        Finding::new(
            "sessions",
            Severity::Note,
            format!(
                "sessions last at least {} (minSessionTimeout), more than the ttl {}: a `run` \
                 holder that dies frees its lock after {}, not after the ttl",
                f(min),
                f(ttl),
                f(min)
            ),
        )
    } else {
        Finding::new(
            "sessions",
            Severity::Ok,
            format!(
                "session bounds {} to {} admit the ttl {}",
                f(min),
                f(max),
                f(ttl)
            ),
        )
    }
}

/// The ensemble's hosts from the store's (redacted) URL: `zk://[user@]h:p,h:p[/chroot]`.
fn hosts(desc: &str) -> Vec<String> {
    let rest = desc.strip_prefix("zk://").unwrap_or(desc);
    let rest = rest.split('/').next().unwrap_or("");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    rest.split(',').map(str::to_string).collect()
}

/// A four-letter word's answer from the first host that gives one.
async fn word(hosts: &[String], w: &str) -> Option<String> {
    for h in hosts {
        let ask = async {
            let mut s = TcpStream::connect(h.as_str()).await.ok()?;
            s.write_all(w.as_bytes()).await.ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.ok()?;
            Some(out)
        };
        if let Ok(Some(out)) = tokio::time::timeout(WORD_TIMEOUT, ask).await
            && !out.contains("not executed")
            && !out.is_empty()
        {
            return Some(out);
        }
    }
    None
}

fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_from_the_url() {
        assert_eq!(hosts("zk://u@a:1,b:2/x/y"), vec!["a:1", "b:2"]);
        assert_eq!(hosts("zk://a:1"), vec!["a:1"]);
    }

    #[test]
    fn session_bounds_against_the_ttl() {
        let s = Duration::from_secs;
        assert_eq!(sessions(s(30), s(4), s(40)).severity, Severity::Ok);
        assert_eq!(sessions(s(60), s(4), s(40)).severity, Severity::Warn);
        assert_eq!(sessions(s(1), s(4), s(40)).severity, Severity::Note);
    }
}
