//! Where dlock keeps its state in etcd, and what it stores there (no I/O here; what a read
//! shows, and the rules decided from it, are in `view`).
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

use serde::{Deserialize, Serialize};

use crate::store::Previous;

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

    /// The namespace's shard-list record: outside `dlock/`, so no range of lock keys holds it.
    pub fn shard_list(&self) -> String {
        format!(
            "dlock-shards/{}",
            &self.base["dlock/".len()..self.base.len() - 1]
        )
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

/// The value of an entry key. The stored JSON keeps one- and two-letter keys (the serde
/// names): every dlock version on a cluster reads the same entries, and they are small.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Mode code (`Mode::code`).
    #[serde(rename = "m")]
    pub mode: String,
    /// Granted (else queued).
    #[serde(rename = "h", default)]
    pub held: bool,
    /// The fence offset the grant used: fence = mod revision + offset ...
    #[serde(rename = "o", default)]
    pub offset: u64,
    /// ... unless the key was rewritten since (a renewal that changed the ttl), which keeps it here.
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// The etcd lease's granted ttl, seconds: a renewal asking for another ttl moves the key.
    #[serde(rename = "t", default)]
    pub lease_ttl: i64,
    /// Every name the lease was granted with: its etcd lease may be revoked only when all of
    /// them are released.
    #[serde(rename = "n", default)]
    pub names: Vec<String>,
    /// Holder metadata (JSON text).
    #[serde(default)]
    pub meta: String,
    /// A waiter's spare holder lease and its ttl (0: none): the lease a release hands the
    /// lock over on (see `Queue::heir`).
    #[serde(rename = "s", default, skip_serializing_if = "is_zero")]
    pub spare: i64,
    #[serde(rename = "st", default, skip_serializing_if = "is_zero")]
    pub spare_ttl: i64,
    /// On an entry a release handed the lock to: the waiters queued right behind it, as that
    /// release knew them, so that its own release may hand over without reading first.
    #[serde(rename = "q", default, skip_serializing_if = "Vec::is_empty")]
    pub behind: Vec<Behind>,
    /// On an entry a release handed the lock to: how the lease before it ended
    /// (`Previous::text`), which the heir learns from its watch without reading the record.
    /// "" from a version before it, whose handovers were all clean releases.
    #[serde(rename = "p", default, skip_serializing_if = "String::is_empty")]
    pub handed_previous: String,
}

/// A waiter as a release passes it on (see `Entry::behind`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Behind {
    #[serde(rename = "k")]
    pub token: String,
    /// The create and mod revisions of its entry key.
    #[serde(rename = "c")]
    pub create: i64,
    #[serde(rename = "v")]
    pub modrev: i64,
    #[serde(rename = "e")]
    pub entry: Entry,
}

/// How many waiters a handover passes on: enough for a run of handovers, little enough to
/// keep the entry small (each carries its metadata).
pub const PASSED_ON: usize = 4;

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The value of a record key (one-letter keys in the stored JSON, as for `Entry`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// Token of the last lease granted ("" before the first grant).
    #[serde(rename = "t", default)]
    pub holder: String,
    /// How the lease before that one ended, as that grant saw it.
    #[serde(rename = "p", default)]
    pub previous: String,
    /// That lease was released after its job ended cleanly. Kept beside `ended` for the
    /// versions before it, which read only this flag (a failed end reads as expired there).
    #[serde(rename = "r", default)]
    pub released: bool,
    /// How that lease ended, if it was given back (`Previous::text`; "" while it is held, or
    /// when it went without a release). A withdrawn attempt writes here what it was told
    /// itself, so that its successor is told the same.
    #[serde(rename = "e", default, skip_serializing_if = "String::is_empty")]
    pub ended: String,
    /// Fence offset (raised by `raise_fence`, never lowered).
    #[serde(rename = "o", default)]
    pub offset: u64,
    /// The last fence, when known outright; a grant cannot write its own revision, so after a
    /// grant this is empty and the fence is the record's mod revision + offset.
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// The record a grant of `holder` writes (a handover writes it for the heir), telling how
/// the lease before it ended.
pub fn granted_record(holder: &str, previous: Previous, offset: u64) -> Record {
    Record {
        holder: holder.to_string(),
        previous: previous.text(),
        released: false,
        ended: String::new(),
        offset,
        fence: None,
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
    fn lease_ttl_rounds_up_to_whole_seconds() {
        use std::time::Duration;
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1500)), 2);
        assert_eq!(lease_secs(Duration::from_secs(30)), 30);
        assert_eq!(lease_secs(Duration::ZERO), 1);
    }

    /// The stored JSON is shared with every other dlock version on the same cluster: the
    /// short keys are the format, whatever the Rust fields are called.
    #[test]
    fn the_stored_json_keeps_its_keys() {
        let waiter = Entry {
            mode: "x".into(),
            lease_ttl: 5,
            names: vec!["a".into()],
            meta: "{}".into(),
            spare: 7,
            spare_ttl: 30,
            ..Entry::default()
        };
        let held = Entry {
            held: true,
            offset: 2,
            fence: Some(9),
            behind: vec![Behind {
                token: "tok".into(),
                create: 3,
                modrev: 4,
                entry: waiter.clone(),
            }],
            ..waiter.clone()
        };
        let waiter_json = r#"{"m":"x","h":false,"o":0,"t":5,"n":["a"],"meta":"{}","s":7,"st":30}"#;
        assert_eq!(String::from_utf8(encode(&waiter)).unwrap(), waiter_json);
        assert_eq!(
            String::from_utf8(encode(&held)).unwrap(),
            format!(
                r#"{{"m":"x","h":true,"o":2,"f":9,"t":5,"n":["a"],"meta":"{{}}","s":7,"st":30,"q":[{{"k":"tok","c":3,"v":4,"e":{waiter_json}}}]}}"#
            )
        );
        let record = Record {
            holder: "tok".into(),
            previous: "released".into(),
            released: true,
            ended: String::new(),
            offset: 1,
            fence: Some(8),
        };
        assert_eq!(
            String::from_utf8(encode(&record)).unwrap(),
            r#"{"t":"tok","p":"released","r":true,"o":1,"f":8}"#
        );
        assert_eq!(
            String::from_utf8(encode(&Record::default())).unwrap(),
            r#"{"t":"","p":"","r":false,"o":0}"#
        );
    }
}
