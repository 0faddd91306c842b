//! The child process of `run` and `multilock -- CMD`, supervised under a lease.
//!
//! The child runs in its own process group, so signals reach everything it started. The lease
//! is renewed every ttl/3 (jittered) by a task of its own. If no renewal has succeeded by
//! (deadline - kill grace), the group gets SIGTERM, and SIGKILL before the deadline itself:
//! the child never runs past the client's conservative deadline, which falls before any store
//! lets the lease go. A renewal the store refuses (the lease is gone: `unlock --force`, an
//! expiry) means someone else may hold the lock already: SIGTERM at once, SIGKILL one kill
//! grace later, by dlock and by its watchdog alike. If dlock dies, the kernel kills the child
//! (parent-death signal).

pub mod signals;
pub mod watchdog;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::process::Command;
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};

use crate::engine::{EngineError, Lease, previous, timing};
use crate::events::{self, Events};
use crate::exit::{Error, ExitCode, Result};
use crate::output::Output;
use crate::shard::Shards;
use crate::sys;
use signals::{FORWARDED, Signals};

/// The `--kill-grace` to use: as given, or the default; it must leave room for renewals.
pub fn kill_grace(given: Option<Duration>, ttl: Duration) -> Result<Duration> {
    let grace = given.unwrap_or_else(|| timing::default_kill_grace(ttl));
    if grace > ttl / 2 {
        return Err(Error::usage(format!(
            "--kill-grace {} is more than half the ttl {}; raise --ttl or lower --kill-grace",
            humantime::format_duration(grace),
            humantime::format_duration(ttl)
        )));
    }
    Ok(grace)
}

/// What `run`'s cron helpers ask of the supervision (none for `multilock`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// `--hold-min`: keep the lease until this long after the command started, even if the
    /// command ends sooner; the lease is then left to expire on the store.
    pub hold_min: Option<Duration>,
    /// `--max-runtime`: stop the command this long after it started.
    pub max_runtime: Option<Duration>,
}

/// What the renewal task last learned.
#[derive(Clone, Debug)]
struct Health {
    deadline: Instant,
    /// Set once the lease is known to be gone: stop the child now.
    lost: Option<String>,
    /// The last renewal failure, while it is not yet fatal.
    trouble: Option<String>,
}

/// How long before the deadline the command gets SIGKILL: a quarter of the kill grace.
fn margin(grace: Duration) -> Duration {
    (grace / 4).max(Duration::from_millis(10))
}

/// The watchdog of a `run` that is about to acquire its lock, forked now so that the moment
/// between the grant and the command's start (which the next holder of a contended lock waits
/// through) holds no fork but the child's. It acts on nothing until `supervise_with` gives it
/// the deadline and the child names its group. `None`, after a warning, if it cannot start.
pub fn standby_watchdog(out: &Output, grace: Duration) -> Option<watchdog::Watchdog> {
    match watchdog::Watchdog::start(grace, margin(grace)) {
        Ok(d) => Some(d),
        Err(e) => {
            out.warn(&format!(
                "cannot start the watchdog ({e}); the command is stopped in time only while dlock runs"
            ));
            None
        }
    }
}

