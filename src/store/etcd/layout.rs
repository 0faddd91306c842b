//! Where dlock keeps its state in etcd, and the rules it reads from that state (no I/O here).
//!
//! Per lock name, under `dlock/<namespace>/<name>/`:
//! - `#q/<token>`: one entry per lease or waiter, attached to its owner's etcd lease, so it
//!   goes when the owner stops renewing. Entries queue by create revision, and an entry may
//!   hold when the mode rules admit it among the entries *ahead of it* only: nobody overtakes
//!   an earlier waiter (FIFO), and the holders are always a prefix of the queue.
//! - `#r`: the record, without a lease: who was granted last, whether that lease was released
//!   cleanly, and the fence offset `raise_fence` sets. It outlives every lease, which is how a
//!   grant learns that its predecessor expired although etcd deletes expired keys silently.
//!
//! `#` cannot appear in a lock name (see `crate::names`), so one name's keys never fall in the
//! range of another name, however the names nest with `/`.
//!
//! Fences are the revision of the grant transaction plus the record's offset. Revisions rise
//! with every write to the cluster, so the fences of one name rise with every grant in grant
//! order, whatever the mode, and the offset (0 unless a quorum raised it) lets the bakery rule
//! of the engine lift them above what other stores handed out.

use etcd_client::KeyValue;
use serde::{Deserialize, Serialize};

use crate::store::{Mode, Previous};

pub struct Layout {
    /// `dlock/<namespace>/`
    base: String,
}

impl Layout {
    pub fn new(namespace: &str) -> Layout {
        Layout {
            base: format!("dlock/{namespace}/"),
        }
    }

    /// Every key of the namespace whose name starts with `prefix`.
    pub fn names_from(&self, prefix: &str) -> String {
        format!("{}{prefix}", self.base)
    }

    /// The range holding one name's entries (a prefix).
    pub fn queue(&self, name: &str) -> String {
        format!("{}{name}/#q/", self.base)
    }

    pub fn entry(&self, name: &str, token: &str) -> String {
        format!("{}{token}", self.queue(name))
    }

    pub fn record(&self, name: &str) -> String {
        format!("{}{name}/#r", self.base)
    }

    /// The lock name an entry key belongs to.
    pub fn name_of_entry(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?.strip_prefix(&self.base)?;
        let (name, _) = key.split_once("/#q/")?;
        Some(name.to_string())
    }
}

/// The value of an entry key.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Mode code (`Mode::code`).
    pub m: String,
    /// Granted (else queued).
    #[serde(default)]
    pub h: bool,
    /// The fence offset the grant used: fence = mod revision + o ...
    #[serde(default)]
    pub o: u64,
    /// ... unless the key was rewritten since (a renewal that changed the ttl), which keeps it here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f: Option<u64>,
    /// The etcd lease's granted ttl, seconds: a renewal asking for another ttl moves the key.
    #[serde(default)]
    pub t: i64,
    /// Every name the lease was granted with: its etcd lease may be revoked only when all of
    /// them are released.
    #[serde(default)]
    pub n: Vec<String>,
    /// Holder metadata (JSON text).
    #[serde(default)]
    pub meta: String,
    /// A waiter's spare holder lease and its ttl (0: none): the lease a release hands the
    /// lock over on (see `Queue::heir`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub s: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub st: i64,
    /// On an entry a release handed the lock to: the waiters queued right behind it, as that
    /// release knew them, so that its own release may hand over without reading first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub q: Vec<Behind>,
}

/// A waiter as a release passes it on (see `Entry::q`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Behind {
    /// Token, create and mod revision.
    pub k: String,
    pub c: i64,
    pub v: i64,
    pub e: Entry,
}

/// How many waiters a handover passes on: enough for a run of handovers, little enough to
/// keep the entry small (each carries its metadata).
pub const PASSED_ON: usize = 4;

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The value of a record key.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// Token of the last lease granted ("" before the first grant).
    #[serde(default)]
    pub t: String,
    /// How the lease before that one ended, as that grant saw it.
    #[serde(default)]
    pub p: String,
    /// That lease was released by its owner.
    #[serde(default)]
    pub r: bool,
    /// Fence offset (raised by `raise_fence`, never lowered).
    #[serde(default)]
    pub o: u64,
    /// The last fence, when known outright; a grant cannot write its own revision, so after a
    /// grant this is empty and the fence is the record's mod revision + o.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f: Option<u64>,
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// One entry as read.
#[derive(Clone, Debug)]
pub struct Seen {
    pub key: Vec<u8>,
    pub token: String,
    pub entry: Entry,
    pub create: i64,
    pub modrev: i64,
    pub lease: i64,
}

