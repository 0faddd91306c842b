//! The etcd store: one etcd cluster (`etcd://h:2379,h:2379`, `etcds://` for TLS).
//!
//! A lease is an etcd lease whose ttl is the lock's, rounded up to whole seconds; a grant is
//! one transaction that puts the holder's key under it only if nothing it read has changed
//! (see `layout` for the keys and the rules, `grant` for the transactions). Expiry is etcd's
//! own: a holder that stops renewing loses its key with its lease, and the next grant learns
//! from the record that it expired. Waiters queue by create revision and each watches only
//! the key that blocks it (`watch`), so a release wakes one exclusive waiter, not the herd;
//! a release that knows that waiter hands it the lock in its own transaction (`grant`).

mod conn;
mod doctor;
mod grant;
mod layout;
mod pool;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::time::Instant;

use super::url::ServerUrl;
use super::{
    Acquire, Attempt, Health, HealthQuery, Holder, Listener, LockState, Store, StoreError,
    StoreResult, Waiter,
};
use conn::Endpoints;
use layout::{Blocker, Layout, Queue, Seen};
use pool::{Free, Pool};

/// One name's queue and record at one revision, per name in request order.
#[derive(Clone)]
struct Snapshot {
    rev: i64,
    queues: Vec<Queue>,
}

/// A waiter's queue entries live on a short lease of their own, kept alive by its attempts
/// (at least every `MAX_POLL`), so a waiter killed with SIGKILL leaves the queue in seconds
/// (unless a release hands it the lock first: then its spare runs out within a ttl).
const WAIT_TTL: i64 = 5;
const WAIT_RENEW: Duration = Duration::from_secs(1);

struct Waiting {
    lease: i64,
    ttl: i64,
    /// Sent no later than the grant or keep-alive that last set its ttl going.
    renewed: Instant,
}

/// What this process last wrote for a lease it holds: enough to release it in one
/// transaction without reading first (a stale copy only fails the transaction's compares).
struct Held {
    names: Vec<String>,
    snap: Snapshot,
    /// When that was read: the waiters it shows are the heirs a release may hand over to ...
    at: Instant,
    /// ... and whether it shows every waiter queued by then (a handover passes on a few).
    whole: bool,
    /// The holder's lease and when its ttl last started running, if known: once released,
    /// the lease goes to the pool as that fresh, and a waiter taking it as its spare need not
    /// renew it first.
    renewed: Option<(i64, Instant)>,
}

/// What a queued waiter of this process watches, and from which revision on.
#[derive(Clone, Debug)]
struct Block {
    what: Blocker,
    rev: i64,
    /// The waiter's own entry and spare lease, when a release may hand the lock over to it
    /// (one name, exclusive, a spare on record): the listener watches that key too ...
    own: Option<(Vec<u8>, i64)>,
    /// ... and keeps here the entry a handover wrote.
    handed: Option<Seen>,
}

pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Endpoints,
    layout: Layout,
    desc: String,
    /// The server's smallest lease ttl, once a grant revealed it (etcd raises shorter ones).
    min_ttl: AtomicI64,
    waiting: Mutex<HashMap<String, Waiting>>,
    /// A holder's lease granted ahead for a queued waiter and named in its entry, so the
    /// grant that ends its wait need not write one: a release may hand the lock over on it,
    /// or a keep-alive, sent with the grant's read, starts its ttl afresh; neither costs a
    /// consensus round.
    spare: Mutex<HashMap<String, Free>>,
    pool: Pool,
    held: Mutex<HashMap<String, Held>>,
    blocks: Mutex<HashMap<String, Block>>,
}

