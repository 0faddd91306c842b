//! The records' transaction (`record::Backend::transact`): read each name's record with its
//! version and the server's `Date`, decide by the shared rules (`record::rules`), and write each
//! changed record back on condition that its version is still the one read (or that it is still
//! absent). Several changed records go as one atomic request where the store has one
//! (DynamoDB); elsewhere a lost race on the first write reads again, and one on a later name
//! undoes the names already written.
//!
//! A release after a grant (or renewal) by this same process skips the read: it decides on the
//! record as this process wrote it, and writes on condition that it is still that version
//! (`Records::as_written`). So does a waiter's grant when a release on this host rang it with
//! the record that release wrote (`Records::rung`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;

use super::written::{FRESH, Written};
use super::{Cond, Object, Objects, Put, record};
use crate::store::record::rules::{Rows, Rules, Write};
use crate::store::record::{Backend, Decide};
use crate::store::{Health, HealthQuery, Listener, StoreError, StoreResult, TagWrite};

/// Added to every expiry a grant or renewal writes: the `Date` it is reckoned from is the
/// server's clock cut to the whole second, up to 1 s before the lease really started (see the
/// module doc of `records`).
pub const PAD_MS: i64 = 1000;

/// Reads and writes of one transaction lost to other writers, at most, before it gives up.
const TRIES: u32 = 24;

pub struct Records<O> {
    pub objects: O,
    /// Every key of this namespace starts with it: `PREFIX/NAMESPACE/`.
    pub base: String,
    pub describe: String,
    /// Each record as this process last wrote it (one-name transactions only), or as a
    /// release on this host rang it to this waiter (`rung`).
    pub written: Mutex<HashMap<String, Written>>,
}

/// One name as read: its rows, and the version to write it back with (none: absent).
struct Read {
    rows: Rows,
    version: Option<String>,
}

/// What a transaction wrote: each record's new version (where known), the records, and the
/// `Date` and the sending of the reads they were decided on.
struct Wrote<'a> {
    versions: Vec<(usize, String)>,
    after: &'a [Rows],
    date_ms: i64,
    sent: Duration,
}

impl<O: Objects> Records<O> {
    pub fn lock_key(&self, name: &str) -> String {
        format!("{}lock/{name}", self.base)
    }

    fn decode(&self, name: &str, obj: Object) -> StoreResult<Read> {
        Ok(match obj.body {
            Some((body, version)) => Read {
                rows: record::decode(name, &body)?,
                version: Some(version),
            },
            None => Read {
                rows: Rows {
                    name: name.to_string(),
                    ..Rows::default()
                },
                version: None,
            },
        })
    }

    /// Every name's record, and the server's clock: the earliest `Date` of the reads (the
    /// reads began after the caller's attempt did) and the latest, in ms.
    async fn read(&self, names: &[String]) -> StoreResult<(Vec<Read>, i64, i64)> {
        let keys: Vec<String> = names.iter().map(|n| self.lock_key(n)).collect();
        let objs = join_all(keys.iter().map(|k| self.objects.get(k))).await;
        let (mut reads, mut early, mut late) = (Vec::new(), i64::MAX, 0);
        for (name, obj) in names.iter().zip(objs) {
            let obj = obj?;
            early = early.min(obj.date_ms);
            late = late.max(obj.date_ms);
            reads.push(self.decode(name, obj)?);
        }
        Ok((reads, early, late))
    }

    /// Write the changed records: in one atomic request where there are several and the store
    /// has one for them (`Objects::put_all`), else in name order. `Ok(None)`: a record had
    /// changed since it was read; none of this attempt's writes stand. Else the new version
    /// of each record written one by one (an atomic request tells none).
    async fn write(
        &self,
        reads: &[Read],
        after: &[Rows],
        writer: &str,
    ) -> StoreResult<Option<Vec<(usize, String)>>> {
        let changed: Vec<usize> = (0..reads.len())
            .filter(|&i| changes(&reads[i], &after[i]))
            .collect();
        if changed.len() > 1 && changed.len() <= self.objects.atomic_limit() {
            let puts = changed
                .iter()
                .map(|&i| Put {
                    key: self.lock_key(&after[i].name),
                    body: record::encode(&after[i], writer),
                    cond: cond(&reads[i]),
                })
                .collect();
            return Ok(self.objects.put_all(puts).await?.then(Vec::new));
        }
        let mut done: Vec<(usize, String)> = Vec::new();
        for i in changed {
            let key = self.lock_key(&after[i].name);
            let body = record::encode(&after[i], writer);
            match self.objects.put(&key, body, cond(&reads[i])).await? {
                Some(version) => done.push((i, version)),
                None => {
                    self.undo(reads, &done, writer).await?;
                    return Ok(None);
                }
            }
        }
        Ok(Some(done))
    }

