//! The quorum engine's own rules, on in-memory stores behind fault wrappers and a paused clock:
//! split votes, lost replies, late majorities, clean-up after a failed attempt, the bakery
//! fence merge and renewal by a minority. Each test fails if the rule it names is taken out.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::{Engine, EngineError, Wait, timing};
use crate::store::fault::{Fault, FaultyStore, Op};
use crate::store::memory::MemoryStore;
use crate::store::{Acquire, Attempt, ErrorKind, Mode, Outcome, Previous, Store};

pub(super) const TTL: Duration = Duration::from_secs(30);
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Three in-memory stores, in use for a while (each has the marker of "job": see `amnesia`).
fn stores() -> Vec<MemoryStore> {
    (0..3)
        .map(|i| MemoryStore::new(format!("m{i}")).remembering("job"))
        .collect()
}

/// One client's view of the stores: its own fault wrapper around each.
pub(super) fn client(stores: &[MemoryStore], timeout: Duration) -> (Engine, Vec<Arc<FaultyStore>>) {
    let faulty: Vec<Arc<FaultyStore>> = stores
        .iter()
        .map(|m| Arc::new(FaultyStore::new(Arc::new(m.clone()))))
        .collect();
    let dyns = faulty.iter().map(|f| f.clone() as Arc<dyn Store>).collect();
    (Engine::from_stores(dyns, timeout), faulty)
}

/// A request for `job`, exclusive, under a new token (for the engine's other tests too).
pub(super) fn request(ttl: Duration) -> Acquire {
    Acquire {
        names: vec!["job".into()],
        token: crate::names::new_token(),
        modes: vec![Mode::Exclusive],
        ttl,
        meta: "{}".into(),
        detached: false,
    }
}

/// Whether `req`'s token holds its lock on this store.
async fn holds(m: &MemoryStore, req: &Acquire) -> bool {
    let owner = crate::names::owner_id(&req.token);
    let st = m.inspect(&req.names[0]).await.unwrap();
    st.holders.iter().any(|h| h.owner == owner)
}

async fn held_on(stores: &[MemoryStore], req: &Acquire) -> Vec<bool> {
    join_all(stores.iter().map(|m| holds(m, req))).await
}

/// Three contenders each reach a different store first, so each store grants a different one
/// and nobody has a majority. Each must give its one grant back (or all stay stuck until the
/// ttl) and back off by a random amount, so that one of them then takes all the stores.
#[tokio::test(start_paused = true)]
async fn split_votes_are_given_back_and_one_contender_then_holds() {
    let m = stores();
    let contenders: Vec<(Engine, Acquire)> = (0..3)
        .map(|i| {
            let (engine, faulty) = client(&m, STORE_TIMEOUT);
            for (j, f) in faulty.iter().enumerate() {
                if j != i {
                    f.set_for(Op::Acquire, Fault::Delay(Duration::from_millis(10)));
                }
                // Releases land after every late attempt was answered: a clean 1-1-1.
                f.set_for(Op::Release, Fault::Delay(Duration::from_millis(20)));
            }
            (engine, request(TTL))
        })
        .collect();
    // Without waiting: every attempt splits 1-1-1, and nothing stays held anywhere.
    let results = join_all(contenders.iter().map(|(e, r)| e.acquire(r, Wait::No))).await;
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(EngineError::NotAcquired))),
        "{results:?}"
    );
    for (_, r) in &contenders {
        assert_eq!(held_on(&m, r).await, [false; 3]);
    }
    // Waiting: they split again at first, then the back-off breaks the tie.
    let wait = Wait::For(Duration::from_secs(5));
    let results = join_all(contenders.iter().map(|(e, r)| e.acquire(r, wait))).await;
    let winners: Vec<usize> = (0..3).filter(|&i| results[i].is_ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = &contenders[winners[0]].1;
    let on = held_on(&m, winner).await;
    assert!(on.iter().filter(|h| **h).count() >= 2, "{on:?}");
}

