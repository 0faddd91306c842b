//! The file store's shard-list record (`Store::shard_list`): the file `.shards` in the
//! namespace's directory. A lock name never starts with `.`, so it can be no lock's file.

use std::fs;
use std::io;
use std::path::Path;

use super::{Files, io_err};
use crate::store::{StoreResult, TagWrite};

impl Files {
    pub(super) async fn record_shard_list(
        &self,
        tag: &str,
        write: TagWrite,
    ) -> StoreResult<String> {
        if write == TagWrite::Read {
            // Without the flock: the record is only ever replaced whole (a rename, never in a
            // journal), so a reader sees one version or the other. Every plain acquire reads
            // it (`shard::plain`), and under the flock it cost a second open and flock of
            // `.lock` in each run, and under contention a blocking thread to wait for it.
            return Ok(read(&self.0.dir)?.unwrap_or_default());
        }
        let tag = tag.to_string();
        // Under the namespace's flock, as every other write: read, decide, replace whole.
        self.locked(move |fs| match read(&fs.dir)? {
            Some(s) if write == TagWrite::IfAbsent => Ok(s),
            _ => {
                fs.put(".shards", tag.as_bytes())?;
                Ok(tag)
            }
        })
        .await
    }
}

/// The record, if there is one.
fn read(dir: &Path) -> StoreResult<Option<String>> {
    let path = dir.join(".shards");
    match fs::read_to_string(&path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("cannot read", &path, e)),
    }
}
