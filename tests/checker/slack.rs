//! How late the next holder may enter after a fault before the lock counts as stuck.
//!
//! A fixed bound fails on a busy machine: there every step between a lease running out and
//! the next section starting (the store's expiry, a notification, a grant, a process start)
//! is slower, for reasons that have nothing to do with dlock. The slack is therefore measured
//! in the run itself, from its own hand-offs, which go through those same steps.

use std::time::Duration;

/// The time a waiter takes to notice a lock come free and ask again: a floor (a waiter's
/// bounded poll, a store's notification) plus four times the 90th percentile of the
/// run's hand-offs (one holder's exit to the next one's entry, in microseconds). On an idle
/// machine the floor dominates; on a loaded one the bound grows by what a hand-off costs
/// there. The 90th percentile leaves out the few hand-offs a fault itself stretched.
pub fn slack(ttl: Duration, handoffs_us: &[u64]) -> Duration {
    let floor = (ttl / 2).max(Duration::from_millis(500));
    let mut h = handoffs_us.to_vec();
    h.sort_unstable();
    let p90 = h.get(h.len() * 9 / 10).copied().unwrap_or(0);
    floor + Duration::from_micros(p90) * 4
}

/// When the next holder is due after a holder fault (a kill, a freeze, a clock jump): within
/// the ttl, the store's expiry grain (how late past the ttl the store itself ends a lease:
/// `Setup::expiry_grain`) and the slack. After a cut from a majority, 3 x ttl (a cut-off holder's renewals may
/// still reach the store unheard, and a ZooKeeper session lives on while its client pings).
/// A store fault before anybody entered adds another ttl and slack: a recovering store may
/// re-time every lease (a new etcd leader renews each by its ttl plus its election timeout),
/// and each waiter has to notice and ask again.
pub fn due(
    ttl: Duration,
    grain: Duration,
    slack: Duration,
    cuts_majority: bool,
    after_store: bool,
) -> Duration {
    let mut due = if cuts_majority {
        ttl * 3
    } else {
        ttl + grain + slack
    };
    if after_store {
        due += ttl + grain + slack;
    }
    due
}
