//! What this process has seen of each store's reachability: whether the store has ever answered
//! it, and since when it has not. Every call the engine makes updates it (`Engine::fan_out_until`).
//!
//! It decides one thing, whether a wait rides out an outage: only once a majority of the stores
//! have served this process (answered an attempt or a read) is an unreachable store taken for a
//! store's own life (a restart,
//! a failover, an election) rather than a mistake in its URL, so that a typo'd URL still fails
//! fast and never hangs a cron job. It also tells whoever watches (the waiting line, `--events`)
//! when a store goes away and comes back, without the engine knowing who that is.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::{ErrorKind, StoreError};

#[derive(Clone, Default)]
struct State {
    /// The store has served this process: answered an attempt, a read or a renewal (not
    /// only a clean-up release, which a store that refuses every grant still answers).
    served: bool,
    /// Since when every call failed as unreachable (None: the last call was answered).
    down_since: Option<Instant>,
    /// The last failure, for the line that says why.
    error: Option<StoreError>,
    /// The last call to it was decided without its answer, which had not come (a stopped
    /// server): give-backs do not wait for it.
    slow: bool,
    /// `-v` was told it is slow (once per process).
    told_slow: bool,
    /// Its last call had no answer within the store timeout. A split vote does not wait for it.
    silent: bool,
    /// Its open was not done when a majority's was, and it has not answered since. A split
    /// vote of a wait does not wait for it either; a single attempt's (`-n`) does.
    opening: bool,
}

/// A store that is unreachable now.
#[derive(Clone, Debug)]
pub struct Outage {
    /// Index of the store in the engine's list.
    pub index: usize,
    pub since: Instant,
    /// The last failure, naming the store.
    pub error: StoreError,
}

/// Who is told of a store by its description (`-v`).
pub(super) type Tell = Box<dyn Fn(&str) + Send + Sync>;

pub(super) struct Reach {
    stores: Vec<Mutex<State>>,
    /// Bumped whenever a store goes away or comes back.
    changed: watch::Sender<u64>,
    /// Told the first time each store is cut off as slow (`-v`).
    on_slow: OnceLock<Tell>,
}

impl Reach {
    pub(super) fn new(n: usize) -> Reach {
        Reach {
            stores: (0..n).map(|_| Mutex::new(State::default())).collect(),
            changed: watch::Sender::new(0),
            on_slow: OnceLock::new(),
        }
    }

    fn with<T>(&self, i: usize, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.stores[i].lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// Store `i` served a request: from now on it is known to be there.
    pub(super) fn served(&self, i: usize) {
        self.with(i, |s| s.served = true);
    }

    /// Store `i` answered (whatever it said).
    pub(super) fn answered(&self, i: usize) {
        let back = self.with(i, |s| {
            s.error = None;
            s.slow = false;
            s.silent = false;
            s.opening = false;
            s.down_since.take().is_some()
        });
        if back {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A call to store `i` failed. Only a store that could not be reached is down; one that
    /// refused us or answered nonsense did answer.
    pub(super) fn failed(&self, i: usize, e: &StoreError) {
        if e.kind() != ErrorKind::Unavailable {
            self.answered(i);
            return;
        }
        let went = self.with(i, |s| {
            s.error = Some(e.clone());
            s.slow = false;
            let went = s.down_since.is_none();
            s.down_since.get_or_insert_with(Instant::now);
            went
        });
        if went {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A call to store `i` was decided before it answered: it is slow until it answers.
    pub(super) fn cut_off(&self, i: usize, desc: &str) {
        let first = self.with(i, |s| {
            s.slow = true;
            !std::mem::replace(&mut s.told_slow, true)
        });
        if first && let Some(tell) = self.on_slow.get() {
            tell(desc);
        }
    }

    /// A call to store `i` had no answer at all within the store timeout. Until it answers,
    /// see `is_silent`.
    pub(super) fn silent(&self, i: usize) {
        self.with(i, |s| s.silent = true);
    }

    /// Store `i` was still opening when a majority of the others had opened. Until it
    /// answers, see `is_silent`.
    pub(super) fn opening(&self, i: usize) {
        self.with(i, |s| s.opening = true);
    }

    /// Whether store `i` is silent: a split vote's tie is not left to it (`amnesia::split`).
    /// Only a store that gave no answer at all is: one that answered slower than the others
    /// (a distant member) is still waited for, or a waiter that needs it to break every
    /// tie would never hold. With `opening`, a store whose open is still going on counts as
    /// silent too: a wait looks again anyway, but a single attempt (`-n`) would call a
    /// free lock busy for a member that is only slow to connect (a busy machine).
    pub(super) fn is_silent(&self, i: usize, opening: bool) -> bool {
        self.with(i, |s| s.silent || (opening && s.opening))
    }

    /// Whether the last call to store `i` was decided without its answer.
    pub(super) fn is_slow(&self, i: usize) -> bool {
        self.with(i, |s| s.slow)
    }

    /// Who to tell when a store is first found slow.
    pub(super) fn on_slow(&self, tell: Tell) {
        let _ = self.on_slow.set(tell);
    }

    /// Whether store `i` has served this process.
    pub(super) fn has_served(&self, i: usize) -> bool {
        self.with(i, |s| s.served)
    }

    /// Since when store `i` has been unreachable, if it is.
    pub(super) fn down_since(&self, i: usize) -> Option<Instant> {
        self.with(i, |s| s.down_since)
    }

    pub(super) fn outages(&self) -> Vec<Outage> {
        (0..self.stores.len())
            .filter_map(|i| {
                self.with(i, |s| {
                    Some(Outage {
                        index: i,
                        since: s.down_since?,
                        error: s.error.clone()?,
                    })
                })
            })
            .collect()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// A length of an outage as a person reads it: "40ms", "4.2s", "12s", "3m 5s".
pub fn show(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(10) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}
