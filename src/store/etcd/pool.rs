//! Keyless etcd leases kept for reuse.
//!
//! Granting and revoking a lease are each a consensus write (an fsync on every member), and
//! a waiter used to pay four of them per turn: a waiting lease and a holder's lease granted,
//! and both revoked again. A lease known to hold no keys (a waiting lease whose entries moved
//! to the holder's lease, a holder's lease whose entries a release deleted, a spare nobody
//! used) goes here instead and is handed to the next waiter of this process that asks for
//! that ttl. A keep-alive, which no consensus round backs, makes it as good as new.
//!
//! A lease left here when the process ends holds no keys and simply runs out.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// More than this many idle leases are revoked rather than kept.
const KEEP: usize = 16;

#[derive(Clone, Copy, Debug)]
pub struct Free {
    pub id: i64,
    pub ttl: i64,
    /// Sent no later than the grant or keep-alive that last set its ttl going, if known.
    pub renewed: Option<Instant>,
}

#[derive(Default)]
pub struct Pool {
    free: Mutex<Vec<Free>>,
}

impl Pool {
    /// Keep `lease`; returns the id of a lease to revoke when the pool is full.
    pub fn put(&self, lease: Free) -> Option<i64> {
        let mut free = self.free.lock().unwrap();
        free.push(lease);
        (free.len() > KEEP).then(|| free.remove(0).id)
    }

    /// A lease of exactly `ttl` seconds; with `fresh`, only one whose ttl was set going
    /// less than that long ago (so it has most of its ttl left without a keep-alive).
    pub fn take(&self, ttl: i64, fresh: Option<Duration>) -> Option<Free> {
        let mut free = self.free.lock().unwrap();
        let usable = |l: &Free| {
            l.ttl == ttl && fresh.is_none_or(|f| l.renewed.is_some_and(|r| r.elapsed() < f))
        };
        let i = free.iter().rposition(usable)?;
        Some(free.remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(id: i64, ttl: i64, renewed: Option<Instant>) -> Free {
        Free { id, ttl, renewed }
    }

    #[test]
    fn hands_out_only_the_ttl_asked_for() {
        let pool = Pool::default();
        assert_eq!(pool.put(free(1, 30, None)), None);
        assert!(pool.take(5, None).is_none());
        assert_eq!(pool.take(30, None).map(|l| l.id), Some(1));
        assert!(pool.take(30, None).is_none());
    }

    #[test]
    fn a_fresh_lease_must_have_been_renewed_recently() {
        let pool = Pool::default();
        let long_ago = Instant::now() - Duration::from_secs(10);
        pool.put(free(1, 5, None));
        pool.put(free(2, 5, Some(long_ago)));
        assert!(pool.take(5, Some(Duration::from_secs(1))).is_none());
        pool.put(free(3, 5, Some(Instant::now())));
        assert_eq!(
            pool.take(5, Some(Duration::from_secs(1))).map(|l| l.id),
            Some(3)
        );
    }

    #[test]
    fn overflow_gives_back_the_oldest() {
        let pool = Pool::default();
        for id in 0..KEEP as i64 {
            assert_eq!(pool.put(free(id, 30, None)), None);
        }
        assert_eq!(pool.put(free(99, 30, None)), Some(0));
    }
}
