//! The DynamoDB store: `dynamodb://TABLE?region=R[&endpoint=URL][&create=1]`, a table whose
//! string partition key is `pk` (and no sort key).
//!
//! One item per lock name, holding the record's JSON body and a random version (`api`),
//! decided and written by the records' transaction S3 shares (`aws::records`, whose module doc
//! holds the expiry argument): a write of one item is a PutItem conditional on the version
//! read, and a write of several (a multi-name grant, renewal or release, up to 100 names) is
//! one TransactWriteItems of such Puts, so a grant is one atomic request, all of its names or
//! none even if dlock is killed mid-way. A refused condition
//! (`ConditionalCheckFailedException`, a `TransactionCanceledException` for failed conditions
//! or conflicts, `TransactionConflictException`) is "not granted, read again". Expiry is
//! judged only by the server's `Date` header, never by this host's clock (DynamoDB's condition
//! expressions have no server clock). A release writes a free record and never deletes the
//! item, which keeps the fence counter; a deleted item or a recreated table still gives
//! higher fences by the clock floor. Waiters poll (`aws::records::poll`).

mod api;
mod doctor;

use std::time::Duration;

use super::StoreResult;
use super::aws::records::ObjectStore;
use super::aws::{self, Options, Service};
use super::server::ServerUrl;
use api::Table;

/// A DynamoDB table as a store.
pub type DynamoStore = ObjectStore<Table>;

/// Open the table a URL names, for locks in `namespace`: dial the endpoint (the connection is
/// kept for the first request). Nothing is asked of the table yet, which would cost every
/// command a round trip: the first request finds a missing table (78, or created with
/// `?create=1`) or one with another key (78), and proves the credentials.
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
        name,
        create: opts.create,
        created: Default::default(),
    };
    let prefix = url.path.trim_start_matches('/');
    let base = match prefix {
        "" => format!("{namespace}/"),
        p => format!("{p}/{namespace}/"),
    };
    table.svc.client.connect().await?;
    Ok(ObjectStore::new(table, base, describe))
}