/// Run `command` while `lease` is held, watched by `dog` (from `standby_watchdog`); release
/// the lease when it exits and return the exit code dlock should end with. `shards` renews
/// and releases the lease; `out` reports; renewals, their failures, a loss and the release go
/// to `events`.
#[allow(clippy::too_many_arguments)]
pub async fn supervise_with(
    shards: &Arc<Shards>,
    out: &Output,
    lease: Lease,
    dog: Option<watchdog::Watchdog>,
    command: &[OsString],
    grace: Duration,
    limits: Limits,
    events: &Events,
) -> Result<i32> {
    let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
    let lost_event = |why: &str| {
        events.emit(
            "lost",
            &lease.req.names,
            events::with(events::fences(&fences), json!({ "reason": why })),
        )
    };
    // Catch the forwarded signals before the child exists, so none is lost in between.
    let mut signals = Signals::catch(&FORWARDED)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    let margin = margin(grace);
    // The deadline before the child: the pipe keeps the order, so the watchdog knows it by the
    // time the child names its group.
    if let Some(d) = &dog {
        d.push(lease.deadline);
    }
    let mut child = match spawn(&lease, command, dog.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            if let Some(d) = dog {
                d.stop();
            }
            shards.release(&lease.req.names, &lease.req.token).await;
            return Err(e);
        }
    };
    let started = Instant::now();
    // The child named its group to the watchdog itself, before exec (see `spawn`).
    let pgid = child.id().unwrap_or(0);
    let terminal = sys::Foreground::give(pgid);
    out.debug(&format!(
        "started {:?} as pid {pgid} under fence {}",
        command[0], lease.grants[0].fence
    ));

    let (tx, mut rx) = watch::channel(Health {
        deadline: lease.deadline,
        lost: None,
        trouble: None,
    });
    let renewer = tokio::spawn(keep_alive(
        shards.clone(),
        lease.clone(),
        tx,
        events.clone(),
    ));
    let mut pushed = lease.deadline;

    let mut term_sent = false;
    let mut kill_sent = false;
    let mut lost: Option<String> = None;
    // Once the store has said the lease is gone: when the SIGKILL is due. Someone else may
    // be inside already, so the kill grace runs from that answer, not from the old deadline;
    // kept, not recomputed, so that a signal forwarded meanwhile does not put it off.
    let mut gone_kill_at: Option<Instant> = None;
    let mut renewer_done = false;
    // `--max-runtime`: when to send SIGTERM, then (once sent) when to send SIGKILL.
    let stop_at = limits.max_runtime.map(|d| started + d);
    let mut overrun_kill_at: Option<Instant> = None;
    let status = loop {
        let health = rx.borrow().clone();
        if health.deadline != pushed {
            pushed = health.deadline;
            if let Some(d) = &dog {
                d.push(pushed);
            }
        }
        let mut kill_at = health.deadline - margin;
        let term_at = health.deadline - grace;
        if let Some(why) = &health.lost
            && gone_kill_at.is_none()
        {
            let at = kill_at.min(Instant::now() + grace);
            gone_kill_at = Some(at);
            if let Some(d) = &dog {
                // The watchdog kills `margin / 2` before the deadline it is given: this one
                // puts its SIGKILL just after dlock's own, for a dlock stopped from now on.
                d.push((at + margin).min(health.deadline));
            }
            if lost.is_none() {
                lost = Some(why.clone());
                lost_event(why);
                // A dlock stopped past the deadline may hear of the loss after the watchdog
                // has stopped the command: say so, not that it stops it now.
                if let Ok(Some(status)) = child.try_wait() {
                    out.error(&format!("{why}; the command had already ended"));
                    break Ok(status);
                }
                out.error(&format!("{why}; stopping the command"));
                let _ = sys::kill_group(pgid, libc::SIGTERM);
                if let Some(d) = &dog {
                    d.terminated();
                }
                term_sent = true;
            }
        }
        if let Some(at) = gone_kill_at {
            kill_at = kill_at.min(at);
        }
        tokio::select! {
            status = child.wait() => break status,
            sig = signals.recv() => {
                out.debug(&format!("forwarding {} to the command", sys::signal_name(sig)));
                let _ = sys::kill_group(pgid, sig);
            }
            // The renewal task ends only after reporting a loss; then stop listening to it.
            changed = rx.changed(), if !renewer_done => renewer_done = changed.is_err(),
            _ = sleep_until(term_at), if !term_sent => {
                // A dlock stopped (SIGSTOP) past the deadline wakes after the watchdog has
                // stopped the command: claim no signal that is not sent.
                if let Ok(Some(status)) = child.try_wait() {
                    break Ok(status);
                }
                let why = format!(
                    "the lease on {} could not be renewed and runs out in {}{}",
                    lease.req.names.join(", "),
                    humantime::format_duration(grace),
                    health.trouble.as_deref().map(|t| format!(" ({t})")).unwrap_or_default()
                );
                out.error(&format!("{why}; sending SIGTERM to the command"));
                if lost.is_none() {
                    lost_event(&why);
                }
                let _ = sys::kill_group(pgid, libc::SIGTERM);
                if let Some(d) = &dog {
                    d.terminated();
                }
                lost.get_or_insert(why);
                term_sent = true;
            }
            _ = sleep_until(stop_at.unwrap_or(started)), if stop_at.is_some() && overrun_kill_at.is_none() => {
                out.debug(&format!(
                    "the command reached --max-runtime {}; sending SIGTERM",
                    humantime::format_duration(limits.max_runtime.unwrap_or_default())
                ));
                let _ = sys::kill_group(pgid, libc::SIGTERM);
                overrun_kill_at = Some(Instant::now() + grace);
            }
            _ = sleep_until(overrun_kill_at.unwrap_or(started)), if overrun_kill_at.is_some() && !kill_sent => {
                out.debug("the command did not stop within --kill-grace; sending SIGKILL");
                let _ = sys::kill_group(pgid, libc::SIGKILL);
                kill_sent = true;
            }
            _ = sleep_until(kill_at), if term_sent && !kill_sent => {
                if let Ok(Some(status)) = child.try_wait() {
                    break Ok(status);
                }
                out.error("the command did not stop in time; sending SIGKILL before the lease runs out");
                let _ = sys::kill_group(pgid, libc::SIGKILL);
                kill_sent = true;
            }
        }
    };
    renewer.abort();
    // The next holder waits on this release: in a plain ending it comes before anything else
    // (giving back the terminal, reaping the watchdog). A lost or overrun lease has its
    // command's group killed first, and --hold-min keeps the lease.
    let plain = lost.is_none() && overrun_kill_at.is_none() && limits.hold_min.is_none();
    let early = if plain {
        Some(shards.release(&lease.req.names, &lease.req.token).await)
    } else {
        None
    };
    drop(terminal);
    if dog.is_some_and(|d| d.stop()) && lost.is_none() {
        // dlock could not act in time (it was stopped or starved) and the watchdog stopped
        // the command at the deadline: the lease is gone as surely as if we had seen it go.
        let why = format!(
            "the lease on {} ran out while dlock could not renew it (was dlock stopped?); \
             the watchdog stopped the command",
            lease.req.names.join(", ")
        );
        out.error(&why);
        lost_event(&why);
        lost = Some(why);
    }
    let overran = overrun_kill_at.is_some();
    if lost.is_some() || overran {
        // Whatever the child left running in its group must not outlive the lease either.
        let _ = sys::kill_group(pgid, libc::SIGKILL);
    }
    // The `released` event: how the run ended, and `what` became of the lease.
    let released = |what: serde_json::Value, ended: &Result<i32>| {
        let code = json!({ "exit_code": ended_code(ended) });
        events.emit(
            "released",
            &lease.req.names,
            events::with(events::fences(&fences), events::with(code, what)),
        )
    };
    if lost.is_none()
        && let Some(hold) = limits.hold_min
        && let Some(left) = (started + hold).checked_duration_since(Instant::now())
        && !left.is_zero()
    {
        // Leave the lease to run out on the store at start + hold-min, not released: no
        // other host (whatever its clock says) runs the job again within that window.
        hold_until(shards, out, &lease, left, hold).await;
        let ended = exit_status(status, overran, limits);
        // Not released: left to run out on the store at the end of --hold-min.
        released(json!({ "expires_in_ms": left.as_millis() as u64 }), &ended);
        return ended;
    }
    let tally = match early {
        Some(tally) => tally,
        None => shards.release(&lease.req.names, &lease.req.token).await,
    };
    if tally.errors().next().is_some() && lost.is_none() {
        // A store that was down all along is no news; a release that left the lease held on
        // a majority (until its ttl) is.
        let report = if shards.confirmed(&tally) {
            Output::debug
        } else {
            Output::warn
        };
        report(
            out,
            &format!(
                "could not release on every store (the lease will expire there): {}",
                tally
                    .errors()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        );
    }
    if let Some(why) = lost {
        // `why` was said when the lease was lost, once; the exit code says the rest.
        let _ = why;
        return Err(Error::new(ExitCode::LockLost, ""));
    }
    let ended = exit_status(status, overran, limits);
    // false: no majority confirmed the release; the lease runs out by its ttl.
    released(json!({ "confirmed": shards.confirmed(&tally) }), &ended);
    ended
}