/// A store that granted but whose answer was lost holds a lease the client never heard of:
/// a failed attempt must release it there, and a release of a held lease must reach it too.
#[tokio::test(start_paused = true)]
async fn a_grant_whose_reply_was_lost_is_released() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let other = request(TTL);
    granted_on(&m[1], &other).await;
    faulty[2].set_for(Op::Acquire, Fault::LoseReply);
    // m0 grants, m1 is busy, m2 grants unheard: no majority, so both grants go back.
    let req = request(TTL);
    let r = engine.acquire(&req, Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    assert_eq!(held_on(&m, &req).await, [false; 3]);
    // With m1 free a majority grants; m2's unheard grant is released with the lease.
    m[1].release(&other.names, &other.token, Outcome::Released)
        .await
        .unwrap();
    let lease = engine.acquire(&req, Wait::No).await.expect("a majority");
    assert_eq!(held_on(&m, &req).await, [true; 3]);
    engine
        .release(&lease.req.names, &lease.req.token, Outcome::Released)
        .await;
    assert_eq!(held_on(&m, &req).await, [false; 3]);
}

/// A majority that arrives late still holds if the lease has time left, and the deadline is
/// reckoned from when the attempt was sent, not from when the answers came.
#[tokio::test(start_paused = true)]
async fn a_majority_reached_late_inside_validity_holds() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let ttl = Duration::from_secs(1);
    faulty[1].set_for(Op::Acquire, Fault::Delay(Duration::from_millis(300)));
    faulty[2].set_for(Op::Acquire, Fault::Hang);
    let start = Instant::now();
    let req = request(ttl);
    let lease = engine.acquire(&req, Wait::No).await.expect("held");
    assert_eq!(lease.deadline - start, ttl - timing::drift(ttl));
    assert_eq!(&held_on(&m, &req).await[..2], [true, true]);
}

/// A majority that arrives after the lease's validity is gone is not a lease: the attempt
/// fails and every store that granted gives it back.
#[tokio::test(start_paused = true)]
async fn a_majority_reached_too_late_is_not_held_and_released_everywhere() {
    let m = stores();
    let (engine, faulty) = client(&m, Duration::from_secs(5));
    let ttl = Duration::from_secs(1);
    faulty[1].set_for(Op::Acquire, Fault::Delay(Duration::from_millis(995)));
    faulty[2].set_for(Op::Acquire, Fault::Hang);
    let req = request(ttl);
    let r = engine.acquire(&req, Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    assert_eq!(held_on(&m, &req).await, [false; 3]);
}

/// Too few stores answered: the attempt fails as unavailable, after releasing on every store
/// (the one that granted, and the one whose grant was applied but unheard).
#[tokio::test(start_paused = true)]
async fn a_failed_attempt_releases_on_every_store() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    faulty[1].set_for(Op::Acquire, Fault::LoseReply);
    faulty[2].set(Fault::Error(ErrorKind::Unavailable));
    let req = request(TTL);
    let r = engine.acquire(&req, Wait::No).await;
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Unavailable)),
        "{r:?}"
    );
    assert_eq!(held_on(&m, &req).await, [false; 3]);
}

/// The bakery rule: a store that lags behind the majority's highest fence is raised to it
/// before the fence is handed out, so a later majority that meets that store and not the ones
/// ahead still hands out more.
#[tokio::test(start_paused = true)]
async fn a_lagging_store_is_raised_before_the_fence_is_handed_out() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let names = vec!["job".to_string()];
    // Ahead of the clock floor every fence starts from, by 1000 s.
    let ahead = crate::store::fence_floor_now() + 1_000_000_000;
    for s in &m[1..] {
        s.raise_fence(&names, &[ahead]).await.unwrap();
    }
    faulty[2].set(Fault::Error(ErrorKind::Unavailable));
    // m0 (at its clock floor) and m1 (ahead) grant: the lease's fence is m1's; m0 is raised.
    let first = engine
        .acquire(&request(TTL), Wait::No)
        .await
        .expect("m0, m1");
    assert_eq!(first.grants[0].fence, ahead + 1);
    assert!(m[0].inspect("job").await.unwrap().fence > ahead);
    engine
        .release(&names, &first.req.token, Outcome::Released)
        .await;
    // Now m0 and m2 (still at 100) grant: m0's raised counter keeps the fence rising.
    faulty[2].set(Fault::None);
    faulty[1].set(Fault::Error(ErrorKind::Unavailable));
    let second = engine
        .acquire(&request(TTL), Wait::No)
        .await
        .expect("m0, m2");
    assert!(
        second.grants[0].fence > first.grants[0].fence,
        "fence {} after {}",
        second.grants[0].fence,
        first.grants[0].fence
    );
}

