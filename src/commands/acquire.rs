//! Taking a lease for a command: the waiting line and events, signals while waiting, the race
//! of `run --any`'s alternatives, and the one line that says a lock was not acquired.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::json;

use super::waiting::{self, Outcome, Waiting};
use super::{Ctx, engine_error, millis, mode_json};
use crate::cli::AcquireArgs;
use crate::engine::{Budget, EngineError, Halt, Lease, Session, Wait, previous};
use crate::events::{self, Events};
use crate::exit::{Error, ExitCode, Result};
use crate::shard::Shards;
use crate::store::{Acquire, ErrorKind};
use crate::supervisor::signals::{STOPPING, Signals};

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
    let all: Vec<String> = reqs.iter().flat_map(|r| r.names.clone()).collect();
    let token = (reqs.len() == 1).then(|| reqs[0].token.as_str());
    let mut waiting = Waiting::new(&ctx.out, &ctx.shards, &all, token, events);
    let ended = race(ctx, reqs, wait, &mut waiting, &mut signals, &all, events).await;
    let (won, r) = match ended {
        Ok(r) => r,
        Err(stop) => {
            waiting.finish(match stop {
                Stop::Refused(_) => Outcome::GaveUp,
                Stop::Signal(_) => Outcome::Interrupted,
            });
            return Err(match stop {
                Stop::Refused(e) => e,
                Stop::Signal(sig) => Error::interrupted(sig),
            });
        }
    };
    let req = &reqs[won];
    waiting.finish(if r.is_ok() {
        Outcome::Acquired
    } else {
        Outcome::GaveUp
    });
    match r {
        Ok(lease) => {
            announce(events, req, &lease, &waiting);
            Ok(lease)
        }
        Err(e) => Err(not_acquired(ctx, args, reqs, won, &all, e).await),
    }
}

/// Why `acquire_any` stopped before a request ran to its end.
enum Stop {
    /// A stopping signal (its number) while waiting.
    Signal(i32),
    /// A plain client on a store that serves a shard list (`shard::plain`).
    Refused(Error),
}

/// Every request waiting at once, with the waiting line and the store outages followed
/// meanwhile, until one is granted or all ran to their end (with the winner's index, or the
/// last answer), or a signal or the shard-list check stops the wait. A wait that is stopped
/// is halted, so that nothing of it stays queued or granted.
async fn race(
    ctx: &Ctx,
    reqs: &[Acquire],
    wait: Wait,
    waiting: &mut Waiting<'_>,
    signals: &mut Signals,
    all: &[String],
    events: &Events,
) -> std::result::Result<(usize, std::result::Result<Lease, EngineError>), Stop> {
    let (busy, busy_seen) = tokio::sync::watch::channel(0u32);
    let (raise, halt) = Halt::channel();
    let mut granting = std::pin::pin!(first_granted(&ctx.shards, reqs, wait, &busy, &raise, halt));
    // The live line shows an outage itself.
    let quiet = !ctx.out.live_line();
    let reach = waiting::follow_reach(&ctx.shards, all, events, &ctx.out, quiet);
    // A plain client makes sure no store serves a shard list while its first attempt is under
    // way (no round trip added; see `shard::plain`); sharded ones checked before.
    let mut check = std::pin::pin!(ctx.shards.check_unsharded());
    let mut checked = false;
    let work = async {
        let mut reach = std::pin::pin!(reach);
        loop {
            tokio::select! {
                r = &mut granting => break Ok(r),
                never = &mut reach => match never {},
                c = &mut check, if !checked => match c {
                    Ok(()) => checked = true,
                    Err(e) => break Err(Stop::Refused(e)),
                },
            }
        }
    };
    let ended = match waiting.until_signal(signals, busy_seen, work).await {
        Ok(ended) => ended,
        Err(sig) => Err(Stop::Signal(sig)),
    };
    match ended {
        // Granted or given up before the check answered: it decides now.
        Ok(r) if !checked => match check.await {
            Ok(()) => Ok(r),
            Err(e) => {
                give_back(&ctx.shards, r.1).await;
                Err(Stop::Refused(e))
            }
        },
        Err(stop) => {
            let _ = raise.send(true);
            give_back(&ctx.shards, granting.await.1).await;
            Err(stop)
        }
        other => other,
    }
}

