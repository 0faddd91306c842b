//! The file store's shard-list record (`Store::shard_list`): the file `.shards` in the
//! namespace's directory. A lock name never starts with `.`, so it can be no lock's file.

use std::fs;
use std::io;

use super::{FileStore, io_err};
use crate::store::{StoreResult, TagWrite};

impl FileStore {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        let tag = tag.to_string();
        // Under the namespace's flock, as every other write: read, decide, replace whole.
        self.locked(move |fs| {
            let path = fs.dir.join(".shards");
            let now = match fs::read_to_string(&path) {
                Ok(s) => Some(s),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_err("cannot read", &path, e)),
            };
            match now {
                _ if write == TagWrite::Read => Ok(now.unwrap_or_default()),
                Some(s) if write == TagWrite::IfAbsent => Ok(s),
                _ => {
                    fs.put(".shards", tag.as_bytes())?;
                    Ok(tag)
                }
            }
        })
        .await
    }
}
