//! Holding a lease while a command runs: the one path `run` and `multilock -- CMD` share.
//! The watchdog is forked before the lock is asked for (`prepare`); once granted, the command
//! runs under the supervisor while the stores' reach is followed, so that both tell
//! `--events` (and `-v`) of a store going away and coming back while the command runs.

use std::ffi::OsString;
use std::time::Duration;

use super::{Ctx, Timing, waiting, warnings};
use crate::cli::SuperviseArgs;
use crate::engine::Lease;
use crate::events::Events;
use crate::exit::Result;
use crate::supervisor::{self, Limits, Prepared};

/// Fork the watchdog of `command`, to run under a lease on (some of) `names`: now, not
/// between the grant and the command.
pub fn prepare(
    ctx: &Ctx,
    command: &[OsString],
    names: &[String],
    grace: Duration,
    args: &SuperviseArgs,
) -> Result<Prepared> {
    Ok(
        supervisor::prepare(command, names, grace, args.leave_running)?
            .with_store_id(ctx.shards.store_id())
            .with_warnings(warnings(args)),
    )
}

/// Run the prepared command while `lease` is held, and release it when the command ends;
/// the code dlock ends with. `timing` marks the command's start.
pub async fn hold_and_run(
    ctx: &Ctx,
    lease: Lease,
    prepared: Prepared,
    grace: Duration,
    limits: Limits,
    events: &Events,
    timing: &mut Timing,
) -> Result<i32> {
    timing.start();
    let names = lease.req.names.clone();
    let supervised = supervisor::supervise_with(
        &ctx.shards,
        &ctx.out,
        lease,
        prepared,
        grace,
        limits,
        events,
    );
    tokio::select! {
        r = supervised => r,
        // A store going away and coming back while the command runs.
        never = waiting::follow_reach(&ctx.shards, &names, events, &ctx.out, true) => {
            match never {}
        }
    }
}
