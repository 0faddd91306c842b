//! What `dlock doctor` says of a server's connection limit (issue 41): how many connections
//! dlock's clients may open there, how many of them one waiting dlock holds, and so how many
//! can wait at once holding theirs. A waiter beyond that is turned away by the server and
//! waits without a connection, dialling again with a backoff (the engine's `Reopen`).

use serde::Serialize;

use super::{Finding, Severity};

#[derive(Clone, Debug, Serialize)]
pub struct ConnLimit {
    /// The server's setting that bounds them: "max_connections", "maxclients",
    /// "maxClientCnxns".
    pub setting: &'static str,
    /// How many connections dlock's clients may open: the setting's value, less what the
    /// server keeps for others (PostgreSQL's superuser_reserved_connections). None: no limit.
    pub limit: Option<u64>,
    /// The limit counts the connections from one client host (ZooKeeper), not all of them.
    pub per_host: bool,
    /// How many connections one waiting dlock holds on this store.
    pub per_waiter: u64,
    /// How many dlocks can wait at once holding their connections (limit / per_waiter).
    pub waiters: Option<u64>,
}

impl ConnLimit {
    /// A limit of `limit` connections (None: unlimited), of which a waiter holds `per_waiter`.
    pub fn new(setting: &'static str, limit: Option<u64>, per_waiter: u64) -> ConnLimit {
        ConnLimit {
            setting,
            limit,
            per_host: false,
            per_waiter,
            waiters: limit.map(|l| l / per_waiter.max(1)),
        }
    }

    /// The finding doctor prints; `how` says what the limit is ("maxclients 20",
    /// "max_connections 30, 3 of them reserved for superusers").
    pub fn finding(&self, how: &str) -> Finding {
        let held = match self.per_waiter {
            1 => "each waiting dlock holds 1 connection".to_string(),
            n => format!("each waiting dlock holds {n} connections"),
        };
        let whose = if self.per_host { " from this host" } else { "" };
        let text = match self.waiters {
            None => format!("{how}: no limit on connections{whose}; {held}"),
            Some(w) => format!(
                "{how}{whose}; {held}, so {w} can wait at once holding theirs (more are turned \
                 away and wait without a connection, retrying with backoff)"
            ),
        };
        // Fewer than a handful: a cron fleet or a CI farm on one host meets it at once.
        let severity = match self.waiters {
            Some(w) if w < 5 => Severity::Warn,
            _ => Severity::Ok,
        };
        Finding::new("connections", severity, text)
    }

    /// The finding when the limit could not be read.
    pub fn unread(setting: &str, why: &str, per_waiter: u64) -> Finding {
        Finding::new(
            "connections",
            Severity::Note,
            format!(
                "{setting} could not be read ({why}); each waiting dlock holds {per_waiter} \
                 connection(s)"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_are_the_limit_over_what_each_holds() {
        assert_eq!(ConnLimit::new("maxclients", Some(20), 2).waiters, Some(10));
        assert_eq!(
            ConnLimit::new("max_connections", Some(97), 1).waiters,
            Some(97)
        );
        assert_eq!(ConnLimit::new("maxClientCnxns", None, 1).waiters, None);
        let f = ConnLimit::new("max_connections", Some(27), 1).finding("max_connections 30");
        assert!(f.text.contains("27 can wait at once"), "{}", f.text);
    }
}
