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
//! **Fences** are the record's counter, floored (when a grant reads it, through the rules'
//! `Rows::floor`) at the server's timestamp of the record's last write (`fence_floor`): the
//! next grant passes it even when the record says less. A record deleted, a bucket deleted
//! and created again or a server come back empty starts above every fence it handed out
//! before. `inspect` shows the counter itself: the last fence handed out.
//!
//! **Waiting** (`wake`): a release rings one waiter's key, which the waiter subscribes to,
//! and hands it the lock in its own write where the rules allow (`handover`). A waiter's key
//! is read only when its life decides something (`unread`).
//!
//! **Several names** (`multilock`) are several records, written with the lease keys as one
//! atomic batch (`allow_atomic`, NATS 2.12: all of it or nothing, every message with its
//! expected revision), so a grant killed at any moment holds all its names or none, as on
//! the other stores. On a bucket without atomic batches each record is written in name
//! order, and a grant whose later write loses deletes the holder keys it wrote, so the
//! records it already wrote name a dead holder (the others drop it): safe, but a dlock killed
//! between two writes leaves those names held until its ttl.

mod bucket;
mod doctor;
mod handover;
mod keys;
mod record;
mod setup;
mod unread;
mod wake;
mod write;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::future::join_all;

use super::record::rules::{Rows, Rules, WaiterRow};
use super::record::{Backend, Decide, RecordStore};
use super::server::ServerUrl;
use super::{
    Acquire, ErrorKind, Granted, Health, HealthQuery, Listener, Recall, StoreError, StoreResult,
    TagWrite, fence_floor,
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
    /// For each name, the holder and waiter keys its record named after this process last
    /// wrote it: the next operation on it (a release after a grant) reads them beside the
    /// record instead of after it, one round trip less.
    seen: Mutex<HashMap<String, Vec<String>>>,
    /// For a waiter's subscriptions (`wake`).
    client: async_nats::Client,
    /// What releases handed this process's waiters (`handover`).
    handovers: Arc<handover::Handovers>,
}

