//! `dlock run` (alias `run-with-lock`): hold a lock for as long as a command runs.

use super::Ctx;
use super::{acquire_with, holder_request, mode};
use crate::cli::RunArgs;
use crate::events::Events;
use crate::exit::Result;
use crate::supervisor;

pub async fn run(args: RunArgs, ctx: &Ctx) -> Result<i32> {
    let req = holder_request(
        vec![args.name],
        mode(&args.mode),
        args.acquire.ttl,
        &args.command,
        false,
        &args.holder,
    );
    let grace = supervisor::kill_grace(args.supervise.kill_grace, req.ttl)?;
    // dlock prints no result of its own on stdout here, so `--events -` may use it.
    let events = Events::open(args.holder.events.as_deref(), true)?;
    let ended = async {
        let lease = acquire_with(ctx, &req, &args.acquire, &events).await?;
        supervisor::supervise_with(&ctx.engine, &ctx.out, lease, &args.command, grace, &events)
            .await
    }
    .await;
    events.finish();
    ended
}
