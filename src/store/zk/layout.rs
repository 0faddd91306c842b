//! What dlock keeps in ZooKeeper, and how to read it back, without any I/O (the queue rule
//! itself is `crate::store::queue`, shared with etcd).
//!
//! Per namespace one base node, `{chroot}/dlock/{namespace}`; touching it (an empty setData)
//! is how we read the server's clock, since liveness of a detached lease must never be judged
//! by the client's wall clock. Per lock name one persistent node under it. Its data is the
//! name's record (no ttl): the last fence, how the last lease ended, and who holds it now. Its
//! children are the queue and the detached holders:
//!
//! - `q-{mode}-{token}-{seq}`: ephemeral sequential. A waiter, or a `run` holder: it lives
//!   exactly as long as its owner's session, and the sequence number is the FIFO order.
//! - `t-{mode}-{token}`: persistent with a TTL. A `lock` lease, which must outlive its
//!   process; alive while its mtime plus the ttl in its data is ahead of the server's clock
//!   (ZooKeeper deletes TTL nodes lazily, so existing is not enough).
//!
//! Entry data is `{ttl_ms}|{holder metadata}`, like the Redis store's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::store::Mode;

/// Where one store's nodes live.
#[derive(Clone, Debug)]
pub struct Paths {
    pub base: String,
}

impl Paths {
    pub fn new(chroot: &str, namespace: &str) -> Paths {
        Paths {
            base: format!("{}/dlock/{namespace}", chroot.trim_end_matches('/')),
        }
    }

    /// The node of a lock name (its record, and the parent of its entries).
    pub fn name(&self, name: &str) -> String {
        format!("{}/{}", self.base, encode(name))
    }

    pub fn child(&self, name: &str, node: &str) -> String {
        format!("{}/{}/{node}", self.base, encode(name))
    }

    /// The path a sequential queue entry is created at; ZooKeeper appends the sequence.
    pub fn queue_prefix(&self, name: &str, mode: Mode, token: &str) -> String {
        self.child(name, &format!("q-{}-{token}-", mode.code()))
    }

    pub fn held_node(mode: Mode, token: &str) -> String {
        format!("t-{}-{token}", mode.code())
    }
}

/// Lock names may hold `/`, which would make ZooKeeper nest them; `%` is not allowed in names,
/// so escaping `/` as `%2F` is unambiguous.
pub fn encode(name: &str) -> String {
    name.replace('/', "%2F")
}

pub fn decode(node: &str) -> String {
    node.replace("%2F", "/")
}

/// A child of a lock name's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pub node: String,
    /// `Some(seq)` for a queue entry, `None` for a detached holder.
    pub seq: Option<i64>,
    pub mode: Mode,
    pub token: String,
}

impl Child {
    pub fn parse(node: &str) -> Option<Child> {
        let (kind, rest) = node.split_once('-')?;
        let (mode, rest) = rest.split_once('-')?;
        let mode = Mode::from_code(mode)?;
        let (token, seq) = match kind {
            "q" => {
                let (token, seq) = rest.split_once('-')?;
                (token, Some(seq.parse().ok()?))
            }
            "t" => (rest, None),
            _ => return None,
        };
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Child {
            node: node.to_string(),
            seq,
            mode,
            token: token.to_string(),
        })
    }

    pub fn queued(&self) -> bool {
        self.seq.is_some()
    }
}

/// The children dlock understands, queue entries first in FIFO order, then detached holders.
pub fn parse_children(nodes: &[String]) -> Vec<Child> {
    let mut out: Vec<Child> = nodes.iter().filter_map(|n| Child::parse(n)).collect();
    out.sort_by_key(|c| (c.seq.is_none(), c.seq));
    out
}

/// The children this version cannot read (damaged, or of a later version). The queue rule
/// counts each as an exclusive holder ahead of everyone: it blocks rather than admits.
pub fn undecodable(nodes: &[String]) -> Vec<String> {
    nodes
        .iter()
        .filter(|n| Child::parse(n).is_none())
        .cloned()
        .collect()
}

/// The per-name record, the name node's data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The last fence handed out (or raised to by the bakery rule).
    #[serde(default)]
    pub fence: u64,
    /// How the last lease to end, ended (`Previous::text`; "" before the first).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous: String,
    /// Token -> fence of every lease granted and not yet seen to end. A token here whose node
    /// is gone ended without a release: its holder died, so the next holder hears "expired".
    #[serde(default)]
    pub open: BTreeMap<String, u64>,
    /// Token -> when its lease was granted (the grant attempt's `acquired_at`). A lease held
    /// in its queue entry shows that entry's metadata, written when it queued, and "held for"
    /// counts from the grant, not from the queueing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub since: BTreeMap<String, String>,
}

impl Record {
    pub fn parse(data: &[u8]) -> Result<Record, String> {
        if data.is_empty() {
            return Ok(Record::default());
        }
        serde_json::from_slice(data).map_err(|e| format!("damaged lock record ({e})"))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

pub fn entry_data(ttl_ms: u64, meta: &str) -> Vec<u8> {
    format!("{ttl_ms}|{meta}").into_bytes()
}

/// (ttl in ms, metadata) from an entry's data; damaged data reads as ttl 0 (already expired).
pub fn parse_entry(data: &[u8]) -> (u64, String) {
    let text = String::from_utf8_lossy(data);
    match text.split_once('|') {
        Some((ttl, meta)) => (ttl.parse().unwrap_or(0), meta.to_string()),
        None => (0, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mode::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn names_escape_slashes_and_round_trip() {
        let p = Paths::new("/app", "default");
        assert_eq!(p.name("team/prod"), "/app/dlock/default/team%2Fprod");
        assert_eq!(decode(&encode("a/b:c@d")), "a/b:c@d");
        assert_eq!(Paths::new("", "ns").base, "/dlock/ns");
    }

    #[test]
    fn children_parse_and_sort_in_queue_order() {
        let nodes = vec![
            format!("q-x-{T}-0000000012"),
            format!("t-s-{T}"),
            format!("q-l3-{T}-0000000002"),
            "junk".to_string(),
            "q-x-nothex-0000000001".to_string(),
        ];
        let c = parse_children(&nodes);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].seq, Some(2));
        assert_eq!(c[0].mode, Limit(3));
        assert_eq!(c[1].seq, Some(12));
        assert_eq!(c[2].seq, None);
        assert_eq!(c[2].mode, Shared);
        assert_eq!(c[2].token, T);
        assert_eq!(undecodable(&nodes), ["junk", "q-x-nothex-0000000001"]);
    }

    #[test]
    fn records_and_entries_round_trip() {
        let mut r = Record {
            fence: 7,
            previous: "released".into(),
            ..Record::default()
        };
        r.open.insert(T.into(), 7);
        assert_eq!(Record::parse(&r.to_bytes()), Ok(r));
        assert_eq!(Record::parse(b""), Ok(Record::default()));
        assert!(Record::parse(b"{oops").is_err());
        assert_eq!(
            parse_entry(&entry_data(3000, "{\"a\":\"|\"}")),
            (3000, "{\"a\":\"|\"}".to_string())
        );
        assert_eq!(parse_entry(b"garbage").0, 0);
    }
}