/// The code dlock ends with once the command has ended and the lease is settled.
fn exit_status(
    status: std::io::Result<std::process::ExitStatus>,
    overran: bool,
    limits: Limits,
) -> Result<i32> {
    let status = status.map_err(|e| Error::failure(format!("cannot wait for the command: {e}")))?;
    if overran {
        return Err(Error::new(
            ExitCode::TimedOut,
            format!(
                "the command ran longer than --max-runtime {} and was stopped",
                humantime::format_duration(limits.max_runtime.unwrap_or_default())
            ),
        ));
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    })
}

/// The code a run ends with, for the `released` event.
fn ended_code(ended: &Result<i32>) -> i32 {
    match ended {
        Ok(code) => *code,
        Err(e) => i32::from(e.code),
    }
}

/// Set the lease to run out `left` from now (the end of the `--hold-min` window) and leave it.
async fn hold_until(shards: &Shards, out: &Output, lease: &Lease, left: Duration, hold: Duration) {
    let req = &lease.req;
    let tally = shards.extend(&req.names, &req.token, left).await;
    match shards.verdict(tally) {
        Ok(_) => {
            out.debug(&format!(
                "keeping {} for the rest of --hold-min {} ({} more); the lease runs out on the store",
                req.names.join(", "),
                humantime::format_duration(hold),
                humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
            ));
        }
        // The command ran under the lock; only the window after it is not assured.
        Err(e) => out.warn(&format!(
            "could not keep {} for the rest of --hold-min {}: {e}",
            req.names.join(", "),
            humantime::format_duration(hold)
        )),
    }
}