impl Seen {
    pub fn from_kv(kv: &KeyValue) -> Option<Seen> {
        let key = kv.key().to_vec();
        let token = std::str::from_utf8(&key)
            .ok()?
            .rsplit('/')
            .next()?
            .to_string();
        Some(Seen {
            token,
            entry: serde_json::from_slice(kv.value()).ok()?,
            create: kv.create_revision(),
            modrev: kv.mod_revision(),
            lease: kv.lease(),
            key,
        })
    }

    /// An entry this version cannot read counts as exclusive: it blocks rather than admits.
    pub fn mode(&self) -> Mode {
        Mode::from_code(&self.entry.m).unwrap_or(Mode::Exclusive)
    }

    /// This waiter as a release passes it on to the next holder.
    pub fn behind(&self) -> Behind {
        Behind {
            k: self.token.clone(),
            c: self.create,
            v: self.modrev,
            e: Entry {
                q: Vec::new(),
                ..self.entry.clone()
            },
        }
    }

    /// A waiter as passed on: its key is `key`; its lease is unknown (0), and only its spare
    /// counts.
    pub fn passed_on(key: String, b: &Behind) -> Seen {
        Seen {
            key: key.into_bytes(),
            token: b.k.clone(),
            entry: b.e.clone(),
            create: b.c,
            modrev: b.v,
            lease: 0,
        }
    }

    pub fn fence(&self) -> u64 {
        self.entry
            .f
            .unwrap_or((self.modrev.max(0) as u64).saturating_add(self.entry.o))
    }
}

/// What a waiter watches: the one key whose deletion may admit it, or (limit slots, where
/// any holder leaving makes room) the whole queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    Key(Vec<u8>),
    Queue(Vec<u8>),
}

/// One name's entries (in create order) and record, as read at one revision.
#[derive(Clone, Debug, Default)]
pub struct Queue {
    pub entries: Vec<Seen>,
    /// The record and its mod revision.
    pub record: Option<(Record, i64)>,
}

impl Queue {
    pub fn new(entries: &[KeyValue], record: Option<&KeyValue>) -> Queue {
        let mut entries: Vec<Seen> = entries.iter().filter_map(Seen::from_kv).collect();
        entries.sort_by_key(|e| e.create);
        let record = record.map(|kv| {
            (
                serde_json::from_slice(kv.value()).unwrap_or_default(),
                kv.mod_revision(),
            )
        });
        Queue { entries, record }
    }

    pub fn find(&self, token: &str) -> Option<&Seen> {
        self.entries.iter().find(|e| e.token == token)
    }

    /// The entries ahead of `token`'s, or all of them if it has none (a new entry goes last).
    pub fn ahead(&self, token: &str) -> &[Seen] {
        let end = self
            .entries
            .iter()
            .position(|e| e.token == token)
            .unwrap_or(self.entries.len());
        &self.entries[..end]
    }

    pub fn admits(&self, token: &str, mode: Mode) -> bool {
        mode.admits(self.ahead(token).iter().map(Seen::mode))
    }

    /// The nearest entry ahead that keeps `token` out, or None if nothing does.
    pub fn blocker(&self, token: &str, mode: Mode, queue_range: &str) -> Option<Blocker> {
        let ahead = self.ahead(token);
        let incompatible = |e: &&Seen| {
            !matches!(
                (mode, e.mode()),
                (Mode::Shared, Mode::Shared) | (Mode::Limit(_), Mode::Limit(_))
            )
        };
        if let Some(e) = ahead.iter().rev().find(incompatible) {
            return Some(Blocker::Key(e.key.clone()));
        }
        match mode {
            Mode::Limit(k) if ahead.len() >= k as usize => {
                Some(Blocker::Queue(queue_range.as_bytes().to_vec()))
            }
            _ => None,
        }
    }

