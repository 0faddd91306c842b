//! `dlock run` (alias `run-with-lock`): hold a lock for as long as a command runs.

use super::Ctx;
use super::{acquire, mode, request};
use crate::cli::RunArgs;
use crate::exit::Result;
use crate::supervisor;

pub async fn run(args: RunArgs, ctx: &Ctx) -> Result<i32> {
    let req = request(
        vec![args.name],
        mode(&args.mode),
        args.acquire.ttl,
        &args.command,
        false,
    );
    let grace = supervisor::kill_grace(args.supervise.kill_grace, req.ttl)?;
    let lease = acquire(ctx, &req, &args.acquire).await?;
    supervisor::supervise(&ctx.engine, &ctx.out, lease, &args.command, grace).await
}
