//! The S3 store: `s3://BUCKET[/PREFIX]?region=R[&endpoint=URL][&path_style=1][&create=1]`.
//!
//! One JSON object per lock name (`record`) holds the name's fence counter, how its last lease
//! ended, and its holders: the same rows the SQL stores keep, decided by the same rules
//! (`record::rules`), so the grant rule exists once. A transaction (`backend`) reads each record
//! with its ETag, decides, and writes each changed record with `If-Match` (or
//! `If-None-Match: *`): S3's conditional writes make each grant one atomic step per name; a
//! lost race (412, 409, or 404 on a vanished key) is "not granted, read again", never success.
//!
//! **Fences never go back.** A release writes a free record and never deletes it, so its
//! counter survives; and a grant lifts the counter to `fence_floor` of the server's clock (or
//! this host's, if ahead), so a deleted record or an emptied or recreated bucket still hands
//! out higher fences.
//!
//! **Expiry never depends on this host's clock.** A lease's expiry is written in the server's
//! clock: the `Date` of the reads that preceded the grant (or renewal), plus the ttl, plus one
//! second (`backend::PAD_MS`). A lease is judged expired only when the `Date` of a later read
//! has reached that expiry. The argument, with `Date` being the server's time cut down to the
//! whole second (so the true time is always at or after `Date`, and less than a second past it):
//! - the holder's conservative deadline is reckoned from the instant `s` it sent its attempt,
//!   on its own monotonic clock: `s + ttl - drift`;
//! - the grant's reads happened after `s`, at a true server time `g >= s`, so their
//!   `Date >= g - 1 s`, and the written expiry is `Date + ttl + 1 s >= g + ttl > s + ttl`;
//! - a waiter judges the lease expired only from a read whose `Date` reached the expiry, whose
//!   true time is at or after its `Date`, so after `s + ttl`: after the holder's deadline.
//!
//! This holds whatever any client's wall clock says (a waiter one hour fast reads the same
//! `Date`s). It assumes what every store assumes of its own clock: it does not step back, its
//! rate is within the drift allowance, and the S3 front ends answering keep time within a
//! second of each other (AWS's do; one SeaweedFS gateway is one clock). This host's clock
//! matters only to AWS itself, which refuses requests signed 15 minutes off (78, saying so).
//!
//! **Waiting.** S3 notifies nobody: a waiter looks again on its own pace (`poll`), about
//! min(1 s, ttl/4) plus jitter, never sooner. Waiters keep no row in the object (each would be
//! a paid write per look, and a conflict for the holder's renewals), so `inspect` shows none.

mod api;
mod backend;
mod doctor;
mod poll;
mod record;

use std::time::Duration;

use async_trait::async_trait;

use super::aws::{self, Endpoint, Service};
use super::server::ServerUrl;
use super::record::RecordStore;
use super::{
    Acquire, Attempt, Health, HealthQuery, Listener, LockState, Outcome, Store, StoreError,
    StoreResult, TagWrite,
};
use api::Bucket;
use backend::S3Backend;

/// An S3 bucket (or a prefix of one) as a store.
pub struct S3Store {
    inner: RecordStore<S3Backend>,
}

/// What an `s3://` URL says beyond the bucket.
struct Options {
    region: String,
    endpoint: Endpoint,
    path_style: bool,
    create: bool,
    ca_file: Option<String>,
}

fn flag(url: &mut ServerUrl, key: &str) -> StoreResult<bool> {
    match url.take_param(key).as_deref() {
        None | Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") | Some("") => Ok(true),
        Some(other) => Err(StoreError::invalid(format!(
            "{key}={other:?}: use {key}=1 or leave it out"
        ))),
    }
}

impl Options {
    fn take(url: &mut ServerUrl, env: aws::creds::Env) -> StoreResult<Options> {
        let region = aws::creds::region(url.take_param("region"), env)?;
        let endpoint = match url.take_param("endpoint") {
            Some(e) => Endpoint::parse(&e).map_err(StoreError::invalid)?,
            None => Endpoint {
                tls: true,
                host: format!("s3.{region}.amazonaws.com"),
                port: 443,
            },
        };
        let path_style = flag(url, "path_style")?;
        let create = flag(url, "create")?;
        let ca_file = url.take_param("ca_file");
        url.reject_unknown_params().map_err(StoreError::invalid)?;
        if ca_file.is_some() && !endpoint.tls {
            return Err(StoreError::invalid("ca_file needs an https:// endpoint"));
        }
        Ok(Options {
            region,
            endpoint,
            path_style,
            create,
            ca_file,
        })
    }
}

impl S3Store {
    /// Open the bucket a URL names, for locks in `namespace`: check that it is there (or
    /// create it with `?create=1`), which also proves the endpoint and the credentials.
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        _timeout: Duration,
    ) -> StoreResult<S3Store> {
        let env = |k: &str| std::env::var(k).ok();
        let mut url = url.clone();
        let opts = Options::take(&mut url, &env)?;
        let creds = aws::creds::credentials(&env)?;
        let name = url.hosts[0].host.clone();
        let tls = match opts.endpoint.tls {
            true => Some(aws::tls_config(opts.ca_file.as_deref())?),
            false => None,
        };
        let (endpoint, root) = match opts.path_style {
            true => (opts.endpoint.clone(), format!("/{name}")),
            false => {
                let mut e = opts.endpoint.clone();
                e.host = format!("{name}.{}", e.host);
                (e, String::new())
            }
        };
        let describe = format!("{url} (at {})", opts.endpoint);
        let bucket = Bucket {
            svc: Service::new(endpoint, tls, creds, opts.region, "s3"),
            name: name.clone(),
            root,
        };
        let prefix = url.path.trim_start_matches('/');
        let base = match prefix {
            "" => format!("{namespace}/"),
            p => format!("{p}/{namespace}/"),
        };
        // Its errors name the URL already (the caller puts it in front).
        match bucket.exists(&format!("{base}shard-list")).await? {
            true => {}
            false if opts.create => bucket.create().await?,
            false => {
                return Err(StoreError::config(format!(
                    "bucket {name} {}",
                    api::MISSING
                )));
            }
        }
        let backend = S3Backend {
            bucket,
            base,
            describe,
        };
        Ok(S3Store {
            inner: RecordStore::new(backend),
        })
    }
}

/// A lock's state as its holders reckon it: the time left of each lease without the second
/// of padding its stored expiry carries (`backend::PAD_MS`).
fn unpadded(mut state: LockState) -> LockState {
    for h in &mut state.holders {
        h.ttl_left_ms = h.ttl_left_ms.saturating_sub(backend::PAD_MS as u64);
    }
    state
}

/// The SQL stores' `Store` over the S3 transaction, but for waiting: a waiter keeps no row
/// (`try_acquire` never queues) and is paced by the lease's ttl (`listen`).
#[async_trait]
impl Store for S3Store {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn reached(&self) -> bool {
        true
    }
    async fn try_acquire(&self, req: &Acquire, _queue: bool) -> StoreResult<Attempt> {
        self.inner.try_acquire(req, false).await
    }
    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        Ok(Box::new(poll::Poll::new(poll::interval(req.ttl))))
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
        Ok(unpadded(self.inner.inspect(name).await?))
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        Ok(self
            .inner
            .list(prefix)
            .await?
            .into_iter()
            .map(unpadded)
            .collect())
    }
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.inner.shard_list(tag, write).await
    }
    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.inner.health(query).await
    }
}
