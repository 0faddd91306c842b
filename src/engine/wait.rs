//! The one wait loop. Every wait on a name, whether to take the lock (`Take`) or until it is
//! free (`dlock wait`, `Free`), looks at the stores, and while it may not finish yet waits for
//! a notification, a pause or the end of an outage, within its budget. What one look is, and
//! what is given back when a wait ends without success, belong to its driver; the rest is here
//! once: the budget, riding out an outage, the listeners, the pace between looks and the busy
//! reports the waiting line follows.

use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::select_all;
use tokio::sync::watch;
use tokio::time::{Instant, sleep};

use super::error::{NOT_WAITED, unreachable};
use super::{Engine, EngineError, Wait, reach, timing};
use crate::store::{Acquire, ErrorKind, Listener, MAX_POLL, StoreError};

/// How long a wait may last, reckoned from when it started. Waits that are parts of one (the
/// shard router's groups, `run --any`'s alternatives) share it, so all end by one deadline.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    wait: Wait,
    give_up_at: Option<Instant>,
}

impl Budget {
    /// A budget of `wait`, starting now.
    pub fn start(wait: Wait) -> Budget {
        let give_up_at = match wait {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        };
        Budget { wait, give_up_at }
    }

    /// Whether it allows any wait at all (not `-n`).
    pub(super) fn waits(&self) -> bool {
        !matches!(self.wait, Wait::No)
    }

    /// Used up at `now`: a busy look ends the wait.
    fn spent(&self, now: Instant) -> bool {
        !self.waits() || self.give_up_at.is_some_and(|g| now >= g)
    }

    /// `pause`, cut to what is left of the budget at `now`.
    fn cap(&self, pause: Duration, now: Instant) -> Duration {
        match self.give_up_at {
            Some(g) => pause.min(g - now),
            None => pause,
        }
    }

    /// `pause` before looking again through an outage, if any of the budget is left.
    fn ride(&self, pause: Duration) -> Option<Duration> {
        match self.give_up_at {
            None => Some(pause),
            Some(g) => {
                let left = g.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| pause.min(left))
            }
        }
    }
}

/// Asks waits to end early, from outside (`run --any`'s race, once one alternative won or a
/// signal came): cloned into each wait, raised once for all. Each wait then ends as if its
/// budget had run out, its driver giving back what it must, so nothing is left queued.
#[derive(Clone, Default)]
pub struct Halt(Option<watch::Receiver<bool>>);

impl Halt {
    /// A halt and what raises it (`send(true)`).
    pub fn channel() -> (watch::Sender<bool>, Halt) {
        let (tx, rx) = watch::channel(false);
        (tx, Halt(Some(rx)))
    }

    /// Until it is raised; never, for the default one (or once nobody can raise it).
    pub async fn raised(self) {
        if let Some(mut rx) = self.0
            && rx.wait_for(|up| *up).await.is_ok()
        {
            return;
        }
        std::future::pending().await
    }
}

/// What one look at the stores found.
pub(super) enum Look<T> {
    /// The wait is over: the lease taken, or the name free.
    Done(T),
    /// Enough stores answered, and enough of them found the name busy: wait, then look again.
    Busy(Pace),
    /// Too few stores answered to tell: an outage to ride out, or the end of the wait.
    TooFew,
}

/// How to wait after a busy look.
pub(super) struct Pace {
    /// The soonest a store said to look again (or a holder's lease runs out), if any did.
    pub(super) retry_after: Option<Duration>,
    /// The longest the waiter may go before it looks again, if nothing tells it of a change:
    /// `MAX_POLL`, or longer where every busy store said so (`Attempt::Busy::patience`).
    pub(super) patience: Duration,
    pub(super) then: Then,
}

pub(super) enum Then {
    /// Until a listener tells of a change, or the pause passes.
    Listen,
    /// The pause alone: our own give-backs would wake the listeners at once.
    Pause,
    /// A short pause of its own length: contenders that split the stores between them back
    /// off by different amounts.
    BackOff,
}

/// One look: what it found, and the stores that failed it (by index).
pub(super) struct Round<T> {
    pub(super) look: Look<T>,
    pub(super) errors: Vec<(usize, StoreError)>,
}

/// Why a wait ended without success, for its driver to give back what it must.
pub(super) enum End {
    /// Too few stores answered, and the outage was not ridden out.
    Unreachable,
    /// The budget ran out on a busy look; `queued`: the look was a queued one.
    GaveUp { queued: bool },
    /// Asked to stop from outside, between two looks (any of which may have queued).
    Halted,
}