    /// Keep what a one-name transaction wrote (see `Written`); forget the names otherwise.
    fn remember(&self, names: &[String], wrote: Option<Wrote<'_>>) {
        let mut written = self.written.lock().unwrap();
        for n in names {
            written.remove(n);
        }
        let Some(wrote) = wrote else {
            return;
        };
        if let ([name], [(0, version)]) = (names, wrote.versions.as_slice()) {
            let w = Written {
                rows: wrote.after[0].clone(),
                version: version.clone(),
                date_ms: wrote.date_ms,
                sent: wrote.sent,
            };
            written.insert(name.clone(), w);
        }
    }

    /// The ring for `name`'s next waiter on this host after a release here: the record as
    /// this process just wrote it (`Written::to_ring`), where it knows it.
    pub fn ring(&self, name: &str) -> Option<Vec<u8>> {
        let written = self.written.lock().unwrap();
        written.get(name)?.to_ring(&self.lock_key(name))
    }

    /// A ring a waiter of `name` heard: its next attempt decides on the record it carries
    /// (`as_written`), where the ring is one for this record from this host's clock.
    pub fn rung(&self, name: &str, ring: &[u8]) {
        if let Some(w) = Written::from_ring(ring, &self.lock_key(name), name) {
            self.written.lock().unwrap().insert(name.to_string(), w);
        }
    }

    /// A decision made on the record as last written (`Written`) and written on condition
    /// that it is still that version: one request instead of a read and a write. Taken only
    /// where its decision is the one a fresh read would give: one name, a record known so,
    /// every holder in it live even at the latest the server's clock can read now
    /// (`Written::now_at_most`), and a decision that writes something. A release or a renewal
    /// (not `create`) must write no holder row. A grant (`create`: after a release on this
    /// host rang its waiter with the record) reckons the lease's end from that latest bound,
    /// so the stored end is at or after the one a read's `Date` would give; its record's
    /// clock must be `FRESH`. `Ok(false)`: not taken, or the record had changed: the caller
    /// reads and decides as usual.
    async fn as_written(
        &self,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<bool> {
        let [name] = names else {
            return Ok(false);
        };
        let Some(w) = self.written.lock().unwrap().remove(name) else {
            return Ok(false);
        };
        let now = w.now_at_most();
        if w.rows.holders.iter().any(|h| h.expires <= now) || (create && w.age() > FRESH) {
            return Ok(false);
        }
        let mut rows = vec![w.rows.clone()];
        let decision = if create {
            // The fence floor from the `Date` itself, never from the bound: a floor ahead of
            // the server's clock would be above the next one a read gives, and a store that
            // forgot in between would then hand out a lower fence.
            rows[0].floor = rows[0].floor.max(floor(w.date_ms) - 1);
            // Every expiry written gets `PAD_MS` on top (`apply`): from the bound, not past it.
            decide(now - PAD_MS, &mut rows)
        } else {
            decide(now, &mut rows)
        };
        let holder = |x: &Write| matches!(x, Write::PutHolder { .. });
        if decision.writes.is_empty() || (!create && decision.writes.iter().any(holder)) {
            return Ok(false);
        }
        let reads = [Read {
            rows: w.rows,
            version: Some(w.version),
        }];
        let after = settled(&reads, &rows, &decision.writes);
        let wrote = self.write(&reads, &after, writer(&decision.writes)).await;
        let versions = wrote.as_ref().ok().cloned().flatten();
        // Decided on no fresher clock than the one the record was written by.
        let (date_ms, sent) = (w.date_ms, w.sent);
        self.remember(
            names,
            versions.map(|versions| Wrote {
                versions,
                after: &after,
                date_ms,
                sent,
            }),
        );
        Ok(wrote?.is_some())
    }

    /// Put back the records written so far (a multi-name grant that lost on a later name).
    /// Only this transaction's own write can carry the version it got, so an undo that fails
    /// means a force or an expiry judged elsewhere moved on: the engine's release after the
    /// error removes whatever of the token is left.
    async fn undo(
        &self,
        reads: &[Read],
        done: &[(usize, String)],
        writer: &str,
    ) -> StoreResult<()> {
        for (i, version) in done.iter().rev() {
            let read = &reads[*i];
            let key = self.lock_key(&read.rows.name);
            let body = record::encode(&read.rows, writer);
            if self
                .objects
                .put(&key, body, Cond::Match(version))
                .await?
                .is_none()
            {
                return Err(StoreError::unavailable(format!(
                    "a partial grant on {:?} could not be undone: it changed meanwhile",
                    read.rows.name
                )));
            }
        }
        Ok(())
    }
}

/// Whether `after` differs from the record as read (an absent one reads as empty).
fn changes(read: &Read, after: &Rows) -> bool {
    match read.version {
        Some(_) => !record::same(&read.rows, after),
        None => !record::same(&Rows::default(), &anonymous(after)),
    }
}

/// The condition to write a record back on: still the version read, or still absent.
fn cond(read: &Read) -> Cond<'_> {
    read.version.as_deref().map_or(Cond::Absent, Cond::Match)
}

