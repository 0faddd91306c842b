//! The ZooKeeper store's shard-list record (`Store::shard_list`): the persistent node
//! `{chroot}/dlock-shards/{namespace}`, beside `{chroot}/dlock/` (whose children are all lock
//! names, as `list` reads them). Create is atomic: of two writers, one creates, the other
//! finds the node and reads it.

use zookeeper_client::{CreateMode, Error};

use std::time::Duration;

use super::conn::classify;
use super::{DEFAULT_SESSION, ZkStore};

/// How long a read waits for the session another request opens before opening one itself.
const SIDE_WAIT: Duration = Duration::from_secs(2);
use crate::store::{StoreResult, TagWrite};

impl ZkStore {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        let (inner, tag) = (self.inner.clone(), tag.to_string());
        self.inner
            .conn
            .spawn(async move {
                // A read is a plain client's side request beside its grant (or inspect, or
                // doctor's leases), which sets the session's timeout from its ttl: use the
                // session they open rather than open one with another timeout first.
                let c = if write == TagWrite::Read {
                    inner.conn.shared_client(SIDE_WAIT, DEFAULT_SESSION).await?
                } else {
                    inner.client(None).await?
                };
                let (root, ns) = inner.paths.base.rsplit_once('/').unwrap_or(("", ""));
                let parent = format!("{root}-shards");
                let path = format!("{parent}/{ns}");
                let opts = inner.opts(CreateMode::Persistent);
                let err = |e| classify(e, "write the shard-list record");
                if write == TagWrite::Read {
                    return match c.get_data(&path).await {
                        Ok((data, _)) => Ok(String::from_utf8_lossy(&data).into_owned()),
                        Err(Error::NoNode) => Ok(String::new()),
                        Err(e) => Err(classify(e, "read the shard-list record")),
                    };
                }
                c.mkdir(&parent, &opts).await.map_err(err)?;
                match c.create(&path, tag.as_bytes(), &opts).await {
                    Ok(_) => return Ok(tag),
                    Err(Error::NodeExists) => {}
                    Err(e) => return Err(err(e)),
                }
                if write == TagWrite::Replace {
                    c.set_data(&path, tag.as_bytes(), None).await.map_err(err)?;
                    return Ok(tag);
                }
                let (data, _) = c.get_data(&path).await.map_err(err)?;
                Ok(String::from_utf8_lossy(&data).into_owned())
            })
            .await
    }
}
