//! The ZooKeeper store: one ensemble (`zk://host:2181,host:2181[/chroot]`).
//!
//! The classic queue recipe (see `layout` for the nodes): a contender creates an ephemeral
//! sequential entry carrying its metadata, and holds once its mode admits everything queued
//! ahead of it; a waiter watches only the entry (or the few entries) whose going could admit
//! it, so a release wakes one exclusive waiter, not the herd. `run` leases are those entries
//! themselves and live exactly as long as the session; `lock` leases must outlive the process,
//! so the grant turns the entry into a TTL node whose liveness is judged by its mtime against
//! the server's clock.
//!
//! Every grant is one multi-op that compare-and-sets the name's record (fence, how the last
//! lease ended, who holds), so grants on a name are serialised by the record's version whatever
//! the queue looked like when read: a stale view fails the multi and is read again. Detached
//! holders found expired are deleted in that same multi, version-checked, so an `extend` racing
//! with the expiry either wins (and the grant is retried) or loses (and returns false).
//!
//! Fence: the czxid of the holder's entry, which rises with every entry; the record's counter
//! only steps in where that would not strictly rise (a `limit` waiter admitted before an
//! older one, or after a raise by the quorum engine's bakery rule).

mod acquire;
mod conn;
mod doctor;
mod inspect;
mod layout;
mod lease;
mod shards;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use zookeeper_client::{
    Acl, Acls, AuthId, Client, CreateMode, CreateOptions, Error, MultiReadResult, Permission, Stat,
};

use super::server::ServerUrl;
use super::{
    Acquire, Attempt, ErrorKind, Health, HealthQuery, Listener, LockState, Outcome, Store,
    StoreError, StoreResult, TagWrite,
};
use conn::{Conn, classify};
use layout::{Child, Paths, Record};

/// Session timeout asked for when no lease says otherwise (`unlock`, `inspect`, ...).
const DEFAULT_SESSION: Duration = Duration::from_secs(10);

/// How often one call re-reads after losing a compare-and-set to a concurrent change.
const CONTENTION: usize = 16;

pub struct ZkStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    desc: String,
    paths: Paths,
    /// The ACL of every node dlock creates. With digest auth: the identity may do anything,
    /// the world only read (so `inspect` works for all). Without: ZooKeeper's open ACL.
    acl: Vec<Acl>,
    /// Our queue entries by token, so an attempt enqueues once (`Pending`: a create was sent
    /// but its answer lost; the next attempt looks for the entry by token before creating).
    mine: Mutex<HashMap<String, Mine>>,
    /// Waiters' wake-ups by token, and the nodes each already watches.
    waits: Arc<Mutex<HashMap<String, Waiting>>>,
    /// Tokens whose last attempt's answer was not heard (cut off by the engine's timeout, or
    /// the connection lost under it): a grant may have been applied unheard (`release`).
    unheard: Mutex<HashSet<String>>,
}

#[derive(Clone)]
enum Mine {
    Pending,
    Created(Vec<String>),
    /// A granted `run` lease, per name: its entry and the record as the grant left it, so the
    /// release can compare-and-set without reading first (one round trip less per handoff).
    Holding(Vec<Hold>),
}

#[derive(Clone)]
struct Hold {
    node: String,
    record: Record,
    version: i32,
}

struct Waiting {
    notify: Arc<Notify>,
    watching: HashSet<String>,
}

/// One lock name as read in one multi-read (a consistent snapshot).
struct View {
    exists: bool,
    record: Record,
    /// The record's data version, for compare-and-set (-1: no node).
    version: i32,
    /// Queue entries in FIFO order, then detached holders.
    children: Vec<Child>,
    /// Children this version cannot read: each blocks like an exclusive holder.
    undecodable: Vec<String>,
    /// Our own queue entry's stat, when asked for (None: it is gone).
    own: Option<Stat>,
}

/// A detached holder with what its data and the server's clock say.
struct Held {
    child: Child,
    version: i32,
    meta: String,
    /// Lease time left by the server's clock; <= 0: expired (though the node may linger).
    left_ms: i64,
}

