//! The handover: a release hands the lock to the waiter at the front of the line in its own
//! script (common.lua's `hand_over`) and tells it on its channel, so the waiter holds without
//! a grant of its own: a handoff costs one round trip, the release's, not two.
//!
//! A waiter asks for it (the grant's `heir` argument) only for one name, on one server (in a
//! cluster it may subscribe on another node than the release runs on), and not with
//! `?wait_replicas` (it could not learn whether the replicas have the write). The release
//! hands over only to a waiter still subscribed to its channel: a killed one is woken as
//! before, to nobody, and leaves the line within its waiter life. A waiter frozen (SIGSTOP)
//! when it is handed the lock keeps it until its ttl runs out, as a holder frozen just after
//! its grant would.
//!
//! Its lease is reckoned from the last attempt that found it in line: the handover came
//! after that attempt's script, so the server's lease started later and ends later. The place
//! in line (`seq`) ties a handover to that attempt: a waiter that lost its place and queued
//! again (frozen past its waiter life, say) takes no handover of an old place, and one that
//! hears a handover more than a tenth of its ttl after that attempt does not take it (see
//! `take`): it asks as usual, and its grant, finding it holds already, starts the lease from
//! then.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{Acquire, Granted, Previous, Recall};

/// What this process's waiters heard and were told, by token.
#[derive(Default)]
pub(super) struct Handovers(Mutex<HashMap<String, Place>>);

#[derive(Default)]
struct Place {
    /// The waiter's place in line and when the attempt that found it there was sent.
    queued: Option<(u64, Instant)>,
    /// A handover heard on the waiter's channel, not yet taken.
    handed: Option<Handed>,
}

struct Handed {
    seq: u64,
    fence: u64,
    recall: Recall,
    previous: Previous,
}

impl Handovers {
    /// Whether a request may be handed the lock (see the module's comment).
    pub(super) fn offered(req: &Acquire, queue: bool, wait_replicas: bool) -> bool {
        queue && req.names.len() == 1 && !wait_replicas
    }

    /// An attempt sent at `sent` found the waiter in line at `seq`.
    pub(super) fn queued(&self, token: &str, seq: u64, sent: Instant) {
        let mut places = self.0.lock().expect("handovers");
        places.entry(token.to_string()).or_default().queued = Some((seq, sent));
    }

    /// A message on the waiter's channel: "1" (a wake-up) or a handover,
    /// "g|seq|fence|marked|horizon|previous". Anything else is a wake-up.
    pub(super) fn heard(&self, token: &str, message: &str) {
        let Some(handed) = parse(message) else { return };
        let mut places = self.0.lock().expect("handovers");
        places.entry(token.to_string()).or_default().handed = Some(handed);
    }

    /// The grant a handover gave `token`, if one came for its latest place in line: the
    /// lease reckoned from the attempt that found it there. Not if that attempt is more than
    /// a tenth of `ttl` old: the lease would start that far gone, and its renewal, a third of
    /// the ttl on, would come late. The waiter then asks as usual, and its grant, finding it
    /// holds already, starts the lease again from then (a 600 ms ttl behind a 500 ms poll
    /// ran out before its first renewal).
    pub(super) fn take(&self, token: &str, ttl: Duration) -> Option<(Granted, Recall)> {
        let mut places = self.0.lock().expect("handovers");
        let place = places.get_mut(token)?;
        let handed = place.handed.take()?;
        let (seq, sent) = place.queued?;
        if handed.seq != seq || sent.elapsed() > ttl / 10 {
            return None;
        }
        places.remove(token);
        let granted = Granted {
            fence: handed.fence,
            previous: handed.previous,
            started: Some(sent),
        };
        Some((granted, handed.recall))
    }

    /// The acquisition of `token` ended (granted by its own attempt, or given up).
    pub(super) fn forget(&self, token: &str) {
        self.0.lock().expect("handovers").remove(token);
    }
}

fn parse(message: &str) -> Option<Handed> {
    let mut parts = message.splitn(6, '|');
    if parts.next()? != "g" {
        return None;
    }
    let mut int = || parts.next()?.parse::<u64>().ok();
    let (seq, fence, marked, horizon) = (int()?, int()?, int()?, int()?);
    Some(Handed {
        seq,
        fence,
        recall: Recall {
            marked: marked == 1,
            horizon: Duration::from_millis(horizon),
        },
        previous: Previous::parse(parts.next()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn a_handover_is_taken_once_and_only_for_the_latest_place() {
        let h = Handovers::default();
        let sent = Instant::now();
        h.queued("t", 7, sent);
        h.heard("t", "1");
        assert!(h.take("t", TTL).is_none(), "a wake-up is no grant");
        h.heard("t", "g|6|41|1|0|released");
        assert!(h.take("t", TTL).is_none(), "a handover of an earlier place");
        h.heard("t", "g|7|42|1|250|failed:3");
        let (g, recall) = h.take("t", TTL).expect("the handover of its place");
        assert_eq!(g.fence, 42);
        assert_eq!(g.started, Some(sent));
        assert_eq!(g.previous, Previous::parse("failed:3"));
        assert!(recall.marked);
        assert_eq!(recall.horizon, Duration::from_millis(250));
        assert!(h.take("t", TTL).is_none(), "taken once");
    }

    #[test]
    fn a_handover_to_a_place_taken_long_ago_in_the_ttl_is_not_taken() {
        let h = Handovers::default();
        let ttl = Duration::from_millis(600);
        h.queued("t", 1, Instant::now() - ttl / 5);
        h.heard("t", "g|1|9|1|0|released");
        assert!(
            h.take("t", ttl).is_none(),
            "a lease begun a fifth of its ttl ago"
        );
        h.queued("t", 1, Instant::now());
        h.heard("t", "g|1|9|1|0|released");
        assert!(h.take("t", ttl).is_some(), "a lease begun just now");
    }

    #[test]
    fn a_handover_heard_before_any_place_is_not_taken() {
        let h = Handovers::default();
        h.heard("t", "g|1|5|0|0|none");
        assert!(h.take("t", TTL).is_none());
        h.queued("u", 1, Instant::now());
        assert!(h.take("u", TTL).is_none(), "nothing was handed to u");
    }
}
