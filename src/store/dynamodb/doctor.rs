//! What `dlock doctor` asks of DynamoDB: a signed read (the endpoint answers and accepts the
//! signature), the table and its key schema, the server's clock against this host's, and what
//! DynamoDB (and DynamoDB Local) cannot promise a lock.

use super::api::{self, Table};
use crate::store::aws::records::Objects;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult, clock_finding, wall_ms};

pub async fn health(table: &Table, probe: &str, _q: HealthQuery) -> StoreResult<Health> {
    let before = wall_ms();
    // A strongly consistent read of any key (present or not); a refusal is an error (77).
    let obj = table.get(probe).await?;
    let after = wall_ms();
    let svc = &table.svc;
    let mut h = Health::default();
    h.findings.push(Finding::new(
        "signature",
        Severity::Ok,
        format!(
            "{} accepted a request signed with access key {} ({}); DynamoDB Local accepts \
             any signature, so this proves the signer only against AWS itself",
            svc.client.endpoint, svc.creds.access_key, svc.creds.source
        ),
    ));
    let (severity, schema) = match table.describe().await? {
        Some(t) if api::schema_fits(&t) => (
            Severity::Ok,
            format!(
                "table {} in region {}: {}, {}",
                table.name,
                svc.region,
                api::SCHEMA,
                t["TableStatus"].as_str().unwrap_or("status unknown")
            ),
        ),
        Some(_) => (
            Severity::Void,
            format!("table {} does not have {}", table.name, api::SCHEMA),
        ),
        None => (
            Severity::Void,
            format!("table {} {}", table.name, api::MISSING),
        ),
    };
    h.findings.push(Finding::new("table", severity, schema));
    // `Date` is in whole seconds: the offset is known to a second at best.
    clock_finding(&mut h, obj.date_ms + 500, before - 500, after + 500);
    h.findings.push(Finding::new(
        "persistence",
        Severity::Ok,
        "DynamoDB stores a write before it answers it, and a release never deletes an item; \
         an item deleted or a table recreated behind dlock's back still gets higher fences \
         (they are floored at the clock)",
    ));
    h.findings.push(Finding::new(
        "expiry",
        Severity::Note,
        "DynamoDB has no server clock in its conditions: a lease's end is judged by the \
         server's Date header (whole seconds), so it runs up to a second past its ttl; a \
         table's TTL setting plays no part",
    ));
    h.findings.push(Finding::new(
        "waiting",
        Severity::Note,
        "DynamoDB notifies nobody: a waiter reads again every min(1 s, ttl/4) plus 0-50 % at \
         random (one strongly consistent read each), so it sees a release up to that late, \
         and waiters are served in no particular order",
    ));
    Ok(h)
}
