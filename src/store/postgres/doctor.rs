//! What `dlock doctor` asks a PostgreSQL server: its version, its clock, and whether a commit
//! survives a crash (`fsync`, `synchronous_commit`), on which the fences' rise depends, and
//! its connection limit.

use super::Postgres;
use super::schema::classify;
use crate::store::conns::ConnLimit;
use crate::store::{Health, HealthQuery, StoreResult, clock_finding, sql, wall_ms};

impl Postgres {
    pub(super) async fn doctor(&self, q: HealthQuery) -> StoreResult<Health> {
        let c = self.session().await?;
        let before = wall_ms();
        let row = c
            .query_typed(
                "SELECT current_setting('server_version'), \
                 (extract(epoch FROM clock_timestamp()) * 1000)::bigint, \
                 current_setting('fsync'), current_setting('synchronous_commit'), \
                 current_setting('max_connections')::bigint, \
                 current_setting('superuser_reserved_connections')::bigint",
                &[],
            )
            .await
            .map_err(classify)?;
        let after = wall_ms();
        let row = row
            .first()
            .ok_or_else(|| crate::store::StoreError::protocol("no answer to the settings query"))?;
        let mut h = Health {
            version: Some(format!("PostgreSQL {}", row.get::<_, String>(0))),
            ..Health::default()
        };
        clock_finding(&mut h, row.get(1), before, after);
        let (fsync, sync_commit): (String, String) = (row.get(2), row.get(3));
        let lossy = match (fsync.as_str(), sync_commit.as_str()) {
            ("off", _) => Some("fsync is off"),
            (_, "off") => Some("synchronous_commit is off"),
            _ => None,
        };
        h.findings.push(sql::durability(q, lossy));
        // One connection a process: its transactions and its LISTEN share it.
        let (max, reserved): (i64, i64) = (row.get(4), row.get(5));
        let limit = ConnLimit::new("max_connections", Some((max - reserved).max(0) as u64), 1);
        h.findings.push(limit.finding(&format!(
            "max_connections {max}, {reserved} of them reserved for superusers"
        )));
        h.connections = Some(limit);
        Ok(h)
    }
}
