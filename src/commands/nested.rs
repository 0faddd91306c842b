//! A `dlock run NAME` inside a job that already holds NAME: it runs its command at once and
//! takes nothing, as a command run under `flock` inherits the lock with its descriptor. A
//! script run under `dlock run deploy` whose steps each say `dlock run deploy -- STEP` would
//! otherwise wait for itself forever.
//!
//! The job is known by what the `run` above it put in its environment: the names and token
//! (`DLOCK_NAME`, `DLOCK_TOKEN`) and the stores and namespace they are held on
//! (`DLOCK_STORE_ID`, a digest: the URLs may carry passwords). The store has the last word:
//! only a lease the token still holds there passes, so a stale environment (a job that lost
//! its lease, or variables copied into another shell) takes the lock as usual.

use std::os::unix::process::CommandExt;

use super::Ctx;
use crate::exit::{Error, Result};
use crate::store::Mode;

/// Whether this `run` of one of `names` in `mode` is inside a job that holds it on these
/// stores: then the command is to run at once. Err (64) when the job holds it in a mode that
/// does not cover `mode` (an exclusive run inside a shared hold): waiting would never end.
pub async fn inside_holder(ctx: &Ctx, names: &[String], mode: Mode) -> Result<bool> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(held), Some(token), Some(id)) =
        (var("DLOCK_NAME"), var("DLOCK_TOKEN"), var("DLOCK_STORE_ID"))
    else {
        return Ok(false);
    };
    // `multilock -- CMD` gives every name it holds, space-separated (names have no spaces).
    let Some(name) = names.iter().find(|n| held.split(' ').any(|h| h == *n)) else {
        return Ok(false);
    };
    if id != ctx.shards.store_id() {
        return Ok(false);
    }
    let Some(hold) = holding(ctx, name, &token).await else {
        return Ok(false);
    };
    if !covers(hold, mode) {
        return Err(Error::usage(format!(
            "this job holds {name} {hold}, and a run of it inside the job takes nothing, so it \
             cannot run {mode}: give it --shared, or take {name} exclusively in the outer run"
        )));
    }
    ctx.out.debug(&format!(
        "this job already holds {name} ({hold}): running the command without taking it"
    ));
    Ok(true)
}

/// The mode `token` holds `name` in, if a majority of the stores still show its lease.
async fn holding(ctx: &Ctx, name: &str, token: &str) -> Option<Mode> {
    let view = ctx.shards.engine(name).view(name).await;
    // Stores show an owner by its token's first digits, never by the token itself.
    let owner = crate::names::owner_id(token);
    view.merged()
        .holders
        .into_iter()
        .find(|q| q.holder.owner == owner && q.holder.ttl_left_ms > 0)
        .map(|q| q.holder.mode)
}

/// Whether a hold in `outer` mode gives everything a run in `inner` mode asks for: an
/// exclusive hold covers any run; a shared run needs only that no one holds it exclusively,
/// which any hold of the job's own ensures; otherwise the same mode.
fn covers(outer: Mode, inner: Mode) -> bool {
    outer == Mode::Exclusive || inner == Mode::Shared || outer == inner
}

/// Become the command, with the environment as it is (the job's lease variables stay true):
/// its exit status is the job's to see, as if dlock were not there. Returns only if the
/// command could not be run.
pub fn exec(command: &[std::ffi::OsString]) -> Error {
    let e = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    crate::supervisor::not_run(command, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_hold_covers_every_run_and_a_shared_one_only_shared_runs() {
        use Mode::*;
        for inner in [Exclusive, Shared, Limit(2)] {
            assert!(covers(Exclusive, inner), "{inner}");
        }
        assert!(covers(Shared, Shared));
        assert!(!covers(Shared, Exclusive));
        assert!(!covers(Shared, Limit(2)));
        assert!(covers(Limit(2), Limit(2)));
        assert!(covers(Limit(2), Shared));
        assert!(!covers(Limit(2), Limit(3)));
        assert!(!covers(Limit(2), Exclusive));
    }
}
