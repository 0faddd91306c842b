//! Lease arithmetic shared by acquire, renew and the `run` supervisor.
//!
//! The client never trusts its lease up to the store's expiry: it counts from the moment the
//! request was sent (before the store started its own clock) and takes off a drift margin for
//! clocks that run at slightly different rates, so its deadline always falls first.

use std::time::Duration;

/// Clock drift allowance: 1% of the ttl plus 2 ms for timer granularity.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Time a lease is still good for, if it was requested `elapsed` ago. None when it is not.
pub fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl))
        .filter(|v| !v.is_zero())
}

/// How long one store may take to answer: a tenth of the ttl, between 10 ms and 1 s, so one
/// stopped server costs a fraction of the lease and never the whole of it.
pub fn default_store_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Renewal period of a running lease: a third of the ttl, so two renewals can fail before
/// the deadline comes near.
pub fn renew_period(ttl: Duration) -> Duration {
    ttl / 3
}

/// Default `--kill-grace`: a quarter of the ttl, at most 10 s.
pub fn default_kill_grace(ttl: Duration) -> Duration {
    (ttl / 4).min(Duration::from_secs(10))
}

/// Scale `d` by a random factor in [1 - spread, 1 + spread], so that many clients that started
/// together do not stay in step.
pub fn jitter(d: Duration, spread: f64) -> Duration {
    let f = 1.0 + spread * (crate::sys::random_f64() * 2.0 - 1.0);
    d.mul_f64(f.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_leaves_the_drift_margin() {
        let ttl = Duration::from_secs(10);
        assert_eq!(drift(ttl), Duration::from_millis(102));
        assert_eq!(
            validity(ttl, Duration::from_secs(1)),
            Some(Duration::from_millis(8898))
        );
        assert_eq!(validity(ttl, Duration::from_millis(9898)), None);
        assert_eq!(validity(ttl, Duration::from_secs(11)), None);
    }

    #[test]
    fn store_timeout_is_a_fraction_of_the_ttl() {
        assert_eq!(
            default_store_timeout(Duration::from_secs(30)),
            Duration::from_secs(1)
        );
        assert_eq!(
            default_store_timeout(Duration::from_secs(3)),
            Duration::from_millis(300)
        );
        assert_eq!(
            default_store_timeout(Duration::from_millis(100)),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn jitter_stays_within_its_spread() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(1), 0.1);
            assert!(j >= Duration::from_millis(900) && j <= Duration::from_millis(1100));
        }
    }
}
