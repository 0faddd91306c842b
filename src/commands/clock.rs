//! Trusting the process's clock before a lease is timed on it.

use std::time::Duration;

use crate::exit::{Error, ExitCode, Result};

/// Leases are timed on the process's monotonic clock (the runtime's timers, the client's
/// conservative deadline, renewals). If that clock is not the kernel's, as under libfaketime,
/// a lease could outlive its deadline unnoticed: refuse to take or extend one rather than let
/// a bent clock admit two holders.
pub(crate) fn trust_clock() -> Result<()> {
    let skew = crate::sys::clock_skew();
    if skew > crate::sys::HONEST_SKEW {
        // As set up, this process can never time a lease: EX_CONFIG, not a plain failure.
        return Err(Error::new(
            ExitCode::Config,
            format!(
                "this process's monotonic clock is {} away from the kernel's (a preloaded \
                 libfaketime?), so dlock will not time leases on it: run dlock without it and \
                 fake the job's clock instead, e.g. `dlock run NAME -- faketime ... ./job`",
                plain_distance(skew)
            ),
        ));
    }
    Ok(())
}

/// A long distance in one plain unit a person reads at a glance: `3 days`, `5 hours`.
fn plain_distance(d: Duration) -> String {
    let s = d.as_secs();
    let (n, unit) = match s {
        0..120 => (s, "second"),
        120..7200 => (s / 60, "minute"),
        7200..172_800 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    format!("about {n} {unit}{}", if n == 1 { "" } else { "s" })
}
