//! What `dlock doctor` reports of a NATS server and its bucket.

use std::time::Duration;

use async_nats::jetstream::stream::StorageType;
use bytes::Bytes;

use super::bucket::Bucket;
use super::keys::Keys;
use super::setup;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult, clock_finding, wall_ms};

pub async fn health(b: &Bucket, keys: &Keys, q: HealthQuery) -> StoreResult<Health> {
    let mut health = Health {
        version: Some(b.js.client().server_info().version),
        ..Health::default()
    };
    let Some(c) = setup::stream_config(&b.js, &b.name).await? else {
        return Err(b.gone());
    };
    let bucket = match setup::lacks(&c) {
        None if c.allow_atomic_publish => Finding::new(
            "bucket",
            Severity::Ok,
            format!(
                "KV bucket {:?}: per-message TTL and delete markers on: the server expires \
                 leases, and an expired one never comes back; atomic batches on: a grant of \
                 several names is one write",
                b.name
            ),
        ),
        None => Finding::new(
            "bucket",
            Severity::Note,
            format!(
                "KV bucket {:?}: per-message TTL and delete markers on, atomic batches \
                 (allow_atomic, NATS 2.12+) off: a grant of several names is written name by \
                 name, and a dlock killed between two writes leaves the first names held \
                 until its ttl; ?create=1 switches them on",
                b.name
            ),
        ),
        Some(what) => Finding::new(
            "bucket",
            Severity::Void,
            format!(
                "KV bucket {:?} lacks {what}: leases would never expire; add ?create=1 to the \
                 store URL to switch it on",
                b.name
            ),
        ),
    };
    health.findings.push(bucket);
    health.findings.push(persistence(&c, q));
    // The server's clock, from a key it stamps (and expires in a second).
    let before = wall_ms();
    let key = format!("{}.clock", keys.shards().trim_end_matches(".shards"));
    b.put(&key, Bytes::new(), None, Some(Duration::from_secs(1)))
        .await?;
    let got = b.get(&key).await?;
    let after = wall_ms();
    if got.rev > 0 {
        clock_finding(&mut health, (got.micros / 1000) as i64, before, after);
    }
    Ok(health)
}

/// A bucket in memory forgets every lease and fence on a restart; one on file loses what
/// the last `sync_interval` (2 minutes by default) did not flush when the host crashes.
fn persistence(c: &async_nats::jetstream::stream::Config, q: HealthQuery) -> Finding {
    let severity = |worse| if q.in_quorum { worse } else { Severity::Warn };
    if c.storage == StorageType::Memory {
        return Finding::new(
            "persistence",
            severity(Severity::Void),
            "the bucket is kept in memory: a server restart forgets every lease (fences stay \
             above the old ones, floored at the server's clock)",
        );
    }
    let replicas = c.num_replicas.max(1);
    Finding::new(
        "persistence",
        if replicas > 1 {
            Severity::Ok
        } else {
            Severity::Note
        },
        format!(
            "the bucket is on file with {replicas} replica(s); a crash of the host (not of \
             the server) can lose what JetStream did not flush yet (sync_interval, 2 minutes \
             by default; `sync_interval: always` in the server's configuration flushes every \
             write)"
        ),
    )
}
