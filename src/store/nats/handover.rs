//! The handover (`Rules::hand_over`): a release that leaves a name free grants it to the
//! waiter at the head of its line in its own write (the waiter's lease key, then the
//! record), and only once that write has won rings the waiter with what it was handed. The
//! waiter then holds without a read or a write of its own: a handoff is the release's write,
//! not that and then the waiter's read and grant.
//!
//! Its lease is reckoned from the last attempt of the waiter whose write the stream ordered
//! before the handed lease key (a lower stream sequence): that attempt was sent before the
//! server wrote the key, so the server's expiry of the key (the ttl rounded up to whole
//! seconds, from that write) comes after the end the waiter reckons. A waiter whose last such
//! attempt is more than a tenth of its ttl old does not take it (the lease would start that
//! far gone, and its first renewal come late): it asks as usual, and its grant, finding it
//! holds already, starts the lease again from then.
//!
//! The ring names the waiter next in line too: the handed waiter's own release then reads
//! that waiter's key beside the record (the one it will ring or hand the lock to), as a
//! process that wrote the record itself knows whom it names.
//!
//! A waiter frozen (SIGSTOP) or killed within the two seconds its key outlives its last look
//! may be handed the lock, and keeps it until the ttl runs out, as a holder frozen or killed
//! just after its grant would.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::store::{Granted, Previous, Recall};

/// What this process's waiters wrote and were told, by token.
#[derive(Default)]
pub struct Handovers(Mutex<HashMap<String, Place>>);

#[derive(Default)]
struct Place {
    /// The stream sequence of the waiter's last write, and when the attempt that made it
    /// was sent.
    queued: Option<(u64, Instant)>,
    /// A handover heard on the waiter's key, not yet taken.
    handed: Option<Handed>,
}

#[derive(Debug, PartialEq)]
struct Handed {
    /// The stream sequence of the handed lease key's write.
    seq: u64,
    fence: u64,
    marked: bool,
    previous: Previous,
    /// The token of the waiter next in line, if any.
    next: Option<String>,
}

/// What a waiter took (`Handovers::take`): its grant, what the store recalled of the name,
/// and the waiter next in line.
pub type Taken = (Granted, Recall, Option<String>);

/// The ring of a handover: "g|SEQ|FENCE|MARKED|PREVIOUS|NEXT" (a plain ring is
/// `wake::RING`), NEXT the next waiter's token or nothing.
pub fn message(seq: u64, fence: i64, marked: bool, previous: &str, next: Option<&str>) -> Bytes {
    let (marked, next) = (u8::from(marked), next.unwrap_or(""));
    Bytes::from(format!("g|{seq}|{fence}|{marked}|{previous}|{next}"))
}

impl Handovers {
    /// An attempt of `token` sent at `sent` wrote at stream sequence `seq`.
    pub fn queued(&self, token: &str, seq: u64, sent: Instant) {
        let mut places = self.0.lock().expect("handovers");
        let place = places.entry(token.to_string()).or_default();
        if place.queued.is_none_or(|(s, _)| s < seq) {
            place.queued = Some((seq, sent));
        }
    }

    /// A ring heard on `token`'s key; true if it was a handover.
    pub fn heard(&self, token: &str, payload: &[u8]) -> bool {
        let Some(handed) = parse(payload) else {
            return false;
        };
        let mut places = self.0.lock().expect("handovers");
        places.entry(token.to_string()).or_default().handed = Some(handed);
        true
    }

    /// The grant a handover gave `token`, if its last write came before the handed key and
    /// the attempt that made it is at most a tenth of `ttl` old (see the module's comment).
    pub fn take(&self, token: &str, ttl: Duration) -> Option<Taken> {
        let mut places = self.0.lock().expect("handovers");
        let place = places.get_mut(token)?;
        let handed = place.handed.take()?;
        let (seq, sent) = place.queued?;
        if seq >= handed.seq || sent.elapsed() > ttl / 10 {
            return None;
        }
        places.remove(token);
        let granted = Granted {
            fence: handed.fence,
            previous: handed.previous,
            started: Some(sent),
        };
        let recall = Recall {
            marked: handed.marked,
            horizon: Duration::ZERO,
        };
        Some((granted, recall, handed.next))
    }

    /// The request of `token` was granted or withdrawn.
    pub fn forget(&self, token: &str) {
        self.0.lock().expect("handovers").remove(token);
    }
}

fn parse(payload: &[u8]) -> Option<Handed> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.splitn(6, '|');
    if parts.next()? != "g" {
        return None;
    }
    Some(Handed {
        seq: parts.next()?.parse().ok()?,
        fence: parts.next()?.parse().ok()?,
        marked: parts.next()? == "1",
        previous: Previous::parse(parts.next()?),
        next: Some(parts.next()?)
            .filter(|t| !t.is_empty())
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn a_handover_after_the_last_write_is_taken_from_that_attempt() {
        let h = Handovers::default();
        let sent = Instant::now();
        h.queued("w", 10, sent);
        assert!(h.heard("w", &message(12, 7, true, "released", Some("n|x"))));
        let (g, recall, next) = h.take("w", TTL).expect("handed");
        assert_eq!(
            (g.fence, g.previous, g.started),
            (7, Previous::Released, Some(sent))
        );
        assert!(recall.marked);
        assert_eq!(next.as_deref(), Some("n|x"));
        assert!(h.take("w", TTL).is_none(), "taken once");
    }

    #[test]
    fn a_handover_not_after_the_last_write_is_not_taken() {
        let h = Handovers::default();
        h.queued("w", 12, Instant::now());
        h.heard("w", &message(12, 7, false, "released", None));
        assert!(
            h.take("w", TTL).is_none(),
            "the write may have come after the key"
        );
        // Nor without any write heard, nor for another token.
        h.heard("v", &message(12, 7, false, "released", None));
        assert!(h.take("v", TTL).is_none());
        assert!(h.take("u", TTL).is_none());
    }

    #[test]
    fn the_latest_write_counts_and_an_old_one_is_not_taken() {
        let h = Handovers::default();
        let old = Instant::now() - Duration::from_secs(4);
        h.queued("w", 3, old);
        h.queued("w", 2, Instant::now());
        h.heard("w", &message(9, 7, false, "released", None));
        assert!(h.take("w", TTL).is_none(), "4 s is over a tenth of 30 s");
    }

    #[test]
    fn a_plain_ring_is_no_handover() {
        let h = Handovers::default();
        assert!(!h.heard("w", super::super::wake::RING));
        assert!(!h.heard("w", b"g|x|1|0|released|"));
    }
}
