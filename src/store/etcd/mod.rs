//! The etcd store: one etcd cluster (`etcd://h:2379,h:2379`, `etcds://` for TLS).
//!
//! A lease is an etcd lease whose ttl is the lock's, rounded up to whole seconds; a grant is
//! one transaction that puts the holder's key under it only if nothing it read has changed.
//! Expiry is etcd's own: a holder that stops renewing loses its key with its lease, and the
//! next grant learns from the record that it expired. Waiters queue by create revision and
//! each watches only the key that blocks it, so a release wakes one exclusive waiter, not the
//! herd; a release that knows that waiter hands it the lock in its own transaction.
//!
//! The files split the way etcd's own `client/v3/concurrency` splits `session.go` from
//! `mutex.go`: `lease` keeps leases (grants, keep-alives, the pool, waiters' spares), and the
//! recipes use them without reckoning lease timing: `grant` takes the lock or queues,
//! `handover` passes it from a release to the waiter behind, `release` renews, releases,
//! forces and raises fences. `layout` holds the keys and stored values, `view` what a read
//! shows and the rules decided from it, `watch` a waiter's wake-up, `conn` the connection.
//! This file holds the store itself, its reads, and the state it keeps per token.

mod conn;
mod doctor;
mod grant;
mod handover;
mod layout;
mod lease;
mod release;
mod shards;
mod view;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::time::Instant;

use super::server::ServerUrl;
use super::{
    Acquire, Attempt, Health, HealthQuery, Holder, Listener, LockState, Outcome, Store, StoreError,
    StoreResult, TagWrite, Waiter,
};
use conn::{Endpoints, Resend};
use layout::Layout;
use lease::{Free, Pool, Waiting};
use view::{Blocker, Queue, Seen};

/// One name's queue and record at one revision, per name in request order.
#[derive(Clone)]
struct Snapshot {
    rev: i64,
    queues: Vec<Queue>,
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
    pool: Pool,
    /// What this process keeps per token, under one lock: a token's steps (queue, be handed
    /// the lock, hold, release) read and change several parts of it together.
    tokens: Mutex<HashMap<String, Token>>,
}

/// What this process keeps for one token on this store. A token with none of it has no
/// entry in `Inner::tokens`.
#[derive(Default)]
struct Token {
    /// While queued: the lease its entries live on.
    waiting: Option<Waiting>,
    /// While queued: a holder's lease granted ahead and named in its entry, so the grant
    /// that ends its wait need not write one: a release may hand the lock over on it, or a
    /// keep-alive, sent with the grant's read, starts its ttl afresh; neither costs a
    /// consensus round.
    spare: Option<Free>,
    /// While queued: what its listener watches.
    block: Option<Block>,
    /// While holding: what it last wrote, for its release.
    held: Option<Held>,
    /// A lease a grant transaction was sent on whose answer never came back (an error, or
    /// the engine's timeout dropped the attempt): etcd may have applied it, so the lease may
    /// hold this token's keys. Its release revokes it (see `release`).
    unheard: Option<i64>,
}

impl Token {
    fn is_idle(&self) -> bool {
        self.waiting.is_none()
            && self.spare.is_none()
            && self.block.is_none()
            && self.held.is_none()
            && self.unheard.is_none()
    }
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
                pool: Pool::default(),
                tokens: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl Inner {
    /// One transaction; `resend` says whether a second copy would be harmless (see `conn`).
    async fn txn(&self, txn: Txn, resend: Resend) -> StoreResult<TxnResponse> {
        self.conn
            .call(resend, |client| {
                let txn = txn.clone();
                async move { client.kv_client().txn(txn).await }
            })
            .await
    }

    /// Every queue and record of `names`, in one read at one revision.
    async fn read(&self, names: &[String]) -> StoreResult<Snapshot> {
        let resp = self
            .txn(Txn::new().and_then(self.reads(names)), Resend::Yes)
            .await?;
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
        let resp = self.txn(Txn::new().and_then(ops), Resend::Yes).await?;
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

    /// The token's entries were found on `leases`: an unheard grant among them is heard now.
    fn heard(&self, token: &str, leases: &HashSet<i64>) {
        self.token(token, |t| {
            if t.unheard.is_some_and(|l| leases.contains(&l)) {
                t.unheard = None;
            }
        });
    }

    /// Read or change what this process keeps for `token`, under the one lock.
    fn token<R>(&self, token: &str, f: impl FnOnce(&mut Token) -> R) -> R {
        let mut tokens = self.tokens.lock().unwrap();
        match tokens.get_mut(token) {
            Some(t) => {
                let r = f(t);
                if t.is_idle() {
                    tokens.remove(token);
                }
                r
            }
            None => {
                let mut t = Token::default();
                let r = f(&mut t);
                if !t.is_idle() {
                    tokens.insert(token.to_string(), t);
                }
                r
            }
        }
    }

    /// The state of one name as `inspect` shows it, with each holder's lease ttl from etcd.
    async fn state(&self, name: &str, q: &Queue) -> StoreResult<LockState> {
        let holders: Vec<&Seen> = q.entries.iter().filter(|e| e.entry.held).collect();
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
            .filter(|e| !e.entry.held)
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

    /// `connect` fails unless a member accepted the connection: a store that opened was
    /// reached, even if no leader has served it yet (an election).
    fn reached(&self) -> bool {
        true
    }

    fn describe(&self) -> &str {
        &self.inner.desc
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write).await
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

    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        self.inner.release(names, token, outcome).await
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
        let from = inner.layout.names_from(prefix);
        let resp = inner
            .conn
            .call(Resend::Yes, |client| {
                let from = from.clone();
                async move {
                    let options = GetOptions::new().with_prefix();
                    client.kv_client().get(from, Some(options)).await
                }
            })
            .await?;
        let names: Vec<String> = resp
            .kvs()
            .iter()
            .filter(|kv| Seen::read(kv).entry.held)
            .filter_map(|kv| inner.layout.name_of_entry(kv.key()))
            .collect();
        super::held_states(self, names).await
    }
}
