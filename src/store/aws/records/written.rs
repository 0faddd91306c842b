//! A record as last written, known without reading it: by the process that wrote it, or by a
//! waiter on the same host whose bell the release rang with it (`store::hostbell`).
//!
//! A decision made on it is written on condition that the record is still that version, so
//! it is the decision a fresh read would give, but for the server's clock, which only a read
//! tells. What stands in for it is an upper bound (`now_at_most`): the `Date` the record's
//! decision was made on, cut down to the whole second, plus a second, plus the time since its
//! read was sent on this host's monotonic clock, stretched by the drift allowance. Every
//! process of the host (and of its containers) reads that clock alike, bar one in another time
//! namespace, whose ring is not taken (`Written::from_ring`).

use std::sync::OnceLock;
use std::time::Duration;

use crate::store::record::rules::Rows;

use super::record;

/// How old a written record's clock may be for a grant to reckon its lease's end from it: the
/// bound loosens by 1 % of its age (0.6 s at this age), and the lease's stored end with it.
pub const FRESH: Duration = Duration::from_secs(60);

/// A ring larger than this goes as a plain ring: a pipe takes a write of at most `PIPE_BUF`
/// bytes whole, and the bell's frame adds five.
const MAX_RING: usize = 4000;

/// The first line of a ring that carries a record.
const MAGIC: &str = "dlock-ring 1";

/// A record as this process wrote it, or as a release on this host rang it: its rows and
/// version, the latest `Date` of the reads its decision was made on, and when those reads
/// were sent, on the kernel's monotonic clock (`sys::monotonic`, which no libfaketime bends).
pub struct Written {
    pub rows: Rows,
    pub version: String,
    pub date_ms: i64,
    pub sent: Duration,
}

impl Written {
    /// How long ago its reads were sent.
    pub fn age(&self) -> Duration {
        crate::sys::monotonic().saturating_sub(self.sent)
    }

    /// The latest the server's clock can read now: `Date` is cut down to the whole second
    /// and was read after `sent`; the elapsed time is stretched by the drift allowance.
    pub fn now_at_most(&self) -> i64 {
        let elapsed = self.age().as_secs_f64() * 1000.0 * 1.01;
        self.date_ms + 1000 + elapsed.ceil() as i64
    }

    /// The ring a release sends its next waiter on this host with: the record's key (a
    /// check against a bell shared by a hash), this process's time namespace, the clock and
    /// the version, then the record's body. None where it would not fit a pipe's atomic write.
    pub fn to_ring(&self, key: &str) -> Option<Vec<u8>> {
        let head = format!(
            "{MAGIC}\n{key}\n{}\n{}\n{}\n{}\n",
            time_ns(),
            self.sent.as_nanos(),
            self.date_ms,
            self.version
        );
        let mut out = head.into_bytes();
        out.extend(record::encode(&self.rows, ""));
        (out.len() <= MAX_RING && !self.version.contains('\n')).then_some(out)
    }

    /// The record a ring carried, for the record at `key` named `name`; None for anything
    /// else: another key, a sender in another time namespace (its monotonic clock is offset
    /// from ours), a clock ahead of ours, or a malformed ring.
    pub fn from_ring(ring: &[u8], key: &str, name: &str) -> Option<Written> {
        let parts: Vec<&[u8]> = ring.splitn(7, |&b| b == b'\n').collect();
        let [magic, k, ns, sent, date_ms, version, body] = parts.as_slice() else {
            return None;
        };
        let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_string);
        if text(magic)? != MAGIC || text(k)? != key || text(ns)? != time_ns() {
            return None;
        }
        let sent = Duration::from_nanos(text(sent)?.parse().ok()?);
        let date_ms: i64 = text(date_ms)?.parse().ok()?;
        let version = text(version)?;
        if sent > crate::sys::monotonic() || version.is_empty() {
            return None;
        }
        let rows = record::decode(name, body).ok()?;
        Some(Written {
            rows,
            version,
            date_ms,
            sent,
        })
    }
}

/// This process's time namespace (the link `/proc/self/ns/time` reads), or empty on a kernel
/// without them: two processes whose monotonic clocks may differ never read the same.
fn time_ns() -> &'static str {
    static NS: OnceLock<String> = OnceLock::new();
    NS.get_or_init(|| {
        std::fs::read_link("/proc/self/ns/time")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::rules::HolderRow;

    fn written() -> Written {
        Written {
            rows: Rows {
                name: "job".into(),
                fence: 41,
                previous: "released".into(),
                holders: vec![HolderRow {
                    token: "t".repeat(32),
                    mode: "s".into(),
                    fence: 40,
                    expires: 1_900_000_000_000,
                    meta: "{}".into(),
                }],
                marked: true,
                ..Rows::default()
            },
            version: "\"0a1b\"".into(),
            date_ms: 1_800_000_000_000,
            sent: crate::sys::monotonic() - Duration::from_millis(5),
        }
    }

    #[test]
    fn a_ring_carries_the_record_for_its_key_only() {
        let w = written();
        let ring = w.to_ring("p/ns/lock/job").unwrap();
        let back = Written::from_ring(&ring, "p/ns/lock/job", "job").unwrap();
        assert!(record::same(&back.rows, &w.rows));
        assert_eq!(
            (back.version.as_str(), back.date_ms, back.sent),
            (w.version.as_str(), w.date_ms, w.sent)
        );
        assert!(Written::from_ring(&ring, "p/ns/lock/other", "other").is_none());
        assert!(Written::from_ring(b"!", "p/ns/lock/job", "job").is_none());
        assert!(Written::from_ring(&ring[..ring.len() - 3], "p/ns/lock/job", "job").is_none());
    }

    #[test]
    fn a_ring_from_a_clock_ahead_of_ours_is_not_taken() {
        let mut w = written();
        w.sent = crate::sys::monotonic() + Duration::from_secs(3600);
        let ring = w.to_ring("k").unwrap();
        assert!(Written::from_ring(&ring, "k", "job").is_none());
    }

    #[test]
    fn the_clock_bound_is_a_second_past_the_date_and_grows_with_age() {
        let mut w = written();
        w.sent = crate::sys::monotonic();
        let now = w.now_at_most();
        assert!((w.date_ms + 1000..w.date_ms + 1010).contains(&now), "{now}");
        w.sent = crate::sys::monotonic() - Duration::from_secs(10);
        assert!(w.now_at_most() >= w.date_ms + 1000 + 10_100);
    }

    #[test]
    fn a_record_too_large_for_one_pipe_write_rings_plainly() {
        let mut w = written();
        w.rows.holders[0].meta = "m".repeat(MAX_RING);
        assert!(w.to_ring("k").is_none());
    }
}