/// One name as an operation read it.
struct Loaded {
    /// The record's revision (0: never written), what its write expects.
    rev: u64,
    /// Whether there is a record (not a delete or nothing).
    present: bool,
    /// A fence the next grant must pass (`Rows::floor`): the clock floor.
    floor: i64,
    record: Record,
    holders: HashMap<String, Got>,
    waiters: HashMap<String, Got>,
    /// The waiters whose keys were not read (see `unread`): presumed live.
    unread: HashSet<String>,
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
        let js = setup::context(client.clone(), timeout);
        // Checked in the background: the first read goes out beside the check.
        let bucket = Bucket::new(js, options.bucket, options.create).await?;
        Ok(RecordStore::new(Nats {
            bucket: Mutex::new(Arc::new(bucket)),
            keys: Keys::new(namespace),
            create: options.create,
            desc: url.to_string(),
            seen: Mutex::default(),
            client,
            handovers: Arc::default(),
        }))
    }

    fn bucket(&self) -> Arc<Bucket> {
        self.bucket.lock().unwrap().clone()
    }

    /// Create the bucket again after it was deleted (with `?create=1`).
    async fn recreate(&self) -> StoreResult<()> {
        let b = self.bucket();
        let kv = setup::ensure(&b.js, &b.name, true).await?;
        let again = Bucket::ready(b.js.clone(), kv, b.name.clone()).await?;
        *self.bucket.lock().unwrap() = Arc::new(again);
        Ok(())
    }

    /// A name's record and the keys of its holders, and of the waiters this process guessed
    /// it names (the others are read only if they decide something: `unread`), with the
    /// fence floor a grant must pass (a release may grant too: `Rules::hand_over`); the
    /// record itself keeps the last fence handed out, as `inspect` must show it.
    async fn load(&self, b: &Bucket, name: &str) -> StoreResult<Loaded> {
        let guess = self.seen.lock().unwrap().get(name).cloned();
        let guess = guess.unwrap_or_default();
        let early = join_all(guess.iter().map(|k| b.get_owned(k.clone())));
        let key = self.keys.record(name);
        let (got, early) = tokio::join!(b.get(&key), early);
        let got = got?;
        // A key read beside the record, before it, is taken only if it was live: a holder's
        // key is written before the record that names it, so one read live before the
        // record was live when the record was read, or has expired since (a renewal over
        // it then loses). One read gone may be a grant's key not written yet: read again.
        let early: HashMap<String, Got> = guess
            .into_iter()
            .zip(early)
            .filter_map(|(k, g)| g.ok().filter(|g| g.live).map(|g| (k, g)))
            .collect();
        let (record, present) = if got.live {
            let r = serde_json::from_slice::<Record>(&got.value).map_err(|e| {
                StoreError::protocol(format!("the record of {name:?} is not dlock's: {e}"))
            })?;
            (r, true)
        } else {
            (Record::empty(), false)
        };
        // The floor by the server's clock at the record's last write (see the module doc),
        // for the rules to pass (`Rows::floor`): the record keeps the last fence handed out.
        let floor = match present {
            true => i64::try_from(fence_floor(got.micros)).unwrap_or(i64::MAX),
            false => 0,
        };
        // Every holder's key: a holder decides every grant.
        let holder = |t: &str| self.keys.holder(name, t);
        let gets = record
            .holders
            .iter()
            .map(|h| b.get_unless(holder(&h.token), early.get(&holder(&h.token)).cloned()));
        let holders = record
            .holders
            .iter()
            .zip(join_all(gets).await)
            .map(|(h, g)| g.map(|g| (h.token.clone(), g)))
            .collect::<StoreResult<HashMap<_, _>>>()?;
        // A waiter's key read live beside the record is known; the others are read only if
        // the rules ask about them (see `unread`).
        let (mut waiters, mut unread) = (HashMap::new(), HashSet::new());
        for e in &record.waiters {
            if let Some(g) = early.get(&self.keys.waiter(&e.token)) {
                waiters.insert(e.token.clone(), g.clone());
            } else {
                unread.insert(e.token.clone());
            }
        }
        Ok(Loaded {
            rev: got.rev,
            present,
            floor,
            record,
            holders,
            waiters,
            unread,
        })
    }

    /// Read the keys of the presumed waiters the rules asked about, into every name that
    /// names them.
    async fn read_waiters(
        &self,
        b: &Bucket,
        loaded: &mut [Loaded],
        asked: &[String],
    ) -> StoreResult<()> {
        let gets = asked.iter().map(|t| b.get_owned(self.keys.waiter(t)));
        for (token, got) in asked.iter().zip(join_all(gets).await) {
            let got = got?;
            for l in loaded.iter_mut() {
                if l.unread.remove(token) {
                    l.waiters.insert(token.clone(), got.clone());
                }
            }
        }
        Ok(())
    }

    /// The rows the rules decide on at `now` (see `Record::rows`): a presumed waiter as one
    /// whose key was just written.
    fn rows_of(names: &[String], loaded: &[Loaded], now: i64) -> Vec<Rows> {
        names
            .iter()
            .zip(loaded)
            .map(|(n, l)| {
                let left = |m: &HashMap<String, Got>, t: &str| m.get(t).and_then(Got::left_ms);
                let waiter = |t: &str| match l.unread.contains(t) {
                    true => Some(WAITER_TTL.as_millis() as i64),
                    false => left(&l.waiters, t),
                };
                let rows = l.record.rows(n, now, |t| left(&l.holders, t), waiter);
                Rows {
                    floor: l.floor,
                    ..rows
                }
            })
            .collect()
    }

    /// One try: read, decide, write.
    async fn once(
        &self,
        b: &Bucket,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<Step> {
        let sent = tokio::time::Instant::now();
        let mut loaded = join_all(names.iter().map(|n| self.load(b, n)))
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
        let (rows, decision) = loop {
            let mut rows = Self::rows_of(names, &loaded, now);
            let presumed = loaded.iter().flat_map(|l| l.unread.iter().cloned());
            let (decision, asked) = unread::deciding(presumed.collect(), || decide(now, &mut rows));
            if asked.is_empty() {
                break (rows, decision);
            }
            // It depends on a waiter presumed live: decide again, knowing.
            self.read_waiters(b, &mut loaded, &asked).await?;
        };
        let step = self
            .apply(b, names, &loaded, &rows, (now, sent), &decision.writes)
            .await?;
        if let Step::Done = step {
            let mut seen = self.seen.lock().unwrap();
            for (n, r) in names.iter().zip(&rows) {
                let holders = r.holders.iter().map(|h| self.keys.holder(n, &h.token));
                let waiters = r.waiters.iter().map(|w| self.keys.waiter(&w.token));
                seen.insert(n.clone(), holders.chain(waiters).collect());
            }
        }
        Ok(step)
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
            hand_over: true,
            ..Rules::SQL
        }
    }

    /// One name only: a handover is of one name (`handover`). What the release's record
    /// names is this process's guess for its next read of it (see `seen`).
    fn handed(&self, req: &Acquire) -> Option<(Granted, Recall)> {
        let [name] = req.names.as_slice() else {
            return None;
        };
        let (granted, recall, next) = self.handovers.take(&req.token, req.ttl)?;
        let mut named = vec![self.keys.holder(name, &req.token)];
        named.extend(next.map(|t| self.keys.waiter(&t)));
        self.seen.lock().unwrap().insert(name.clone(), named);
        Some((granted, recall))
    }

    fn done(&self, token: &str) {
        self.handovers.forget(token);
    }

    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>> {
        let b = self.bucket();
        let own = b.subject(&self.keys.waiter(token));
        let kv = &b.checked().await?.kv;
        let told = (token.to_string(), self.handovers.clone());
        let bell = wake::Bell::open(&self.client, kv, own, told).await;
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

    /// A waiter read is judged by its key (its row's expiry); one presumed live is noted, so
    /// that the decision is made again once its key is read (see `unread`).
    fn waiter_alive(&self, row: &WaiterRow) -> bool {
        unread::ask(&row.token);
        true
    }
}
