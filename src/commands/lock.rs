//! `dlock lock`: take a lease that outlives this process and print its token.

use serde_json::json;

use super::Ctx;
use super::keepalive;
use super::{acquire_with, holder_request, millis, mode};
use crate::cli::{Follow, LockArgs};
use crate::engine::{Lease, previous};
use crate::events::Events;
use crate::exit::{Error, ExitCode, Result};

pub async fn run(args: LockArgs, ctx: &Ctx) -> Result<i32> {
    if args.keepalive && keepalive::is_renewer() {
        return keepalive::renew(args, ctx).await;
    }
    let mut req = holder_request(
        vec![(args.name.clone(), mode(&args.mode))],
        args.acquire.ttl,
        &[],
        true,
        &args.holder,
    );
    // Started before the wait, so that the lease names it (see `keepalive`).
    let renewer = match args.keepalive {
        true => {
            let follow = args.follow.unwrap_or(Follow::Parent);
            let r = keepalive::Renewer::start(follow)?;
            req.meta = keepalive::with_renewer(&req.meta, r.pid(), follow);
            Some(r)
        }
        false => None,
    };
    // The token is the result on stdout: events go to a file only.
    let events = Events::open(args.holder.events.as_deref(), false)?;
    // The run, for --metrics-file, is the taking of the lock: no command of its own.
    let mut timing = super::Timing::default();
    let lease = timing
        .wait_on(acquire_with(ctx, &req, &args.acquire, &events))
        .await;
    events.finish();
    let ended = match lease {
        Ok(lease) => hold(ctx, &lease, renewer, args.keepalive).await,
        Err(e) => Err(e),
    };
    let path = args.holder.metrics_file.as_deref();
    super::record_metrics(ctx, path, &req.names, &ended, &timing);
    ended
}

/// Hand the lease to its renewer (`--keepalive`), then print its token; a lease that cannot
/// be handed over or printed is given back, and its renewer stopped.
async fn hold(
    ctx: &Ctx,
    lease: &Lease,
    renewer: Option<keepalive::Renewer>,
    keepalive: bool,
) -> Result<i32> {
    if let Some(r) = renewer
        && let Err(e) = r.hand_over(lease)
    {
        withdraw(ctx, lease).await;
        return Err(e);
    }
    let printed = hand_over(ctx, lease).await;
    if printed.is_err() && keepalive {
        // Released by `hand_over`: its renewer must not go on.
        keepalive::stop::stop(&lease.req.token).await;
    }
    printed
}

/// Print the token of a lease that outlives dlock; if it cannot be written (a full disk, a
/// closed stdout or pipe), nobody would ever have the token, and the lock would stay held for
/// the whole ttl: release it, and exit 74.
pub async fn hand_over(ctx: &Ctx, lease: &Lease) -> Result<i32> {
    let Err(e) = print_token(ctx, lease) else {
        return Ok(0);
    };
    let names = &lease.req.names;
    withdraw(ctx, lease).await;
    Err(Error::new(
        ExitCode::IoError,
        format!(
            "cannot write the token to stdout ({e}), so nobody would have it: released {}",
            crate::output::printable(&names.join(", "))
        ),
    ))
}

/// Give back a lease no job ran under: the next holder is told of the holder before, as it
/// was.
async fn withdraw(ctx: &Ctx, lease: &Lease) {
    let mut session = crate::engine::Session::new(ctx.shards.clone(), lease.clone());
    session.release(crate::store::Outcome::Withdrawn).await;
}

/// The token on stdout (it is all a script captures); the rest as JSON or a terminal notice.
fn print_token(ctx: &Ctx, lease: &Lease) -> std::io::Result<()> {
    let req = &lease.req;
    let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
    if ctx.out.json {
        let mut v = json!({
            "acquired": true,
            "token": req.token,
            "previous": previous(lease),
            "previous_exit": previous(lease).exit(),
            "ttl_ms": millis(req.ttl),
            "mode": super::mode_json(req),
        });
        if req.names.len() == 1 {
            v["name"] = json!(req.names[0]);
            v["fence"] = json!(fences[0]);
        } else {
            v["names"] = json!(req.names);
            v["modes"] = json!(req.modes);
            v["fences"] = json!(fences);
        }
        ctx.out.try_json_value(&v)
    } else {
        ctx.out.try_line(&req.token)?;
        let f: Vec<String> = fences.iter().map(u64::to_string).collect();
        ctx.out.notice(&format!(
            "locked {} (fence {}, previous {}, ttl {}); release with: dlock unlock NAME --token TOKEN",
            req.names.join(", "),
            f.join(", "),
            previous(lease),
            humantime::format_duration(req.ttl)
        ));
        Ok(())
    }
}
