//! Lease keeping, the way etcd's own `concurrency/session.go` owns a session's lease: granting,
//! keep-alives and revoking; the pool of keyless leases kept for reuse; each waiter's waiting
//! lease and spare holder lease. The recipes (`grant`, `handover`, `release`) use leases
//! from here and never reckon their timing themselves.
//!
//! Granting and revoking a lease are each a consensus write (an fsync on every member), and
//! a waiter used to pay four of them per turn: a waiting lease and a holder's lease granted,
//! and both revoked again. A lease known to hold no keys (a waiting lease whose entries moved
//! to the holder's lease, a holder's lease whose entries a release deleted, a spare nobody
//! used) goes to the pool instead and is handed to the next waiter of this process that asks
//! for that ttl. A keep-alive, which no consensus round backs, makes it as good as new. A
//! lease left in the pool when the process ends holds no keys and simply runs out.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Inner;
use super::conn::Resend;
use super::layout::lease_secs;
use crate::store::{Acquire, StoreResult};

/// A waiter's queue entries live on a short lease of their own, kept alive by its attempts
/// (at least every `MAX_POLL`), so a waiter killed with SIGKILL leaves the queue in seconds
/// (unless a release hands it the lock first: then its spare runs out within a ttl). The
/// lease is the run's ttl in whole seconds, at most `WAIT_TTL` and at least what etcd allows
/// (its least lease ttl), so a killed waiter is gone from `inspect` within about a ttl.
const WAIT_TTL: i64 = 5;
/// A waiting lease is renewed when this much of it has passed: a third of its ttl, at most a
/// second.
fn wait_renew(ttl_secs: i64) -> Duration {
    (Duration::from_secs(ttl_secs.max(1) as u64) / 3).min(Duration::from_secs(1))
}

/// The waiting lease's ttl asked for a lease of `ttl`: whole seconds rounded down (so the
/// entries never outlive a ttl by more than etcd's expiry check), at least 1, at most
/// `WAIT_TTL`.
pub(super) fn wait_secs(ttl: Duration) -> i64 {
    (ttl.as_secs() as i64).clamp(1, WAIT_TTL)
}

/// More than this many idle leases are revoked rather than kept.
const KEEP: usize = 16;

/// An etcd lease as this process knows it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Free {
    pub id: i64,
    /// The ttl etcd granted, seconds.
    pub ttl: i64,
    /// Sent no later than the grant or keep-alive that last set its ttl going, if known.
    pub renewed: Option<Instant>,
}

/// The lease a queued waiter's entries live on.
pub(super) struct Waiting {
    pub lease: i64,
    pub ttl: i64,
    /// Sent no later than the grant or keep-alive that last set its ttl going.
    pub renewed: Instant,
}

/// Leases known to hold no keys, kept for reuse.
#[derive(Default)]
pub(super) struct Pool {
    free: Mutex<Vec<Free>>,
}

impl Pool {
    /// Keep `lease`; returns the id of a lease to revoke when the pool is full.
    fn put(&self, lease: Free) -> Option<i64> {
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

/// A lease taken for one attempt and known to hold no keys: it goes back to the pool when
/// the guard is dropped, whichever way the attempt ends. A write that may put keys on it
/// takes it out first (`spend`); only a write known not to have happened puts it back.
pub(super) struct Keyless<'a> {
    inner: &'a Inner,
    lease: Option<Free>,
}

impl<'a> Keyless<'a> {
    pub fn new(inner: &'a Inner, lease: Option<Free>) -> Keyless<'a> {
        Keyless { inner, lease }
    }

    pub fn get(&self) -> Option<Free> {
        self.lease
    }

    /// Keep `lease` (a new one) under the guard, and return it.
    pub fn set(&mut self, lease: Free) -> Free {
        *self.lease.insert(lease)
    }

    /// The lease is about to hold keys (or may, if the answer is lost): the pool must never
    /// have it. If the write's answer is lost, the token's release revokes it (`unheard`).
    pub fn spend(&mut self) -> Option<Free> {
        self.lease.take()
    }
}

impl Drop for Keyless<'_> {
    fn drop(&mut self) {
        if let Some(l) = self.lease.take() {
            self.inner.recycle(l);
        }
    }
}

impl Inner {
    /// A lease of `secs` (or the server's least ttl): from the pool if it has one, else new.
    async fn lease_for(&self, secs: i64, fresh: Option<Duration>) -> StoreResult<Free> {
        let secs = secs.max(self.min_ttl.load(Ordering::Relaxed));
        match self.pool.take(secs, fresh) {
            Some(l) => Ok(l),
            None => self.new_lease(secs).await,
        }
    }

