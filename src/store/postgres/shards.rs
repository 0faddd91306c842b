//! The PostgreSQL store's shard-list record (`Store::shard_list`): one row per namespace in
//! `{schema}.shard_lists`, a table of its own (created on first use) so the lock tables and
//! their statements stay as they are.

use tokio_postgres::types::Type;

use super::{Postgres, schema};
use crate::store::{StoreError, StoreResult, TagWrite};

impl Postgres {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        let s = &self.sql.schema;
        let insert = match write {
            TagWrite::IfAbsent | TagWrite::Read => format!(
                "INSERT INTO {s}.shard_lists (ns, tag) VALUES ($1, $2) ON CONFLICT (ns) DO NOTHING"
            ),
            TagWrite::Replace => format!(
                "INSERT INTO {s}.shard_lists (ns, tag) VALUES ($1, $2)
                 ON CONFLICT (ns) DO UPDATE SET tag = EXCLUDED.tag"
            ),
        };
        // A statement of its own after the insert: whichever writer won has committed by
        // the time ON CONFLICT let ours through, and a new statement's snapshot sees it.
        let read = format!("SELECT tag FROM {s}.shard_lists WHERE ns = $1");
        let c = self.session().await?;
        let ns = &self.namespace;
        let tag = tag.to_string();
        let params = [(ns as _, Type::TEXT), (&tag as _, Type::TEXT)];
        if write == TagWrite::Read {
            return match c.query_typed(&read, &params[..1]).await {
                Ok(rows) => Ok(rows.first().map(|r| r.get(0)).unwrap_or_default()),
                Err(e) if schema::missing_tables(&e) => Ok(String::new()),
                Err(e) => Err(schema::classify(e)),
            };
        }
        let mut created = false;
        loop {
            match c.query_typed(&insert, &params).await {
                Err(e) if schema::missing_tables(&e) && !created => {
                    // Under the setup's advisory lock: two CREATEs at once can collide.
                    c.batch_execute(&format!(
                        "SELECT pg_advisory_xact_lock({});
                         CREATE SCHEMA IF NOT EXISTS {s};
                         CREATE TABLE IF NOT EXISTS {s}.shard_lists (
                             ns text PRIMARY KEY, tag text NOT NULL)",
                        schema::SETUP_LOCK
                    ))
                    .await
                    .map_err(|e| schema::setup_error(e, s, &self.user))?;
                    created = true;
                }
                r => {
                    r.map_err(schema::classify)?;
                    break;
                }
            }
        }
        let rows = c
            .query_typed(&read, &params[..1])
            .await
            .map_err(schema::classify)?;
        rows.first()
            .map(|r| r.get::<_, String>(0))
            .ok_or_else(|| StoreError::protocol("the shard-list record vanished as it was read"))
    }
}
