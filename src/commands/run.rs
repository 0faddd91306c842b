//! `dlock run` (alias `run-with-lock`): hold a lock for as long as a command runs.

use std::ffi::OsString;
use std::time::Duration;

use super::Ctx;
use super::{acquire_any, hold, holder_request, mode};
use crate::cli::RunArgs;
use crate::events::Events;
use crate::exit::{Error, Result};
use crate::names;
use crate::store::Acquire;
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
    if args.name_before_any
        && let Some(name) = &args.name
    {
        return Err(Error::usage(format!(
            "both a lock name ({:?}) and --any were given; use `dlock run NAME -- CMD` or \
             `dlock run --any NAME NAME... -- CMD`",
            name.to_string_lossy()
        )));
    }
    let (names, command) = names_and_command(args.name, args.any, args.command)?;
    let mode = mode(&args.mode);
    if super::nested::inside_holder(ctx, &names, mode).await? {
        return Err(super::nested::exec(&command));
    }
    // One request per name, each with its own token; the holder's metadata is built once.
    let base = holder_request(
        Vec::new(),
        args.acquire.ttl,
        &command,
        detached,
        &args.holder,
    );
    let reqs: Vec<_> = names
        .into_iter()
        .map(|name| Acquire {
            names: vec![name],
            modes: vec![mode],
            token: names::new_token(),
            ..base.clone()
        })
        .collect();
    let grace = supervisor::kill_grace(args.supervise.kill_grace, args.acquire.ttl)?;
    // dlock prints no result of its own on stdout here, so `--events -` may use it.
    let events = Events::open(args.holder.events.as_deref(), true)?;
    if let Some(most) = args.cron.jitter {
        jitter(ctx, most).await?;
    }
    // The names a skipped or failed run is recorded under; the one taken once granted.
    let mut names: Vec<String> = reqs.iter().flat_map(|r| r.names.clone()).collect();
    let mut timing = super::Timing::default();
    let ended = async {
        // The watchdog is forked now, not between the grant and the command.
        let prepared = hold::prepare(ctx, &command, &names, grace, &args.supervise)?;
        let lease = timing
            .wait_on(acquire_any(ctx, &reqs, &args.acquire, &events))
            .await?;
        names = lease.req.names.clone();
        hold::hold_and_run(ctx, lease, prepared, grace, limits, &events, &mut timing).await
    }
    .await;
    events.finish();
    let path = args.holder.metrics_file.as_deref();
    super::record_metrics(ctx, path, &names, &ended, &timing);
    ended
}

/// `--jitter`: sleep a random time up to `most` (so a fleet started by cron at :00 does not
/// hit the store at once); a stopping signal ends it with 128+N, as while waiting.
async fn jitter(ctx: &Ctx, most: Duration) -> Result<()> {
    let pause = most.mul_f64(crate::sys::random_f64());
    ctx.out.debug(&format!(
        "--jitter: sleeping {} before trying",
        humantime::format_duration(Duration::from_millis(pause.as_millis() as u64))
    ));
    let mut signals = Signals::catch(&STOPPING)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    tokio::select! {
        _ = tokio::time::sleep(pause) => Ok(()),
        sig = signals.recv() => Err(Error::interrupted(sig)),
    }
}

/// The names a run may take and its command. Without --any: the one name, checked. With it:
/// --any's names, each once, in a random rotation (when several are free, the first asked is
/// granted first, so a fixed order would send every run to the same one; a rotation keeps
/// the user's order and spreads the start), and the positional slot, if filled, is the
/// command's first word.
fn names_and_command(
    name: Option<OsString>,
    any: Vec<String>,
    mut command: Vec<OsString>,
) -> Result<(Vec<String>, Vec<OsString>)> {
    let names = if any.is_empty() {
        let name = name.ok_or_else(|| Error::usage("dlock run needs a lock name"))?;
        let text = name
            .to_str()
            .ok_or_else(|| Error::usage(format!("the lock name {name:?} is not valid UTF-8")))?;
        vec![names::parse_name(text).map_err(|e| Error::usage(format!("invalid lock name: {e}")))?]
    } else {
        if let Some(first) = name {
            command.insert(0, first);
        }
        let mut seen = std::collections::HashSet::new();
        let mut names = any;
        names.retain(|n| seen.insert(n.clone()));
        let start = crate::sys::random_below(names.len());
        names.rotate_left(start);
        names
    };
    if command.is_empty() {
        return Err(Error::usage(if names_after_dash_dash(&names) {
            // `dlock run -- CMD`: clap fills the name slot with the command's first word.
            "no lock name: the words after `--` are the command; give the name before it, as \
             in `dlock run NAME -- CMD`"
        } else {
            "no command to run: give it after the lock name, as in `dlock run NAME -- CMD`"
        }));
    }
    Ok((names, command))
}

/// Whether the one name came right after `--` on the command line (so it was meant as the
/// command, and the name is missing). clap does not say where a positional came from.
fn names_after_dash_dash(names: &[String]) -> bool {
    let argv: Vec<OsString> = std::env::args_os().collect();
    argv.windows(2)
        .any(|w| w[0] == "--" && names.len() == 1 && w[1] == *names[0].as_str())
}
