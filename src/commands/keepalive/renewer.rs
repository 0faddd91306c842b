//! The renewer's side of `lock --keepalive` (see the module above): take the lease from
//! `lock`, renew it, and end as the hold ends.

use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::{FOLLOW_FD, stop};
use crate::cli::LockArgs;
use crate::commands::{Ctx, mode};
use crate::engine::{Lease, Session};
use crate::events::{self, Events};
use crate::exit::{Error, Result};
use crate::store::{Acquire, Granted, Outcome, Previous};
use crate::supervisor::signals::{STOPPING, Signals};

/// The renewer's answer once it keeps the lease.
pub(super) const READY: &str = "renewing";

/// How the hold ended.
enum End {
    Unlocked(tokio::net::UnixStream),
    Lost(String),
    FollowedEnded,
    Signal(i32),
}

pub async fn run(args: LockArgs, ctx: &Ctx) -> Result<i32> {
    let follow = follow_fd(args.follow);
    // The parent's handover, or nothing when `lock` ended without a lease.
    let Some(line) = read_handover().await else {
        return Ok(0);
    };
    let lease = lease_from(&args, &line)?;
    let token = lease.req.token.clone();
    let listener =
        stop::bind(&token).map_err(|e| Error::failure(format!("cannot listen for unlock: {e}")))?;
    let events = Events::open(args.holder.events.as_deref(), false)?;
    let signals = Signals::catch(&STOPPING)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    let names = lease.req.names.clone();
    let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
    let mut session = Session::new(ctx.shards.clone(), lease);
    if !tell_ready() {
        // `lock` is gone before it printed the token: nobody has it.
        session.release(Outcome::Withdrawn).await;
        return Ok(0);
    }
    detach();
    let end = hold(&mut session, &listener, follow, signals, &events).await;
    let fields = |why: &str| events::with(events::fences(&fences), json!({ "reason": why }));
    match end {
        End::Unlocked(mut s) => {
            // `unlock` releases once told: the renewal has stopped.
            let _ = s.write_all(format!("{}\n", stop::STOPPED).as_bytes()).await;
        }
        End::Lost(why) => events.emit("lost", &names, fields(&why)),
        End::FollowedEnded | End::Signal(_) => {
            // The holder ended without unlocking: the next one should clean up after it.
            session.release(Outcome::Failed(None)).await;
            let why = match end {
                End::Signal(sig) => format!("the renewer got {}", crate::sys::signal_name(sig)),
                _ => "the followed process ended".to_string(),
            };
            events.emit("released", &names, fields(&why));
        }
    }
    events.finish();
    Ok(0)
}

/// Renew until the hold ends one of the ways `End` names.
async fn hold(
    session: &mut Session<crate::shard::Shards>,
    listener: &tokio::net::UnixListener,
    follow: Option<AsyncFd<OwnedFd>>,
    mut signals: Signals,
    events: &Events,
) -> End {
    session.keep_alive(events);
    let ended = async {
        match &follow {
            Some(fd) => drop(fd.readable().await),
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        s = stop::requested(listener) => End::Unlocked(s),
        why = session.lost() => End::Lost(why),
        () = ended => End::FollowedEnded,
        sig = signals.recv() => End::Signal(sig),
    };
    // Whatever ended the hold, no renewal follows it (`unlock` releases once told).
    session.stop();
    end
}

/// The process to follow, as `lock` passed it (see `Renewer::start`).
fn follow_fd(follow: Option<crate::cli::Follow>) -> Option<AsyncFd<OwnedFd>> {
    if follow == Some(crate::cli::Follow::Nothing) {
        return None;
    }
    // SAFETY: `lock` put the pidfd on this descriptor for us alone, and the AsyncFd owns it
    // from here on (nothing else closes it while it is registered).
    unsafe {
        let fd = OwnedFd::from_raw_fd(FOLLOW_FD);
        AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE).ok()
    }
}

/// One line from `lock`: the token, the lease's deadline (nanoseconds on the monotonic
/// clock), its fences.
async fn read_handover() -> Option<String> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).ok()?;
        (!line.trim().is_empty()).then_some(line)
    })
    .await
    .ok()
    .flatten()
}

/// The lease `lock` took, as far as renewing it needs: names, modes, ttl from the same
/// command line; token, deadline and fences from the handover.
fn lease_from(args: &LockArgs, line: &str) -> Result<Lease> {
    let bad = || Error::failure("a handover the renewer cannot read");
    let mut words = line.split_whitespace();
    let token = crate::names::parse_token(words.next().ok_or_else(bad)?).map_err(|_| bad())?;
    let deadline: u64 = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let left = Duration::from_nanos(deadline).saturating_sub(crate::sys::monotonic());
    let grants = words
        .next()
        .unwrap_or_default()
        .split(',')
        .filter_map(|f| f.parse().ok())
        .map(|fence| Granted {
            fence,
            previous: Previous::default(),
            started: None,
        })
        .collect();
    Ok(Lease {
        req: Acquire {
            names: vec![args.name.clone()],
            modes: vec![mode(&args.mode)],
            token,
            ttl: args.acquire.ttl,
            meta: String::new(),
            detached: true,
        },
        grants,
        deadline: Instant::now() + left,
    })
}

/// `READY` to `lock`; false if it cannot hear it.
fn tell_ready() -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(format!("{READY}\n").as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// Nothing of `lock`'s pipes, nor of the directory it ran in, is kept: the caller may be
/// waiting for EOF on them, or want to remove the directory.
fn detach() {
    // SAFETY: plain syscalls on descriptors of this process.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::close(null);
        }
        libc::chdir(c"/".as_ptr());
    }
}
