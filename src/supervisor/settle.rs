//! The end of a supervised run: the lease released (or kept for `--hold-min`), the watchdog's
//! word on whether it had to stop the command, and the code dlock ends with.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::{Limits, Supervised};
use crate::engine::Lease;
use crate::events;
use crate::exit::{Error, ExitCode, Result};
use crate::output::Output;
use crate::shard::{Shards, Tallies};
use crate::store::Outcome;
use crate::sys;

impl Supervised<'_> {
    /// The command has ended: release the lease (or keep it for --hold-min) and say how the
    /// run ended.
    pub(super) async fn settle(
        mut self,
        status: std::io::Result<std::process::ExitStatus>,
    ) -> Result<i32> {
        self.session.stop();
        // The next holder waits on this release: in a plain ending it comes before anything
        // else (giving back the terminal). A lost or overrun lease has its command's tree
        // killed first (the watchdog ends only when none of it is left), and --hold-min keeps
        // the lease.
        let overran = self.stop.overran();
        let plain = self.stop.lost().is_none() && !overran && self.limits.hold_min.is_none();
        let early = match plain {
            true => self.release(outcome(&status, false, false)).await,
            false => None,
        };
        // The status may have come from the watchdog's last word: it is exiting; reap it, so
        // that dlock never ends before its watchdog.
        self.dog.reap().await;
        drop(self.terminal.take());
        self.note_fired();
        if self.stop.lost().is_some() || overran {
            // Whatever the child left running in its group must not outlive the lease either.
            let _ = sys::kill_group(self.pgid, libc::SIGKILL);
        }
        if self.stop.lost().is_none()
            && let Some(hold) = self.limits.hold_min
            && let Some(left) = (self.started + hold).checked_duration_since(Instant::now())
            && !left.is_zero()
        {
            // Leave the lease to run out on the store at start + hold-min, not released: no
            // other host (whatever its clock says) runs the job again within that window.
            hold_until(self.session.keeper(), self.out, self.lease(), left, hold).await;
            let ended = exit_status(status, overran, self.limits);
            // Not released: left to run out on the store at the end of --hold-min.
            self.released(json!({ "expires_in_ms": left.as_millis() as u64 }), &ended);
            return ended;
        }
        // The session releases once: here unless the plain ending did already.
        let tally = match early {
            Some(tally) => Some(tally),
            None => {
                self.release(outcome(&status, self.stop.lost().is_some(), overran))
                    .await
            }
        };
        if self.stop.lost().is_none()
            && let Some(tally) = &tally
        {
            self.report_unreleased(tally);
        }
        if self.stop.lost().is_some() {
            // The loss was said when it happened, once; the exit code says the rest.
            return Err(Error::new(ExitCode::LockLost, ""));
        }
        let ended = exit_status(status, overran, self.limits);
        // false: no majority confirmed the release; the lease runs out by its ttl.
        let confirmed = tally.is_some_and(|t| self.session.keeper().confirmed(&t));
        self.released(json!({ "confirmed": confirmed }), &ended);
        ended
    }

    /// The watchdog stopped the command for the deadline and dlock had not seen the lease go:
    /// say it is lost now.
    fn note_fired(&mut self) {
        if !self.dog.fired() || self.stop.lost().is_some() {
            return;
        }
        // dlock could not act in time (it was stopped or starved) and the watchdog
        // stopped the command at the deadline: the lease is gone as surely as if we had
        // seen it go.
        let why = match self.suspended {
            // Ctrl-Z stopped dlock with the job: the user's pause outlived the lease.
            true => format!(
                "the lease on {} ran out while the job was suspended (Ctrl-Z); the \
                 watchdog stopped the command then",
                self.names()
            ),
            false => format!(
                "the lease on {} ran out while dlock could not renew it (was dlock \
                 stopped?); the watchdog stopped the command",
                self.names()
            ),
        };
        self.out.error(&why);
        self.lost_event(&why);
        self.alarm.lost(self.pushed, &why, None, self.out);
        self.stop.lose(&why);
    }

    /// Release the lease, telling the stores how the job ended for its successor (None: it
    /// was released already).
    async fn release(&mut self, outcome: Outcome) -> Option<Tallies> {
        self.session.release(outcome).await
    }

    /// Say which stores the release did not reach: a store that was down all along is no
    /// news; a release that left the lease held on a majority (until its ttl) is.
    fn report_unreleased(&self, tally: &Tallies) {
        if tally.errors().next().is_none() {
            return;
        }
        let report = if self.session.keeper().confirmed(tally) {
            Output::debug
        } else {
            Output::warn
        };
        let errors: Vec<String> = tally.errors().map(|e| e.to_string()).collect();
        report(
            self.out,
            &format!(
                "could not release on every store (the lease will expire there): {}",
                errors.join("; ")
            ),
        );
    }

    /// The `released` event: how the run ended, and `what` became of the lease.
    fn released(&self, what: serde_json::Value, ended: &Result<i32>) {
        let code = json!({ "exit_code": ended_code(ended) });
        self.events.emit(
            "released",
            &self.lease().req.names,
            events::with(events::fences(&self.fences), events::with(code, what)),
        )
    }
}

