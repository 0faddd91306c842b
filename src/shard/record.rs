//! Safety across different shard lists: two clients that disagree on the list must never
//! both hold one name (they may place it on different shards).
//!
//! Every store of every shard keeps one record per namespace (`Store::shard_list`): the
//! fingerprint of the whole list it serves, written set-if-absent on first use and changed
//! only by `dlock shards adopt`. Before it grants anything, a sharded command reads (and on
//! first use writes) the record on every store of its list at once, and goes on only if
//!
//! 1. no store answers with another list's fingerprint (that refuses with exit 64), and
//! 2. either every shard has a majority of its stores carrying ours (the whole list is
//!    verified; stores whose record was new are then marked `verified`), or some store
//!    already carries the `verified` mark, which is written only after such a whole check.
//!
//! Why that is enough. Say client A (list LA) and client B (list LB ≠ LA) hold one name, and
//! the two lists share a shard S (the same stores). Each went on under (2), so each list was
//! once verified whole: at that moment a majority of S carried its fingerprint. Records are
//! set once and changed only by `adopt`, so from then on a majority of S keeps carrying it.
//! Two majorities of S share a store, whose one record cannot carry both: contradiction. The
//! second of the two lists is never verified whole, and without the mark it cannot go on
//! with a shard down either: it is refused (64) where it can see the first list's records,
//! and unavailable (69) where it cannot. A shard that stops later keeps names on the other
//! shards working, since the mark is already there.
//!
//! What it does not cover: two lists that share no shard but some store (a shard of one
//! store against a shard of three that includes it) are the same mistake as two quorums over
//! different stores without sharding; rule (1) catches them whenever the shared store
//! answers. Plain `--store` clients are kept off a store that serves a shard list by `plain`.
//! And records are only as durable as the store (a Redis without
//! persistence forgets them on restart, as it forgets fences).

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::timeout;

use super::{Shards, hash};
use crate::exit::{Error, ExitCode};
use crate::store::{StoreError, TagWrite};

/// Marks a record written after the whole list was verified.
const VERIFIED: &str = "/verified";

/// One store's answer: its shard, its name, and its record (or why there is none).
pub(super) struct Answer {
    pub(super) shard: usize,
    pub(super) store: String,
    pub(super) record: Result<String, StoreError>,
}

impl Shards {
    /// This list's fingerprint (see `hash::fingerprint`).
    pub fn fingerprint(&self) -> String {
        hash::fingerprint(&self.labels())
    }

    fn labels(&self) -> Vec<String> {
        self.shards.iter().map(|s| s.label.clone()).collect()
    }

    /// The stores and namespace this client locks on, as `run` gives them to its command
    /// (see `hash::store_id`).
    pub fn store_id(&self) -> String {
        hash::store_id(&self.namespace, &self.labels())
    }

    /// Read (and on first use write) every store's record, each within its store timeout;
    /// on each shard, the answers of a majority decide (see `Engine::shard_lists`).
    pub(super) async fn records(&self, write: TagWrite, tag: &str) -> Vec<Answer> {
        let each = self.shards.iter().map(|s| s.engine.shard_lists(tag, write));
        join_all(each)
            .await
            .into_iter()
            .enumerate()
            .flat_map(|(i, records)| {
                let stores = self.shards[i].engine.stores();
                records
                    .into_iter()
                    .zip(stores)
                    .map(move |(record, st)| Answer {
                        shard: i,
                        store: st.describe().to_string(),
                        record,
                    })
            })
            .collect()
    }

