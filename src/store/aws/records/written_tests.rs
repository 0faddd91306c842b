//! A waiter's grant on the record a ring carried, over records kept in memory whose server
//! clock the test sets: no read, an expiry at or after the one a read would have written, and
//! a ring gone stale (the record written again since) never taken.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{Cond, Object, Objects, Records, record};
use crate::store::record::RecordStore;
use crate::store::{
    Acquire, Attempt, Health, HealthQuery, Mode, Outcome, Store, StoreError, StoreResult,
};

/// Records in memory: each body with its version, a server clock, and the reads counted.
#[derive(Default)]
struct Memory {
    bodies: Mutex<HashMap<String, (Bytes, String)>>,
    date_ms: AtomicI64,
    reads: AtomicUsize,
    versions: AtomicUsize,
}

#[async_trait]
impl Objects for Arc<Memory> {
    async fn get(&self, key: &str) -> StoreResult<Object> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(Object {
            body: self.bodies.lock().unwrap().get(key).cloned(),
            date_ms: self.date_ms.load(Ordering::SeqCst),
        })
    }
    async fn put(&self, key: &str, body: Vec<u8>, cond: Cond<'_>) -> StoreResult<Option<String>> {
        let mut bodies = self.bodies.lock().unwrap();
        let ok = match (cond, bodies.get(key)) {
            (Cond::Absent, None) => true,
            (Cond::Match(v), Some((_, now))) => v == now,
            _ => false,
        };
        if !ok {
            return Ok(None);
        }
        let version = format!("v{}", self.versions.fetch_add(1, Ordering::SeqCst));
        bodies.insert(key.to_string(), (body.into(), version.clone()));
        Ok(Some(version))
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let bodies = self.bodies.lock().unwrap();
        Ok(bodies
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
    async fn health(&self, _probe: &str, _query: HealthQuery) -> StoreResult<Health> {
        Err(StoreError::protocol("not asked of records in memory"))
    }
}

/// A process's store over the shared records.
fn process(memory: &Arc<Memory>) -> RecordStore<Records<Arc<Memory>>> {
    RecordStore::new(Records {
        objects: memory.clone(),
        base: "p/ns/".into(),
        describe: "memory".into(),
        written: Default::default(),
    })
}

fn request(ttl: Duration) -> Acquire {
    crate::store::conformance::request(&["job"], Mode::Exclusive, ttl, false)
}

/// The stored expiry of the record's only holder.
fn stored_expiry(memory: &Memory) -> i64 {
    let bodies = memory.bodies.lock().unwrap();
    let rows = record::decode("job", &bodies["p/ns/lock/job"].0).unwrap();
    assert_eq!(rows.holders.len(), 1, "{rows:?}");
    rows.holders[0].expires
}

/// A holder on one process takes and releases `job`; the ring its release would send.
async fn released_with_ring(memory: &Arc<Memory>) -> Vec<u8> {
    let releaser = process(memory);
    let held = request(Duration::from_secs(30));
    let a = releaser.try_acquire(&held, false).await.unwrap();
    assert!(matches!(a, Attempt::Granted(_)), "{a:?}");
    let names = &held.names;
    assert!(
        releaser
            .release(names, &held.token, Outcome::Released)
            .await
            .unwrap()
    );
    releaser
        .backend
        .ring("job")
        .expect("a release rings with its record")
}

#[tokio::test]
async fn a_rung_grant_reads_nothing_and_stores_no_earlier_an_end_than_a_read_would() {
    let memory = Arc::new(Memory::default());
    memory.date_ms.store(1_800_000_000_000, Ordering::SeqCst);
    let ring = released_with_ring(&memory).await;
    // The server's clock went on (up to the second a `Date` hides) before the waiter's grant.
    let server_now = memory.date_ms.fetch_add(999, Ordering::SeqCst) + 999;
    let waiter = process(&memory);
    waiter.backend.rung("job", &ring);
    let reads = memory.reads.load(Ordering::SeqCst);
    let ttl = Duration::from_secs(30);
    let a = waiter.try_acquire(&request(ttl), true).await.unwrap();
    assert!(matches!(a, Attempt::Granted(_)), "{a:?}");
    assert_eq!(memory.reads.load(Ordering::SeqCst), reads, "the grant read");
    let end = stored_expiry(&memory);
    assert!(
        end >= server_now + ttl.as_millis() as i64,
        "the stored end {end} is before the server's clock plus the ttl"
    );
}

#[tokio::test]
async fn a_ring_for_a_record_written_since_is_not_taken() {
    let memory = Arc::new(Memory::default());
    let ring = released_with_ring(&memory).await;
    // Another process takes the lock after the release rang.
    let other = process(&memory);
    let held = request(Duration::from_secs(30));
    let a = other.try_acquire(&held, false).await.unwrap();
    assert!(matches!(a, Attempt::Granted(_)), "{a:?}");
    let waiter = process(&memory);
    waiter.backend.rung("job", &ring);
    let a = waiter
        .try_acquire(&request(Duration::from_secs(30)), true)
        .await
        .unwrap();
    assert!(
        matches!(a, Attempt::Busy { .. }),
        "a stale ring let a second holder in: {a:?}"
    );
}

/// A grant on a record as last written (here this process's own release) floors its fence at
/// the `Date` the record was decided on, never at the bound of the clock it reckons the lease
/// from: that bound may be ahead of the server's clock, and once the store forgets, the next
/// grant's floor comes from a read's `Date` alone.
#[tokio::test]
async fn fences_from_records_as_written_stay_below_the_next_seconds_floor() {
    let memory = Arc::new(Memory::default());
    memory.date_ms.store(1_800_000_000_000, Ordering::SeqCst);
    let holder = process(&memory);
    let mut top = 0;
    for _ in 0..3 {
        let req = request(Duration::from_secs(30));
        match holder.try_acquire(&req, false).await.unwrap() {
            Attempt::Granted(g) => top = top.max(g[0].fence),
            a => panic!("{a:?}"),
        }
        let released = holder.release(&req.names, &req.token, Outcome::Released);
        assert!(released.await.unwrap());
    }
    // The next second's `Date`, and the bucket emptied.
    memory.date_ms.fetch_add(1000, Ordering::SeqCst);
    memory.bodies.lock().unwrap().clear();
    let a = process(&memory)
        .try_acquire(&request(Duration::from_secs(30)), false)
        .await
        .unwrap();
    let Attempt::Granted(g) = a else {
        panic!("{a:?}")
    };
    assert!(
        g[0].fence > top,
        "fence {} after the store forgot, {top} before",
        g[0].fence
    );
}