impl ZkStore {
    pub fn open(url: &ServerUrl, namespace: &str, timeout: Duration) -> StoreResult<ZkStore> {
        url.reject_unknown_params().map_err(StoreError::invalid)?;
        let chroot = check_chroot(&url.path).map_err(StoreError::invalid)?;
        let auth = match (&url.user, &url.password) {
            (None, None) => None,
            (Some(u), Some(p)) if !u.contains(':') => Some(format!("{u}:{p}").into_bytes()),
            (Some(_), Some(_)) => {
                return Err(StoreError::invalid(
                    "a ZooKeeper digest user name cannot contain ':'",
                ));
            }
            (Some(_), None) => {
                return Err(StoreError::invalid(String::from(
                    "ZooKeeper digest authentication needs a password as well as the user \
                     (in the URL, ?password_file=, ?password_env= or DLOCK_PASSWORD)",
                )));
            }
            (None, Some(_)) => {
                return Err(StoreError::invalid(String::from(
                    "a password was given (in the URL, a parameter or DLOCK_PASSWORD) but \
                     no user; ZooKeeper digest authentication needs zk://USER@host",
                )));
            }
        };
        let acl = if auth.is_some() {
            vec![
                Acl::new(Permission::ALL, AuthId::new("auth", "")),
                Acl::new(Permission::READ, AuthId::anyone()),
            ]
        } else {
            Vec::new()
        };
        let hosts: Vec<String> = url.hosts.iter().map(|h| h.to_string()).collect();
        Ok(ZkStore {
            inner: Arc::new(Inner {
                conn: Conn::start(hosts.join(","), auth, timeout)?,
                desc: url.to_string(),
                paths: Paths::new(chroot, namespace),
                acl,
                mine: Mutex::new(HashMap::new()),
                waits: Arc::new(Mutex::new(HashMap::new())),
                unheard: Mutex::new(HashSet::new()),
            }),
        })
    }
}

impl Drop for ZkStore {
    fn drop(&mut self) {
        self.inner.conn.close();
    }
}

