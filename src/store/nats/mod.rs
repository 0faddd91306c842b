//! The NATS JetStream KV store: `nats://[user:pass@]host:4222[,host...]/BUCKET[?create=1]`
//! (`tls://` for TLS; a token as `nats://:TOKEN@host`, `?creds_file=`).
//!
//! **One record per name, written with its expected revision.** A name's key (`NS.r.NAME`,
//! never expiring) holds its fence, how the last lease ended, its holders and its waiters:
//! the SQL stores' rows, decided on by the same rules (`record::rules`, through `record::Backend`).
//! An operation reads the record, decides, and writes it back with
//! `Nats-Expected-Last-Subject-Sequence` set to the revision it read: of two writers, one
//! wins and the other reads again. The grant rule exists once, in Rust.
//!
//! **Expiry is the server's, never this host's clock.** The server has no "now" a client can
//! judge times by, but it expires messages itself. So each holder has a key of its own
//! (`NS.h.NAME.TOKEN`) written with `Nats-TTL` (the ttl rounded up to whole seconds: the
//! server's expiry comes after the holder's own deadline), and a holder is live exactly while
//! its key is: the record says who holds, the key's existence (judged by the server) says
//! whether it still does. A grant writes its holder key before the record that names it, so
//! no one ever reads a record naming a holder whose key was not yet written; a key once gone
//! never comes back (a renewal writes it only with the revision it read live, and expiry
//! leaves a marker with a newer one), so a holder judged dead stays dead. Every renewal
//! carries `Nats-TTL` (a write without it would make the key immortal). A renewal then
//! checks that the record still names it (an `unlock --force` in between). Waiters' keys
//! (`NS.w.TOKEN`) live the same way on a 2 s TTL. The times the rules see are this host's
//! estimate of what each key has left, used for `inspect` and a waiter's next look only.
//!
//! **Fences** are the record's counter, floored (when a grant reads it) at the server's
//! timestamp of the record's last write (`fence_floor`): a record deleted, a bucket deleted
//! and created again or a server come back empty starts above every fence it handed out
//! before. `inspect` shows the counter itself: the last fence handed out.
//!
//! **Waiting** is a watch (`wake`): a release rings one waiter's key, an expiry shows as the
//! server's marker on a holder key.
//!
//! **Several names** (`multilock`) are several records: each is written in name order, and
//! a grant whose later write loses deletes the holder keys it wrote, so the records it
//! already wrote name a dead holder (the others drop it). Until then those names look held
//! to others (they wait: safe); the grant itself is never given, so no one enters with part
//! of its names. This is not one atomic write, unlike the other stores' multi-name grants:
//! it is safe, and under contention on several names a waiter may wait a little more.

mod bucket;
mod doctor;
mod keys;
mod record;
mod setup;
mod wake;
mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::future::join_all;

use super::record::rules::{Rows, Rules};
use super::record::{Backend, Decide, RecordStore};
use super::server::ServerUrl;
use super::{
    ErrorKind, Health, HealthQuery, Listener, StoreError, StoreResult, TagWrite, fence_floor,
};
use bucket::{Bucket, Got, Wrote};
use keys::Keys;
use record::Record;

pub type NatsStore = RecordStore<Nats>;

pub struct Nats {
    /// Replaced when `?create=1` creates the bucket again (it was deleted under us).
    bucket: Mutex<Arc<Bucket>>,
    keys: Keys,
    create: bool,
    desc: String,
}

/// One name as an operation read it.
struct Loaded {
    /// The record's revision (0: never written), what its write expects.
    rev: u64,
    /// Whether there is a record (not a delete or nothing).
    present: bool,
    record: Record,
    holders: HashMap<String, Got>,
    waiters: HashMap<String, Got>,
}

/// How one try of an operation ended.
enum Step {
    Done,
    /// Someone wrote first: read again.
    Again,
}

impl Nats {
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<NatsStore> {
        let mut url = url.clone();
        let (client, options) = setup::connect(&mut url, timeout).await?;
        let js = setup::context(client, timeout);
        let kv = setup::ensure(&js, &options.bucket, options.create).await?;
        Ok(RecordStore::new(Nats {
            bucket: Mutex::new(Arc::new(Bucket {
                js,
                kv,
                name: options.bucket,
            })),
            keys: Keys::new(namespace),
            create: options.create,
            desc: url.to_string(),
        }))
    }

    fn bucket(&self) -> Arc<Bucket> {
        self.bucket.lock().unwrap().clone()
    }

    /// Create the bucket again after it was deleted (with `?create=1`).
    async fn recreate(&self) -> StoreResult<()> {
        let b = self.bucket();
        let kv = setup::ensure(&b.js, &b.name, true).await?;
        *self.bucket.lock().unwrap() = Arc::new(Bucket {
            js: b.js.clone(),
            kv,
            name: b.name.clone(),
        });
        Ok(())
    }

