//! One module per subcommand; here the pieces they share: building a grant request, waiting for
//! a lock while answering signals, and turning engine outcomes into pinned exit codes.

pub mod check;
pub mod completions;
pub mod doctor;
pub mod extend;
pub mod inspect;
pub mod keepalive;
pub mod list;
pub mod lock;
pub mod multilock;
mod nested;
pub mod run;
pub mod shards;
pub mod unlock;
pub mod wait;
mod waiting;

use std::ffi::OsString;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use serde_json::json;

use crate::cli::{AcquireArgs, Command, HolderArgs, ModeArgs};
use crate::engine::{EngineError, Lease, Wait, previous};
use crate::events::{self, Events};
use crate::exit::{Error, ExitCode, Result};
use crate::output::Output;
use crate::shard::Shards;
use crate::store::{Acquire, Mode};
use crate::supervisor::signals::{STOPPING, Signals};
use waiting::{Outcome, Waiting};

/// What every command gets: the stores (as shards; one without `--shard`), the namespace, and
/// where to print. It lives here, not in `app`, so that commands need nothing from the module
/// that dispatches to them.
pub struct Ctx {
    pub shards: std::sync::Arc<Shards>,
    pub namespace: String,
    pub out: Output,
}

pub async fn run(command: Command, ctx: &Ctx) -> Result<i32> {
    match command {
        Command::Lock(a) => lock::run(a, ctx).await,
        Command::Unlock(a) => unlock::run(a, ctx).await,
        Command::Extend(a) => extend::run(a, ctx).await,
        Command::Check(a) => check::run(a, ctx).await,
        Command::Run(a) => run::run(a, ctx).await,
        Command::Multilock(a) => multilock::run(a, ctx).await,
        Command::Inspect(a) => inspect::run(a, ctx).await,
        Command::List(a) => list::run(a, ctx).await,
        Command::Wait(a) => wait::run(a, ctx).await,
        Command::Doctor(a) => doctor::run(a, ctx).await,
        Command::Shards(a) => shards::run(a, ctx).await,
        Command::Completions(a) => {
            completions::run(&a, &ctx.out);
            Ok(0)
        }
    }
}

/// A request's mode in JSON: the one mode of all its names, or "mixed" (the names' own
/// modes are then in "modes").
pub fn mode_json(req: &Acquire) -> serde_json::Value {
    req.uniform().map_or_else(|| json!("mixed"), |m| json!(m))
}

pub fn mode(args: &ModeArgs) -> Mode {
    match (args.shared, args.limit) {
        (true, _) => Mode::Shared,
        (false, Some(k)) => Mode::Limit(k),
        (false, None) => Mode::Exclusive,
    }
}

/// A grant request for `named` (each name with its mode; put in canonical order: sorted,
/// without duplicates), with what the holder says of itself (`--reason`, the CI job) in its
/// metadata.
pub fn holder_request(
    mut named: Vec<(String, Mode)>,
    ttl: Duration,
    command: &[OsString],
    detached: bool,
    holder: &HolderArgs,
) -> Acquire {
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named.dedup_by(|a, b| a.0 == b.0);
    let (names, modes) = named.into_iter().unzip();
    Acquire {
        names,
        modes,
        token: crate::names::new_token(),
        ttl,
        meta: crate::meta::holder_with(command, holder.reason.as_deref()),
        detached,
    }
}

/// Take the lease as `args` says, with the waiting line on stderr and the `waiting` and
/// `acquired` events; a stopping signal while waiting withdraws the request (so nothing is
/// left queued) and exits 128+N.
pub async fn acquire_with(
    ctx: &Ctx,
    req: &Acquire,
    args: &AcquireArgs,
    events: &Events,
) -> Result<Lease> {
    acquire_any(ctx, std::slice::from_ref(req), args, events).await
}

