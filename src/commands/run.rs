//! `dlock run` (alias `run-with-lock`): hold a lock for as long as a command runs.

use std::time::Duration;

use super::Ctx;
use super::{acquire_with, holder_request, mode};
use crate::cli::RunArgs;
use crate::events::Events;
use crate::exit::{Error, ExitCode, Result};
use crate::supervisor::signals::{STOPPING, Signals};
use crate::supervisor::{self, Limits};

pub async fn run(args: RunArgs, ctx: &Ctx) -> Result<i32> {
    let limits = Limits {
        hold_min: args.cron.hold_min,
        max_runtime: args.cron.max_runtime,
    };
    // With --hold-min the lease must outlive dlock (as `lock`'s does): it is left to expire
    // on the store after the command ends.
    let detached = limits.hold_min.is_some();
    let req = holder_request(
        vec![args.name],
        mode(&args.mode),
        args.acquire.ttl,
        &args.command,
        detached,
        &args.holder,
    );
    let grace = supervisor::kill_grace(args.supervise.kill_grace, req.ttl)?;
    // dlock prints no result of its own on stdout here, so `--events -` may use it.
    let events = Events::open(args.holder.events.as_deref(), true)?;
    if let Some(most) = args.cron.jitter {
        jitter(ctx, most).await?;
    }
    let dog = supervisor::standby_watchdog(&ctx.out, grace);
    let ended = async {
        // A run that does not get its lock drops its watchdog, which then ends.
        let lease = acquire_with(ctx, &req, &args.acquire, &events).await?;
        supervisor::supervise_with(
            &ctx.engine,
            &ctx.out,
            lease,
            dog,
            &args.command,
            grace,
            limits,
            &events,
        )
        .await
    }
    .await;
    events.finish();
    ended
}

/// `--jitter`: sleep a random time up to `most` (so a fleet started by cron at :00 does not
/// hit the store at once); a stopping signal ends it with 128+N, as while waiting.
async fn jitter(ctx: &Ctx, most: Duration) -> Result<()> {
    let pause = most.mul_f64(rand::random::<f64>());
    ctx.out.debug(&format!(
        "--jitter: sleeping {} before trying",
        humantime::format_duration(Duration::from_millis(pause.as_millis() as u64))
    ));
    let mut signals = Signals::catch(&STOPPING)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    tokio::select! {
        _ = tokio::time::sleep(pause) => Ok(()),
        sig = signals.recv() => Err(Error::new(ExitCode::Raw(128 + sig), "")),
    }
}