    /// How the lease before a new grant ended, as far as the record tells.
    pub fn previous(&self) -> Previous {
        let Some((rec, _)) = &self.record else {
            return Previous::None;
        };
        if rec.t.is_empty() {
            return Previous::None;
        }
        if rec.r {
            return Previous::Released;
        }
        // The last grant is still held (a sharer, or `token` itself when the answer to its
        // grant was lost and it tries again): the answer is the one that grant got.
        if self.entries.iter().any(|e| e.token == rec.t && e.entry.h) {
            return Previous::parse(&rec.p);
        }
        Previous::Expired
    }

    /// The last fence this store handed out on the name (0: never).
    pub fn last_fence(&self) -> u64 {
        match &self.record {
            None => 0,
            Some((rec, modrev)) => match rec.f {
                Some(f) => f,
                None if rec.t.is_empty() => 0,
                None => ((*modrev).max(0) as u64).saturating_add(rec.o),
            },
        }
    }

    pub fn offset(&self) -> u64 {
        self.record.as_ref().map_or(0, |(r, _)| r.o)
    }

    /// The waiter `token`'s release may hand the lock to in the same transaction: the entry
    /// right behind it, when `token` is the last exclusive grant of this one name and that
    /// entry is an exclusive waiter for this name alone with a spare lease. Nothing can
    /// queue ahead of an entry that exists, so the heir is admitted once `token` is gone.
    pub fn heir(&self, token: &str) -> Option<&Seen> {
        let at = self.entries.iter().position(|e| e.token == token)?;
        let (own, next) = (&self.entries[at], self.entries.get(at + 1)?);
        let single = |e: &Seen| e.mode() == Mode::Exclusive && e.entry.n.len() == 1;
        let last_grant = self.record.as_ref().is_some_and(|(r, _)| r.t == token);
        (own.entry.h && single(own) && last_grant && !next.entry.h && single(next))
            .then_some(next)
            .filter(|n| n.entry.s != 0 && n.entry.st > 0)
    }
}

/// The record a grant of `holder` writes (a handover writes it for the heir), telling how
/// the lease before it ended.
pub fn granted_record(holder: &str, previous: Previous, offset: u64) -> Record {
    Record {
        t: holder.to_string(),
        p: previous.as_str().into(),
        r: false,
        o: offset,
        f: None,
    }
}

