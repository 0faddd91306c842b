//! One lock name's queue and record as a read shows them at one revision, and what dlock
//! decides from them without I/O: who may hold (the queue rule of `crate::store::queue`),
//! what a waiter watches, whom a release may hand the lock to, how the lease before ended,
//! and the last fence.

use etcd_client::KeyValue;

use super::layout::{Behind, Entry, Record};
use crate::store::queue::{self, Turn};
use crate::store::{Mode, Previous};

/// One entry as read.
#[derive(Clone, Debug)]
pub struct Seen {
    pub key: Vec<u8>,
    /// The token its key ends in ("" for an entry that could not be decoded).
    pub token: String,
    pub entry: Entry,
    /// The key's create revision: its place in the queue.
    pub create: i64,
    /// The key's mod revision: a grant's fence is reckoned from it.
    pub modrev: i64,
    /// The etcd lease the key is attached to.
    pub lease: i64,
}

impl Seen {
    /// An entry this version can decode, or `None`.
    pub fn from_kv(kv: &KeyValue) -> Option<Seen> {
        let revisions = [kv.create_revision(), kv.mod_revision(), kv.lease()];
        Seen::decode(kv.key(), kv.value(), revisions)
    }

    /// An entry as the queue rule reads it: one whose value this version cannot decode blocks
    /// as an exclusive holder (see `crate::store::queue`), never counts as absent.
    pub fn read(kv: &KeyValue) -> Seen {
        let revisions = [kv.create_revision(), kv.mod_revision(), kv.lease()];
        Seen::decode(kv.key(), kv.value(), revisions)
            .unwrap_or_else(|| Seen::undecodable(kv.key(), revisions))
    }

    /// `[create revision, mod revision, lease]` of the key.
    fn decode(key: &[u8], value: &[u8], [create, modrev, lease]: [i64; 3]) -> Option<Seen> {
        let token = std::str::from_utf8(key).ok()?.rsplit('/').next()?;
        Some(Seen {
            key: key.to_vec(),
            token: token.to_string(),
            entry: serde_json::from_slice(value).ok()?,
            create,
            modrev,
            lease,
        })
    }

    /// An entry that could not be decoded, as a holder of no known mode (exclusive to the
    /// queue rule). Its token is left empty, so that no waiter takes it for its own.
    fn undecodable(key: &[u8], [create, modrev, lease]: [i64; 3]) -> Seen {
        Seen {
            key: key.to_vec(),
            token: String::new(),
            entry: Entry {
                held: true,
                ..Entry::default()
            },
            create,
            modrev,
            lease,
        }
    }

    /// The entry's mode; `None` when this version cannot read it (the queue rule then counts
    /// it as exclusive).
    pub fn known_mode(&self) -> Option<Mode> {
        Mode::from_code(&self.entry.mode)
    }

    /// The mode to show for the entry: one this version cannot read shows as exclusive, the
    /// way the queue rule counts it.
    pub fn mode(&self) -> Mode {
        self.known_mode().unwrap_or(Mode::Exclusive)
    }

    /// This waiter as a release passes it on to the next holder.
    pub fn behind(&self) -> Behind {
        Behind {
            token: self.token.clone(),
            create: self.create,
            modrev: self.modrev,
            entry: Entry {
                behind: Vec::new(),
                ..self.entry.clone()
            },
        }
    }

    /// A waiter as passed on: its key is `key`; its lease is unknown (0), and only its spare
    /// counts.
    pub fn passed_on(key: String, b: &Behind) -> Seen {
        Seen {
            key: key.into_bytes(),
            token: b.token.clone(),
            entry: b.entry.clone(),
            create: b.create,
            modrev: b.modrev,
            lease: 0,
        }
    }

    pub fn fence(&self) -> u64 {
        self.entry
            .fence
            .unwrap_or((self.modrev.max(0) as u64).saturating_add(self.entry.offset))
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
        let mut entries: Vec<Seen> = entries.iter().map(Seen::read).collect();
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

    /// Where `token` stands under the queue rule, given the entries ahead of it.
    fn turn(&self, token: &str, mode: Mode) -> Turn<'_, Seen> {
        let ahead: Vec<(&Seen, Option<Mode>)> = self
            .ahead(token)
            .iter()
            .map(|e| (e, e.known_mode()))
            .collect();
        match queue::turn(mode, &ahead) {
            Turn::Hold => Turn::Hold,
            Turn::After(e) => Turn::After(*e),
            Turn::Slots(es) => Turn::Slots(es.into_iter().copied().collect()),
        }
    }

    pub fn admits(&self, token: &str, mode: Mode) -> bool {
        matches!(self.turn(token, mode), Turn::Hold)
    }

    /// What keeps `token` out, or None if nothing does: the one key whose deletion may admit
    /// it, or for limit slots, where any holder leaving makes room, the whole queue (one
    /// watch on the range instead of one per slot).
    pub fn blocker(&self, token: &str, mode: Mode, queue_range: &str) -> Option<Blocker> {
        match self.turn(token, mode) {
            Turn::Hold => None,
            Turn::After(e) => Some(Blocker::Key(e.key.clone())),
            Turn::Slots(_) => Some(Blocker::Queue(queue_range.as_bytes().to_vec())),
        }
    }