impl EtcdStore {
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<EtcdStore> {
        let mut url = url.clone();
        let conn = Endpoints::connect(&mut url, timeout).await?;
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                conn,
                layout: Layout::new(namespace),
                desc: url.to_string(),
                min_ttl: AtomicI64::new(0),
                waiting: Mutex::new(HashMap::new()),
                spare: Mutex::new(HashMap::new()),
                pool: Pool::default(),
                held: Mutex::new(HashMap::new()),
                blocks: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl Inner {
    async fn txn(&self, txn: Txn) -> StoreResult<TxnResponse> {
        let kv = self.conn.client.kv_client();
        self.conn
            .call(|| {
                let (mut kv, txn) = (kv.clone(), txn.clone());
                async move { kv.txn(txn).await }
            })
            .await
    }

    /// Every queue and record of `names`, in one read at one revision.
    async fn read(&self, names: &[String]) -> StoreResult<Snapshot> {
        let resp = self.txn(Txn::new().and_then(self.reads(names))).await?;
        snapshot(&resp, names)
    }

    /// The gets of `read`, to add to a transaction.
    fn reads(&self, names: &[String]) -> Vec<TxnOp> {
        let mut ops = Vec::with_capacity(names.len() * 2);
        for name in names {
            ops.push(TxnOp::get(
                self.layout.queue(name),
                Some(GetOptions::new().with_prefix()),
            ));
            ops.push(TxnOp::get(self.layout.record(name), None));
        }
        ops
    }

    /// `token`'s own entry for each of `names`, if it has one.
    async fn entries(&self, names: &[String], token: &str) -> StoreResult<Vec<Option<Seen>>> {
        let ops: Vec<TxnOp> = names
            .iter()
            .map(|n| TxnOp::get(self.layout.entry(n, token), None))
            .collect();
        let resp = self.txn(Txn::new().and_then(ops)).await?;
        let out: Vec<Option<Seen>> = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g.kvs().first().and_then(Seen::from_kv)),
                _ => None,
            })
            .collect();
        if out.len() != names.len() {
            return Err(StoreError::protocol("etcd: malformed read answer"));
        }
        Ok(out)
    }

    /// A lease of `secs` (or the server's least ttl): from the pool if it has one, else new.
    async fn lease_for(&self, secs: i64, fresh: Option<Duration>) -> StoreResult<Free> {
        let secs = secs.max(self.min_ttl.load(Ordering::Relaxed));
        match self.pool.take(secs, fresh) {
            Some(l) => Ok(l),
            None => self.new_lease(secs).await,
        }
    }

    /// Grant an etcd lease of at least `secs`, with the ttl etcd gave it.
    async fn new_lease(&self, secs: i64) -> StoreResult<Free> {
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

    /// Keep a lease that holds no keys for the next waiter (see `pool`).
    fn recycle(&self, lease: Free) {
        if let Some(id) = self.pool.put(lease) {
            self.revoke_later(id);
        }
    }

    /// One keep-alive. `Ok(false)`: the lease is gone.
    async fn keep_alive(&self, id: i64) -> StoreResult<bool> {
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

    async fn revoke(&self, id: i64) {
        let _ = self
            .lease_call(|mut lease| async move { lease.revoke(id).await })
            .await;
    }

    /// Seconds left on a lease (negative: gone).
    async fn ttl_left(&self, id: i64) -> StoreResult<i64> {
        let resp = self
            .lease_call(|mut lease| async move { lease.time_to_live(id, None).await })
            .await?;
        Ok(resp.ttl())
    }

    /// One request to the lease service, retried on another member as `Endpoints::call` does.
    async fn lease_call<T, F, Fut>(&self, request: F) -> StoreResult<T>
    where
        F: Fn(etcd_client::LeaseClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let lease = self.conn.client.lease_client();
        self.conn.call(|| request(lease.clone())).await
    }

    /// Revoke a lease nobody needs any more, without waiting for it: if this process ends
    /// first, the lease (with no keys left on it) simply runs out.
    fn revoke_later(&self, lease: i64) {
        let mut client = self.conn.client.lease_client();
        tokio::spawn(async move {
            let _ = client.revoke(lease).await;
        });
    }

    /// `token` waits no more on this store: forget its watch target and drop its waiting
    /// lease (revoked: its entries, if any are left, go with it). Its spare is returned, not
    /// pooled: a release may have handed the lock over on it, so it is pooled only once the
    /// caller knows it holds no keys.
    fn done_waiting(&self, token: &str) -> Option<Free> {
        self.blocks.lock().unwrap().remove(token);
        let waiting = self.waiting.lock().unwrap().remove(token);
        if let Some(w) = waiting {
            self.revoke_later(w.lease);
        }
        self.spare.lock().unwrap().remove(token)
    }

    /// `token` was granted: its entries moved to the holder's lease, so its waiting lease
    /// holds nothing any more and is kept for another waiter, as is an unused spare.
    fn granted_after_wait(&self, token: &str) {
        self.blocks.lock().unwrap().remove(token);
        let waiting = self.waiting.lock().unwrap().remove(token);
        if let Some(w) = waiting {
            self.recycle(Free {
                id: w.lease,
                ttl: w.ttl,
                renewed: Some(w.renewed),
            });
        }
        let spare = self.spare.lock().unwrap().remove(token);
        if let Some(l) = spare {
            self.recycle(l);
        }
    }

    /// The state of one name as `inspect` shows it, with each holder's lease ttl from etcd.
    async fn state(&self, name: &str, q: &Queue) -> StoreResult<LockState> {
        let holders: Vec<&Seen> = q.entries.iter().filter(|e| e.entry.h).collect();
        let ttls =
            futures_util::future::join_all(holders.iter().map(|e| self.ttl_left(e.lease))).await;
        let mut out = LockState {
            name: name.to_string(),
            fence: q.last_fence(),
            previous: q.previous(),
            ..LockState::default()
        };
        for (e, ttl) in holders.into_iter().zip(ttls) {
            let left = ttl?;
            if left < 0 {
                continue;
            }
            out.holders.push(Holder {
                owner: crate::names::owner_id(&e.token),
                mode: e.mode(),
                fence: e.fence(),
                ttl_left_ms: left as u64 * 1000,
                meta: crate::meta::parse(&e.entry.meta),
            });
        }
        out.holders.sort_by_key(|h| h.fence);
        out.waiters = q
            .entries
            .iter()
            .filter(|e| !e.entry.h)
            .map(|e| Waiter {
                owner: crate::names::owner_id(&e.token),
                mode: e.mode(),
                meta: crate::meta::parse(&e.entry.meta),
            })
            .collect();
        Ok(out)
    }
}

/// The queues and records the gets of `Inner::reads` returned in `resp`.
fn snapshot(resp: &TxnResponse, names: &[String]) -> StoreResult<Snapshot> {
    let rev = resp.header().map_or(0, |h| h.revision());
    let gets: Vec<_> = resp
        .op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect();
    if gets.len() != names.len() * 2 {
        return Err(StoreError::protocol("etcd: malformed read answer"));
    }
    let queues = gets
        .chunks(2)
        .map(|c| Queue::new(c[0].kvs(), c[1].kvs().first()))
        .collect();
    Ok(Snapshot { rev, queues })
}

#[async_trait]
impl Store for EtcdStore {
    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query).await
    }

    fn describe(&self) -> &str {
        &self.inner.desc
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        self.inner.attempt(req, queue).await
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        Ok(Box::new(watch::Predecessor::new(
            self.inner.clone(),
            &req.token,
        )))
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        self.inner.renew(names, token, ttl).await
    }

    async fn release(&self, names: &[String], token: &str) -> StoreResult<bool> {
        self.inner.release(names, token).await
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        self.inner.force_release(names).await
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.inner.raise_fence(names, fences).await
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let names = [name.to_string()];
        let snap = self.inner.read(&names).await?;
        self.inner.state(name, &snap.queues[0]).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let inner = &self.inner;
        let kv = inner.conn.client.kv_client();
        let from = inner.layout.names_from(prefix);
        let resp = inner
            .conn
            .call(|| {
                let (mut kv, from) = (kv.clone(), from.clone());
                async move { kv.get(from, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let names: Vec<String> = resp
            .kvs()
            .iter()
            .filter(|kv| Seen::from_kv(kv).is_some_and(|s| s.entry.h))
            .filter_map(|kv| inner.layout.name_of_entry(kv.key()))
            .collect();
        super::held_states(self, names).await
    }
}