/// A name's rows without its name (to compare with an empty record).
fn anonymous(rows: &Rows) -> Rows {
    Rows {
        name: String::new(),
        ..rows.clone()
    }
}

/// The rows after `writes`, applied to the rows as read: the rules' decision, with every
/// written expiry padded (`PAD_MS`). Waiter rows and wake-ups have no place in a record.
pub fn apply(rows: &mut [Rows], writes: &[Write]) {
    let find = |rows: &mut [Rows], name: &str| rows.iter().position(|r| r.name == name);
    for w in writes {
        match w {
            Write::Record {
                name,
                fence,
                previous,
                ..
            } => {
                if let Some(i) = find(rows, name) {
                    rows[i].fence = *fence;
                    rows[i].previous = previous.clone();
                }
            }
            Write::PutHolder { name, row } => {
                if let Some(i) = find(rows, name) {
                    let r = &mut rows[i];
                    r.holders.retain(|h| h.token != row.token);
                    let mut row = row.clone();
                    row.expires += PAD_MS;
                    r.holders.push(row);
                }
            }
            Write::DeleteHolder { name, token } => {
                if let Some(i) = find(rows, name) {
                    rows[i].holders.retain(|h| &h.token != token);
                }
            }
            Write::PutWaiter { .. } | Write::DeleteWaiter { .. } | Write::Wake { .. } => {}
        }
    }
}

/// The records to write: as read, with the decision's writes applied (`apply`) and the
/// engine's marker where the rules set it (`rules::mark`; never cleared).
fn settled(reads: &[Read], decided: &[Rows], writes: &[Write]) -> Vec<Rows> {
    let mut after: Vec<Rows> = reads.iter().map(|r| r.rows.clone()).collect();
    apply(&mut after, writes);
    for (a, r) in after.iter_mut().zip(decided) {
        a.marked |= r.marked;
    }
    after
}

