//! The store contract as a test suite: one async function per property of the `Store` trait,
//! each taking a `Subject` (a way to open clients of one store, and what that store offers).
//! The properties are listed once (`with_conformance_properties!`), and every store runs each
//! of them (`tests/integration/conformance.rs` makes one test per store and property from that
//! list), so a new store is written against the same suite and a difference between stores is
//! a flag in `Caps`, never a forked copy of a test.
//!
//! Each property works in its own namespace, so all of them can run at once on one server.
//! Waits are bounded generously and only ever fail on a store that never does the thing; no
//! assertion depends on how fast a loaded machine is.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::{Instant, sleep, timeout};

use super::{Acquire, Attempt, Granted, Mode, Outcome, Previous, Store};

/// What one store offers beyond the common contract (each kind's is in `store::registry`).
pub use super::kind::Caps;

pub type Opened = Pin<Box<dyn Future<Output = Arc<dyn Store>> + Send>>;

/// The store under test.
pub struct Subject {
    /// Opens a client of the store for a namespace; clients of one namespace share its locks
    /// (as two processes would).
    pub open: Box<dyn Fn(&str) -> Opened + Send + Sync>,
    pub caps: Caps,
}

impl Subject {
    async fn client(&self, namespace: &str) -> Arc<dyn Store> {
        within((self.open)(namespace)).await
    }
}

/// The properties that take only a `Subject`, named once: `with_conformance_properties!(
/// m!(ARGS))` expands to `m!(ARGS p1, p2, ...,)`. The integration tests make one test per
/// store and property from it, so a property added here runs on every store; one added
/// below but not here is caught by the test that compares `PROPERTIES` with this file.
#[macro_export]
macro_rules! with_conformance_properties {
    ($m:ident ! ($($args:tt)*)) => {
        $m! {
            $($args)*
            grant_is_exclusive,
            concurrent_attempts_grant_one,
            expired_holders_are_dropped_inside_the_grant,
            force_release_drops_every_holder,
            release_checks_the_owner,
            a_release_after_another_client_moved_on_takes_nothing,
            renew_checks_the_owner,
            fences_rise,
            raise_fence_lifts_the_next_fence,
            previous_reads_released_then_expired,
            previous_tells_a_failed_end_and_its_status,
            a_withdrawn_attempt_leaves_the_previous_end,
            names_are_granted_all_or_none,
            mixed_modes_in_one_grant,
            queued_mixed_request_is_granted_in_its_modes,
            shared_mode,
            limit_mode,
            limit_holders_admit_only_their_own_k,
            release_removes_a_queued_entry,
            a_dead_waiter_leaves_within_its_ttl,
            a_release_after_a_cut_off_attempt_takes_only_its_own,
            listener_wakes_on_release,
            queued_writer_and_later_reader,
            inspect_and_list_show_the_live_holders,
            shard_list_is_written_once,
        }
    };
}

macro_rules! names {
    ($($property:ident,)*) => {
        &[$(stringify!($property)),*]
    };
}

/// The names of the properties `with_conformance_properties!` lists.
pub const PROPERTIES: &[&str] = crate::with_conformance_properties!(names!());

/// The lease ttl of properties that do not wait for expiry: long enough for any machine.
const TTL: Duration = Duration::from_secs(30);

/// Bound on any one store call: a hang fails the property instead of blocking the run.
const CALL_LIMIT: Duration = Duration::from_secs(30);

async fn within<T>(f: impl Future<Output = T>) -> T {
    timeout(CALL_LIMIT, f)
        .await
        .expect("the store did not answer within 30 s")
}

/// A namespace of its own for one run of one property.
fn namespace(property: &str) -> String {
    format!("{property}-{:08x}", (crate::sys::random_u64() as u32))
}

/// A request for `names` in one mode (the store modules' own tests use it too).
pub(crate) fn request(names: &[&str], mode: Mode, ttl: Duration, detached: bool) -> Acquire {
    let named: Vec<(&str, Mode)> = names.iter().map(|n| (*n, mode)).collect();
    mixed(&named, ttl, detached)
}

/// A request with a mode per name (a mixed `multilock`), in canonical order.
fn mixed(named: &[(&str, Mode)], ttl: Duration, detached: bool) -> Acquire {
    let mut named = named.to_vec();
    named.sort_by_key(|(n, _)| *n);
    Acquire {
        names: named.iter().map(|(n, _)| n.to_string()).collect(),
        modes: named.iter().map(|(_, m)| *m).collect(),
        token: crate::names::new_token(),
        ttl,
        meta: r#"{"host":"conformance","pid":1}"#.into(),
        detached,
    }
}

fn exclusive(name: &str) -> Acquire {
    request(&[name], Mode::Exclusive, TTL, false)
}

async fn attempt(s: &dyn Store, req: &Acquire, queue: bool) -> Option<Vec<Granted>> {
    match within(s.try_acquire(req, queue)).await {
        Ok(Attempt::Granted(g)) => {
            assert_eq!(g.len(), req.names.len(), "one grant per name");
            Some(g)
        }
        Ok(Attempt::Busy { .. }) => None,
        Err(e) => panic!("{}: try_acquire {:?}: {e}", s.describe(), req.names),
    }
}

#[track_caller]
fn expect_granted(g: Option<Vec<Granted>>, what: &str) -> Vec<Granted> {
    g.unwrap_or_else(|| panic!("not granted: {what}"))
}