/// A lease's ttl in whole seconds, rounded up: the client's deadline assumes the store keeps
/// the lease at least `ttl`.
pub fn lease_secs(ttl: std::time::Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.clamp(1, i64::MAX as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(token: &str, mode: Mode, held: bool, create: i64) -> Seen {
        Seen {
            key: format!("dlock/ns/n/#q/{token}").into_bytes(),
            token: token.into(),
            entry: Entry {
                m: mode.code(),
                h: held,
                ..Entry::default()
            },
            create,
            modrev: create,
            lease: 1,
        }
    }

    fn queue(entries: Vec<Seen>) -> Queue {
        Queue {
            entries,
            record: None,
        }
    }

    #[test]
    fn keys_of_nested_names_do_not_overlap() {
        let l = Layout::new("ns");
        assert_eq!(l.entry("a", "t"), "dlock/ns/a/#q/t");
        assert!(!l.entry("a/b", "t").starts_with(&l.queue("a")));
        assert!(!l.record("a/b").starts_with(&l.queue("a")));
        assert_eq!(
            l.name_of_entry(b"dlock/ns/a/b/#q/t").as_deref(),
            Some("a/b")
        );
        assert_eq!(l.name_of_entry(b"dlock/ns/a/#r"), None);
        assert_eq!(l.name_of_entry(b"dlock/other/a/#q/t"), None);
    }

    #[test]
    fn exclusive_waits_for_everyone_ahead_and_watches_only_its_predecessor() {
        let q = queue(vec![
            seen("a", Mode::Exclusive, true, 5),
            seen("b", Mode::Exclusive, false, 7),
            seen("c", Mode::Exclusive, false, 9),
        ]);
        assert!(q.admits("a", Mode::Exclusive));
        assert!(!q.admits("b", Mode::Exclusive));
        let r = "dlock/ns/n/#q/";
        assert_eq!(
            q.blocker("c", Mode::Exclusive, r),
            Some(Blocker::Key(b"dlock/ns/n/#q/b".to_vec()))
        );
        // A newcomer goes behind every waiter.
        assert!(!q.admits("new", Mode::Exclusive));
        assert_eq!(q.blocker("a", Mode::Exclusive, r), None);
    }

    #[test]
    fn sharers_join_sharers_but_not_past_a_writer() {
        let q = queue(vec![
            seen("s1", Mode::Shared, true, 1),
            seen("s2", Mode::Shared, false, 2),
            seen("x", Mode::Exclusive, false, 3),
            seen("s3", Mode::Shared, false, 4),
        ]);
        assert!(q.admits("s2", Mode::Shared));
        assert!(!q.admits("x", Mode::Exclusive));
        assert!(!q.admits("s3", Mode::Shared));
        assert_eq!(
            q.blocker("s3", Mode::Shared, "r"),
            Some(Blocker::Key(b"dlock/ns/n/#q/x".to_vec()))
        );
    }

    #[test]
    fn limit_counts_the_slots_ahead() {
        let q = queue(vec![
            seen("a", Mode::Limit(2), true, 1),
            seen("b", Mode::Limit(2), true, 2),
            seen("c", Mode::Limit(2), false, 3),
        ]);
        assert!(q.admits("b", Mode::Limit(2)));
        assert!(!q.admits("c", Mode::Limit(2)));
        assert_eq!(
            q.blocker("c", Mode::Limit(2), "r"),
            Some(Blocker::Queue(b"r".to_vec()))
        );
    }

    #[test]
    fn a_release_hands_over_only_to_a_lone_exclusive_waiter_right_behind() {
        let with_spare = |mut e: Seen| {
            e.entry.n = vec!["n".into()];
            e.entry.s = 42;
            e.entry.st = 30;
            e
        };
        let mut q = queue(vec![
            with_spare(seen("a", Mode::Exclusive, true, 5)),
            with_spare(seen("b", Mode::Exclusive, false, 7)),
            with_spare(seen("c", Mode::Exclusive, false, 9)),
        ]);
        // Not the last grant on record (say the answer came from a force): no hand-over.
        assert!(q.heir("a").is_none());
        q.record = Some((
            Record {
                t: "a".into(),
                ..Record::default()
            },
            5,
        ));
        assert_eq!(q.heir("a").map(|e| e.token.as_str()), Some("b"));
        // A waiter cannot hand over, nor can the last entry.
        assert!(q.heir("b").is_none());
        assert!(q.heir("c").is_none());
        // A waiter without a spare lease, for several names, or shared: it takes the lock
        // itself.
        q.entries[1].entry.s = 0;
        assert!(q.heir("a").is_none());
        q.entries[1].entry.s = 42;
        q.entries[1].entry.n.push("m".into());
        assert!(q.heir("a").is_none());
        q.entries[1].entry.n.pop();
        q.entries[1].entry.m = Mode::Shared.code();
        assert!(q.heir("a").is_none());
        // A sharer holding hands over to nobody.
        q.entries[1].entry.m = Mode::Exclusive.code();
        q.entries[0].entry.m = Mode::Shared.code();
        assert!(q.heir("a").is_none());
    }

    #[test]
    fn previous_comes_from_the_record() {
        let mut q = queue(vec![]);
        assert_eq!(q.previous(), Previous::None);
        q.record = Some((
            Record {
                t: "old".into(),
                ..Record::default()
            },
            10,
        ));
        assert_eq!(q.previous(), Previous::Expired);
        assert_eq!(q.last_fence(), 10);
        q.record.as_mut().unwrap().0.r = true;
        q.record.as_mut().unwrap().0.f = Some(10);
        assert_eq!(q.previous(), Previous::Released);
        // A sharer still holding passes on what it was told.
        q.record = Some((
            Record {
                t: "s1".into(),
                p: "released".into(),
                o: 100,
                ..Record::default()
            },
            12,
        ));
        q.entries.push(seen("s1", Mode::Shared, true, 12));
        assert_eq!(q.previous(), Previous::Released);
        assert_eq!(q.last_fence(), 112);
    }

    #[test]
    fn lease_ttl_rounds_up_to_whole_seconds() {
        use std::time::Duration;
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1500)), 2);
        assert_eq!(lease_secs(Duration::from_secs(30)), 30);
        assert_eq!(lease_secs(Duration::ZERO), 1);
    }
}
