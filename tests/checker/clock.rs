//! The clock-rate fault: a holder whose process clock runs fast or slow (libfaketime's rate),
//! honest when it starts, so that dlock's check of its clock at start-up passes. A slow clock
//! is the dangerous one: by its own reckoning a holder that cannot renew reaches its deadline
//! late. Where the setup has a proxy to cut, the victim is cut from a majority once it holds
//! (as partition-blackhole) and must be stopped within the ttl all the same; on `file` and
//! `cluster` it only holds for 4 x ttl on the bent clock, renewing.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::{Fault, Injected, Run, Setup, Stores, common};

/// Within the drift dlock allows for (1% of the ttl), and 5% beyond it either way.
const RATES: [f64; 3] = [0.95, 0.99, 1.05];

/// Run `cmd` on a clock that runs at `rate` (1.0 is real time), sleeps scaled alike.
pub(crate) fn bend(cmd: &mut Command, rate: f64) {
    cmd.env("LD_PRELOAD", common::libfaketime()).env(
        "FAKETIME",
        format!("{:.3} x{rate}", common::honest_offset()),
    );
}

impl Run {
    /// The rate for the next clock-rate victim: each of `RATES` in turn, or the one given.
    pub(crate) fn clock_rate(&self) -> f64 {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        self.cfg
            .clock_rate
            .unwrap_or_else(|| RATES[NEXT.fetch_add(1, Ordering::SeqCst) % RATES.len()])
    }

    pub(crate) fn clock_rate_fault(&self, n: usize, setup: &Setup) -> Injected {
        if !matches!(setup.stores, Stores::File(_)) {
            return self.partition_fault(Fault::ClockRate, n, setup);
        }
        let ttl = self.cfg.ttl;
        let rate = self.clock_rate();
        let victim = format!("v{n}-clock-rate");
        let mut cmd = self.dlock_run(&victim, ttl * 4);
        bend(&mut cmd, rate);
        let mut child = cmd.spawn().expect("spawn the victim");
        let entered = self.wait_entered(&victim, &mut child, Duration::from_secs(60));
        let (code, said) = self.finish_saying(&mut child, ttl * 6 + Duration::from_secs(10));
        let said = said.trim().replace('\n', " / ");
        Injected {
            fault: Fault::ClockRate,
            victim: Some(victim),
            at: None,
            exit: Some(code),
            outcome: match entered {
                Some(_) => format!("held on a clock x{rate}, not cut, dlock exit {code}: {said}"),
                None => format!("never entered, exit {code}: {said}"),
            },
        }
    }
}