async fn grant(s: &dyn Store, req: &Acquire) -> Vec<Granted> {
    let g = attempt(s, req, false).await;
    expect_granted(g, &format!("{:?} {:?}", req.names, req.modes))
}

async fn busy(s: &dyn Store, req: &Acquire, why: &str) {
    if attempt(s, req, false).await.is_some() {
        panic!("{:?} {:?} was granted: {why}", req.names, req.modes);
    }
}

async fn release(s: &dyn Store, req: &Acquire) -> bool {
    release_as(s, req, Outcome::Released).await
}

async fn release_as(s: &dyn Store, req: &Acquire, outcome: Outcome) -> bool {
    within(s.release(&req.names, &req.token, outcome))
        .await
        .unwrap_or_else(|e| panic!("release ({outcome:?}): {e}"))
}

/// A renewal's answer; a store may say "no" with its reason (`ErrorKind::LeaseGone`).
async fn renew(s: &dyn Store, req: &Acquire, ttl: Duration) -> bool {
    match within(s.renew(&req.names, &req.token, ttl)).await {
        Ok(held) => held,
        Err(e) if e.kind() == super::ErrorKind::LeaseGone => false,
        Err(e) => panic!("renew: {e}"),
    }
}

async fn inspect(s: &dyn Store, name: &str) -> super::LockState {
    within(s.inspect(name))
        .await
        .unwrap_or_else(|e| panic!("inspect {name}: {e}"))
}

async fn listed(s: &dyn Store, prefix: &str) -> Vec<String> {
    let states = within(s.list(prefix))
        .await
        .unwrap_or_else(|e| panic!("list {prefix:?}: {e}"));
    states.into_iter().map(|st| st.name).collect()
}