/// A chroot is an absolute ZooKeeper path without a trailing slash ("" for none).
fn check_chroot(path: &str) -> Result<&str, String> {
    if path.is_empty() || path == "/" {
        return Ok("");
    }
    let ok = path.starts_with('/')
        && path[1..].split('/').all(|seg| {
            !seg.is_empty() && seg != "." && seg != ".." && !seg.contains(char::is_control)
        });
    if ok {
        Ok(path)
    } else {
        Err(format!(
            "{path:?} is not a chroot; write an absolute path like /app/locks"
        ))
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn malformed() -> StoreError {
    StoreError::protocol("malformed answer from the server")
}

/// A path the client refused to send (only a bug could build one).
fn bad_path(e: Error) -> StoreError {
    StoreError::protocol(format!("bad ZooKeeper path: {e}"))
}

impl Inner {
    fn opts(&self, mode: CreateMode) -> CreateOptions<'_> {
        mode.with_acls(if self.acl.is_empty() {
            Acls::anyone_all()
        } else {
            Acls::new(&self.acl)
        })
    }

    /// The session; for a `run` lease it must last at least the ttl, or the store could drop the
    /// lease (with the session) before the client's deadline.
    async fn client(&self, req: Option<&Acquire>) -> StoreResult<Client> {
        // The protocol carries the timeout as i32 milliseconds; servers cap it far lower anyway.
        let most = Duration::from_millis(i32::MAX as u64);
        let c = self
            .conn
            .client(req.map(|r| r.ttl.min(most)), DEFAULT_SESSION)
            .await?;
        if let Some(r) = req
            && !r.detached
            && c.session_timeout() < r.ttl
        {
            return Err(StoreError::invalid(format!(
                "the ZooKeeper session timeout is {} (the server's maxSessionTimeout caps it), \
                 shorter than the ttl {}; a `run` lease lives in the session, so use --ttl {} or \
                 less, or raise maxSessionTimeout in zoo.cfg",
                humantime::format_duration(c.session_timeout()),
                humantime::format_duration(r.ttl),
                humantime::format_duration(c.session_timeout()),
            )));
        }
        Ok(c)
    }

    /// Records and children of `names` (and our own entries' stats) in one multi-read.
    async fn view(
        &self,
        c: &Client,
        names: &[String],
        own: Option<&[String]>,
    ) -> StoreResult<Vec<View>> {
        let mut r = c.new_multi_reader();
        for (i, name) in names.iter().enumerate() {
            let p = self.paths.name(name);
            r.add_get_data(&p).map_err(bad_path)?;
            r.add_get_children(&p).map_err(bad_path)?;
            if let Some(own) = own {
                r.add_get_data(&self.paths.child(name, &own[i]))
                    .map_err(bad_path)?;
            }
        }
        let results = r.commit().await.map_err(|e| classify(e, "read the lock"))?;
        let per = if own.is_some() { 3 } else { 2 };
        if results.len() != names.len() * per {
            return Err(malformed());
        }
        let mut it = results.into_iter();
        let mut out = Vec::with_capacity(names.len());
        for _ in names {
            let (exists, record, version) = match it.next() {
                Some(MultiReadResult::Data { data, stat }) => (
                    true,
                    Record::parse(&data).map_err(StoreError::protocol)?,
                    stat.version,
                ),
                Some(MultiReadResult::Error { err: Error::NoNode }) => {
                    (false, Record::default(), -1)
                }
                Some(MultiReadResult::Error { err }) => return Err(classify(err, "read the lock")),
                _ => return Err(malformed()),
            };
            let nodes = match it.next() {
                Some(MultiReadResult::Children { children }) => children,
                Some(MultiReadResult::Error { err: Error::NoNode }) => Vec::new(),
                Some(MultiReadResult::Error { err }) => return Err(classify(err, "read the lock")),
                _ => return Err(malformed()),
            };
            let own = if own.is_none() {
                None
            } else {
                match it.next() {
                    Some(MultiReadResult::Data { stat, .. }) => Some(stat),
                    Some(MultiReadResult::Error { err: Error::NoNode }) => None,
                    Some(MultiReadResult::Error { err }) => {
                        return Err(classify(err, "read the lock"));
                    }
                    _ => return Err(malformed()),
                }
            };
            out.push(View {
                exists,
                record,
                version,
                children: layout::parse_children(&nodes),
                undecodable: layout::undecodable(&nodes),
                own,
            });
        }
        Ok(out)
    }

    /// Data and stat of each path (None: gone), in one multi-read.
    async fn fetch(
        &self,
        c: &Client,
        paths: &[String],
    ) -> StoreResult<Vec<Option<(Vec<u8>, Stat)>>> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let mut r = c.new_multi_reader();
        for p in paths {
            r.add_get_data(p).map_err(bad_path)?;
        }
        let results = r.commit().await.map_err(|e| classify(e, "read the lock"))?;
        if results.len() != paths.len() {
            return Err(malformed());
        }
        results
            .into_iter()
            .map(|r| match r {
                MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
                MultiReadResult::Error { err: Error::NoNode } => Ok(None),
                MultiReadResult::Error { err } => Err(classify(err, "read the lock")),
                _ => Err(malformed()),
            })
            .collect()
    }

    /// The server's clock in ms: the mtime a write to the namespace's node gets. TTL nodes are
    /// judged by the server's time, never ours.
    async fn now(&self, c: &Client) -> StoreResult<i64> {
        let base = &self.paths.base;
        match c.set_data(base, &[], None).await {
            Ok(stat) => return Ok(stat.mtime),
            Err(Error::NoNode) => {}
            Err(e) => return Err(classify(e, "read the server's clock")),
        }
        self.ensure(c, &[]).await?;
        c.set_data(base, &[], None)
            .await
            .map(|s| s.mtime)
            .map_err(|e| classify(e, "read the server's clock"))
    }

    /// The detached holders of each name (those of `only` if given), judged by the server's
    /// clock. Costs nothing when there are none, which is the usual case. `looking`: only to
    /// show them (`inspect`), so a reader who may not write the clock node gets its own clock.
    async fn held(
        &self,
        c: &Client,
        names: &[String],
        views: &[View],
        only: Option<&str>,
        looking: bool,
    ) -> StoreResult<Vec<Vec<Held>>> {
        let mut paths = Vec::new();
        let mut owners = Vec::new();
        for (i, v) in views.iter().enumerate() {
            for ch in v.children.iter().filter(|ch| !ch.queued()) {
                if only.is_none_or(|t| ch.token == t) {
                    paths.push(self.paths.child(&names[i], &ch.node));
                    owners.push((i, ch.clone()));
                }
            }
        }
        let mut out: Vec<Vec<Held>> = views.iter().map(|_| Vec::new()).collect();
        if paths.is_empty() {
            return Ok(out);
        }
        // Read the nodes before the clock: a node changed in between looks older, never younger.
        let (data, now) = tokio::join!(self.fetch(c, &paths), self.now(c));
        let now = match now {
            Err(e) if e.kind() == ErrorKind::Refused && looking => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            other => other?,
        };
        let data = data?;
        for ((i, child), d) in owners.into_iter().zip(data) {
            if let Some((bytes, stat)) = d {
                let (ttl_ms, meta) = layout::parse_entry(&bytes);
                out[i].push(Held {
                    child,
                    version: stat.version,
                    meta,
                    left_ms: stat.mtime.saturating_add(ttl_ms as i64) - now,
                });
            }
        }
        Ok(out)
    }

    /// Create the namespace's node and the names' nodes where missing.
    async fn ensure(&self, c: &Client, names: &[String]) -> StoreResult<()> {
        c.mkdir(&self.paths.base, &self.opts(CreateMode::Persistent))
            .await
            .map_err(|e| classify(e, "create the namespace's node"))?;
        for name in names {
            let empty = Record::default().to_bytes();
            match c
                .create(
                    &self.paths.name(name),
                    &empty,
                    &self.opts(CreateMode::Persistent),
                )
                .await
            {
                Ok(_) | Err(Error::NodeExists) => {}
                Err(e) => return Err(classify(e, "create the lock's node")),
            }
        }
        Ok(())
    }

    fn mark_unheard(&self, token: &str, unheard: bool) {
        if let Ok(mut u) = self.unheard.lock() {
            if unheard {
                u.insert(token.to_string());
            } else {
                u.remove(token);
            }
        }
    }

    /// Whether `token`'s last attempt went unheard while this process holds no other lease
    /// in the session: then the session may be given up to free what the attempt may have
    /// been granted (see `lease::release`).
    fn may_abandon_for(&self, token: &str) -> bool {
        let unheard = self.unheard.lock().is_ok_and(|u| u.contains(token));
        let others_hold = self.mine.lock().map_or(true, |m| {
            m.iter()
                .any(|(t, s)| t != token && matches!(s, Mine::Holding(_)))
        });
        unheard && !others_hold
    }

    fn forget(&self, token: &str) {
        if let Ok(mut m) = self.mine.lock() {
            m.remove(token);
        }
        if let Ok(mut w) = self.waits.lock() {
            w.remove(token);
        }
    }
}