/// Give back a grant that will not be held (it raced the winner, or the wait was stopped):
/// no job ran under it.
async fn give_back(shards: &Arc<Shards>, r: std::result::Result<Lease, EngineError>) {
    if let Ok(lease) = r {
        Session::new(shards.clone(), lease)
            .release(crate::store::Outcome::Withdrawn)
            .await;
    }
}

/// The `acquired` event.
fn announce(events: &Events, req: &Acquire, lease: &Lease, waiting: &Waiting<'_>) {
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

/// The error for a wait that ended without the lease (`reqs[won]` the last to answer): for a
/// busy lock, one line (and the JSON) that names the holder, as the waiting line did, so that
/// a cron mail names it; for the stores, how long it all took.
async fn not_acquired(
    ctx: &Ctx,
    args: &AcquireArgs,
    reqs: &[Acquire],
    won: usize,
    all: &[String],
    e: EngineError,
) -> Error {
    match e {
        EngineError::NotAcquired => {}
        // A store's own timeout is per request, and a failed attempt also cleans up after
        // itself: say how long it all took, so the message names a true time.
        EngineError::Stores(e) if e.kind() == ErrorKind::Unavailable => {
            return Error::new(
                ExitCode::Unavailable,
                format!("{e}; gave up after {}", took()),
            );
        }
        other => return engine_error(other),
    }
    let req = &reqs[won];
    let held_by = match args.conflict_exit_code != Some(0) || ctx.out.json {
        true => Waiting::holder(&ctx.shards, all).await,
        false => None,
    };
    if ctx.out.json {
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
    let code = args
        .conflict_exit_code
        .map_or(ExitCode::NotAcquired, |c| ExitCode::Raw(c.into()));
    Error::new(code, busy_message(args, reqs, req, all, &by)).with_kind("not_acquired")
}

/// "NAME is held by ...; not acquired", or after `-w` "gave up waiting for NAME after ...".
fn busy_message(
    args: &AcquireArgs,
    reqs: &[Acquire],
    req: &Acquire,
    all: &[String],
    by: &str,
) -> String {
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
    match (args.no_wait, args.wait) {
        _ if args.conflict_exit_code == Some(0) => String::new(),
        (false, Some(w)) => format!(
            "gave up waiting for {what} after {} (-w {}): {still} {by}",
            took(),
            humantime::format_duration(w)
        ),
        _ => format!("{busy} {by}; not acquired"),
    }
}

/// How long this dlock has been running, as a message shows it (`1.2s`).
fn took() -> String {
    format!("{:.1}s", crate::sys::started().elapsed().as_secs_f64())
}

/// The first of `reqs` to be granted, with its index; if none is, the last answer (every
/// request ran to its end: busy, timed out, or failed). The first grant raises `halt` for
/// the others (each gives back what it queued), and a grant that raced it is given back.
async fn first_granted(
    shards: &Arc<Shards>,
    reqs: &[Acquire],
    wait: Wait,
    busy: &tokio::sync::watch::Sender<u32>,
    raise: &tokio::sync::watch::Sender<bool>,
    halt: Halt,
) -> (usize, std::result::Result<Lease, EngineError>) {
    // One budget for every alternative: the race ends by one deadline.
    let budget = Budget::start(wait);
    let mut racing: FuturesUnordered<_> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let halt = halt.clone();
            async move { (i, shards.acquire_until(r, budget, Some(busy), halt).await) }
        })
        .collect();
    let mut won = None;
    let mut last = None;
    while let Some((i, r)) = racing.next().await {
        match r {
            Ok(lease) if won.is_none() => {
                let _ = raise.send(true);
                won = Some((i, Ok(lease)));
            }
            Ok(lease) => give_back(shards, Ok(lease)).await,
            Err(e) => last = Some((i, Err(e))),
        }
    }
    won.or(last).expect("at least one request")
}