/// What a wait does at each look, and after one that ends it without success.
pub(super) trait Driver {
    type Done;
    /// Its looks queue the request (a grant attempt does): when a store came back, the new
    /// listeners are opened before the old ones go, since a store may keep a waiter's place
    /// with its listener (the file store's bell). A watcher's old listeners go first.
    const KEEPS_PLACE: bool;
    /// One look; `queued` once the listeners are open (no release slips between them).
    fn look(
        &mut self,
        engine: &Engine,
        queued: bool,
    ) -> impl Future<Output = Round<Self::Done>> + Send;
    /// What the listeners are opened for (the last look's request).
    fn listens_for(&self) -> &Acquire;
    /// The wait ended without success.
    fn end(&mut self, engine: &Engine, why: End) -> impl Future<Output = ()> + Send;
}

impl Engine {
    /// Wait as `driver` looks, within `budget`, counting up `busy` each time a look finds the
    /// name busy and the engine is about to wait: what the waiting line and the `waiting`
    /// event follow. The count changes nothing in how the engine waits. Once `stop` is
    /// done the wait ends at its next pause, as one whose budget ran out (`End::Halted`).
    pub(super) async fn wait_with<D: Driver>(
        &self,
        driver: &mut D,
        budget: Budget,
        busy: Option<&watch::Sender<u32>>,
        stop: impl Future<Output = ()> + Send,
    ) -> Result<D::Done, EngineError> {
        // Fused: a stop seen in a pause is remembered in `halted`, never polled again.
        let mut stop = std::pin::pin!(stop.fuse());
        let mut halted = false;
        let mut listeners: Option<Vec<Box<dyn Listener>>> = None;
        // The stores that failed the last look, and whether this wait rode out an outage.
        let mut erred: Vec<usize> = Vec::new();
        let mut rode_out = false;
        loop {
            if halted || stop.as_mut().now_or_never().is_some() {
                driver.end(self, End::Halted).await;
                return Err(EngineError::NotAcquired);
            }
            let queued = listeners.is_some();
            let Round { look, errors } = driver.look(self, queued).await;
            let back = erred.iter().any(|i| !errors.iter().any(|(j, _)| j == i));
            erred = errors.iter().map(|(i, _)| *i).collect();
            let pace = match look {
                Look::Done(done) => return Ok(done),
                Look::Busy(pace) => pace,
                Look::TooFew => {
                    // A wait rides out an outage (a restart, a failover, an election) for its
                    // whole budget, once the stores have answered this process.
                    if let Some(pause) = self.ride_out(budget, &errors) {
                        rode_out = true;
                        halted = until(stop.as_mut(), sleep(pause)).await;
                        continue;
                    }
                    driver.end(self, End::Unreachable).await;
                    return Err(self.unreachable_after(errors, rode_out, budget));
                }
            };
            let now = Instant::now();
            if budget.spent(now) {
                driver.end(self, End::GaveUp { queued }).await;
                return Err(EngineError::NotAcquired);
            }
            if let Some(b) = busy {
                b.send_modify(|n| *n = n.wrapping_add(1));
            }
            let most = pace.patience;
            let pause = budget.cap(pace.retry_after.map_or(most, |r| r.min(most)), now);
            match listeners.as_mut() {
                // A store that came back lost what it was telling us on the old connection:
                // listen again, on all, before the next look.
                Some(ls) if !back => {
                    halted = until(stop.as_mut(), self.pace(ls, pace.then, pause)).await
                }
                _ => {
                    if !D::KEEPS_PLACE {
                        drop(listeners.take());
                    }
                    // Listen before the next (queued) look, so no release slips between them.
                    listeners = Some(self.listen_all(driver.listens_for()).await);
                }
            }
        }
    }

    /// Wait between two looks as `then` says, for at most `pause`.
    async fn pace(&self, listeners: &mut [Box<dyn Listener>], then: Then, pause: Duration) {
        match then {
            Then::Listen => wait_any(listeners, pause).await,
            Then::Pause => sleep(pause).await,
            Then::BackOff => {
                let short = pause.min(self.store_timeout).min(Duration::from_millis(20));
                sleep(timing::jitter(short, 1.0)).await
            }
        }
    }

    /// Listen on every store; the listeners of a majority are enough (any live store tells
    /// of a release, and a missed one costs a bounded poll).
    async fn listen_all(&self, req: &Acquire) -> Vec<Box<dyn Listener>> {
        self.fan_out_majority(|s| s.listen(req), super::fan::Linger::Pace)
            .await
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .collect()
    }

