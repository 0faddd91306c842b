//! The Redis store's shard-list record (`Store::shard_list`): one string key per namespace,
//! `dlock-shards:{namespace}`, outside the `dlock:{...}` keys of lock names (so `list`'s scan
//! never meets it) and without expiry.

use redis::cmd;

use super::RedisStore;
use super::redial::Retry;
use crate::store::{StoreError, StoreResult, TagWrite};

/// Set if absent and read back, in one atomic round trip on any Redis version (`SET NX GET`
/// together needs 7.0). The script is a few bytes, so it is sent whole rather than cached.
const IF_ABSENT: &str =
    "redis.call('SET', KEYS[1], ARGV[1], 'NX') return redis.call('GET', KEYS[1])";

impl RedisStore {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        let key = format!("dlock-shards:{}", self.namespace);
        let answer = match write {
            TagWrite::IfAbsent => {
                let mut c = cmd("EVAL");
                c.arg(IF_ABSENT).arg(1).arg(&key).arg(tag);
                self.conn
                    .query_key::<Option<String>>(&key, &c, Retry::Safe)
                    .await
            }
            TagWrite::Read => {
                let mut c = cmd("GET");
                c.arg(&key);
                // By key: a cluster sends it to the slot's master (a read may be sent again).
                return match self
                    .conn
                    .query_key::<Option<String>>(&key, &c, Retry::Safe)
                    .await
                {
                    Ok(record) => Ok(record.unwrap_or_default()),
                    Err(e) => Err(self.explain(e).await),
                };
            }
            TagWrite::Replace => {
                let mut c = cmd("SET");
                c.arg(&key).arg(tag);
                self.conn
                    .query_key::<()>(&key, &c, Retry::Safe)
                    .await
                    .map(|()| Some(tag.to_string()))
            }
        };
        match answer {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(StoreError::protocol(
                "the shard-list record vanished as it was written",
            )),
            Err(e) => Err(self.explain(e).await),
        }
    }
}
