//! What `dlock doctor` asks a MySQL/MariaDB server: its version, its clock, and whether a
//! commit survives a crash (`innodb_flush_log_at_trx_commit`), on which the fences' rise
//! depends, and its connection limit.

use mysql_async::prelude::Queryable;

use super::Mysql;
use super::schema::{CLOCK_EXPR, classify};
use crate::store::conns::ConnLimit;
use crate::store::{Health, HealthQuery, StoreResult, clock_finding, sql, wall_ms};

impl Mysql {
    pub(super) async fn doctor(&self, q: HealthQuery) -> StoreResult<Health> {
        let mut c = self.session().await?;
        let before = wall_ms();
        let row: Option<(String, i64, i64, u64, u64)> = c
            .query_first(format!(
                "SELECT VERSION(), {CLOCK_EXPR}, @@innodb_flush_log_at_trx_commit, \
                 @@max_connections, @@max_user_connections"
            ))
            .await
            .map_err(classify)?;
        let after = wall_ms();
        let (version, now, flush, max, per_user) = row
            .ok_or_else(|| crate::store::StoreError::protocol("no answer to the settings query"))?;
        let mut h = Health {
            version: Some(version),
            ..Health::default()
        };
        clock_finding(&mut h, now, before, after);
        let lossy = (flush != 1).then_some("innodb_flush_log_at_trx_commit is not 1");
        h.findings.push(sql::durability(q, lossy));
        // A waiter holds its connection and its bell's (`bell`).
        let (setting, n) = match per_user {
            u if u > 0 && u < max => ("max_user_connections", u),
            _ => ("max_connections", max),
        };
        let limit = ConnLimit::new(setting, Some(n), 2);
        h.findings.push(limit.finding(&format!("{setting} {n}")));
        h.connections = Some(limit);
        Ok(h)
    }
}