#[async_trait]
impl Store for ZkStore {
    fn describe(&self) -> &str {
        &self.inner.desc
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write).await
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query).await
    }

    fn reached(&self) -> bool {
        self.inner.conn.reached()
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        let token = req.token.clone();
        let (inner, req) = (self.inner.clone(), req.clone());
        // Marked before the attempt is sent, since a timeout drops this future without a
        // word; cleared once an answer is heard.
        self.inner.mark_unheard(&token, true);
        let r = self
            .inner
            .conn
            .spawn(async move { inner.acquire(&req, queue).await })
            .await;
        let heard = match &r {
            Ok(_) => true,
            Err(e) => e.kind() != ErrorKind::Unavailable,
        };
        if heard {
            self.inner.mark_unheard(&token, false);
        }
        r
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        let mut waits = self
            .inner
            .waits
            .lock()
            .map_err(|_| StoreError::protocol("internal error"))?;
        let w = waits.entry(req.token.clone()).or_insert_with(|| Waiting {
            notify: Arc::new(Notify::new()),
            watching: HashSet::new(),
        });
        Ok(Box::new(Wake {
            notify: w.notify.clone(),
        }))
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let (inner, names, owner) = (self.inner.clone(), names.to_vec(), token.to_string());
        let renewed = self
            .inner
            .conn
            .spawn(async move { inner.renew(&names, &owner, ttl).await })
            .await;
        if let Ok(true) = renewed {
            // The grant was applied after all, and its lease is in use (a quorum's other
            // stores granted it): from here it ends as any lease does, by the usual release.
            self.inner.mark_unheard(token, false);
        }
        renewed
    }

    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        let (inner, names, token) = (self.inner.clone(), names.to_vec(), token.to_string());
        self.inner
            .conn
            .spawn(async move { inner.release(&names, &token, outcome).await })
            .await
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let (inner, names) = (self.inner.clone(), names.to_vec());
        self.inner
            .conn
            .spawn(async move { inner.force_release(&names).await })
            .await
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        let (inner, names, fences) = (self.inner.clone(), names.to_vec(), fences.to_vec());
        self.inner
            .conn
            .spawn(async move { inner.raise_fence(&names, &fences).await })
            .await
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let (inner, name) = (self.inner.clone(), name.to_string());
        self.inner
            .conn
            .spawn(async move {
                let c = inner.client(None).await?;
                inner.inspect(&c, &name).await
            })
            .await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let (inner, prefix) = (self.inner.clone(), prefix.to_string());
        self.inner
            .conn
            .spawn(async move { inner.list(&prefix).await })
            .await
    }
}

/// A waiter's wake-up: a watch on a node that blocks it fired.
struct Wake {
    notify: Arc<Notify>,
}

#[async_trait]
impl Listener for Wake {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.notify.notified()).await;
    }
}
