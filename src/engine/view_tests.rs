//! What `inspect` and `list` show of a quorum whose members answer at different paces: a read
//! settles who holds a name before it stops listening, and never waits for a member that
//! cannot change the answer.

use std::time::Duration;

use tokio::time::Instant;

use super::tests::{TTL, client, granted_on, request};
use crate::store::fault::{Fault, Op};
use crate::store::memory::MemoryStore;

const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Three members: the first shows a leftover lease of another owner (a minority, as after a
/// holder that reached one member only), the other two the lease of `holder`.
async fn held_beside_a_leftover() -> (Vec<MemoryStore>, crate::store::Acquire) {
    let m: Vec<MemoryStore> = (0..3).map(|i| MemoryStore::new(format!("m{i}"))).collect();
    granted_on(&m[0], &request(TTL)).await;
    let holder = request(TTL);
    for s in &m[1..] {
        granted_on(s, &holder).await;
    }
    (m, holder)
}

/// The holder's second member answers 50 ms after the two others. A read that stopped at the
/// first majority's answers saw one owner on each and said the name was free (a loaded full
/// run's `inspect` did, of a lease on two of three).
#[tokio::test(start_paused = true)]
async fn a_lease_on_a_majority_is_held_though_its_last_member_answers_late() {
    let (m, holder) = held_beside_a_leftover().await;
    let owner = crate::names::owner_id(&holder.token);
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    faulty[2].set_for(Op::Inspect, Fault::Delay(Duration::from_millis(50)));
    faulty[2].set_for(Op::List, Fault::Delay(Duration::from_millis(50)));
    let merged = engine.view("job").await.merged();
    let holders: Vec<&str> = merged.holders.iter().map(|q| &*q.holder.owner).collect();
    assert_eq!(holders, [&*owner], "inspect");
    let listed = engine.held("").await.unwrap();
    assert_eq!(listed.len(), 1, "list");
    assert_eq!(listed[0].1.holders[0].holder.owner, owner, "list");
}

/// A frozen member cannot hold a read up when the others settle it; when they do not, the
/// read waits for it no longer than the store timeout, and says it did not answer.
#[tokio::test(start_paused = true)]
async fn a_frozen_member_costs_a_read_only_when_the_others_disagree() {
    let (m, holder) = held_beside_a_leftover().await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    faulty[0].set(Fault::Hang);
    let t0 = Instant::now();
    let merged = engine.view("job").await.merged();
    assert!(t0.elapsed() < STORE_TIMEOUT, "{:?}", t0.elapsed());
    let owner = crate::names::owner_id(&holder.token);
    assert_eq!(merged.holders[0].holder.owner, owner);

    faulty[0].set(Fault::None);
    faulty[2].set(Fault::Hang);
    let t0 = Instant::now();
    let view = engine.view("job").await;
    assert!(t0.elapsed() <= STORE_TIMEOUT + Duration::from_millis(10));
    assert!(view.stores[2].1.is_err(), "the frozen member answered");
    assert!(
        view.merged().holders.is_empty(),
        "one member each is no majority"
    );
}