/// `acquire_with` for alternatives (`run --any`): every request waits at once, each in its
/// own queue, and the first granted wins; the others are withdrawn, and released if they were
/// granted meanwhile. `reqs` come in the order to try them (first sent, first answered).
pub async fn acquire_any(
    ctx: &Ctx,
    reqs: &[Acquire],
    args: &AcquireArgs,
    events: &Events,
) -> Result<Lease> {
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Wait::No,
        (false, Some(d)) => Wait::For(d),
        (false, None) => Wait::Forever,
    };
    // Before anything is granted: this client's shard list must be the one its stores serve.
    ctx.shards.check_list().await?;
    let mut signals = Signals::catch(&STOPPING)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    let (busy, busy_seen) = tokio::sync::watch::channel(0u32);
    let all: Vec<String> = reqs.iter().flat_map(|r| r.names.clone()).collect();
    let token = (reqs.len() == 1).then(|| reqs[0].token.as_str());
    let mut waiting = Waiting::new(&ctx.out, &ctx.shards, &all, token, events);
    // A plain client makes sure no store serves a shard list while its first attempt is under
    // way (no round trip added; see `shard::plain`); sharded ones checked above.
    let ended = {
        let mut granting = std::pin::pin!(first_granted(&ctx.shards, reqs, wait, &busy));
        let mut follow = std::pin::pin!(waiting.follow(busy_seen));
        // The live line shows an outage itself.
        let mut reach = std::pin::pin!(waiting::follow_reach(
            &ctx.shards,
            &all,
            events,
            &ctx.out,
            !ctx.out.live_line()
        ));
        let mut check = std::pin::pin!(ctx.shards.check_unsharded());
        let mut checked = false;
        let ended = loop {
            tokio::select! {
                r = &mut granting => break Ok(r),
                sig = signals.recv() => break Err(Stop::Signal(sig)),
                never = &mut follow => match never {},
                never = &mut reach => match never {},
                c = &mut check, if !checked => match c {
                    Ok(()) => checked = true,
                    Err(e) => break Err(Stop::Refused(e)),
                },
            }
        };
        match ended {
            // Granted or given up before the check answered: it decides now.
            Ok(r) if !checked => check.await.map(|()| r).map_err(Stop::Refused),
            other => other,
        }
    };
    let withdraw = |except: Option<usize>| {
        join_all(
            reqs.iter()
                .enumerate()
                .filter(move |(i, _)| Some(*i) != except)
                .map(|(_, r)| {
                    ctx.shards
                        .release(&r.names, &r.token, crate::store::Outcome::Withdrawn)
                }),
        )
    };
    let (won, r) = match ended {
        Ok(r) => r,
        Err(Stop::Refused(e)) => {
            waiting.finish(Outcome::GaveUp);
            withdraw(None).await;
            return Err(e);
        }
        Err(Stop::Signal(sig)) => {
            waiting.finish(Outcome::Interrupted);
            withdraw(None).await;
            return Err(Error::interrupted(sig));
        }
    };
    if r.is_ok() {
        // The losers' queue entries (and any grant that raced the winner's) must not stay. A
        // request that ran to its end without a grant has withdrawn itself.
        withdraw(Some(won)).await;
    }
    let req = &reqs[won];
    waiting.finish(if r.is_ok() {
        Outcome::Acquired
    } else {
        Outcome::GaveUp
    });
    if let Ok(lease) = &r {
        let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
        events.emit(
            "acquired",
            &req.names,
            events::with(
                events::fences(&fences),
                json!({
                    "previous": previous(lease),
                    "previous_exit": previous(lease).exit(),
                    "mode": mode_json(req),
                    "ttl_ms": millis(req.ttl),
                    "waited_ms": waiting.waited().map_or(0, millis),
                }),
            ),
        );
    }
    let what = match reqs.len() {
        1 => req.names.join(", "),
        _ => format!("each of {}", all.join(", ")),
    };
    let (busy, still) = match (reqs.len(), req.names.len()) {
        (1, 1) => (format!("{what} is held"), "it is still held"),
        (1, _) => (
            format!("at least one of {what} is held"),
            "at least one is still held",
        ),
        _ => (format!("{what} is held"), "each is still held"),
    };
    // Whoever holds it, for the one line (and the JSON) that says it was not acquired: the
    // same description as the waiting line's, so that a cron mail names the holder.
    let held_by = match &r {
        Err(EngineError::NotAcquired) if args.conflict_exit_code != Some(0) || ctx.out.json => {
            Waiting::holder(&ctx.shards, &all).await
        }
        _ => None,
    };
    if let (Err(EngineError::NotAcquired), true) = (&r, ctx.out.json) {
        let mut v = json!({ "acquired": false, "holder": held_by.as_ref().map(|h| &h.1) });
        if req.names.len() == 1 && reqs.len() == 1 {
            v["name"] = json!(req.names[0]);
        } else {
            v["names"] = json!(all);
        }
        ctx.out.json_value(&v);
    }
    let by = match held_by {
        Some((line, _)) if all.len() > 1 => format!("({line})"),
        Some((line, _)) => line,
        None => "by someone else".to_string(),
    };
    r.map_err(|e| match e {
        EngineError::NotAcquired => {
            let code = args
                .conflict_exit_code
                .map_or(ExitCode::NotAcquired, |c| ExitCode::Raw(c.into()));
            let msg = match (args.no_wait, args.wait) {
                _ if args.conflict_exit_code == Some(0) => String::new(),
                (false, Some(w)) => format!(
                    "gave up waiting for {what} after {} (-w {}): {still} {by}",
                    took(),
                    humantime::format_duration(w)
                ),
                _ => format!("{busy} {by}; not acquired"),
            };
            Error::new(code, msg).with_kind("not_acquired")
        }
        // A store's own timeout is per request, and a failed attempt also cleans up after
        // itself: say how long it all took, so the message names a true time.
        EngineError::Unavailable(m) => Error::new(
            ExitCode::Unavailable,
            format!("{m}; gave up after {}", took()),
        ),
        other => engine_error(other),
    })
}

