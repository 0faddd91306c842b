//! `dlock multilock`: several locks, all or none, in one canonical order, so two jobs that
//! need overlapping sets can never deadlock; then run a command or print the token.

use super::{acquire, request};
use crate::app::Ctx;
use crate::cli::MultilockArgs;
use crate::exit::Result;
use crate::store::Mode;
use crate::supervisor;

pub async fn run(args: MultilockArgs, ctx: &Ctx) -> Result<i32> {
    let detached = args.command.is_empty();
    let req = request(
        args.names,
        Mode::Exclusive,
        args.acquire.ttl,
        &args.command,
        detached,
    );
    let grace = supervisor::kill_grace(args.supervise.kill_grace, req.ttl)?;
    let lease = acquire(ctx, &req, &args.acquire).await?;
    if detached {
        super::lock::print_token(ctx, &lease);
        return Ok(0);
    }
    supervisor::supervise(
        ctx,
        lease,
        &args.command,
        grace,
        supervisor::Limits::default(),
    )
    .await
}