/// A lagging store that cannot be raised does not count towards the majority: the fence is
/// never handed out on stores that would hand out less next time.
#[tokio::test(start_paused = true)]
async fn a_lagging_store_that_cannot_be_raised_does_not_count() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let names = vec!["job".to_string()];
    // Ahead of the clock m0's first fence starts from, by 1000 s.
    let ahead = crate::store::fence_floor_now() + 1_000_000_000;
    m[1].raise_fence(&names, &[ahead]).await.unwrap();
    faulty[0].set_for(Op::Raise, Fault::Error(ErrorKind::Unavailable));
    faulty[2].set(Fault::Error(ErrorKind::Unavailable));
    let req = request(TTL);
    let r = engine.acquire(&req, Wait::No).await;
    assert!(r.is_err(), "held with an unraised store in the majority");
    assert_eq!(held_on(&m, &req).await, [false; 3]);
}

/// A renewal that only a minority confirms does not extend the lease: gone on a majority is
/// lost, unconfirmed by a majority is not renewed.
#[tokio::test(start_paused = true)]
async fn renewal_by_a_minority_is_lost() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let mut lease = engine.acquire(&request(TTL), Wait::No).await.expect("held");
    let names = lease.req.names.clone();
    // Gone on one store: a majority still renews.
    m[0].force_release(&names).await.unwrap();
    engine
        .renew(&mut lease)
        .await
        .expect("renewed by m1 and m2");
    // Gone on one, the other unreachable: only m2 renews, which is not a majority.
    faulty[1].set(Fault::Error(ErrorKind::Unavailable));
    let before = lease.deadline;
    tokio::time::advance(Duration::from_secs(1)).await;
    let r = engine.renew(&mut lease).await;
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Unavailable)),
        "{r:?}"
    );
    assert_eq!(lease.deadline, before, "the deadline moved");
    // Gone on two: lost.
    faulty[1].set(Fault::None);
    m[1].force_release(&names).await.unwrap();
    let r = engine.renew(&mut lease).await;
    assert!(matches!(r, Err(EngineError::Lost(_))), "{r:?}");
    assert_eq!(lease.deadline, before, "the deadline moved");
}

/// Whether `req`'s token is queued on this store.
async fn queued(m: &MemoryStore, req: &Acquire) -> bool {
    let owner = crate::names::owner_id(&req.token);
    let st = m.inspect(&req.names[0]).await.unwrap();
    st.waiters.iter().any(|w| w.owner == owner)
}

/// A waiter queues on the stores that answered busy; when it gives up (its wait ran out, with
/// the stores reachable or not) it leaves no entry on any of them.
#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_no_queue_entry() {
    let m = stores();
    held_by_another(&m).await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let engine = Arc::new(engine);
    // Its wait runs out.
    let req = request(TTL);
    let r = engine
        .acquire(&req, Wait::For(Duration::from_secs(2)))
        .await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    for s in &m {
        assert!(!queued(s, &req).await, "left queued on {}", s.describe());
    }
    // The stores go away while it waits: it rides out the rest of its wait, then gives up.
    let req = request(TTL);
    let waiting = tokio::spawn({
        let (engine, req) = (engine.clone(), req.clone());
        async move {
            engine
                .acquire(&req, Wait::For(Duration::from_secs(60)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(queued(&m[0], &req).await, "not queued");
    for f in &faulty[1..] {
        f.set(Fault::Error(ErrorKind::Unavailable));
    }
    let r = waiting.await.unwrap();
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Unavailable)),
        "{r:?}"
    );
    assert!(
        !queued(&m[0], &req).await,
        "left queued on the store that stayed"
    );
}

/// Three stores where `holder` holds the lock.
async fn held_by_another(m: &[MemoryStore]) -> Acquire {
    let holder = request(TTL);
    for s in m {
        granted_on(s, &holder).await;
    }
    holder
}

/// A waiter whose stores all go away for 20 s (far past any fixed grace) and come back
/// with the lock free is served: an outage is not an error while its wait lasts.
#[tokio::test(start_paused = true)]
async fn a_waiter_rides_out_an_outage_for_its_whole_budget() {
    let m = stores();
    let holder = held_by_another(&m).await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let req = request(TTL);
    let waiting = tokio::spawn(async move {
        let r = engine
            .acquire(&req, Wait::For(Duration::from_secs(60)))
            .await;
        (r, engine.outages().len())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for f in &faulty {
        f.set(Fault::Error(ErrorKind::Unavailable));
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    for s in &m {
        s.release(&holder.names, &holder.token, Outcome::Released)
            .await
            .unwrap();
    }
    for f in &faulty {
        f.set(Fault::None);
    }
    let (r, down) = waiting.await.unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(down, 0, "the stores are back");
}

/// A wait that ends with the stores still unreachable fails as unavailable (69), saying
/// for how long they have been; one that ends with them reachable and busy is not acquired.
#[tokio::test(start_paused = true)]
async fn a_budget_that_ends_in_an_outage_says_how_long_it_lasted() {
    let m = stores();
    held_by_another(&m).await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let engine = Arc::new(engine);
    let req = request(TTL);
    let started = Instant::now();
    let waiting = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .acquire(&req, Wait::For(Duration::from_secs(10)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for f in &faulty {
        f.set(Fault::Error(ErrorKind::Unavailable));
    }
    let r = waiting.await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(10));
    match r {
        Err(EngineError::Stores(e)) if e.kind() == ErrorKind::Unavailable => {
            let m = e.to_string();
            assert!(m.contains("m0: unreachable for 9."), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(engine.outages().len(), 3);
}

/// Stores that never answered this process fail a wait at once, however long it may wait
/// (a typo'd URL must not hang a cron job); `-n` never waits for stores either.
#[tokio::test(start_paused = true)]
async fn stores_never_reached_fail_at_once() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    for f in &faulty {
        f.set(Fault::Error(ErrorKind::Unavailable));
    }
    let started = Instant::now();
    let r = engine.acquire(&request(TTL), Wait::Forever).await;
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Unavailable)),
        "{r:?}"
    );
    let r = engine.wait_free("job", Wait::Forever, None).await;
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Unavailable)),
        "{r:?}"
    );
    assert!(started.elapsed() < STORE_TIMEOUT);
    // Once they have answered, `-n` still answers at once.
    for f in &faulty {
        f.set(Fault::None);
    }
    held_by_another(&m).await;
    let r = engine.acquire(&request(TTL), Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    for f in &faulty {
        f.set(Fault::Error(ErrorKind::Unavailable));
    }
    let started = Instant::now();
    let r = engine.acquire(&request(TTL), Wait::No).await;
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Unavailable)),
        "{r:?}"
    );
    assert!(started.elapsed() < STORE_TIMEOUT);
}

