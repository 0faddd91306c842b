//! A held lease and what holding it takes: keeping it alive, knowing whether it still is, and
//! giving it back once.
//!
//! Whoever holds a lease for a while (`run` and `multilock -- CMD` under the supervisor,
//! `lock --keepalive`'s renewer) opens a `Session` on it. The session renews every ttl/3
//! (jittered) in a task of its own, tries again sooner after a failure for as long as the
//! lease may still be saved, and publishes what it learnt (`Health`): the deadline the stores
//! agreed to, a renewal that is failing, a lease the stores say is gone. `release` gives the
//! lease back, owner-checked, at most once; dropping the session stops the renewer, so an
//! early return never leaves a task renewing a lease nobody holds.
//!
//! The session renews and releases through a `Keeper`: one engine, or the shard router for a
//! lease spread over several shards (which sits above the engine, so it plugs in here rather
//! than being known by name).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::{Engine, EngineError, Failed, Lease, Tally, timing};
use crate::events::{self, Events};
use crate::store::Outcome;

/// What renews and releases a lease on the stores: an `Engine`, or a router over several.
pub trait Keeper: Send + Sync + 'static {
    /// What a release reports (per store, or per shard).
    type Released: Send;

    /// Renew `lease` for another ttl, moving its deadline; `EngineError::Lost` when the stores
    /// say it is gone.
    fn renew(&self, lease: &mut Lease) -> impl Future<Output = Result<(), EngineError>> + Send;

    /// Owner-checked release of `lease`, recording how the job ended; the stores that give
    /// no answer are asked again, `failed` told of each (`Engine::release_held`).
    fn release(
        &self,
        lease: &Lease,
        outcome: Outcome,
        failed: &Failed<'_>,
    ) -> impl Future<Output = Self::Released> + Send;
}

impl Keeper for Engine {
    type Released = Tally;

    async fn renew(&self, lease: &mut Lease) -> Result<(), EngineError> {
        Engine::renew(self, lease).await
    }

    async fn release(&self, lease: &Lease, outcome: Outcome, failed: &Failed<'_>) -> Tally {
        self.release_held(lease, outcome, failed).await
    }
}

/// What the renewer last learned.
#[derive(Clone, Debug)]
pub struct Health {
    pub deadline: Instant,
    /// Set once the lease is known to be gone: stop the child now.
    pub lost: Option<String>,
    /// The last renewal failure, while it is not yet fatal.
    pub trouble: Option<String>,
}

/// A lease held, renewed in the background once `keep_alive` is called.
pub struct Session<K: Keeper> {
    keeper: Arc<K>,
    lease: Lease,
    /// Given back already: a lease is released once, whatever path ends the hold.
    released: bool,
    /// The renewer and what it reports, once started.
    renewer: Option<Renewer>,
    /// Who hears of renewals and of releases asked again (set by `keep_alive`).
    events: Events,
}

/// The renewal task and dlock's end of what it reports.
struct Renewer {
    task: JoinHandle<()>,
    health: watch::Receiver<Health>,
    /// Asks the renewer to renew at once (before a suspended job's dlock stops).
    now: Arc<Notify>,
    /// The renewer has ended (it does after reporting a loss): nothing more will change.
    done: bool,
}