    /// Whether this client may grant under its shard list (see the module's comment). A
    /// no-op without `--shard`.
    pub async fn check_list(&self) -> Result<(), Error> {
        if !self.sharded {
            return Ok(());
        }
        let fp = self.fingerprint();
        let answers = self.records(TagWrite::IfAbsent, &fp).await;
        let ours = |r: &str| r.strip_suffix(VERIFIED).unwrap_or(r) == fp;
        if let Some(a) = answers
            .iter()
            .find(|a| a.record.as_ref().is_ok_and(|r| !ours(r)))
        {
            return Err(self.differs(a, &fp));
        }
        let unverified: Vec<usize> = (0..self.shards.len())
            .filter(|&i| {
                let carry = answers
                    .iter()
                    .filter(|a| a.shard == i && a.record.is_ok())
                    .count();
                carry < self.shards[i].engine.majority()
            })
            .collect();
        if unverified.is_empty() {
            let fresh = answers
                .iter()
                .filter(|a| a.record.as_ref().is_ok_and(|r| !r.ends_with(VERIFIED)));
            if fresh.clone().next().is_some() {
                // The whole list is verified: mark it, so a shard down later does not stop
                // the others. Best effort: a store that misses it is marked next time.
                self.records(TagWrite::Replace, &format!("{fp}{VERIFIED}"))
                    .await;
            }
            return Ok(());
        }
        if answers
            .iter()
            .any(|a| a.record.as_ref().is_ok_and(|r| r.ends_with(VERIFIED)))
        {
            return Ok(());
        }
        let i = unverified[0];
        let why: Vec<String> = answers
            .iter()
            .filter(|a| a.shard == i)
            .filter_map(|a| a.record.as_ref().err().map(|e| format!("{}: {e}", a.store)))
            .collect();
        Err(Error::new(
            ExitCode::Unavailable,
            format!(
                "cannot check the shard list on shard {} of {} ({}): {}; a new shard list must \
                 be checked on every shard once before its first lock",
                i + 1,
                self.shards.len(),
                self.shards[i].label,
                why.join("; ")
            ),
        ))
    }

    fn differs(&self, a: &Answer, fp: &str) -> Error {
        let theirs = a.record.as_deref().unwrap_or_default();
        let theirs = theirs.strip_suffix(VERIFIED).unwrap_or(theirs);
        Error::usage(format!(
            "shard {} of {} ({}) belongs to another shard list: {} keeps fingerprint {}, this \
             list's is {fp}; give every client the same shards (in any order), or to change \
             the list stop every client of the old one, then run `dlock shards adopt` with the \
             new list",
            a.shard + 1,
            self.shards.len(),
            self.shards[a.shard].label,
            a.store,
            crate::output::printable(theirs),
        ))
    }

    /// `dlock shards adopt`: make this list the one every store of it serves, refusing while
    /// any store holds a lock in the namespace or does not answer. Returns how many stores
    /// were written.
    pub async fn adopt(&self, limit: Duration) -> Result<usize, Error> {
        let listed = join_all(self.shards.iter().flat_map(|s| {
            s.engine.stores().iter().map(move |st| async move {
                let r = timeout(limit, st.list(""))
                    .await
                    .unwrap_or_else(|_| Err(StoreError::unavailable("no answer in time")));
                (st.describe().to_string(), r)
            })
        }))
        .await;
        for (store, r) in &listed {
            match r {
                Err(e) => {
                    return Err(Error::new(
                        ExitCode::Unavailable,
                        format!(
                            "{store}: {e}; every store of the new list must answer to adopt it"
                        ),
                    ));
                }
                Ok(held) if !held.is_empty() => {
                    return Err(Error::new(
                        ExitCode::NotAcquired,
                        format!(
                            "{} is held on {store}; the shard list changes only while no lock \
                             is held: stop every client of the old list, let their locks go, \
                             and try again",
                            crate::output::printable(&held[0].name)
                        ),
                    ));
                }
                Ok(_) => {}
            }
        }
        let tag = format!("{}{VERIFIED}", self.fingerprint());
        let written = self.records(TagWrite::Replace, &tag).await;
        if let Some(a) = written.iter().find(|a| a.record.is_err()) {
            let e = a.record.as_ref().err().map(|e| e.to_string());
            return Err(Error::new(
                ExitCode::Unavailable,
                format!(
                    "{}: {}; the list is adopted on some stores only: run adopt again",
                    a.store,
                    e.unwrap_or_default()
                ),
            ));
        }
        Ok(written.len())
    }
}
