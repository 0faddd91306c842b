//! A split vote beside a member that never answers (issue 41). Each member keeps its line in
//! its own arrival order, so two waiters can each stand first on some members: their attempts
//! split the vote, and only the frozen member could break the tie. Neither may wait for it
//! (the whole store timeout, at every split), and neither may split again: each gave back
//! where it was granted, and had it kept its place where it was busy, it would be first there
//! at the next try, in the other's place.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::tests::{TTL, client, granted_on, request};
use super::{Engine, Wait};
use crate::store::fault::{Fault, Op};
use crate::store::memory::MemoryStore;
use crate::store::{Acquire, Attempt, Outcome, Store};

const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Five members in use for a while, with fair lines; the last will not answer the clients.
fn five() -> Vec<MemoryStore> {
    (0..5)
        .map(|i| MemoryStore::fair(format!("m{i}")).remembering("job"))
        .collect()
}

/// Queue `first` then `second` on a member held by someone else.
async fn line_up(m: &MemoryStore, first: &Acquire, second: &Acquire) {
    for r in [first, second] {
        let a = m.try_acquire(r, true).await.unwrap();
        assert!(matches!(a, Attempt::Busy { .. }), "{a:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_split_beside_a_frozen_member_neither_waits_for_it_nor_splits_again() {
    let m = five();
    let holder = request(TTL);
    for s in &m[..4] {
        granted_on(s, &holder).await;
    }
    // x is first in line on m0 and m1, y on m2 and m3.
    let (x, y) = (request(TTL), request(TTL));
    for (i, s) in m[..4].iter().enumerate() {
        if i < 2 {
            line_up(s, &x, &y).await
        } else {
            line_up(s, &y, &x).await
        }
    }
    for s in &m[..4] {
        s.release(&holder.names, &holder.token, Outcome::Released)
            .await
            .unwrap();
    }
    let t0 = Instant::now();
    let wait = Wait::For(Duration::from_secs(120));
    let mut waits = tokio::task::JoinSet::new();
    for req in [x.clone(), y.clone()] {
        let (engine, faulty) = client(&m, STORE_TIMEOUT);
        faulty[4].set(Fault::Hang);
        // Give-backs slower than the back-off: each contender's next try comes before the
        // other's give-back has landed, as two waiters woken by one release do.
        for f in &faulty[..4] {
            f.set_for(Op::Release, Fault::Delay(Duration::from_millis(50)));
        }
        // As `Engine::open` leaves a member whose open had no answer when a majority's had.
        engine.reach.opening(4);
        let engine: Arc<Engine> = Arc::new(engine);
        waits.spawn(async move { (engine.acquire(&req, wait).await, req) });
    }
    let (won, winner) = waits.join_next().await.unwrap().unwrap();
    let took = t0.elapsed();
    assert!(won.is_ok(), "{won:?}");
    assert!(
        took < STORE_TIMEOUT,
        "the first holder took {took:?}: a split waited for the frozen member"
    );
    let mut on = 0;
    for s in &m[..4] {
        let st = s.inspect("job").await.unwrap();
        let owner = crate::names::owner_id(&winner.token);
        on += usize::from(st.holders.iter().any(|h| h.owner == owner));
    }
    assert!(on >= 3, "held on {on} of the four members that answer");
    waits.abort_all();
}

/// A waiter beside a frozen member for a long while: each look is decided without the
/// member, and what it asked there is given back in the background. The give-backs must not
/// pile up behind one another (a chain that grows at every look and drains at one per store
/// timeout overflowed the stack when polled).
#[tokio::test(start_paused = true)]
async fn a_long_wait_beside_a_frozen_member_does_not_pile_up_give_backs() {
    let m: Vec<MemoryStore> = five().into_iter().take(3).collect();
    let holder = request(Duration::from_secs(4 * 3600));
    for s in &m[..2] {
        granted_on(s, &holder).await;
    }
    let (engine, faulty) = client(&m, Duration::from_secs(1));
    faulty[2].set(Fault::Hang);
    let req = request(TTL);
    let r = engine
        .acquire(&req, Wait::For(Duration::from_secs(2 * 3600)))
        .await;
    assert!(matches!(r, Err(super::EngineError::NotAcquired)), "{r:?}");
    for s in &m[..2] {
        let st = s.inspect("job").await.unwrap();
        assert!(st.waiters.is_empty(), "left queued on {}", s.describe());
    }
}

/// A single attempt (`-n`) on a free lock whose vote splits, one member busy with a lease left
/// from before it went down, one granting, and the third only slow to connect (a busy
/// machine): the attempt waits for the third, which breaks the tie, rather than calling the
/// lock busy. A wait would look again; `-n` has only this look.
#[tokio::test(start_paused = true)]
async fn a_single_attempt_waits_for_a_member_still_opening_to_break_a_split() {
    let m: Vec<MemoryStore> = five().into_iter().take(3).collect();
    granted_on(&m[0], &request(TTL)).await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    faulty[2].set(Fault::Delay(Duration::from_millis(50)));
    engine.reach.opening(2);
    let req = request(TTL);
    let r = engine.acquire(&req, Wait::No).await;
    assert!(r.is_ok(), "a free lock was called busy: {r:?}");
}
