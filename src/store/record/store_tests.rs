//! Which transaction each operation makes: a request's first attempt arrives through
//! `Backend::transact_arrival`, the rest through `transact`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use crate::store::{Listener, Mode};

/// A name held by someone else, forever; counts the transactions of each kind and may
/// fail the next arrival, as a first attempt cut off by the engine's timeout would.
#[derive(Default)]
struct Held {
    arrivals: AtomicUsize,
    others: AtomicUsize,
    fail_next_arrival: AtomicBool,
}

#[async_trait]
impl Backend for Held {
    fn describe(&self) -> &str {
        "held"
    }

    async fn transact(
        &self,
        names: &[String],
        _: bool,
        decide: super::super::Decide<'_>,
    ) -> StoreResult<()> {
        self.others.fetch_add(1, Ordering::SeqCst);
        held(names, decide)
    }

    async fn transact_arrival(
        &self,
        names: &[String],
        decide: super::super::Decide<'_>,
    ) -> StoreResult<()> {
        if self.fail_next_arrival.swap(false, Ordering::SeqCst) {
            return Err(StoreError::new(
                crate::store::ErrorKind::Unavailable,
                "cut off",
            ));
        }
        self.arrivals.fetch_add(1, Ordering::SeqCst);
        held(names, decide)
    }

    async fn listen(&self, _: &str) -> StoreResult<Box<dyn Listener>> {
        unimplemented!("not waited on")
    }

    async fn shard_list(&self, _: &str, _: TagWrite) -> StoreResult<String> {
        Ok(String::new())
    }

    async fn held_names(&self, _: &str) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }
}

/// Decide on `names`, each held by someone else; nothing is written.
fn held(names: &[String], decide: super::super::Decide<'_>) -> StoreResult<()> {
    let mut rows: Vec<Rows> = names
        .iter()
        .map(|n| Rows {
            name: n.clone(),
            holders: vec![rules::HolderRow {
                token: "someone".into(),
                mode: "exclusive".into(),
                fence: 1,
                expires: i64::MAX,
                meta: "{}".into(),
            }],
            ..Rows::default()
        })
        .collect();
    decide(0, &mut rows);
    Ok(())
}

fn request(token: &str) -> Acquire {
    Acquire {
        names: vec!["n".into()],
        modes: vec![Mode::Exclusive],
        token: token.into(),
        ttl: Duration::from_secs(30),
        meta: "{}".into(),
        detached: false,
    }
}

fn counts(store: &RecordStore<Held>) -> (usize, usize) {
    let b = &store.backend;
    (
        b.arrivals.load(Ordering::SeqCst),
        b.others.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn a_first_attempt_arrives_apart_and_the_next_ones_do_not() {
    let store = RecordStore::new(Held::default());
    for _ in 0..3 {
        assert!(matches!(
            store.attempt(&request("a"), true).await,
            Ok((Attempt::Busy { .. }, _))
        ));
    }
    assert_eq!(counts(&store), (1, 2));
    // Another request's first attempt arrives too.
    store.attempt(&request("b"), true).await.unwrap();
    assert_eq!(counts(&store), (2, 2));
}

#[tokio::test]
async fn a_first_attempt_without_an_answer_arrives_again() {
    let store = RecordStore::new(Held::default());
    store
        .backend
        .fail_next_arrival
        .store(true, Ordering::SeqCst);
    assert!(store.attempt(&request("a"), true).await.is_err());
    store.attempt(&request("a"), true).await.unwrap();
    assert_eq!(counts(&store), (1, 0));
    // Withdrawn, the same token would arrive afresh.
    store
        .release(&["n".into()], "a", crate::store::Outcome::Released)
        .await
        .unwrap();
    store.attempt(&request("a"), true).await.unwrap();
    assert_eq!(counts(&store), (2, 1));
}