/// Attempt until granted: for a lease that must run out first. Fails only if the store keeps
/// an expired holder for far longer than its ttl.
async fn granted_after_expiry(s: &dyn Store, req: &Acquire, ttl: Duration) -> Vec<Granted> {
    let limit = Instant::now() + ttl * 3 + Duration::from_secs(10);
    loop {
        if let Some(g) = attempt(s, req, false).await {
            return g;
        }
        assert!(
            Instant::now() < limit,
            "an expired holder was still kept {:?} after its ttl of {ttl:?}",
            ttl * 3 + Duration::from_secs(10)
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// One holder at a time: a second exclusive or a shared attempt is busy until the first is
/// released, then granted.
pub async fn grant_is_exclusive(subject: &Subject) {
    let s = subject.client(&namespace("exclusive")).await;
    let a = exclusive("job");
    grant(&*s, &a).await;
    let b = exclusive("job");
    busy(&*s, &b, "a second exclusive holder").await;
    busy(
        &*s,
        &request(&["job"], Mode::Shared, TTL, false),
        "a shared holder beside an exclusive one",
    )
    .await;
    assert!(release(&*s, &a).await, "the holder's release found nothing");
    grant(&*s, &b).await;
}

/// Many clients attempting at once: exactly one is granted (one atomic conditional operation
/// per grant, no read-then-write race).
pub async fn concurrent_attempts_grant_one(subject: &Subject) {
    let ns = namespace("race");
    let clients = join_all((0..8).map(|_| subject.client(&ns))).await;
    let reqs: Vec<Acquire> = (0..8).map(|_| exclusive("hot")).collect();
    let results = join_all(
        clients
            .iter()
            .zip(&reqs)
            .map(|(c, r)| attempt(c.as_ref(), r, false)),
    )
    .await;
    let winners = results.iter().filter(|g| g.is_some()).count();
    assert_eq!(
        winners, 1,
        "{winners} of 8 concurrent attempts were granted"
    );
    assert_eq!(inspect(&*clients[0], "hot").await.holders.len(), 1);
}

/// A holder past its ttl is dropped by the next grant itself (no client clean-up), never
/// before its ttl, and only that holder: the others keep their slots.
pub async fn expired_holders_are_dropped_inside_the_grant(subject: &Subject) {
    let ns = namespace("expiry");
    let ttl = subject.caps.short_ttl;
    let slot = |ttl, detached| request(&["pool"], Mode::Limit(2), ttl, detached);
    // The short lease is another client's, as `dlock lock --ttl` in another process: a
    // ZooKeeper client keeps the session its first request set up (see `Caps::session_leases`).
    let short = slot(ttl, true);
    grant(&*subject.client(&ns).await, &short).await;
    let s = subject.client(&ns).await;
    let long = slot(TTL, false);
    grant(&*s, &long).await;
    let next = slot(TTL, false);
    busy(&*s, &next, "the short holder's ttl has not run out").await;
    // How the previous lease ended is `previous_reads_released_then_expired`'s: with a
    // co-holder still in, etcd answers what that co-holder's grant was told.
    granted_after_expiry(&*s, &next, ttl).await;
    busy(&*s, &slot(TTL, false), "the long holder still has its slot").await;
    let st = inspect(&*s, "pool").await;
    let mut owners: Vec<String> = st.holders.iter().map(|h| h.owner.clone()).collect();
    owners.sort();
    let mut want = vec![
        crate::names::owner_id(&long.token),
        crate::names::owner_id(&next.token),
    ];
    want.sort();
    assert_eq!(owners, want, "{st:?}");
    // The expired holder's token no longer holds anything.
    assert!(
        !renew(&*s, &short, TTL).await,
        "an expired lease was renewed"
    );
    assert!(!release(&*s, &short).await, "an expired lease was released");
}

/// `force_release` drops every holder, whoever it is, and the next holder hears that its
/// predecessor did not finish by itself; on a free name it finds nothing.
pub async fn force_release_drops_every_holder(subject: &Subject) {
    let s = subject.client(&namespace("force")).await;
    let names = vec!["db".to_string()];
    let (r1, r2) = (
        request(&["db"], Mode::Shared, TTL, false),
        request(&["db"], Mode::Shared, TTL, false),
    );
    grant(&*s, &r1).await;
    grant(&*s, &r2).await;
    assert!(within(s.force_release(&names)).await.expect("force"));
    assert!(inspect(&*s, "db").await.holders.is_empty());
    assert!(
        !renew(&*s, &r1, TTL).await,
        "a forced-out lease was renewed"
    );
    let g = grant(&*s, &exclusive("db")).await;
    assert_eq!(g[0].previous, Previous::Expired);
    let free = vec!["free".to_string()];
    assert!(!within(s.force_release(&free)).await.expect("force"));
}

/// A stale or foreign token releases nothing; the holder's own release works once.
pub async fn release_checks_the_owner(subject: &Subject) {
    let s = subject.client(&namespace("release")).await;
    let a = exclusive("job");
    grant(&*s, &a).await;
    let stranger = exclusive("job");
    assert!(
        !release(&*s, &stranger).await,
        "a foreign token released it"
    );
    busy(&*s, &exclusive("job"), "a foreign token's release freed it").await;
    assert_eq!(inspect(&*s, "job").await.holders.len(), 1);
    assert!(release(&*s, &a).await);
    assert!(!release(&*s, &a).await, "released twice");
    // The old token cannot release the next holder's lease either.
    let b = exclusive("job");
    grant(&*s, &b).await;
    assert!(
        !release(&*s, &a).await,
        "a stale token released a newer lease"
    );
    let st = inspect(&*s, "job").await;
    assert_eq!(st.holders.len(), 1);
    assert_eq!(st.holders[0].owner, crate::names::owner_id(&b.token));
}

/// A release decided on what this client last wrote of a name (a store may keep that, to
/// skip a read) undoes nothing another client did since: A's lease forced out and the name
/// granted to B by a second client, A's release frees nothing and B still holds.
pub async fn a_release_after_another_client_moved_on_takes_nothing(subject: &Subject) {
    let ns = namespace("moved");
    let (one, two) = (subject.client(&ns).await, subject.client(&ns).await);
    let a = exclusive("job");
    grant(&*one, &a).await;
    let names = vec!["job".to_string()];
    assert!(within(two.force_release(&names)).await.expect("force"));
    // Detached, as `dlock lock` takes it: the second client's session (ZooKeeper's) was opened
    // by the force, not for a lease of this ttl.
    let b = request(&["job"], Mode::Exclusive, TTL, true);
    grant(&*two, &b).await;
    assert!(
        !release(&*one, &a).await,
        "a stale lease's release said it held"
    );
    let st = inspect(&*two, "job").await;
    assert_eq!(st.holders.len(), 1, "{st:?}");
    assert_eq!(st.holders[0].owner, crate::names::owner_id(&b.token));
}

/// Renewal (`extend`) checks the owner and pushes the store's expiry out.
pub async fn renew_checks_the_owner(subject: &Subject) {
    let s = subject.client(&namespace("renew")).await;
    let long = Duration::from_secs(50);
    // A detached lease (`lock`): its expiry is the store's alone, so a renewal must move it.
    let a = request(&["job"], Mode::Exclusive, Duration::from_secs(10), true);
    grant(&*s, &a).await;
    assert!(
        !renew(&*s, &exclusive("job"), long).await,
        "a stranger renewed it"
    );
    let fence = inspect(&*s, "job").await.holders[0].fence;
    assert!(renew(&*s, &a, long).await, "the holder could not renew");
    let h = &inspect(&*s, "job").await.holders[0];
    assert!(
        h.ttl_left_ms > 20_000,
        "renewed to 50 s, yet {} ms left",
        h.ttl_left_ms
    );
    assert_eq!(
        h.fence, fence,
        "a renewal is the same lease, with the same fence"
    );
    assert!(release(&*s, &a).await);
    assert!(!renew(&*s, &a, long).await, "a released lease was renewed");
    // A `run` lease: renewed by its owner only, wherever its expiry lives.
    let r = request(&["run"], Mode::Exclusive, Duration::from_secs(10), false);
    grant(&*s, &r).await;
    assert!(!renew(&*s, &exclusive("run"), long).await);
    assert!(renew(&*s, &r, long).await);
    if !subject.caps.session_leases {
        let left = inspect(&*s, "run").await.holders[0].ttl_left_ms;
        assert!(left > 20_000, "renewed to 50 s, yet {left} ms left");
    }
    assert!(release(&*s, &r).await);
    assert!(!renew(&*s, &r, long).await, "a released lease was renewed");
}

/// Every grant on a name gets a higher fence than every earlier one, whatever the mode, and
/// `inspect` reports the last one handed out.
pub async fn fences_rise(subject: &Subject) {
    let s = subject.client(&namespace("fences")).await;
    let mut last = 0;
    let mut held: Vec<Acquire> = Vec::new();
    // The two shared leases overlap: the second's fence rises past the first's while it holds.
    for mode in [Mode::Exclusive, Mode::Shared, Mode::Shared, Mode::Limit(2)] {
        if !held
            .iter()
            .all(|r| r.modes == [mode] && mode == Mode::Shared)
        {
            for r in held.drain(..) {
                release(&*s, &r).await;
            }
        }
        let r = request(&["job"], mode, TTL, false);
        let f = grant(&*s, &r).await[0].fence;
        assert!(f > last, "fence {f} after {last}");
        assert!(inspect(&*s, "job").await.fence >= f);
        held.push(r);
        last = f;
    }
    for r in held.drain(..) {
        release(&*s, &r).await;
    }
    // Another name has its own record; this one's still rises after it.
    grant(&*s, &exclusive("other")).await;
    let f = grant(&*s, &exclusive("job")).await;
    assert!(f[0].fence > last, "fence {} after {last}", f[0].fence);
}

/// Loses every lock, counter and marker of the store, as a restart without its data does (a
/// Redis server started again empty, a file store's directory emptied). Only for stores a
/// test can do that to, each on a store of its own: properties run at once.
pub type Wipe = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A store that forgot everything still hands out a fence above every one it handed out
/// before: fences are floored at the store's clock (the counters alone start again at 1).
pub async fn fence_after_the_store_forgot_is_higher(subject: &Subject, wipe: Wipe) {
    let ns = namespace("forgot");
    let s = subject.client(&ns).await;
    let mut top = 0;
    for _ in 0..5 {
        let r = exclusive("job");
        top = top.max(grant(&*s, &r).await[0].fence);
        release(&*s, &r).await;
    }
    within(wipe()).await;
    // A new client, as the next process after the restart would be.
    let s = subject.client(&ns).await;
    assert_eq!(
        inspect(&*s, "job").await.fence,
        0,
        "the store did not forget"
    );
    let f = grant(&*s, &exclusive("job")).await[0].fence;
    assert!(f > top, "fence {f} after the store forgot, {top} before");
}

/// `raise_fence` lifts the counter (the quorum's bakery rule): the next grant hands out more
/// than the raise; a raise below the counter lowers nothing.
pub async fn raise_fence_lifts_the_next_fence(subject: &Subject) {
    let s = subject.client(&namespace("raise")).await;
    let names = vec!["job".to_string()];
    let first = exclusive("job");
    let f = grant(&*s, &first).await[0].fence;
    release(&*s, &first).await;
    let to = f + 1000;
    within(s.raise_fence(&names, &[to])).await.expect("raise");
    let second = exclusive("job");
    let g = grant(&*s, &second).await[0].fence;
    assert!(g > to, "fence {g} after a raise to {to}");
    release(&*s, &second).await;
    within(s.raise_fence(&names, &[1])).await.expect("raise");
    let h = grant(&*s, &exclusive("job")).await[0].fence;
    assert!(h > g, "fence {h} after {g}: a raise lowered the counter");
}

/// A grant learns how the lease before it ended: none, then released, then expired.
pub async fn previous_reads_released_then_expired(subject: &Subject) {
    let s = subject.client(&namespace("previous")).await;
    let first = exclusive("job");
    assert_eq!(grant(&*s, &first).await[0].previous, Previous::None);
    release(&*s, &first).await;
    let ttl = subject.caps.short_ttl;
    let second = request(&["job"], Mode::Exclusive, ttl, true);
    assert_eq!(grant(&*s, &second).await[0].previous, Previous::Released);
    let third = exclusive("job");
    let g = granted_after_expiry(&*s, &third, ttl).await;
    assert_eq!(g[0].previous, Previous::Expired);
    release(&*s, &third).await;
    assert_eq!(inspect(&*s, "job").await.previous, Previous::Released);
}

/// A lease given back after its job failed is reported so to the next grant, with the
/// status when known, and by `inspect`; a clean end after it reads as released again.
pub async fn previous_tells_a_failed_end_and_its_status(subject: &Subject) {
    let s = subject.client(&namespace("failed")).await;
    let first = exclusive("job");
    grant(&*s, &first).await;
    assert!(release_as(&*s, &first, Outcome::Failed(Some(3))).await);
    assert_eq!(
        inspect(&*s, "job").await.previous,
        Previous::Failed(Some(3))
    );
    let second = exclusive("job");
    assert_eq!(
        grant(&*s, &second).await[0].previous,
        Previous::Failed(Some(3))
    );
    release_as(&*s, &second, Outcome::Failed(None)).await;
    let third = exclusive("job");
    assert_eq!(grant(&*s, &third).await[0].previous, Previous::Failed(None));
    release(&*s, &third).await;
    assert_eq!(
        grant(&*s, &exclusive("job")).await[0].previous,
        Previous::Released
    );
}

/// A waiter's attempt given back (`Outcome::Withdrawn`: granted too late, or not by a
/// majority) is no holder's end: the next grant still hears how the last holder ended.
/// Once for a plain grant, once for one that was queued behind the holder and had another
/// waiter queued behind it in turn (a queue store may hand the lock over on a release).
pub async fn a_withdrawn_attempt_leaves_the_previous_end(subject: &Subject) {
    let ns = namespace("withdrawn");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let holder = exclusive("job");
    grant(&*s, &holder).await;
    release_as(&*s, &holder, Outcome::Failed(Some(2))).await;
    let withdrawn = exclusive("job");
    assert_eq!(
        grant(&*t, &withdrawn).await[0].previous,
        Previous::Failed(Some(2))
    );
    release_as(&*t, &withdrawn, Outcome::Withdrawn).await;
    assert_eq!(
        inspect(&*s, "job").await.previous,
        Previous::Failed(Some(2)),
        "a withdrawn attempt overwrote the last holder's end"
    );
    let holder = exclusive("job");
    assert_eq!(
        grant(&*s, &holder).await[0].previous,
        Previous::Failed(Some(2)),
        "a withdrawn attempt overwrote the last holder's end"
    );
    // Queued: the withdrawn attempt waits behind the holder, and a third behind it.
    let (queued, behind) = (exclusive("job"), exclusive("job"));
    assert!(
        attempt(&*t, &queued, true).await.is_none(),
        "granted past a holder"
    );
    assert!(
        attempt(&*s, &behind, true).await.is_none(),
        "granted past a holder"
    );
    release_as(&*s, &holder, Outcome::Failed(Some(4))).await;
    let g = expect_granted(attempt(&*t, &queued, true).await, "the first waiter");
    assert_eq!(g[0].previous, Previous::Failed(Some(4)));
    release_as(&*t, &queued, Outcome::Withdrawn).await;
    let g = expect_granted(attempt(&*s, &behind, true).await, "the second waiter");
    assert_eq!(
        g[0].previous,
        Previous::Failed(Some(4)),
        "a withdrawn attempt (queued) overwrote the last holder's end"
    );
    release(&*s, &behind).await;
}

/// Several names are granted together or not at all: a busy one leaves the others untouched.
pub async fn names_are_granted_all_or_none(subject: &Subject) {
    let s = subject.client(&namespace("multi")).await;
    let b = exclusive("b");
    grant(&*s, &b).await;
    let abc = request(&["a", "b", "c"], Mode::Exclusive, TTL, false);
    busy(&*s, &abc, "b is held by someone else").await;
    for n in ["a", "c"] {
        let st = inspect(&*s, n).await;
        assert!(st.holders.is_empty() && st.waiters.is_empty(), "{st:?}");
    }
    release(&*s, &b).await;
    let g = grant(&*s, &abc).await;
    assert_eq!(g.len(), 3);
    for n in ["a", "b", "c"] {
        busy(&*s, &exclusive(n), "the multi-name lease holds it").await;
    }
    assert!(renew(&*s, &abc, TTL).await);
    assert!(release(&*s, &abc).await);
    for n in ["a", "b", "c"] {
        assert!(inspect(&*s, n).await.holders.is_empty(), "{n} still held");
    }
}

/// Shared holders share; an exclusive one waits for all of them, and they for it.
pub async fn shared_mode(subject: &Subject) {
    let s = subject.client(&namespace("shared")).await;
    let shared = || request(&["db"], Mode::Shared, TTL, false);
    let (r1, r2) = (shared(), shared());
    grant(&*s, &r1).await;
    grant(&*s, &r2).await;
    assert_eq!(inspect(&*s, "db").await.holders.len(), 2);
    let w = exclusive("db");
    busy(&*s, &w, "two readers hold it").await;
    release(&*s, &r1).await;
    busy(&*s, &w, "one reader still holds it").await;
    release(&*s, &r2).await;
    grant(&*s, &w).await;
    busy(&*s, &shared(), "a writer holds it").await;
}

/// One grant takes some names shared and others exclusive: readers of a name share it across
/// such grants, a writer of it excludes them, and a grant that cannot have every name in its
/// mode takes none (Cages' R(P1)+W(P2) against R(P2)+W(P1)).
pub async fn mixed_modes_in_one_grant(subject: &Subject) {
    use Mode::{Exclusive as W, Shared as R};
    let s = subject.client(&namespace("mixed")).await;
    let a = mixed(&[("p1", R), ("p2", W)], TTL, false);
    let ga = grant(&*s, &a).await;
    // Another reader of p1 with a writer of p3 shares p1.
    let b = mixed(&[("p1", R), ("p3", W)], TTL, false);
    let gb = grant(&*s, &b).await;
    assert!(gb[0].fence > ga[0].fence, "p1's fence did not rise");
    let st = inspect(&*s, "p1").await;
    assert_eq!(st.holders.len(), 2, "{st:?}");
    assert!(st.holders.iter().all(|h| h.mode == R), "{st:?}");
    let st = inspect(&*s, "p2").await;
    assert_eq!(st.holders.len(), 1, "{st:?}");
    assert_eq!(st.holders[0].mode, W, "{st:?}");
    // The opposite pair: p2 is written by `a`, so a reader of it waits, and p1 is not taken
    // for writing meanwhile, not even for a moment.
    let c = mixed(&[("p1", W), ("p2", R)], TTL, false);
    busy(&*s, &c, "p2 is held for writing and p1 for reading").await;
    busy(&*s, &exclusive("p1"), "two readers hold p1").await;
    busy(&*s, &request(&["p2"], R, TTL, false), "a writer holds p2").await;
    let st = inspect(&*s, "p1").await;
    assert_eq!(st.holders.len(), 2, "a refused grant changed p1: {st:?}");
    release(&*s, &a).await;
    busy(&*s, &c, "b still reads p1").await;
    assert!(inspect(&*s, "p2").await.holders.is_empty(), "p2 kept");
    release(&*s, &b).await;
    let gc = grant(&*s, &c).await;
    assert!(gc[0].fence > gb[0].fence, "p1's fence did not rise");
    busy(&*s, &request(&["p1"], R, TTL, false), "c writes p1").await;
    grant(&*s, &request(&["p2"], R, TTL, false)).await;
    assert!(renew(&*s, &c, TTL).await);
    assert!(release(&*s, &c).await);
}

/// A mixed request queued behind a writer on one of its names is granted when the writer
/// goes, with each name in its own mode (a queue entry keeps its name's mode).
pub async fn queued_mixed_request_is_granted_in_its_modes(subject: &Subject) {
    use Mode::{Exclusive as W, Shared as R};
    let ns = namespace("mixedq");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let reader = request(&["r"], R, TTL, false);
    grant(&*s, &reader).await;
    let writer = exclusive("w");
    grant(&*s, &writer).await;
    let waiter = mixed(&[("r", R), ("w", W)], TTL, false);
    let _listener = within(t.listen(&waiter)).await.expect("listen");
    assert!(
        attempt(&*t, &waiter, true).await.is_none(),
        "granted past w"
    );
    release(&*s, &writer).await;
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if attempt(&*t, &waiter, true).await.is_some() {
            break;
        }
        assert!(Instant::now() < until, "the mixed waiter was never granted");
        sleep(Duration::from_millis(20)).await;
    }
    let st = inspect(&*s, "r").await;
    assert_eq!(st.holders.len(), 2, "r is shared by both readers: {st:?}");
    let st = inspect(&*s, "w").await;
    assert_eq!(st.holders.iter().map(|h| h.mode).collect::<Vec<_>>(), [W]);
    assert!(st.waiters.is_empty(), "left queued: {st:?}");
    release(&*t, &waiter).await;
    release(&*s, &reader).await;
}

/// `limit K` admits K holders and no more; a slot freed admits the next.
pub async fn limit_mode(subject: &Subject) {
    let s = subject.client(&namespace("limit")).await;
    let slot = || request(&["pool"], Mode::Limit(2), TTL, false);
    let a = slot();
    grant(&*s, &a).await;
    grant(&*s, &slot()).await;
    let third = slot();
    busy(&*s, &third, "both slots are taken").await;
    busy(&*s, &exclusive("pool"), "limit holders exclude a writer").await;
    busy(
        &*s,
        &request(&["pool"], Mode::Shared, TTL, false),
        "limit holders exclude a reader",
    )
    .await;
    release(&*s, &a).await;
    grant(&*s, &third).await;
    busy(&*s, &slot(), "both slots are taken again").await;
}

/// A `limit K` with another K never joins the holders (two `limit 2` holders and a `limit 3`
/// would be three holders where two were promised), nor does a reader; once the holders are
/// gone the other K is granted, and then keeps out the first K in turn.
pub async fn limit_holders_admit_only_their_own_k(subject: &Subject) {
    let s = subject.client(&namespace("limit-k")).await;
    let slot = |k| request(&["pool"], Mode::Limit(k), TTL, false);
    let (a, b) = (slot(2), slot(2));
    grant(&*s, &a).await;
    grant(&*s, &b).await;
    busy(&*s, &slot(3), "a limit 3 beside two limit 2 holders").await;
    busy(&*s, &slot(1), "a limit 1 beside limit 2 holders").await;
    release(&*s, &a).await;
    busy(&*s, &slot(3), "a limit 3 beside one limit 2 holder").await;
    busy(
        &*s,
        &request(&["pool"], Mode::Shared, TTL, false),
        "a reader beside a limit holder",
    )
    .await;
    release(&*s, &b).await;
    let c = slot(3);
    grant(&*s, &c).await;
    busy(&*s, &slot(2), "a limit 2 beside a limit 3 holder").await;
    release(&*s, &c).await;
}

/// A waiter that gives up (releases by its token) leaves nothing behind, and is never the one
/// the lock passes to.
pub async fn release_removes_a_queued_entry(subject: &Subject) {
    let ns = namespace("queue");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let holder = exclusive("q");
    grant(&*s, &holder).await;
    let waiter = exclusive("q");
    let _listener = within(t.listen(&waiter)).await.expect("listen");
    assert!(
        attempt(&*t, &waiter, true).await.is_none(),
        "granted past a holder"
    );
    if subject.caps.shows_waiters {
        assert_eq!(inspect(&*s, "q").await.waiters.len(), 1, "not queued");
    }
    assert!(
        !release(&*t, &waiter).await,
        "a waiter's release held nothing"
    );
    let st = inspect(&*s, "q").await;
    assert!(st.waiters.is_empty(), "left behind: {st:?}");
    release(&*s, &holder).await;
    let st = inspect(&*s, "q").await;
    assert!(
        st.holders.is_empty() && st.waiters.is_empty(),
        "the withdrawn waiter got the lock or stayed queued: {st:?}"
    );
    grant(&*s, &exclusive("q")).await;
}

/// A waiter whose client is gone while it is queued, without a release (its process was
/// killed), is gone from the waiters `inspect` lists within its ttl and a second (etcd once
/// kept it for a fixed 5 s whatever the ttl).
pub async fn a_dead_waiter_leaves_within_its_ttl(subject: &Subject) {
    if !subject.caps.shows_waiters || !subject.caps.dead_waiters_leave {
        return;
    }
    let ns = namespace("deadwaiter");
    let s = subject.client(&ns).await;
    let holder = exclusive("d");
    grant(&*s, &holder).await;
    let ttl = subject.caps.short_ttl;
    let waiter = mixed(&[("d", Mode::Exclusive)], ttl, false);
    {
        let t = subject.client(&ns).await;
        let _listener = within(t.listen(&waiter)).await.expect("listen");
        assert!(
            attempt(&*t, &waiter, true).await.is_none(),
            "granted past a holder"
        );
        assert_eq!(inspect(&*s, "d").await.waiters.len(), 1, "not queued");
    }
    let gone = Instant::now();
    loop {
        let st = inspect(&*s, "d").await;
        if st.waiters.is_empty() {
            break;
        }
        assert!(
            gone.elapsed() < ttl + Duration::from_secs(1),
            "a dead waiter with a {ttl:?} ttl still listed after {:?}: {st:?}",
            gone.elapsed()
        );
        sleep(Duration::from_millis(50)).await;
    }
    release(&*s, &holder).await;
}

/// A release after a grant attempt that was cut off unheard (the engine's timeout dropped it:
/// it may have been applied, its answer never came) gives back that token's entries and only
/// those: another sharer's hold and another token's queue entry stay, and the waiter behind a
/// name it held is woken. (The SQL stores send such a release blind, without waiting on any
/// answer.)
pub async fn a_release_after_a_cut_off_attempt_takes_only_its_own(subject: &Subject) {
    let ns = namespace("cutoff");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let mine = mixed(&[("a", Mode::Shared), ("c", Mode::Exclusive)], TTL, false);
    let theirs = request(&["a"], Mode::Shared, TTL, false);
    grant(&*s, &mine).await;
    grant(&*t, &theirs).await;
    let holder = exclusive("b");
    grant(&*t, &holder).await;
    let (queued, waiter) = (exclusive("b"), exclusive("b"));
    let queued = Acquire {
        token: mine.token.clone(),
        ..queued
    };
    for w in [&waiter, &queued] {
        assert!(
            attempt(&*t, w, true).await.is_none(),
            "granted past a holder"
        );
    }
    let behind = exclusive("c");
    let mut listener = within(t.listen(&behind)).await.expect("listen");
    assert!(
        attempt(&*t, &behind, true).await.is_none(),
        "granted past a holder"
    );
    // Sent, then dropped before any answer, as a store timeout drops it.
    let _ = timeout(Duration::ZERO, s.try_acquire(&queued, true)).await;
    let all = ["a".to_string(), "b".to_string(), "c".to_string()];
    // Its answer is not asserted: MySQL's blind release is never read back (its connection is
    // out of step), so the usual release after it finds nothing left to say it held.
    within(s.release(&all, &mine.token, Outcome::Withdrawn))
        .await
        .unwrap_or_else(|e| panic!("release: {e}"));
    let a = inspect(&*t, "a").await;
    assert_eq!(a.holders.len(), 1, "the other sharer must stay: {a:?}");
    assert_eq!(a.holders[0].owner, crate::names::owner_id(&theirs.token));
    let b = inspect(&*t, "b").await;
    assert_eq!(b.holders.len(), 1, "b's holder must stay: {b:?}");
    assert_eq!(b.holders[0].owner, crate::names::owner_id(&holder.token));
    if subject.caps.shows_waiters {
        let owners: Vec<&str> = b.waiters.iter().map(|w| w.owner.as_str()).collect();
        assert!(
            owners.contains(&crate::names::owner_id(&waiter.token).as_str())
                && !owners.contains(&crate::names::owner_id(&mine.token).as_str()),
            "only the released token's queue entry goes: {b:?}"
        );
    }
    let start = Instant::now();
    listener.changed(Duration::from_secs(20)).await;
    assert!(
        !subject.caps.notified || start.elapsed() < Duration::from_secs(10),
        "the release did not wake the waiter behind it ({:?})",
        start.elapsed()
    );
    let g = attempt(&*t, &behind, true).await;
    expect_granted(g, "the waiter behind the released token");
}

/// A listener opened before a queued attempt wakes on the holder's release (not after its
/// whole wait), and the waiter's next attempt is granted.
pub async fn listener_wakes_on_release(subject: &Subject) {
    let ns = namespace("wake");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let holder = exclusive("w");
    grant(&*s, &holder).await;
    let waiter = exclusive("w");
    let mut listener = within(t.listen(&waiter)).await.expect("listen");
    assert!(attempt(&*t, &waiter, true).await.is_none());
    release(&*s, &holder).await;
    // Without notifications, the waiter's next look (after `MAX_POLL`) must find it free.
    let max = if subject.caps.notified {
        Duration::from_secs(20)
    } else {
        super::MAX_POLL
    };
    let start = Instant::now();
    listener.changed(max).await;
    assert!(
        !subject.caps.notified || start.elapsed() < max / 2,
        "the release did not wake the listener ({:?})",
        start.elapsed()
    );
    let g = attempt(&*t, &waiter, true).await;
    expect_granted(g, "the woken waiter");
}

/// In a store with a queue, a reader does not pass a queued writer; without one, it may.
pub async fn queued_writer_and_later_reader(subject: &Subject) {
    let ns = namespace("fair");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let reader = request(&["rw"], Mode::Shared, TTL, false);
    grant(&*s, &reader).await;
    let writer = exclusive("rw");
    let _listener = within(t.listen(&writer)).await.expect("listen");
    assert!(attempt(&*t, &writer, true).await.is_none());
    let later = request(&["rw"], Mode::Shared, TTL, false);
    let got = attempt(&*s, &later, false).await.is_some();
    assert_eq!(
        got, !subject.caps.fifo,
        "a reader after a queued writer: granted {got}"
    );
    release(&*t, &writer).await;
}

/// `inspect` shows exactly the live holders with their owner, mode, fence, time left and
/// metadata; `list` shows exactly the names with a live holder under a prefix.
pub async fn inspect_and_list_show_the_live_holders(subject: &Subject) {
    let s = subject.client(&namespace("inspect")).await;
    let a = exclusive("app/a");
    let fa = grant(&*s, &a).await[0].fence;
    let (b1, b2) = (
        request(&["app/b"], Mode::Shared, TTL, false),
        request(&["app/b"], Mode::Shared, TTL, false),
    );
    grant(&*s, &b1).await;
    grant(&*s, &b2).await;
    grant(&*s, &exclusive("other")).await;
    let c = exclusive("app/c");
    grant(&*s, &c).await;
    release(&*s, &c).await;
    let ttl = subject.caps.short_ttl;
    let d = request(&["app/d"], Mode::Exclusive, ttl, true);
    grant(&*s, &d).await;

    let st = inspect(&*s, "app/a").await;
    assert_eq!(st.holders.len(), 1, "{st:?}");
    let h = &st.holders[0];
    assert_eq!(h.owner, crate::names::owner_id(&a.token));
    assert_eq!((h.mode, h.fence), (Mode::Exclusive, fa));
    assert!(h.ttl_left_ms > 0 && h.ttl_left_ms <= TTL.as_millis() as u64);
    assert_eq!(h.meta["host"], "conformance", "{:?}", h.meta);
    assert!(st.fence >= fa);
    let st = inspect(&*s, "app/b").await;
    let mut owners: Vec<String> = st.holders.iter().map(|h| h.owner.clone()).collect();
    owners.sort();
    let mut want = vec![
        crate::names::owner_id(&b1.token),
        crate::names::owner_id(&b2.token),
    ];
    want.sort();
    assert_eq!(owners, want);
    assert!(st.holders.iter().all(|h| h.mode == Mode::Shared));
    let st = inspect(&*s, "app/c").await;
    assert!(st.holders.is_empty(), "a released holder is shown: {st:?}");
    assert_eq!(st.previous, Previous::Released);
    assert!(inspect(&*s, "never").await.holders.is_empty());

    // Once app/d's short lease has run out, nothing shows it, though nobody took it since.
    sleep(ttl + Duration::from_millis(500)).await;
    let until = Instant::now() + ttl * 2 + Duration::from_secs(10);
    while !inspect(&*s, "app/d").await.holders.is_empty() {
        assert!(Instant::now() < until, "an expired holder is still shown");
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed(&*s, "app/").await, ["app/a", "app/b"]);
    assert_eq!(listed(&*s, "").await, ["app/a", "app/b", "other"]);
    release(&*s, &a).await;
    assert_eq!(listed(&*s, "app/").await, ["app/b"]);
}

/// The shard-list record: the first write wins (also of two at once), later `IfAbsent`
/// writes read it back unchanged, `Replace` overwrites it, and `list` never shows it.
pub async fn shard_list_is_written_once(subject: &Subject) {
    use super::TagWrite::{IfAbsent, Read, Replace};
    let ns = namespace("shards");
    let (s, t) = (subject.client(&ns).await, subject.client(&ns).await);
    let tag = |what: &str| format!("{what}-{:08x}", (crate::sys::random_u64() as u32));
    let record = |s: &Arc<dyn Store>, tag: String, write| {
        let s = s.clone();
        async move {
            within(s.shard_list(&tag, write))
                .await
                .unwrap_or_else(|e| panic!("shard_list: {e}"))
        }
    };
    // A read writes nothing: "" before any record, and still "" after.
    assert_eq!(
        record(&s, tag("r"), Read).await,
        "",
        "a record before any write"
    );
    assert_eq!(
        record(&t, tag("r"), Read).await,
        "",
        "a read wrote a record"
    );
    let (a, b) = (tag("a"), tag("b"));
    let (got_a, got_b) = tokio::join!(
        record(&s, a.clone(), IfAbsent),
        record(&t, b.clone(), IfAbsent)
    );
    assert_eq!(
        got_a, got_b,
        "two first writers read back different records"
    );
    assert!(got_a == a || got_a == b, "{got_a:?} is neither write");
    assert_eq!(
        record(&s, tag("c"), IfAbsent).await,
        got_a,
        "a later write replaced it"
    );
    let d = tag("d");
    assert_eq!(record(&t, d.clone(), Replace).await, d);
    assert_eq!(
        record(&s, tag("e"), IfAbsent).await,
        d,
        "the replaced record"
    );
    assert_eq!(record(&t, tag("f"), Read).await, d, "a read of the record");
    assert!(
        listed(&*s, "").await.is_empty(),
        "the record is listed as a lock"
    );
}
