//! What `dlock doctor` asks of S3: a signed read (the endpoint answers, and accepts the
//! signature: an answer to a GET names a refused signature, where a HEAD cannot), the bucket,
//! the server's clock against this host's, persistence, and what S3 cannot promise a lock.

use super::api::Bucket;
use crate::store::aws::records::Objects;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult, clock_finding, wall_ms};

pub async fn health(bucket: &Bucket, probe: &str, _q: HealthQuery) -> StoreResult<Health> {
    let before = wall_ms();
    // Any key's GET (present or not) proves the signature; a refused one is an error (77).
    let obj = bucket.get(probe).await?;
    let after = wall_ms();
    let svc = &bucket.svc;
    let mut h = Health::default();
    h.findings.push(Finding::new(
        "signature",
        Severity::Ok,
        format!(
            "{} accepted a request signed with access key {} ({})",
            svc.client.endpoint, svc.creds.access_key, svc.creds.source
        ),
    ));
    h.findings.push(Finding::new(
        "bucket",
        Severity::Ok,
        format!(
            "bucket {} in region {}, {} addressing",
            bucket.name,
            svc.region,
            if bucket.root.is_empty() {
                "virtual-hosted"
            } else {
                "path-style"
            }
        ),
    ));
    // `Date` is in whole seconds: the offset is known to a second at best.
    clock_finding(&mut h, obj.date_ms + 500, before - 500, after + 500);
    h.findings.push(Finding::new(
        "persistence",
        Severity::Ok,
        "S3 stores a write before it answers it, and a release never deletes a record; a \
         record deleted or a bucket emptied behind dlock's back still gets higher fences (they \
         are floored at the clock)",
    ));
    h.findings.push(Finding::new(
        "expiry",
        Severity::Note,
        "S3 has no server-side expiry: a lease's end is judged by the server's Date (whole \
         seconds), so it runs up to a second past its ttl, and the S3 front ends must keep \
         time within a second of each other (AWS's do)",
    ));
    h.findings.push(Finding::new(
        "waiting",
        Severity::Note,
        "S3 notifies nobody: a waiter looks again every min(1 s, ttl/4) plus 0-50 % at \
         random (one paid request each), so it sees a release up to that late, and waiters \
         are served in no particular order",
    ));
    Ok(h)
}