fn spawn(
    lease: &Lease,
    command: &[OsString],
    dog: Option<&watchdog::Watchdog>,
) -> Result<tokio::process::Child> {
    let req = &lease.req;
    let fences: Vec<String> = lease.grants.iter().map(|g| g.fence.to_string()).collect();
    // Each name with its own fence, for a child that fences several resources: names hold no
    // comma, and the fence comes after a name's last `=` (a name may hold `=`, a fence not).
    let pairs: Vec<String> = req
        .names
        .iter()
        .zip(&fences)
        .map(|(n, f)| format!("{n}={f}"))
        .collect();
    let mut cmd = match sys::find_program(&command[0]) {
        Some(path) => {
            let mut c = Command::new(path);
            c.arg0(&command[0]);
            c
        }
        None => Command::new(&command[0]),
    };
    cmd.args(&command[1..])
        .env("DLOCK_NAME", req.names.join(" "))
        .env("DLOCK_TOKEN", &req.token)
        .env("DLOCK_FENCE", fences.join(" "))
        .env("DLOCK_FENCES", pairs.join(","))
        .env("DLOCK_PREVIOUS", previous(lease).as_str())
        .process_group(0);
    let parent = std::process::id() as i32;
    let announce = dog.map(|d| d.announcer());
    // SAFETY: die_with_parent and the announcement only make async-signal-safe calls (prctl,
    // getppid, getpid, write, _exit).
    unsafe {
        cmd.pre_exec(move || {
            sys::die_with_parent(parent)?;
            // The child names its own group to the watchdog before any of the user's code
            // runs, so no moment exists when the watchdog could not stop it.
            if let Some(a) = &announce {
                a.announce();
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        // The user's word, escaped: it must not reach the terminal raw.
        let shown = format!("{:?}", command[0].to_string_lossy());
        // The shell's conventions: 127 not found, 126 found but not runnable.
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::new(ExitCode::Raw(127), format!("{shown}: command not found"))
            }
            std::io::ErrorKind::PermissionDenied => {
                Error::new(ExitCode::Raw(126), format!("{shown}: permission denied"))
            }
            _ => Error::new(ExitCode::Raw(126), format!("cannot run {shown}: {e}")),
        }
    })
}

/// Renew every ttl/3 (jittered); after a failed renewal try again sooner, for as long as the
/// lease may still be saved. Ends after reporting a definite loss.
async fn keep_alive(
    shards: Arc<Shards>,
    mut lease: Lease,
    tx: watch::Sender<Health>,
    events: Events,
) {
    let ttl = lease.req.ttl;
    let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
    let mut pause = timing::jitter(timing::renew_period(ttl), 0.1);
    loop {
        sleep(pause).await;
        match shards.renew(&mut lease).await {
            Ok(()) => {
                tx.send_replace(Health {
                    deadline: lease.deadline,
                    lost: None,
                    trouble: None,
                });
                events.emit(
                    "renewed",
                    &lease.req.names,
                    events::with(
                        events::fences(&fences),
                        json!({ "ttl_ms": ttl.as_millis() as u64 }),
                    ),
                );
                pause = timing::jitter(timing::renew_period(ttl), 0.1);
            }
            Err(EngineError::Lost(why)) => {
                tx.send_modify(|h| {
                    h.lost = Some(format!(
                        "the lease on {} was lost: {why}",
                        lease.req.names.join(", ")
                    ))
                });
                return;
            }
            Err(e) => {
                let left = lease.deadline.saturating_duration_since(Instant::now());
                events.emit(
                    "renew-failed",
                    &lease.req.names,
                    events::with(
                        events::fences(&fences),
                        json!({ "error": e.to_string(), "lease_left_ms": left.as_millis() as u64 }),
                    ),
                );
                tx.send_modify(|h| h.trouble = Some(e.to_string()));
                pause = timing::jitter(ttl / 10, 0.2);
            }
        }
    }
}