impl<K: Keeper> Session<K> {
    /// Hold `lease`, renewed and released through `keeper`; nothing runs until `keep_alive`.
    pub fn new(keeper: Arc<K>, lease: Lease) -> Session<K> {
        Session {
            keeper,
            lease,
            released: false,
            renewer: None,
            events: Events::default(),
        }
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    pub fn keeper(&self) -> &K {
        &self.keeper
    }

    /// Start renewing, telling `events` of each renewal and each failure.
    pub fn keep_alive(&mut self, events: &Events) {
        if self.renewer.is_some() {
            return;
        }
        self.events = events.clone();
        let (tx, health) = watch::channel(Health {
            deadline: self.lease.deadline,
            lost: None,
            trouble: None,
        });
        let now = Arc::new(Notify::new());
        let task = tokio::spawn(renew_loop(
            self.keeper.clone(),
            self.lease.clone(),
            tx,
            events.clone(),
            now.clone(),
        ));
        self.renewer = Some(Renewer {
            task,
            health,
            now,
            done: false,
        });
    }

    /// What the renewer last learned (the lease as taken, before `keep_alive`).
    pub fn health(&self) -> Health {
        match &self.renewer {
            Some(r) => r.health.borrow().clone(),
            None => Health {
                deadline: self.lease.deadline,
                lost: None,
                trouble: None,
            },
        }
    }

    /// Until the renewer reports something new; never, once it has ended. Cancel-safe.
    pub async fn changed(&mut self) {
        match &mut self.renewer {
            Some(r) if !r.done => r.done = r.health.changed().await.is_err(),
            _ => std::future::pending().await,
        }
    }

    /// Until the lease is known to be lost: why. A renewer that ended without a word (it
    /// cannot) counts as a loss too.
    pub async fn lost(&mut self) -> String {
        loop {
            if let Some(why) = self.health().lost {
                return why;
            }
            if matches!(&self.renewer, Some(r) if r.done) {
                return "the renewal ended".to_string();
            }
            self.changed().await;
        }
    }

    /// Renew at once and wait for the answer, at most `within`: the deadline then.
    pub async fn renew_now(&mut self, within: Duration) -> Instant {
        if let Some(r) = &mut self.renewer {
            r.now.notify_one();
            if !r.done {
                let _ = timeout(within, r.health.changed()).await;
            }
        }
        self.health().deadline
    }

    /// Stop renewing; the lease is left as it is on the stores (to be released, or to run
    /// out).
    pub fn stop(&mut self) {
        if let Some(r) = &self.renewer {
            r.task.abort();
        }
    }

    /// Give the lease back, owner-checked, telling the stores how the job ended: once (None
    /// after the first). The renewer stops first, so no renewal follows the release. A store
    /// that gives no answer is asked again for a while (`release-failed` events): a lease
    /// left to run out keeps every waiter waiting for its ttl.
    pub async fn release(&mut self, outcome: Outcome) -> Option<K::Released> {
        self.stop();
        if std::mem::replace(&mut self.released, true) {
            return None;
        }
        // Asked again until the deadline the renewals reached at the latest.
        let lease = Lease {
            deadline: self.health().deadline,
            ..self.lease.clone()
        };
        let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
        let (events, names) = (&self.events, &lease.req.names);
        let failed = |e: &crate::store::StoreError, left: Duration| {
            events.emit(
                "release-failed",
                names,
                events::with(
                    events::fences(&fences),
                    json!({ "error": e.to_string(), "lease_left_ms": left.as_millis() as u64 }),
                ),
            )
        };
        Some(self.keeper.release(&lease, outcome, &failed).await)
    }
}

impl<K: Keeper> Drop for Session<K> {
    /// No renewer outlives its session: an early return stops renewing a lease nobody holds.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Renew every ttl/3 (jittered); after a failed renewal try again sooner, for as long as the
/// lease may still be saved; `now` asks for a renewal at once. Ends after reporting a
/// definite loss.
async fn renew_loop<K: Keeper>(
    keeper: Arc<K>,
    mut lease: Lease,
    tx: watch::Sender<Health>,
    events: Events,
    now: Arc<Notify>,
) {
    let ttl = lease.req.ttl;
    let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
    let mut pause = timing::jitter(timing::renew_period(ttl), 0.1);
    loop {
        tokio::select! {
            _ = sleep(pause) => {}
            _ = now.notified() => {}
        }
        match keeper.renew(&mut lease).await {
            Ok(()) => {
                tx.send_replace(Health {
                    deadline: lease.deadline,
                    lost: None,
                    trouble: None,
                });
                events.emit(
                    "renewed",
                    &lease.req.names,
                    events::with(
                        events::fences(&fences),
                        json!({ "ttl_ms": ttl.as_millis() as u64 }),
                    ),
                );
                pause = timing::jitter(timing::renew_period(ttl), 0.1);
            }
            Err(EngineError::Lost(why)) => {
                tx.send_modify(|h| {
                    h.lost = Some(format!(
                        "the lease on {} was lost: {why}",
                        lease.req.names.join(", ")
                    ))
                });
                return;
            }
            Err(e) => {
                let left = lease.deadline.saturating_duration_since(Instant::now());
                events.emit(
                    "renew-failed",
                    &lease.req.names,
                    events::with(
                        events::fences(&fences),
                        json!({ "error": e.to_string(), "lease_left_ms": left.as_millis() as u64 }),
                    ),
                );
                tx.send_modify(|h| h.trouble = Some(e.to_string()));
                pause = timing::jitter(ttl / 10, 0.2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::sleep;

    use super::Session;
    use crate::engine::{Engine, Wait};
    use crate::events::Events;
    use crate::store::memory::MemoryStore;
    use crate::store::{Acquire, Mode, Outcome, Store};

    const TTL: Duration = Duration::from_secs(3);

    /// One engine over three in-memory stores, and a request for `job`.
    fn engine() -> (Engine, Vec<MemoryStore>, Acquire) {
        let m: Vec<MemoryStore> = (0..3).map(|i| MemoryStore::new(format!("m{i}"))).collect();
        let dyns = m
            .iter()
            .map(|s| Arc::new(s.clone()) as Arc<dyn Store>)
            .collect();
        let req = Acquire {
            names: vec!["job".into()],
            token: crate::names::new_token(),
            modes: vec![Mode::Exclusive],
            ttl: TTL,
            meta: "{}".into(),
            detached: false,
        };
        (Engine::from_stores(dyns, Duration::from_secs(1)), m, req)
    }

    async fn held(m: &[MemoryStore]) -> usize {
        let mut n = 0;
        for s in m {
            n += s.inspect("job").await.unwrap().holders.len();
        }
        n
    }

    /// Kept alive, the lease outlives its ttl many times over; once the session is dropped
    /// (an early return), nobody renews it and it runs out.
    #[tokio::test(start_paused = true)]
    async fn a_session_renews_until_it_is_dropped() {
        let (e, m, req) = engine();
        let lease = e.acquire(&req, Wait::No).await.unwrap();
        let mut session = Session::new(Arc::new(e), lease);
        session.keep_alive(&Events::default());
        sleep(TTL * 4).await;
        assert_eq!(held(&m).await, 3, "renewed while held");
        assert!(session.health().lost.is_none());
        drop(session);
        sleep(TTL * 2).await;
        assert_eq!(held(&m).await, 0, "a dropped session renewed on");
    }

    /// The lease is given back once, whatever asks again; the renewer stops with it.
    #[tokio::test(start_paused = true)]
    async fn a_session_releases_once() {
        let (e, m, req) = engine();
        let lease = e.acquire(&req, Wait::No).await.unwrap();
        let mut session = Session::new(Arc::new(e), lease);
        session.keep_alive(&Events::default());
        let first = session.release(Outcome::Released).await;
        assert_eq!(first.map(|t| t.yes), Some(3));
        assert!(session.release(Outcome::Failed(Some(1))).await.is_none());
        assert_eq!(held(&m).await, 0);
        sleep(TTL * 2).await;
        assert_eq!(held(&m).await, 0, "renewed after the release");
    }
}
