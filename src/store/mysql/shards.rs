//! The MySQL/MariaDB store's shard-list record (`Store::shard_list`): one row per namespace
//! in `{prefix}_shard_lists`, a table of its own (created on first use) so the lock tables and
//! their statements stay as they are.

use mysql_async::Value;
use mysql_async::prelude::Queryable;

use super::{Mysql, schema};
use crate::store::{StoreError, StoreResult, TagWrite};

impl Mysql {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        let t = format!("{}_shard_lists", self.sql.prefix);
        let insert = match write {
            // INSERT IGNORE would also swallow other errors; this keeps them.
            TagWrite::IfAbsent | TagWrite::Read => {
                format!("INSERT INTO {t} (ns, tag) VALUES (?, ?) ON DUPLICATE KEY UPDATE ns = ns")
            }
            TagWrite::Replace => {
                format!(
                    "INSERT INTO {t} (ns, tag) VALUES (?, ?) ON DUPLICATE KEY UPDATE tag = VALUES(tag)"
                )
            }
        };
        let ns = Value::from(self.namespace.as_bytes());
        let mut c = self.session().await?;
        if write == TagWrite::Read {
            let row = c
                .exec_first::<Vec<u8>, _, _>(format!("SELECT tag FROM {t} WHERE ns = ?"), (ns,))
                .await;
            return match row {
                Ok(row) => Ok(row
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()),
                Err(e) if schema::missing_tables(&e) => Ok(String::new()),
                Err(e) => Err(schema::classify(e)),
            };
        }
        let mut created = false;
        loop {
            match c
                .exec_drop(&insert, (ns.clone(), Value::from(tag.as_bytes())))
                .await
            {
                Err(e) if schema::missing_tables(&e) && !created => {
                    c.query_drop(format!(
                        "CREATE TABLE IF NOT EXISTS {t} (
                           ns VARBINARY(255) NOT NULL PRIMARY KEY,
                           tag VARBINARY(255) NOT NULL) ENGINE=InnoDB"
                    ))
                    .await
                    .map_err(|e| schema::setup_error(e, &self.sql.prefix, &self.user, &self.db))?;
                    created = true;
                }
                r => {
                    r.map_err(schema::classify)?;
                    break;
                }
            }
        }
        let row: Option<Vec<u8>> = c
            .exec_first(format!("SELECT tag FROM {t} WHERE ns = ?"), (ns,))
            .await
            .map_err(schema::classify)?;
        row.map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok_or_else(|| StoreError::protocol("the shard-list record vanished as it was read"))
    }
}