/// A store set up so that it can never grant (ErrorKind::Config: ZooKeeper without TTL nodes
/// for `lock`) is no outage: a waiter stops at once with `Config` (exit 78) instead of riding
/// it out for its budget and calling it unavailable.
#[tokio::test(start_paused = true)]
async fn a_misconfigured_store_is_not_ridden_out() {
    let m = stores();
    held_by_another(&m).await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let engine = Arc::new(engine);
    let req = request(TTL);
    let waiting = tokio::spawn({
        let (engine, req) = (engine.clone(), req.clone());
        async move {
            engine
                .acquire(&req, Wait::For(Duration::from_secs(600)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let broke = Instant::now();
    for f in &faulty[1..] {
        f.set(Fault::Error(ErrorKind::Config));
    }
    let r = waiting.await.unwrap();
    assert!(
        matches!(&r, Err(e) if e.store_kind() == Some(ErrorKind::Config)),
        "{r:?}"
    );
    assert!(
        broke.elapsed() < Duration::from_secs(10),
        "rode out a misconfiguration for {:?}",
        broke.elapsed()
    );
    assert!(!queued(&m[0], &req).await, "left queued");
}

/// Grant `req` on one store alone, past the engine.
pub(super) async fn granted_on(m: &MemoryStore, req: &Acquire) {
    let r = m.try_acquire(req, false).await.unwrap();
    assert!(matches!(r, Attempt::Granted(_)), "{r:?}");
}

/// Give `req` a lease on one store alone and release it with `outcome`, so that the store
/// remembers that end.
async fn ended_on(m: &MemoryStore, outcome: Outcome) {
    let req = request(TTL);
    granted_on(m, &req).await;
    assert!(m.release(&req.names, &req.token, outcome).await.unwrap());
}

/// Over a quorum the next holder hears the worst of the members' answers, and of a failed
/// end the status some member kept: expired over failed over released over none.
#[tokio::test(start_paused = true)]
async fn a_quorum_tells_the_worst_previous_end_with_its_status() {
    let m = stores();
    let (engine, _) = client(&m, STORE_TIMEOUT);
    ended_on(&m[0], Outcome::Released).await;
    ended_on(&m[1], Outcome::Failed(None)).await;
    ended_on(&m[2], Outcome::Failed(Some(3))).await;
    let lease = engine.acquire(&request(TTL), Wait::No).await.expect("free");
    assert_eq!(super::previous(&lease), Previous::Failed(Some(3)));
    engine
        .release(&lease.req.names, &lease.req.token, Outcome::Released)
        .await;
    // A lease that ran out on one member outweighs a clean end on the others.
    let lost = request(Duration::from_secs(1));
    granted_on(&m[1], &lost).await;
    tokio::time::advance(Duration::from_secs(2)).await;
    let lease = engine.acquire(&request(TTL), Wait::No).await.expect("free");
    assert_eq!(super::previous(&lease), Previous::Expired);
}

/// An attempt that fails to win a majority is given back as withdrawn: on the stores that
/// granted it (heard or not) the record still tells how the last holder ended.
#[tokio::test(start_paused = true)]
async fn a_withdrawn_attempt_on_a_quorum_leaves_the_previous_end() {
    let m = stores();
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    let lease = engine.acquire(&request(TTL), Wait::No).await.expect("free");
    engine
        .release(&lease.req.names, &lease.req.token, Outcome::Failed(Some(2)))
        .await;
    // m1 is busy, m2 grants unheard: m0's grant and m2's are given back.
    let blocker = request(TTL);
    granted_on(&m[1], &blocker).await;
    faulty[2].set_for(Op::Acquire, Fault::LoseReply);
    let req = request(TTL);
    let r = engine.acquire(&req, Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    assert_eq!(held_on(&m, &req).await, [false; 3]);
    for i in [0, 2] {
        let st = m[i].inspect("job").await.unwrap();
        assert_eq!(st.previous, Previous::Failed(Some(2)), "m{i}");
    }
    m[1].release(&blocker.names, &blocker.token, Outcome::Withdrawn)
        .await
        .unwrap();
    faulty[2].set(Fault::None);
    let lease = engine.acquire(&request(TTL), Wait::No).await.expect("free");
    assert_eq!(super::previous(&lease), Previous::Failed(Some(2)));
}

/// The holder vanished and its lease ran out while a waiter's answers came too late to
/// count (a store that froze): the waiter's late grants are withdrawn, and the next grant
/// still hears that the lease before expired, not that it was released (issue 36).
#[tokio::test(start_paused = true)]
async fn a_late_grant_given_back_leaves_the_expiry_on_record() {
    let m = stores();
    let (holder, _) = client(&m, STORE_TIMEOUT);
    let ttl = Duration::from_secs(1);
    holder.acquire(&request(ttl), Wait::No).await.expect("free");
    tokio::time::advance(Duration::from_secs(2)).await;
    let (engine, faulty) = client(&m, Duration::from_secs(5));
    faulty[1].set_for(Op::Acquire, Fault::Delay(Duration::from_millis(995)));
    // Applied, unheard: every store grants, so each must keep the expiry it saw.
    faulty[2].set_for(Op::Acquire, Fault::LoseReply);
    let late = request(ttl);
    let r = engine.acquire(&late, Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    for f in &faulty {
        f.set(Fault::None);
    }
    let lease = engine.acquire(&request(TTL), Wait::No).await.expect("free");
    assert_eq!(super::previous(&lease), Previous::Expired);
}

/// A member cut off as slow gets the give-back of a failed attempt in the background; the
/// same token's next attempt there must wait for it, or the late give-back takes away the
/// grant the new lease counts on (the checker once saw two holders so).
#[tokio::test(start_paused = true)]
async fn a_give_back_in_the_background_lands_before_the_next_attempt() {
    let m = stores();
    let other = request(TTL);
    granted_on(&m[0], &other).await;
    granted_on(&m[1], &other).await;
    let (engine, faulty) = client(&m, STORE_TIMEOUT);
    faulty[2].set_for(Op::Acquire, Fault::Delay(Duration::from_millis(50)));
    faulty[2].set_for(Op::Release, Fault::Delay(Duration::from_millis(200)));
    let req = request(TTL);
    // Busy on a majority: decided without m2, whose give-back goes in the background.
    let r = engine.acquire(&req, Wait::No).await;
    assert!(matches!(r, Err(EngineError::NotAcquired)), "{r:?}");
    assert!(
        m[1].release(&other.names, &other.token, Outcome::Released)
            .await
            .unwrap()
    );
    faulty[2].set_for(Op::Acquire, Fault::None);
    // m0 is still busy: the lease needs m1 and m2.
    let lease = engine
        .acquire(&req, Wait::No)
        .await
        .expect("held on m1 and m2");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(held_on(&m, &req).await, vec![false, true, true]);
    assert!(Instant::now() < lease.deadline);
}
