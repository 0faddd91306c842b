//! A waiter's pace on S3 and DynamoDB. Neither tells anybody of a change, so a waiter looks
//! again, and each look is a paid request: once per `interval(ttl)`, stretched by a random 0 to
//! 50 % so waiters drift apart, and never sooner, however soon the engine would look again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep_until};

use crate::store::Listener;
use crate::store::hostbell::Bell;

/// The fastest a waiter polls: about a quarter of the lease's ttl (a lock that runs out is
/// seen within a quarter of its time), at most a second apart (one look per second costs
/// about $0.035 a day per waiter at S3's GET price, about $0.01 at DynamoDB's on-demand
/// strongly consistent read price), and at least 100 ms.
pub fn interval(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Wakes its waiter once per (jittered) interval.
pub struct Poll {
    interval: Duration,
    /// When the waiter was last let go to look: the next look waits a whole interval from it.
    last: Instant,
}

impl Poll {
    pub fn new(interval: Duration) -> Poll {
        Poll {
            interval,
            last: Instant::now(),
        }
    }
}

#[async_trait]
impl Listener for Poll {
    /// Returns after `max`, or later: not before a jittered interval since the last return.
    async fn changed(&mut self, max: Duration) {
        let jittered = self.interval.mul_f64(1.0 + crate::sys::random_f64() / 2.0);
        let at = (Instant::now() + max).max(self.last + jittered);
        sleep_until(at).await;
        self.last = Instant::now();
    }
}

/// The pace of `Poll`, or sooner where a release on this host rings the waiter's bell
/// (`store::hostbell`): one look more per release, for one waiter.
pub struct Rung {
    poll: Poll,
    bell: Option<Bell>,
    /// Where the waiter's first queued attempt hangs its bell (`ObjectStore::listening`).
    slot: Arc<Slot>,
}

/// A listening waiter's bell, once its first queued attempt has hung it, and what its last
/// ring carried until the next attempt takes it.
#[derive(Default)]
pub struct Slot(Mutex<SlotState>);

#[derive(Default)]
struct SlotState {
    hung: bool,
    bell: Option<Bell>,
    ring: Option<Vec<u8>>,
}

impl Slot {
    /// Hang the bell unless it was hung before (it is hung once per wait).
    pub fn hang_once(&self, hang: impl FnOnce() -> Option<Bell>) {
        let mut s = self.0.lock().unwrap();
        if !s.hung {
            s.hung = true;
            s.bell = hang();
        }
    }

    /// What the last ring carried (the record the release wrote), once.
    pub fn take_ring(&self) -> Option<Vec<u8>> {
        self.0.lock().unwrap().ring.take()
    }

    fn take(&self) -> Option<Bell> {
        self.0.lock().unwrap().bell.take()
    }
}

impl Rung {
    pub fn new(poll: Poll, slot: Arc<Slot>) -> Rung {
        Rung {
            poll,
            bell: None,
            slot,
        }
    }
}

#[async_trait]
impl Listener for Rung {
    async fn changed(&mut self, max: Duration) {
        if self.bell.is_none() {
            self.bell = self.slot.take();
        }
        let Some(bell) = self.bell.as_mut() else {
            return self.poll.changed(max).await;
        };
        tokio::select! {
            _ = self.poll.changed(max) => {}
            ring = bell.rung() => {
                self.poll.last = Instant::now();
                self.slot.0.lock().unwrap().ring = ring;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_a_quarter_of_the_ttl_within_bounds() {
        assert_eq!(interval(Duration::from_secs(30)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(2)), Duration::from_millis(500));
        assert_eq!(
            interval(Duration::from_millis(200)),
            Duration::from_millis(100)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_never_looks_sooner_than_its_interval() {
        let mut p = Poll::new(Duration::from_secs(1));
        let start = Instant::now();
        for n in 1..=5u32 {
            p.changed(Duration::ZERO).await;
            assert!(start.elapsed() >= Duration::from_secs(n.into()), "look {n}");
        }
        // A longer wait than the interval is the caller's to ask for.
        let before = Instant::now();
        p.changed(Duration::from_secs(3)).await;
        assert!(before.elapsed() >= Duration::from_secs(3));
    }
}