    /// A name's record and the keys of everyone it names, read in parallel. With `floor` (an
    /// operation that may grant), its fence counter is read floored (see the module doc); the
    /// others see the last fence handed out, as `inspect` must show it.
    async fn load(&self, b: &Bucket, name: &str, floor: bool) -> StoreResult<Loaded> {
        let got = b.get(&self.keys.record(name)).await?;
        let (mut record, present) = if got.live {
            let r = serde_json::from_slice::<Record>(&got.value).map_err(|e| {
                StoreError::protocol(format!("the record of {name:?} is not dlock's: {e}"))
            })?;
            (r, true)
        } else {
            (Record::empty(), false)
        };
        if present && floor {
            // The floor by the server's clock at the record's last write: see the module doc.
            let floor = i64::try_from(fence_floor(got.micros)).unwrap_or(i64::MAX);
            record.fence = record.fence.max(floor);
        }
        let keys = |entries: &[record::Entry], key: &dyn Fn(&str) -> String| {
            let tokens: Vec<String> = entries.iter().map(|e| e.token.clone()).collect();
            let gets = tokens
                .iter()
                .map(|t| b.get_owned(key(t)))
                .collect::<Vec<_>>();
            (tokens, join_all(gets))
        };
        let (ht, hg) = keys(&record.holders, &|t| self.keys.holder(name, t));
        let (wt, wg) = keys(&record.waiters, &|t| self.keys.waiter(t));
        let (hg, wg) = tokio::join!(hg, wg);
        let zip = |t: Vec<String>, g: Vec<StoreResult<Got>>| {
            t.into_iter()
                .zip(g)
                .map(|(t, g)| g.map(|g| (t, g)))
                .collect::<StoreResult<HashMap<_, _>>>()
        };
        Ok(Loaded {
            rev: got.rev,
            present,
            record,
            holders: zip(ht, hg)?,
            waiters: zip(wt, wg)?,
        })
    }

    /// One try: read, decide, write.
    async fn once(
        &self,
        b: &Bucket,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<Step> {
        let loaded = join_all(names.iter().map(|n| self.load(b, n, create)))
            .await
            .into_iter()
            .collect::<StoreResult<Vec<_>>>()?;
        if create && loaded.iter().any(|l| !l.present) {
            // A name's first use (or its record deleted): an empty record first, so that its
            // fence floors at the server's clock of that write.
            let empty = Bytes::from(serde_json::to_vec(&Record::empty()).expect("json"));
            for (n, l) in names.iter().zip(&loaded).filter(|(_, l)| !l.present) {
                b.put(&self.keys.record(n), empty.clone(), Some(l.rev), None)
                    .await?;
            }
            return Ok(Step::Again);
        }
        let now = super::wall_ms();
        let mut rows: Vec<Rows> = names
            .iter()
            .zip(&loaded)
            .map(|(n, l)| {
                let left = |m: &HashMap<String, Got>, t: &str| m.get(t).and_then(Got::left_ms);
                l.record
                    .rows(n, now, |t| left(&l.holders, t), |t| left(&l.waiters, t))
            })
            .collect();
        let decision = decide(now, &mut rows);
        self.apply(b, names, &loaded, &rows, now, &decision.writes)
            .await
    }
}

/// A waiter's key lives as long as a SQL store's waiter row (`record::Rules::waiter_ttl`).
const WAITER_TTL: Duration = Duration::from_secs(2);

#[async_trait]
impl Backend for Nats {
    fn describe(&self) -> &str {
        &self.desc
    }

    async fn transact(
        &self,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        let mut tries = 0u32;
        loop {
            tries += 1;
            let b = self.bucket();
            match self.once(&b, names, create, &mut *decide).await {
                Ok(Step::Done) => return Ok(()),
                Ok(Step::Again) if tries < 500 => {
                    // Contenders that lost must not come back in step.
                    let spread = 1 + u64::from(tries.min(20));
                    let pause = crate::sys::random_below(spread as usize * 500) as u64;
                    tokio::time::sleep(Duration::from_micros(pause)).await;
                }
                Ok(Step::Again) => {
                    return Err(StoreError::unavailable(
                        "too many clients writing the same lock at once; try again",
                    ));
                }
                // The bucket is gone (deleted, or a server come back empty), or another
                // client just created it again under our old handle: set it up again.
                Err(e) if self.create && e.kind() == ErrorKind::Config && tries < 3 => {
                    self.recreate().await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A bucket can lose its records (deleted, a server come back with an empty data dir):
    /// each record keeps the engine's marker, so that a quorum member that lost its holders
    /// abstains while another remembers a live lease (`engine::amnesia`), and a renewal that
    /// finds the record gone says the lease was forgotten. Waiters as the SQL stores'.
    fn rules(&self) -> Rules {
        Rules {
            forgetful: true,
            ..Rules::SQL
        }
    }

    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>> {
        let b = self.bucket();
        let own = self.keys.waiter(token);
        let bell = wake::Bell::open(&b.kv, own, self.keys.holders_everywhere()).await;
        Ok(Box::new(bell))
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        let (b, key) = (self.bucket(), self.keys.shards());
        loop {
            let got = b.get(&key).await?;
            let current = if got.live {
                String::from_utf8_lossy(&got.value).into_owned()
            } else {
                String::new()
            };
            let expect = match write {
                TagWrite::Read => return Ok(current),
                TagWrite::IfAbsent if got.live => return Ok(current),
                TagWrite::IfAbsent => Some(got.rev),
                TagWrite::Replace => None,
            };
            let body = Bytes::from(tag.to_string());
            if let Wrote::Done(_) = b.put(&key, body, expect, None).await? {
                return Ok(tag.to_string());
            }
        }
    }

    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let b = self.bucket();
        let keys = b.subjects(&self.keys.records()).await?;
        Ok(keys
            .iter()
            .filter_map(|k| self.keys.name_of(k))
            .filter(|n| n.starts_with(prefix))
            .collect())
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        doctor::health(&self.bucket(), &self.keys, query).await
    }

    /// Not needed: an unheard grant's holder key expires by the server's clock, and the usual
    /// release (a read, then a write) finds it.
    async fn release_unheard(&self, _names: &[String], _token: &str) -> Option<bool> {
        None
    }
}