/// Leases are timed on the process's monotonic clock (the runtime's timers, the client's
/// conservative deadline, renewals). If that clock is not the kernel's, as under libfaketime,
/// a lease could outlive its deadline unnoticed: refuse to take or extend one rather than let
/// a bent clock admit two holders.
pub(crate) fn trust_clock() -> Result<()> {
    let skew = crate::sys::clock_skew();
    if skew > Duration::from_millis(500) {
        // As set up, this process can never time a lease: EX_CONFIG, not a plain failure.
        return Err(Error::new(
            ExitCode::Config,
            format!(
                "this process's monotonic clock is {} away from the kernel's (a preloaded \
                 libfaketime?), so dlock will not time leases on it: run dlock without it and \
                 fake the job's clock instead, e.g. `dlock run NAME -- faketime ... ./job`",
                plain_distance(skew)
            ),
        ));
    }
    Ok(())
}

/// A long distance in one plain unit a person reads at a glance: `3 days`, `5 hours`.
fn plain_distance(d: Duration) -> String {
    let s = d.as_secs();
    let (n, unit) = match s {
        0..120 => (s, "second"),
        120..7200 => (s / 60, "minute"),
        7200..172_800 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    format!("about {n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// The pinned exit code for an engine outcome.
pub fn engine_error(e: EngineError) -> Error {
    match e {
        EngineError::NotAcquired => Error::new(ExitCode::NotAcquired, e.to_string()),
        EngineError::Unavailable(m) => Error::new(ExitCode::Unavailable, m),
        EngineError::Refused(m) => Error::new(ExitCode::Refused, m),
        EngineError::Invalid(m) => Error::new(ExitCode::Usage, m),
        EngineError::Config(m) => Error::new(ExitCode::Config, m),
        EngineError::Lost(m) => Error::new(ExitCode::LockLost, m),
        EngineError::NotHolder => Error::new(ExitCode::Failure, e.to_string()),
    }
}

/// How long this dlock has been running, as a message shows it (`1.2s`).
fn took() -> String {
    format!("{:.1}s", crate::sys::started().elapsed().as_secs_f64())
}

pub fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Why `acquire_any` stopped before a request ran to its end.
enum Stop {
    /// A stopping signal (its number) while waiting.
    Signal(i32),
    /// A plain client on a store that serves a shard list (`shard::plain`).
    Refused(Error),
}

/// The first of `reqs` to be granted, with its index; if none is, the last answer (every
/// request ran to its end: busy, timed out, or failed).
async fn first_granted(
    shards: &Shards,
    reqs: &[Acquire],
    wait: Wait,
    busy: &tokio::sync::watch::Sender<u32>,
) -> (usize, std::result::Result<Lease, EngineError>) {
    let mut racing: FuturesUnordered<_> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| async move { (i, shards.acquire_reporting(r, wait, Some(busy)).await) })
        .collect();
    let mut last = None;
    while let Some((i, r)) = racing.next().await {
        if r.is_ok() {
            return (i, r);
        }
        last = Some((i, r));
    }
    last.expect("at least one request")
}