/// How the job ended, for the next holder: clean only when the command exited 0 and nothing
/// stopped it; otherwise the code dlock ends with (the command's, 128+signal, 124 for
/// --max-runtime, 70 for a lost lease).
fn outcome(
    status: &std::io::Result<std::process::ExitStatus>,
    lost: bool,
    overran: bool,
) -> Outcome {
    let code = match status {
        _ if lost => Some(ExitCode::LockLost.into()),
        _ if overran => Some(ExitCode::TimedOut.into()),
        Ok(s) => command_code(*s),
        Err(_) => None,
    };
    match code {
        Some(0) => Outcome::Released,
        code => Outcome::Failed(code),
    }
}

/// The command's own code, or 128+N when a signal ended it.
fn command_code(status: std::process::ExitStatus) -> Option<i32> {
    match (status.code(), status.signal()) {
        (Some(code), _) => Some(code),
        (None, Some(sig)) => Some(128 + sig),
        _ => None,
    }
}

/// The code dlock ends with once the command has ended and the lease is settled.
fn exit_status(
    status: std::io::Result<std::process::ExitStatus>,
    overran: bool,
    limits: Limits,
) -> Result<i32> {
    let status = status.map_err(|e| Error::failure(format!("cannot wait for the command: {e}")))?;
    if overran {
        return Err(Error::new(
            ExitCode::TimedOut,
            format!(
                "the command ran longer than --max-runtime {} and was stopped",
                humantime::format_duration(limits.max_runtime.unwrap_or_default())
            ),
        ));
    }
    Ok(command_code(status).unwrap_or(1))
}

/// The code a run ends with, for the `released` event.
fn ended_code(ended: &Result<i32>) -> i32 {
    match ended {
        Ok(code) => *code,
        Err(e) => i32::from(e.code),
    }
}

/// Set the lease to run out `left` from now (the end of the `--hold-min` window) and leave it.
async fn hold_until(shards: &Shards, out: &Output, lease: &Lease, left: Duration, hold: Duration) {
    let req = &lease.req;
    let tally = shards.extend(&req.names, &req.token, left).await;
    match shards.verdict(tally) {
        Ok(_) => {
            out.debug(&format!(
                "keeping {} for the rest of --hold-min {} ({} more); the lease runs out on the store",
                req.names.join(", "),
                humantime::format_duration(hold),
                humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
            ));
        }
        // The command ran under the lock; only the window after it is not assured.
        Err(e) => out.warn(&format!(
            "could not keep {} for the rest of --hold-min {}: {e}",
            req.names.join(", "),
            humantime::format_duration(hold)
        )),
    }
}