    /// Whether a wait that found too few stores answering keeps trying, and if so the pause
    /// before it tries again. It does when it may wait (not `-n`, budget left), every failure
    /// was an outage, and a majority of the stores are known to this process (they answered
    /// when opened, or served an attempt or a read since): then this is the stores' own life
    /// (a restart, a failover, an election), not a wrong URL.
    fn ride_out(&self, budget: Budget, errors: &[(usize, StoreError)]) -> Option<Duration> {
        // Only an outage is ridden out: not a refusal, a usage error or an answer this
        // version cannot read (a URL naming some other service).
        let outage = errors
            .iter()
            .all(|(_, e)| matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::LeaseGone));
        if !budget.waits() || !outage || !self.rides_out() {
            return None;
        }
        let pause = match self.full_for(errors) {
            // A server at its connection limit is asked again sooner at first, then less
            // often the longer it stays full, each waiter at its own pace: a crowd beyond the
            // limit must not keep it full with its own dials.
            Some(full) => timing::jitter(
                (full / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)),
                0.5,
            ),
            None => timing::jitter(self.store_timeout.min(MAX_POLL), 0.5),
        };
        budget.ride(pause)
    }

    /// How long the longest of the stores that turned us away at their connection limit
    /// has been doing so, if any did.
    fn full_for(&self, errors: &[(usize, StoreError)]) -> Option<Duration> {
        errors
            .iter()
            .filter(|(_, e)| e.limit().is_some())
            .map(|(i, _)| {
                self.reach
                    .down_since(*i)
                    .map_or(Duration::ZERO, |t| t.elapsed())
            })
            .max()
    }

    /// The error for too few stores answering; after riding out an outage, each store that
    /// is still unreachable says for how long.
    fn unreachable_after(
        &self,
        errors: Vec<(usize, StoreError)>,
        rode_out: bool,
        budget: Budget,
    ) -> EngineError {
        // A wait that was not ridden out because the stores never answered this process (a
        // wrong URL fails fast by contract) says so: `-w` did not apply.
        let unheard = !rode_out
            && budget.waits()
            && !self.rides_out()
            && errors
                .iter()
                .all(|(_, e)| e.kind() == ErrorKind::Unavailable)
            // A local file store's error is its answer: nothing was left unheard.
            && !errors.iter().all(|(i, _)| self.stores[*i].local());
        let errors = errors
            .into_iter()
            .map(|(i, e)| match self.reach.down_since(i) {
                Some(since) if rode_out => self.still_down(i, e, since),
                _ => e,
            })
            .collect();
        match unreachable(errors, self.stores.len(), self.majority()) {
            EngineError::Stores(e) if unheard && e.kind() == ErrorKind::Unavailable => {
                EngineError::Stores(e.reworded(|m| format!("{m} ({NOT_WAITED})")))
            }
            other => other,
        }
    }

    /// Store `i`'s error `e` at the end of a wait that rode out its outage: for how long it
    /// has been unreachable (or turned us away), and why.
    fn still_down(&self, i: usize, e: StoreError, since: Instant) -> StoreError {
        let desc = self.stores[i].describe();
        let what = match e.limit() {
            Some(_) => "turned away",
            None => "unreachable",
        };
        e.reworded(|m| {
            let why = m.strip_prefix(desc).unwrap_or(m);
            let why = why.strip_prefix(": ").unwrap_or(why);
            let down = reach::show(since.elapsed());
            format!("{desc}: {what} for {down}: {why}")
        })
    }

    /// Whether a wait on these stores rides out an outage now: a majority of them has
    /// answered this process (see `ride_out`). If not, a wait that finds them unreachable
    /// ends at once, and nobody should be told it is retrying.
    pub fn rides_out(&self) -> bool {
        self.known() >= self.majority()
    }

    /// How many stores have answered this process.
    fn known(&self) -> usize {
        (0..self.stores.len())
            .filter(|&i| self.reach.has_served(i) || self.stores[i].reached())
            .count()
    }
}

/// Until `f` is done, or `stop` is: whether `stop` was (the wait then ends before its next
/// look).
async fn until(
    stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    f: impl Future<Output = ()>,
) -> bool {
    tokio::select! {
        biased;
        _ = stop => true,
        _ = f => false,
    }
}

/// Until any listener reports a change, or `max` passes.
async fn wait_any(listeners: &mut [Box<dyn Listener>], max: Duration) {
    if listeners.is_empty() {
        sleep(max).await;
        return;
    }
    select_all(listeners.iter_mut().map(|l| l.changed(max))).await;
}
