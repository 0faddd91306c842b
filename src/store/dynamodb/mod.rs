//! The DynamoDB store: `dynamodb://TABLE?region=R[&endpoint=URL][&create=1]`, a table whose
//! string partition key is `pk` (and no sort key).
//!
//! One item per lock name, holding the record's JSON body and a random version (`api`),
//! decided and written by the records' transaction S3 shares (`aws::records`, whose module doc
//! holds the expiry argument): every write is a PutItem conditional on the version read, so
//! each grant is one atomic step per name, and a refused condition
//! (`ConditionalCheckFailedException`, `TransactionConflictException`) is "not granted, read
//! again". Expiry is judged only by the server's `Date` header, never by this host's clock
//! (DynamoDB's condition expressions have no server clock). A release writes a free record and
//! never deletes the item, which keeps the fence counter; a deleted item or a recreated table
//! still gives higher fences by the clock floor. Waiters poll (`aws::records::poll`).

mod api;
mod doctor;

use std::time::Duration;

use super::aws::records::ObjectStore;
use super::aws::{self, Options, Service};
use super::server::ServerUrl;
use super::{StoreError, StoreResult};
use api::Table;

/// A DynamoDB table as a store.
pub type DynamoStore = ObjectStore<Table>;

/// Open the table a URL names, for locks in `namespace`: check that it is there with the key
/// dlock needs (or create it with `?create=1`), which also proves the endpoint and the
/// credentials.
pub async fn connect(
    url: &ServerUrl,
    namespace: &str,
    _timeout: Duration,
) -> StoreResult<DynamoStore> {
    let env = |k: &str| std::env::var(k).ok();
    let mut url = url.clone();
    let opts = Options::take(&mut url, &env, |region| {
        format!("dynamodb.{region}.amazonaws.com")
    })?;
    let creds = aws::creds::credentials(&env)?;
    let name = url.hosts[0].host.clone();
    let tls = opts.tls()?;
    let describe = format!("{url} (at {})", opts.endpoint);
    let table = Table {
        svc: Service::new(opts.endpoint, tls, creds, opts.region, "dynamodb"),
        name: name.clone(),
    };
    let prefix = url.path.trim_start_matches('/');
    let base = match prefix {
        "" => format!("{namespace}/"),
        p => format!("{p}/{namespace}/"),
    };
    // Its errors name the URL already (the caller puts it in front).
    match table.describe().await? {
        Some(t) if api::schema_fits(&t) => {}
        Some(_) => {
            return Err(StoreError::config(format!(
                "table {name} does not have {}: dlock cannot use it",
                api::SCHEMA
            )));
        }
        None if opts.create => table.create().await?,
        None => {
            return Err(StoreError::config(format!("table {name} {}", api::MISSING)));
        }
    }
    Ok(ObjectStore::new(table, base, describe))
}
