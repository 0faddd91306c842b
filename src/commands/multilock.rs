//! `dlock multilock`: several locks, all or none, in one canonical order, so two jobs that
//! need overlapping sets can never deadlock; then run a command or print the token. Names
//! given plainly are taken exclusively, those after `--shared` shared, in the same grant.

use super::Ctx;
use super::{acquire_with, hold, holder_request};
use crate::cli::MultilockArgs;
use crate::events::Events;
use crate::exit::{Error, Result};
use crate::output::printable;
use crate::store::Mode;
use crate::supervisor;

pub async fn run(args: MultilockArgs, ctx: &Ctx) -> Result<i32> {
    let detached = args.command.is_empty();
    if let Some(both) = args.names.iter().find(|n| args.shared.contains(n)) {
        return Err(Error::usage(format!(
            "{} is given both exclusive and --shared; name it once, in the mode it needs",
            printable(both)
        )));
    }
    let exclusive = args.names.into_iter().map(|n| (n, Mode::Exclusive));
    let shared = args.shared.into_iter().map(|n| (n, Mode::Shared));
    let req = holder_request(
        exclusive.chain(shared).collect(),
        args.acquire.ttl,
        &args.command,
        detached,
        &args.holder,
    );
    let grace = supervisor::kill_grace(args.supervise.kill_grace, req.ttl)?;
    // Without a command the token is the result on stdout, so `--events -` may not use it.
    let events = Events::open(args.holder.events.as_deref(), !detached)?;
    let mut timing = super::Timing::default();
    let ended = async {
        // The watchdog is forked before the wait, not between the grant and the command.
        let prepared = match detached {
            true => None,
            false => Some(hold::prepare(
                ctx,
                &args.command,
                &req.names,
                grace,
                &args.supervise,
            )?),
        };
        let lease = timing
            .wait_on(acquire_with(ctx, &req, &args.acquire, &events))
            .await?;
        let Some(prepared) = prepared else {
            return super::lock::hand_over(ctx, &lease).await;
        };
        let limits = supervisor::Limits::default();
        hold::hold_and_run(ctx, lease, prepared, grace, limits, &events, &mut timing).await
    }
    .await;
    events.finish();
    let path = args.holder.metrics_file.as_deref();
    super::record_metrics(ctx, path, &req.names, &ended, &timing);
    ended
}
