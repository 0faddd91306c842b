//! The S3 store: `s3://BUCKET[/PREFIX]?region=R[&endpoint=URL][&path_style=1][&create=1]`.
//!
//! One JSON object per lock name, its ETag the record's version, decided and written by the
//! records' transaction that DynamoDB shares (`aws::records`, whose module doc holds the
//! expiry argument). S3's conditional writes (`If-Match`, `If-None-Match: *`) make each grant
//! one atomic step per name; a lost race (412, 409, or 404 on a vanished key) is "not granted,
//! read again", never success.

mod api;
mod doctor;

use std::time::Duration;

use super::aws::records::ObjectStore;
use super::aws::{self, Endpoint, Options, Service};
use super::server::ServerUrl;
use super::{StoreError, StoreResult};
use api::Bucket;

/// An S3 bucket (or a prefix of one) as a store.
pub type S3Store = ObjectStore<Bucket>;

/// Open the bucket a URL names, for locks in `namespace`: check that it is there (or create it
/// with `?create=1`), which also proves the endpoint and the credentials.
pub async fn connect(url: &ServerUrl, namespace: &str, _timeout: Duration) -> StoreResult<S3Store> {
    let env = |k: &str| std::env::var(k).ok();
    let mut url = url.clone();
    let path_style = aws::flag(&mut url, "path_style")?;
    let opts = Options::take(&mut url, &env, |region| {
        format!("s3.{region}.amazonaws.com")
    })?;
    let creds = aws::creds::credentials(&env)?;
    let name = url.hosts[0].host.clone();
    let tls = opts.tls()?;
    let (endpoint, root) = match path_style {
        true => (opts.endpoint.clone(), format!("/{name}")),
        false => {
            let mut e: Endpoint = opts.endpoint.clone();
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
    Ok(ObjectStore::new(bucket, base, describe))
}
