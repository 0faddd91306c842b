//! The etcd store's shard-list record (`Store::shard_list`): one key per namespace with no
//! lease, written by a transaction that puts it only where it has never been created.

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::EtcdStore;
use super::conn::Resend;
use crate::store::{StoreError, StoreResult, TagWrite};

impl EtcdStore {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        let key = self.inner.layout.shard_list();
        let put = TxnOp::put(key.clone(), tag, None);
        let txn = match write {
            TagWrite::IfAbsent => Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([put])
                .or_else([TxnOp::get(key, None)]),
            TagWrite::Replace => Txn::new().and_then([put]),
            // Never succeeds (no key has create revision -1): answers with the get.
            TagWrite::Read => Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Less, 0)])
                .or_else([TxnOp::get(key, None)]),
        };
        // A read, or a put where there is none, may go twice: the second copy finds the
        // first's record and answers it. (Every plain `--store` client reads it first thing,
        // so this lets that read leave a frozen member; see `conn`.)
        let resend = match write {
            TagWrite::Replace => Resend::No,
            TagWrite::IfAbsent | TagWrite::Read => Resend::Yes,
        };
        let resp = self.inner.txn(txn, resend).await?;
        if resp.succeeded() {
            return Ok(tag.to_string());
        }
        let record = resp
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            })
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        match (record, write) {
            (Some(r), _) => Ok(r),
            (None, TagWrite::Read) => Ok(String::new()),
            (None, _) => Err(StoreError::protocol(
                "the shard-list record vanished as it was read",
            )),
        }
    }
}
