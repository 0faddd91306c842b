//! The lost-grant fault: a grant the store applies but whose reply the client never hears.
//! The victim reaches every server through a fault proxy that delays each chunk by a good part
//! of its store timeout; the other clients hold off so that the lock comes free and the
//! victim's attempt is granted; the checker, watching the store directly, sees the grant and
//! switches the proxies to drop every reply before the grant's own reply is due back. The
//! victim must not enter, and the orphaned grant must be freed within the victim's ttl (by its
//! release, which reaches the store unheard, or by the store's expiry): another client must
//! enter within that ttl and a little more. `max-lost-grant-free-ms` is the longest time from
//! the loss to that entry.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::proxy::Mode;
use crate::partition::Proxied;
use crate::{Fault, Injected, Run, Section, Setup, Summary, mono_ns};

/// The victim's lease is this many checker ttls: long enough that a grant freed by the store's
/// expiry rather than by dlock's release shows in the figure.
const VICTIM_TTLS: u32 = 4;

impl Run {
    pub(crate) fn lost_grant_fault(&self, n: usize, setup: &Setup) -> Injected {
        let ttl = self.cfg.ttl * VICTIM_TTLS;
        // dlock's default store timeout for that ttl; each way is delayed a quarter of it, so
        // the grant's round trip still fits and its reply would be heard but for the drop.
        // Where a grant takes several round trips (a SQL transaction, ZooKeeper's create and
        // list) the victim gets as many times the timeout, and the delay stays long enough
        // for the checker to see the grant before its reply is due.
        let timeout = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let way = Proxied::new(setup);
        way.set_all(Mode::Delay(timeout / 4));
        let victim = format!("v{n}-lost-grant");
        self.hold_off.store(true, Ordering::SeqCst);
        let mut cmd = self.dlock_run_ttl(&way.env, &victim, self.cfg.hold, ttl);
        if setup.round_trips() > 1 {
            let longer = timeout * (setup.round_trips() + 1);
            cmd.env("DLOCK_STORE_TIMEOUT", format!("{}ms", longer.as_millis()));
        }
        let mut child = cmd.spawn().expect("spawn the victim");
        let pid = child.id();
        let start = Instant::now();
        let mut at = None;
        while start.elapsed() < Duration::from_secs(20) {
            if self.listed("holders", pid) {
                way.set_all(Mode::DropReplies);
                at = Some(mono_ns());
                break;
            }
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.hold_off.store(false, Ordering::SeqCst);
        // Its replies stay lost until it is done, so it may never hear its grant and wait
        // out its -w: killed at the limit then, without the report of a hang.
        let limit = ttl * 2 + Duration::from_secs(10);
        let (code, said) = self.finish_as(&mut child, limit, false);
        // Healed only once the victim is done.
        drop(way);
        let said = said.trim().replace('\n', " / ");
        Injected {
            fault: Fault::LostGrant,
            victim: Some(victim),
            at,
            exit: Some(code),
            outcome: match at {
                Some(_) => format!(
                    "grant seen after {} ms and its reply dropped, dlock exit {code}: {said}",
                    start.elapsed().as_millis()
                ),
                None => format!("no grant seen, dlock exit {code}: {said}"),
            },
        }
    }
}

/// A lost grant's victim must not enter after the loss (one that entered heard its reply
/// before the drop: counted, as the fault missed), and someone else must enter within the
/// victim's ttl and a little more.
pub(crate) fn check(
    s: &mut Summary,
    secs: &[Section],
    faults: &[Injected],
    ttl: Duration,
    slack: Duration,
) {
    let due = ttl * VICTIM_TTLS + slack;
    for f in faults.iter().filter(|f| f.fault == Fault::LostGrant) {
        let (Some(at), Some(victim)) = (f.at, &f.victim) else {
            continue;
        };
        s.max_lost_grant_free_ms.get_or_insert(0);
        if secs.iter().any(|x| &x.client == victim) {
            s.lost_grant_heard += 1;
            s.details
                .push(format!("lost grant heard: {victim} entered all the same"));
            continue;
        }
        let next = secs
            .iter()
            .filter(|x| x.enter > at)
            .map(|x| (x.enter - at) / 1_000_000)
            .min();
        let Some(next) = next else { continue };
        let m = s.max_lost_grant_free_ms.get_or_insert(0);
        *m = (*m).max(next);
        if Duration::from_millis(next) > due {
            s.stuck += 1;
            s.details
                .push(format!("stuck: {next} ms after the lost grant of {victim}"));
        }
    }
}