/// The token a decision writes for, if any: its records name that owner as their writer.
fn writer(writes: &[Write]) -> &str {
    writes
        .iter()
        .find_map(|w| match w {
            Write::PutHolder { row, .. } => Some(row.token.as_str()),
            Write::DeleteHolder { token, .. } => Some(token.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

/// The fence floor of the server's clock `date_ms`, or of this host's if it is ahead.
fn floor(date_ms: i64) -> i64 {
    let clock = date_ms.max(crate::store::wall_ms()).max(0) as u64;
    crate::store::fence_floor(clock * 1000) as i64
}

/// A pause before reading again after a lost race: 5 ms doubling to 200 ms, jittered, so
/// contenders that collided do not collide again in step.
fn backoff(try_no: u32) -> Duration {
    let ms = (5u64 << try_no.min(6)).min(200);
    Duration::from_millis(ms).mul_f64(0.5 + crate::sys::random_f64())
}

#[async_trait]
impl<O: Objects> Backend for Records<O> {
    fn describe(&self) -> &str {
        &self.describe
    }

    /// `create`: a grant or a fence raise. Those lift each counter to the fence floor of the
    /// server's clock (or this host's, whichever is ahead), so a record deleted, or a bucket or
    /// table emptied or recreated, never hands out a fence it handed out before.
    async fn transact(
        &self,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        if self.as_written(names, create, &mut *decide).await? {
            return Ok(());
        }
        for try_no in 0..TRIES {
            let sent = crate::sys::monotonic();
            let (reads, early, late) = self.read(names).await?;
            let mut rows: Vec<Rows> = reads.iter().map(|r| r.rows.clone()).collect();
            // What is written starts from the records as read (`settled`): a lifted counter
            // is written only with what the rules decided (a grant), never by a busy look.
            if create {
                // The rules' own floor (`Rows::floor`): the next grant passes it.
                for r in &mut rows {
                    r.floor = r.floor.max(floor(late) - 1);
                }
            }
            let decision = decide(early, &mut rows);
            let after = settled(&reads, &rows, &decision.writes);
            let wrote = self.write(&reads, &after, writer(&decision.writes)).await;
            let versions = wrote.as_ref().ok().cloned().flatten();
            self.remember(
                names,
                versions.map(|versions| Wrote {
                    versions,
                    after: &after,
                    date_ms: late,
                    sent,
                }),
            );
            if wrote?.is_some() {
                return Ok(());
            }
            tokio::time::sleep(backoff(try_no)).await;
        }
        Err(StoreError::unavailable(format!(
            "the records of {names:?} kept changing under this client ({TRIES} tries)"
        )))
    }

    /// A bucket or table can lose its records (deleted and created again, a server without
    /// persistence restarted): each record keeps the engine's marker, so that a quorum member
    /// that lost its holders abstains while another remembers a live lease
    /// (`engine::amnesia`), and a renewal that finds the record gone says the lease was
    /// forgotten. Fences are floored at the clocks already (`transact`).
    fn rules(&self) -> Rules {
        Rules {
            forgetful: true,
            ..Rules::SQL
        }
    }

    /// Waiters poll, paced by their ttl (`ObjectStore::listen`); one that came here instead
    /// looks at the slowest pace, once a second.
    async fn listen(&self, _token: &str) -> StoreResult<Box<dyn Listener>> {
        Ok(Box::new(super::poll::Poll::new(Duration::from_secs(1))))
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        let key = format!("{}shard-list", self.base);
        loop {
            let obj = self.objects.get(&key).await?;
            let (now, etag) = match obj.body {
                Some((body, etag)) => (String::from_utf8_lossy(&body).into_owned(), Some(etag)),
                None => (String::new(), None),
            };
            let put = match write {
                TagWrite::Read => return Ok(now),
                TagWrite::IfAbsent if etag.is_some() => return Ok(now),
                TagWrite::Replace if now == tag => return Ok(now),
                _ => etag.as_deref().map_or(Cond::Absent, Cond::Match),
            };
            if self
                .objects
                .put(&key, tag.as_bytes().to_vec(), put)
                .await?
                .is_some()
            {
                return Ok(tag.to_string());
            }
        }
    }

    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let under = self.lock_key("");
        let keys = self.objects.list(&format!("{under}{prefix}")).await?;
        Ok(keys
            .into_iter()
            .filter_map(|k| k.strip_prefix(&under).map(str::to_string))
            .collect())
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.objects
            .health(&format!("{}shard-list", self.base), query)
            .await
    }

    /// Each request stands alone: there is no open transaction to end blind.
    async fn release_unheard(&self, _names: &[String], _token: &str) -> Option<bool> {
        None
    }
}
