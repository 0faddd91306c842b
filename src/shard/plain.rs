//! A plain `--store` client on a store that serves a shard list (issue 26): it would place
//! every name on this store, while the list's clients place some names on other shards, so
//! both could hold one name. Such a client is refused (exit 64) with the way out.
//!
//! Cost. The check reads each store's shard-list record (`TagWrite::Read`, writing nothing)
//! while the first grant attempt is under way, not before it: one more small request per
//! store per acquiring command (`lock`, `run`, `multilock`), and no added round trip on the
//! way to the grant, which is released again if the check refuses. Renewals, releases and
//! every other command pay nothing.
//!
//! What it cannot close: a store that becomes a shard (its record first written) while a
//! plain client takes a lock on it. Records are written before the list's first grant, so
//! every plain acquire that starts after that is refused; clients already holding a lock
//! keep it until it ends. Stop plain clients before making their store a shard.

use super::Shards;
use super::record::Answer;
use crate::exit::Error;
use crate::store::TagWrite;

/// How a record is shown: its fingerprint, without the `/verified` mark.
fn fingerprint(record: &str) -> String {
    let fp = record.split('/').next().unwrap_or(record);
    crate::output::printable(fp)
}

impl Shards {
    /// The stores of a plain client that serve a shard list in this namespace, each with its
    /// record. Stores that could not be read are left out (their grant reports them anyway).
    pub async fn shard_records(&self) -> Vec<(String, String)> {
        if self.sharded {
            return Vec::new();
        }
        let answers: Vec<Answer> = self.records(TagWrite::Read, "").await;
        answers
            .into_iter()
            .filter_map(|a| match a.record {
                Ok(r) if !r.is_empty() => Some((a.store, fingerprint(&r))),
                _ => None,
            })
            .collect()
    }

    /// A plain client may not use a store that serves a shard list: the one line that says so.
    pub async fn check_unsharded(&self) -> Result<(), Error> {
        match self.shard_records().await.first() {
            None => Ok(()),
            Some((store, fp)) => Err(Error::usage(format!(
                "{store} is a shard of a shard list (fingerprint {fp}) in namespace {}; without \
                 --shard a lock taken here could be held on another shard too: give the same \
                 --shard list as the other clients (each shard as --shard, a quorum \
                 comma-separated), whose fingerprint `dlock --shard ... --json doctor` shows",
                crate::output::printable(&self.namespace)
            ))),
        }
    }
}
