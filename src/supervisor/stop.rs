//! How far dlock has gone in stopping the command: one value, which only goes forward.
//!
//! Two causes stop a command: `--max-runtime` (it overran) and a lease being lost (no renewal
//! by the point of no return, or the store said it is gone). Either may come after the
//! other, and each keeps its own SIGKILL time; a SIGKILL once sent is the end of what dlock
//! sends. The `select!` arms of the supervision loop each ask this value one question (is a
//! SIGTERM for the lease sent, when is a SIGKILL due) instead of reading loose flags.

use tokio::time::Instant;

/// What has been done to stop the command so far.
#[derive(Debug)]
pub enum Stop {
    /// Nothing: the command runs.
    Running,
    /// `--max-runtime` was reached: SIGTERM sent, SIGKILL due at `kill_at` (one kill grace
    /// later), unless `killed` already.
    Overran { kill_at: Instant, killed: bool },
    /// The lease is being lost (`why`, said once): SIGTERM sent (unless the command had
    /// ended, or the watchdog had stopped it, by the time dlock heard), SIGKILL due before the
    /// deadline, or at `gone_kill_at` once the store has said the lease is gone (someone else
    /// may be inside already, so the kill grace runs from that answer; kept, not recomputed,
    /// so that a signal forwarded meanwhile does not put it off). `overrun_kill_at`: when
    /// `--max-runtime` stopped it too, that SIGKILL time.
    Losing {
        why: String,
        gone_kill_at: Option<Instant>,
        overrun_kill_at: Option<Instant>,
        killed: bool,
    },
}

impl Stop {
    /// Why the lease is lost, once it is.
    pub fn lost(&self) -> Option<&str> {
        match self {
            Stop::Losing { why, .. } => Some(why),
            _ => None,
        }
    }

    /// The lease is being lost and the command was told (SIGTERM): no more warnings of a late
    /// renewal, no second SIGTERM for it.
    pub fn losing(&self) -> bool {
        matches!(self, Stop::Losing { .. })
    }

    /// `--max-runtime` stopped the command.
    pub fn overran(&self) -> bool {
        match self {
            Stop::Overran { .. } => true,
            Stop::Losing {
                overrun_kill_at, ..
            } => overrun_kill_at.is_some(),
            Stop::Running => false,
        }
    }

    /// When the store said the lease is gone, the SIGKILL time set then.
    pub fn gone_kill_at(&self) -> Option<Instant> {
        match self {
            Stop::Losing { gone_kill_at, .. } => *gone_kill_at,
            _ => None,
        }
    }

    fn killed(&self) -> bool {
        match self {
            Stop::Running => false,
            Stop::Overran { killed, .. } | Stop::Losing { killed, .. } => *killed,
        }
    }

    /// When the SIGKILL for a lost lease is due, if one is: `before_deadline`, or sooner once
    /// the store said the lease is gone.
    pub fn lost_kill_at(&self, before_deadline: Instant) -> Option<Instant> {
        match self {
            Stop::Losing { gone_kill_at, .. } if !self.killed() => {
                Some(gone_kill_at.map_or(before_deadline, |at| at.min(before_deadline)))
            }
            _ => None,
        }
    }

    /// When the SIGKILL for `--max-runtime` is due, if one is.
    pub fn overrun_kill_at(&self) -> Option<Instant> {
        match self {
            _ if self.killed() => None,
            Stop::Overran { kill_at, .. } => Some(*kill_at),
            Stop::Losing {
                overrun_kill_at, ..
            } => *overrun_kill_at,
            Stop::Running => None,
        }
    }

    /// `--max-runtime` may still stop the command (it has not yet).
    pub fn may_overrun(&self) -> bool {
        !self.overran()
    }

    /// `--max-runtime` reached: its SIGKILL is due at `kill_at`.
    pub fn overrun(&mut self, kill_at: Instant) {
        match self {
            Stop::Running => {
                *self = Stop::Overran {
                    kill_at,
                    killed: false,
                }
            }
            Stop::Losing {
                overrun_kill_at, ..
            } => *overrun_kill_at = overrun_kill_at.or(Some(kill_at)),
            Stop::Overran { .. } => {}
        }
    }

    /// The lease is lost, for `why`: kept if it was already (the first reason stands).
    pub fn lose(&mut self, why: &str) {
        let (overrun_kill_at, killed) = match self {
            Stop::Running => (None, false),
            Stop::Overran { kill_at, killed } => (Some(*kill_at), *killed),
            Stop::Losing { .. } => return,
        };
        *self = Stop::Losing {
            why: why.to_string(),
            gone_kill_at: None,
            overrun_kill_at,
            killed,
        };
    }

    /// The store said the lease is gone: its SIGKILL is due at `at` (set once).
    pub fn gone(&mut self, why: &str, at: Instant) {
        self.lose(why);
        if let Stop::Losing { gone_kill_at, .. } = self {
            gone_kill_at.get_or_insert(at);
        }
    }

    /// SIGKILL sent: nothing more to send.
    pub fn killed_now(&mut self) {
        match self {
            Stop::Overran { killed, .. } | Stop::Losing { killed, .. } => *killed = true,
            Stop::Running => {}
        }
    }
}
