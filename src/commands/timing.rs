//! What a supervised run carries beside its lease: the warnings for its job when the lease is
//! lost, and the timing that `--metrics-file` records.

use std::time::Duration;

use super::Ctx;
use crate::cli::SuperviseArgs;
use crate::exit::{ExitCode, Result};

/// What a supervised job is told when its lease is lost (`--on-lost`, `--warn-signal`).
pub fn warnings(args: &SuperviseArgs) -> crate::supervisor::Warnings {
    crate::supervisor::Warnings {
        on_lost: args.on_lost.clone(),
        warn_signal: args.warn_signal,
    }
}

/// When a run asked for its lock and when its command started, for `--metrics-file`.
#[derive(Default)]
pub struct Timing {
    /// How long the run waited for the lock, granted or not.
    pub waited: Option<Duration>,
    /// When the command started (wall clock, for the file; monotonic, for its duration).
    pub started: Option<(std::time::SystemTime, std::time::Instant)>,
}

impl Timing {
    /// Await the taking of the lock (`acquire_with`, `acquire_any`), noting how long it took,
    /// granted or not.
    pub async fn wait_on<T>(&mut self, acquiring: impl std::future::Future<Output = T>) -> T {
        let asked = std::time::Instant::now();
        let r = acquiring.await;
        self.waited = Some(asked.elapsed());
        r
    }

    /// The command starts now.
    pub fn start(&mut self) {
        self.started = Some((std::time::SystemTime::now(), std::time::Instant::now()));
    }
}

/// Record how a run on `names` ended in `--metrics-file`, if one was given. A file that
/// cannot be written is said on stderr; it never changes the run's exit code.
pub fn record_metrics(
    ctx: &Ctx,
    path: Option<&std::path::Path>,
    names: &[String],
    ended: &Result<i32>,
    timing: &Timing,
) {
    let Some(path) = path else { return };
    let run = crate::metrics::Run {
        waited: timing.waited,
        ran: timing.started.map(|(at, mono)| (at, mono.elapsed())),
        exit_code: match ended {
            Ok(code) => Some(*code),
            Err(e) if e.kind() == "not_acquired" => None,
            Err(e) => Some(i32::from(e.code)),
        },
        lost: matches!(ended, Err(e) if e.code == ExitCode::LockLost),
    };
    if let Err(e) = crate::metrics::record(path, names, &run) {
        ctx.out.warn(&format!(
            "cannot write --metrics-file {}: {e}",
            crate::output::printable(&path.display().to_string())
        ));
    }
}
