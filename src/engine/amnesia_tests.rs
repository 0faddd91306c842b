//! The amnesia rule (`amnesia`) on in-memory stores and a paused clock: members restarted
//! empty while a lease runs never give a second holder a majority, first use is not delayed,
//! and fences keep rising across a store that forgot. Each test fails without the rule.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Engine, EngineError, Wait, previous};
use crate::store::memory::MemoryStore;
use crate::store::{Acquire, Mode, Outcome, Previous, Store};

const STORE_TIMEOUT: Duration = Duration::from_secs(1);

fn members(n: usize) -> Vec<MemoryStore> {
    (0..n).map(|i| MemoryStore::new(format!("m{i}"))).collect()
}

fn engine(m: &[MemoryStore]) -> Engine {
    let stores = m
        .iter()
        .map(|s| Arc::new(s.clone()) as Arc<dyn Store>)
        .collect();
    Engine::from_stores(stores, STORE_TIMEOUT)
}

fn request(ttl: Duration) -> Acquire {
    Acquire {
        names: vec!["job".into()],
        modes: vec![Mode::Exclusive],
        token: crate::names::new_token(),
        ttl,
        meta: "{}".into(),
        detached: false,
    }
}

/// A holds (ttl 5 s, not renewed); two of three members are restarted empty in turn; B waits.
/// B must not get the lock before A's lease runs out on the member that remembers it, and its
/// fence is above A's, and it is told the lease before ended unknown (`expired`).
#[tokio::test(start_paused = true)]
async fn two_members_that_forgot_never_give_a_second_holder_a_majority() {
    for spacing in [Duration::ZERO, Duration::from_millis(2500)] {
        let m = members(3);
        let ttl = Duration::from_secs(5);
        let a = engine(&m)
            .acquire(&request(ttl), Wait::No)
            .await
            .expect("A");
        let a_ends = a.deadline;
        m[0].forget();
        tokio::time::advance(spacing).await;
        m[1].forget();
        let b = engine(&m)
            .acquire(&request(ttl), Wait::For(Duration::from_secs(10)))
            .await
            .expect("B gets the lock once A's lease is over");
        assert!(
            Instant::now() >= a_ends,
            "B entered {:?} before A's lease ended (spacing {spacing:?})",
            a_ends - Instant::now()
        );
        assert!(
            b.grants[0].fence > a.grants[0].fence,
            "B's fence not above A's"
        );
        assert_eq!(previous(&b), Previous::Expired);
        // B marked the members that forgot: a third client now waits for B's lease.
        let c = engine(&m).acquire(&request(ttl), Wait::No).await;
        assert!(matches!(c, Err(EngineError::NotAcquired)), "{c:?}");
    }
}

/// Once A released on the member that remembers, the members that forgot vote at once.
#[tokio::test(start_paused = true)]
async fn members_that_forgot_vote_again_once_the_lease_they_lost_is_released() {
    let m = members(3);
    let e = engine(&m);
    let a = e
        .acquire(&request(Duration::from_secs(30)), Wait::No)
        .await
        .expect("A");
    m[0].forget();
    m[1].forget();
    let r = e.acquire(&request(Duration::from_secs(30)), Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    e.release(&a.req.names, &a.req.token, Outcome::Released)
        .await;
    let t = Instant::now();
    let b = e
        .acquire(&request(Duration::from_secs(30)), Wait::No)
        .await
        .expect("B");
    assert_eq!(t, Instant::now(), "B was delayed");
    assert!(b.grants[0].fence > a.grants[0].fence);
}

/// First use: no member has a marker, so nobody waits (the paused clock does not move).
#[tokio::test(start_paused = true)]
async fn first_use_is_not_delayed() {
    let m = members(3);
    let t = Instant::now();
    let a = engine(&m)
        .acquire(&request(Duration::from_secs(5)), Wait::No)
        .await;
    assert!(a.is_ok(), "{a:?}");
    assert_eq!(t, Instant::now());
    assert_eq!(previous(&a.unwrap()), Previous::None);
}

/// A single store that forgot cannot be told from a first use (the documented limit), but its
/// fences still rise: they are floored at its clock.
#[tokio::test(start_paused = true)]
async fn a_single_store_that_forgot_still_hands_out_higher_fences() {
    let m = members(1);
    let e = engine(&m);
    let mut top = 0;
    for _ in 0..5 {
        let l = e
            .acquire(&request(Duration::from_secs(5)), Wait::No)
            .await
            .expect("held");
        top = top.max(l.grants[0].fence);
        e.release(&l.req.names, &l.req.token, Outcome::Released)
            .await;
    }
    m[0].forget();
    // A restart takes real time; the floor is the store's wall clock in whole milliseconds.
    std::thread::sleep(Duration::from_millis(2));
    let l = e
        .acquire(&request(Duration::from_secs(5)), Wait::No)
        .await
        .expect("held");
    assert!(
        l.grants[0].fence > top,
        "fence {} after {top}",
        l.grants[0].fence
    );
}

/// A's marks fail on the member that will remember (slow for a moment right after it
/// granted); A's next renewal marks it. When the two others then forget, that member still
/// outvotes them: B is refused while A's lease runs. Without the mark at the renewal nobody
/// has a marker and B's grant looks like a first use.
#[tokio::test(start_paused = true)]
async fn a_mark_that_did_not_take_is_made_at_the_next_renewal() {
    use crate::store::ErrorKind;
    use crate::store::fault::{Fault, FaultyStore, Op};
    let m = members(3);
    let faulty: Vec<Arc<FaultyStore>> = m
        .iter()
        .map(|s| Arc::new(FaultyStore::new(Arc::new(s.clone()))))
        .collect();
    let dyns = faulty.iter().map(|f| f.clone() as Arc<dyn Store>).collect();
    let a_engine = Engine::from_stores(dyns, STORE_TIMEOUT);
    faulty[2].set_for(Op::Mark, Fault::Error(ErrorKind::Unavailable));
    let ttl = Duration::from_secs(30);
    let mut a = a_engine.acquire(&request(ttl), Wait::No).await.expect("A");
    faulty[2].set(Fault::None);
    a_engine.renew(&mut a).await.expect("A renewed");
    m[0].forget();
    m[1].forget();
    let b = engine(&m).acquire(&request(ttl), Wait::No).await;
    assert!(matches!(b, Err(EngineError::NotAcquired)), "{b:?}");
}

/// A store used alone is not marked: no other member's memory could ever outvote it, so its
/// marker is never read, and a name's first use takes one request, the grant. The mark
/// hangs here: a grant that waited for it would take the store timeout, twice.
#[tokio::test(start_paused = true)]
async fn a_store_used_alone_is_not_marked() {
    use crate::store::fault::{Fault, FaultyStore, Op};
    let m = members(1);
    let faulty = Arc::new(FaultyStore::new(Arc::new(m[0].clone())));
    faulty.set_for(Op::Mark, Fault::Hang);
    let e = Engine::from_stores(vec![faulty as Arc<dyn Store>], STORE_TIMEOUT);
    let t = Instant::now();
    let a = e.acquire(&request(Duration::from_secs(5)), Wait::No).await;
    assert!(a.is_ok(), "{a:?}");
    assert_eq!(t, Instant::now(), "the grant waited for a mark");
}