    /// Grant an etcd lease of at least `secs`, with the ttl etcd gave it.
    pub(super) async fn new_lease(&self, secs: i64) -> StoreResult<Free> {
        let sent = Instant::now();
        let resp = self
            .lease_call(|mut lease| async move { lease.grant(secs, None).await })
            .await?;
        if resp.ttl() > secs {
            self.min_ttl.fetch_max(resp.ttl(), Ordering::Relaxed);
        }
        Ok(Free {
            id: resp.id(),
            ttl: resp.ttl(),
            renewed: Some(sent),
        })
    }

    /// Keep a lease that holds no keys for the next waiter.
    pub(super) fn recycle(&self, lease: Free) {
        if let Some(id) = self.pool.put(lease) {
            self.revoke_later(id);
        }
    }

    /// One keep-alive. `Ok(false)`: the lease is gone.
    pub(super) async fn keep_alive(&self, id: i64) -> StoreResult<bool> {
        self.lease_call(|mut lease| async move {
            match lease.keep_alive(id).await {
                // Dropping the keeper and its stream ends the gRPC stream: one renewal.
                Ok(_) => Ok(true),
                // The crate raises this variant here only when etcd's first answer has ttl 0,
                // its word for a lease it no longer has (its one other source, a send into
                // the channel it has just made, cannot fail).
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    pub(super) async fn revoke(&self, id: i64) {
        let _ = self
            .lease_call(|mut lease| async move { lease.revoke(id).await })
            .await;
    }

    /// Seconds left on a lease (negative: gone).
    pub(super) async fn ttl_left(&self, id: i64) -> StoreResult<i64> {
        let resp = self
            .lease_call(|mut lease| async move { lease.time_to_live(id, None).await })
            .await?;
        Ok(resp.ttl())
    }

    /// One request to the lease service, sent to another member if its member does not
    /// answer in time: each of them may be sent twice (a second grant only makes a lease
    /// without keys, which runs out; keep-alives and revokes are the same twice).
    async fn lease_call<T, F, Fut>(&self, request: F) -> StoreResult<T>
    where
        F: Fn(etcd_client::LeaseClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.conn
            .call(Resend::Yes, |client| request(client.lease_client()))
            .await
    }

    /// Revoke a lease nobody needs any more, without waiting for it: if this process ends
    /// first (or has no connection to send it on), the lease (with no keys left on it)
    /// simply runs out.
    pub(super) fn revoke_later(&self, lease: i64) {
        let Some(client) = self.conn.connected() else {
            return;
        };
        tokio::spawn(async move {
            let _ = client.lease_client().revoke(lease).await;
        });
    }

    /// The lease `token` queues under (`secs` long, see `wait_secs`) with its ttl, granted
    /// once and renewed by its attempts.
    pub(super) async fn waiting_lease(&self, token: &str, secs: i64) -> StoreResult<(i64, i64)> {
        let cached = self.token(token, |t| t.waiting.as_ref().map(|w| (w.lease, w.ttl)));
        if let Some(l) = cached {
            return Ok(l);
        }
        // Only a lease with most of its ttl left will do: `keep_waiting` renews it on time
        // reckoned from `renewed`, and a lapse would cost the waiter its place in the queue.
        let secs = secs.max(self.min_ttl.load(Ordering::Relaxed));
        let l = self.lease_for(secs, Some(wait_renew(secs))).await?;
        let waiting = Waiting {
            lease: l.id,
            ttl: l.ttl,
            renewed: l.renewed.unwrap_or_else(Instant::now),
        };
        self.token(token, |t| t.waiting = Some(waiting));
        Ok((l.id, l.ttl))
    }

    /// Renew `token`'s waiting lease `lease` when due. `Ok(false)`: it is gone (and with it
    /// the waiter's entries; the next round queues again).
    pub(super) async fn keep_waiting_lease(&self, token: &str, lease: i64) -> StoreResult<bool> {
        let due = self.token(token, |t| {
            t.waiting
                .as_ref()
                .is_none_or(|w| w.lease != lease || w.renewed.elapsed() >= wait_renew(w.ttl))
        });
        if !due {
            return Ok(true);
        }
        let sent = Instant::now();
        let alive = self.keep_alive(lease).await?;
        self.token(token, |t| {
            if !alive {
                t.waiting = None;
                return;
            }
            // A lease of unknown ttl is renewed as often as the shortest would be.
            let ttl = t.waiting.as_ref().map_or(1, |w| w.ttl);
            t.waiting = Some(Waiting {
                lease,
                ttl,
                renewed: sent,
            });
        });
        Ok(alive)
    }

    /// Grant a waiter's spare holder lease, unless it has one. Without it (say the grant
    /// failed) the grant that ends the wait takes a lease of its own.
    pub(super) async fn grant_spare(&self, req: &Acquire) {
        if self.token(&req.token, |t| t.spare.is_some()) {
            return;
        }
        // A pooled lease may be near its end; the keep-alive before its use renews it.
        if let Ok(l) = self.lease_for(lease_secs(req.ttl), None).await {
            let old = self.token(&req.token, |t| t.spare.replace(l));
            if let Some(old) = old {
                self.recycle(old);
            }
        }
    }

    /// Renew a queued waiter's spare every third of its ttl, so that a release handing the
    /// lock over on it leaves most of a ttl to the heir. A spare found gone is forgotten: a
    /// release that names it fails on it and then releases without handing over.
    pub(super) async fn keep_spare(&self, token: &str) {
        let due = self.token(token, |t| t.spare).filter(|l| {
            let third = Duration::from_secs(l.ttl.max(1) as u64) / 3;
            l.renewed.is_none_or(|r| r.elapsed() >= third)
        });
        let Some(l) = due else { return };
        let sent = Instant::now();
        let alive = self.keep_alive(l.id).await;
        self.token(token, |t| match alive {
            Ok(true) => {
                if let Some(kept) = t.spare.as_mut().filter(|k| k.id == l.id) {
                    kept.renewed = Some(sent);
                }
            }
            Ok(false) => t.spare = None,
            Err(_) => {}
        });
    }

    /// `token` waits no more on this store: forget its watch target and drop its waiting
    /// lease (revoked: its entries, if any are left, go with it). Its spare is returned, not
    /// pooled: a release may have handed the lock over on it, so it is pooled only once the
    /// caller knows it holds no keys.
    pub(super) fn done_waiting(&self, token: &str) -> Option<Free> {
        let (waiting, spare) = self.token(token, |t| {
            t.block = None;
            (t.waiting.take(), t.spare.take())
        });
        if let Some(w) = waiting {
            self.revoke_later(w.lease);
        }
        spare
    }

    /// `token` was granted: its entries moved to the holder's lease, so its waiting lease
    /// holds nothing any more and is kept for another waiter, as is an unused spare.
    pub(super) fn granted_after_wait(&self, token: &str) {
        let (waiting, spare) = self.token(token, |t| {
            t.block = None;
            (t.waiting.take(), t.spare.take())
        });
        if let Some(w) = waiting {
            self.recycle(Free {
                id: w.lease,
                ttl: w.ttl,
                renewed: Some(w.renewed),
            });
        }
        if let Some(l) = spare {
            self.recycle(l);
        }
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