    /// How the lease before a new grant ended, as far as the record tells.
    pub fn previous(&self) -> Previous {
        let Some((rec, _)) = &self.record else {
            return Previous::None;
        };
        if rec.holder.is_empty() {
            return Previous::None;
        }
        if !rec.ended.is_empty() {
            return Previous::parse(&rec.ended);
        }
        if rec.released {
            return Previous::Released;
        }
        // The last grant is still held (a sharer, or `token` itself when the answer to its
        // grant was lost and it tries again): the answer is the one that grant got.
        if self
            .entries
            .iter()
            .any(|e| e.token == rec.holder && e.entry.held)
        {
            return Previous::parse(&rec.previous);
        }
        Previous::Expired
    }

    /// The last fence this store handed out on the name (0: never).
    pub fn last_fence(&self) -> u64 {
        match &self.record {
            None => 0,
            Some((rec, modrev)) => match rec.fence {
                Some(f) => f,
                None if rec.holder.is_empty() => 0,
                None => ((*modrev).max(0) as u64).saturating_add(rec.offset),
            },
        }
    }

    pub fn offset(&self) -> u64 {
        self.record.as_ref().map_or(0, |(r, _)| r.offset)
    }

    /// The waiter `token`'s release may hand the lock to in the same transaction: the entry
    /// right behind it, when `token` is the last exclusive grant of this one name and that
    /// entry is an exclusive waiter for this name alone with a spare lease. Nothing can
    /// queue ahead of an entry that exists, so the heir is admitted once `token` is gone.
    pub fn heir(&self, token: &str) -> Option<&Seen> {
        let at = self.entries.iter().position(|e| e.token == token)?;
        let (own, next) = (&self.entries[at], self.entries.get(at + 1)?);
        let single = |e: &Seen| e.mode() == Mode::Exclusive && e.entry.names.len() == 1;
        let last_grant = self.record.as_ref().is_some_and(|(r, _)| r.holder == token);
        (own.entry.held && single(own) && last_grant && !next.entry.held && single(next))
            .then_some(next)
            .filter(|n| n.entry.spare != 0 && n.entry.spare_ttl > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(token: &str, mode: Mode, held: bool, create: i64) -> Seen {
        Seen {
            key: format!("dlock/ns/n/#q/{token}").into_bytes(),
            token: token.into(),
            entry: Entry {
                mode: mode.code(),
                held,
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
    fn an_undecodable_entry_blocks_as_an_exclusive_holder() {
        let damaged = Seen::decode(b"dlock/ns/n/#q/d", b"{oops", [3, 3, 1])
            .unwrap_or_else(|| Seen::undecodable(b"dlock/ns/n/#q/d", [3, 3, 1]));
        assert!(damaged.entry.held && damaged.token.is_empty());
        let q = queue(vec![damaged, seen("s", Mode::Shared, false, 4)]);
        for mode in [Mode::Exclusive, Mode::Shared, Mode::Limit(3)] {
            assert!(!q.admits("new", mode), "{mode}");
            assert!(!q.admits("s", mode), "{mode}");
            assert_eq!(
                q.blocker("s", mode, "r"),
                Some(Blocker::Key(b"dlock/ns/n/#q/d".to_vec())),
                "{mode}"
            );
        }
        // A release hands over to nobody behind it, and nobody takes it for its own entry.
        assert!(q.find("s").is_some_and(|e| !e.entry.held));
        assert!(q.heir("").is_none());
    }

    #[test]
    fn a_release_hands_over_only_to_a_lone_exclusive_waiter_right_behind() {
        let with_spare = |mut e: Seen| {
            e.entry.names = vec!["n".into()];
            e.entry.spare = 42;
            e.entry.spare_ttl = 30;
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
                holder: "a".into(),
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
        q.entries[1].entry.spare = 0;
        assert!(q.heir("a").is_none());
        q.entries[1].entry.spare = 42;
        q.entries[1].entry.names.push("m".into());
        assert!(q.heir("a").is_none());
        q.entries[1].entry.names.pop();
        q.entries[1].entry.mode = Mode::Shared.code();
        assert!(q.heir("a").is_none());
        // A sharer holding hands over to nobody.
        q.entries[1].entry.mode = Mode::Exclusive.code();
        q.entries[0].entry.mode = Mode::Shared.code();
        assert!(q.heir("a").is_none());
    }

    #[test]
    fn previous_comes_from_the_record() {
        let mut q = queue(vec![]);
        assert_eq!(q.previous(), Previous::None);
        q.record = Some((
            Record {
                holder: "old".into(),
                ..Record::default()
            },
            10,
        ));
        assert_eq!(q.previous(), Previous::Expired);
        assert_eq!(q.last_fence(), 10);
        q.record.as_mut().unwrap().0.released = true;
        q.record.as_mut().unwrap().0.fence = Some(10);
        assert_eq!(q.previous(), Previous::Released);
        // A sharer still holding passes on what it was told.
        q.record = Some((
            Record {
                holder: "s1".into(),
                previous: "released".into(),
                offset: 100,
                ..Record::default()
            },
            12,
        ));
        q.entries.push(seen("s1", Mode::Shared, true, 12));
        assert_eq!(q.previous(), Previous::Released);
        assert_eq!(q.last_fence(), 112);
    }
}
