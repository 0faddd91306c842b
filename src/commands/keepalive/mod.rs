//! `dlock lock --keepalive`: a hold across steps and processes (issue 40, item 2).
//!
//! Before it asks for the lock, `lock` starts its renewer: dlock itself again, with the same
//! command line and `RENEWER_VAR` set, in a session of its own (so the caller's terminal,
//! Ctrl-C and job control never reach it), its descriptors on pipes to `lock` and, once it
//! has the lease, on /dev/null. It is started first so that its pid can go into the lease's
//! metadata (`inspect` shows who keeps the hold alive) and so that it has connected to the
//! stores while `lock` waits. Once granted, `lock` hands it the token and the time the lease
//! has left; the renewer answers when it listens for `unlock` (`stop`), and only then is the
//! token printed, so an `unlock` right after always finds it. If `lock` ends without a lease
//! (busy, a signal, a crash), the pipe closes and the renewer exits having done nothing.
//!
//! The renewer renews as `run` does (`supervisor::renew`) and ends when `dlock unlock
//! --token` asks it to (that unlock then releases), when a renewal is refused (the lease is
//! gone), or when the process it follows ends (then it releases itself, as a job that
//! failed: the caller ended without unlocking). SIGTERM, SIGINT and SIGHUP release too.

mod renewer;
pub mod stop;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::cli::Follow;
use crate::engine::Lease;
use crate::exit::{Error, ExitCode, Result};

pub use renewer::run as renew;

/// Set in the renewer's environment: this dlock is a `lock --keepalive`'s renewer.
const RENEWER_VAR: &str = "DLOCK_KEEPALIVE_RENEWER";
/// The descriptor on which the renewer finds the process to follow (a pidfd).
const FOLLOW_FD: i32 = 3;
/// close_range(2)'s flag: mark the range close-on-exec instead of closing it now (std's own
/// pipe that reports a failed exec stays usable).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Whether this process is a renewer (see the module's comment).
pub fn is_renewer() -> bool {
    std::env::var_os(RENEWER_VAR).is_some()
}

/// A renewer started by `lock`, not yet handed a lease. Dropped without `hand_over`, its
/// pipe closes and it exits.
pub struct Renewer {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Renewer {
    /// Start the renewer, following `follow` (its pidfd is opened here, while the process is
    /// surely the one meant, so a reused pid can never stand in for it).
    pub fn start(follow: Follow) -> Result<Renewer> {
        let pidfd = match follow {
            Follow::Nothing => None,
            Follow::Parent => Some(pidfd(std::os::unix::process::parent_id())?),
            Follow::Pid(pid) => Some(pidfd(pid)?),
        };
        let exe = std::env::current_exe()
            .map_err(|e| Error::failure(format!("cannot find dlock's own binary: {e}")))?;
        let mut cmd = Command::new(exe);
        cmd.args(std::env::args_os().skip(1))
            .env(RENEWER_VAR, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let raw = pidfd.as_ref().map(|fd| fd.as_raw_fd());
        // SAFETY: between fork and exec only async-signal-safe calls (setsid, dup2, fcntl).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Nothing else of the caller's stays open in it: a descriptor the caller
                // left inheritable (the write end of a CI log's pipe) would otherwise be held
                // for as long as the lock is, and whoever reads it would wait that long.
                libc::syscall(
                    libc::SYS_close_range,
                    FOLLOW_FD + 1,
                    u32::MAX,
                    CLOSE_RANGE_CLOEXEC,
                );
                if let Some(fd) = raw {
                    let rc = if fd == FOLLOW_FD {
                        libc::fcntl(fd, libc::F_SETFD, 0)
                    } else {
                        libc::dup2(fd, FOLLOW_FD)
                    };
                    if rc < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::failure(format!("cannot start the keepalive renewer: {e}")))?;
        let (to, from) = (child.stdin.take(), child.stdout.take());
        let (Some(to), Some(from)) = (to, from) else {
            return Err(Error::failure("the keepalive renewer has no pipes"));
        };
        Ok(Renewer {
            child,
            to,
            from: BufReader::new(from),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Give the renewer the lease and wait until it keeps it (and listens for `unlock`).
    pub fn hand_over(mut self, lease: &Lease) -> Result<()> {
        // The deadline on the kernel's monotonic clock, which both processes read: the
        // renewer's is then this one exactly, not later by the time the handover takes.
        let left = lease
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let deadline = crate::sys::monotonic() + left;
        let fences: Vec<String> = lease.grants.iter().map(|g| g.fence.to_string()).collect();
        let line = format!(
            "{} {} {}\n",
            lease.req.token,
            deadline.as_nanos(),
            fences.join(",")
        );
        let mut answer = String::new();
        let sent = self
            .to
            .write_all(line.as_bytes())
            .and_then(|()| self.to.flush())
            .and_then(|()| self.from.read_line(&mut answer));
        match sent {
            Ok(_) if answer.trim() == renewer::READY => Ok(()),
            Ok(_) => Err(Error::failure(format!(
                "the keepalive renewer did not start: {}",
                crate::output::one_line(answer.trim())
            ))),
            Err(e) => Err(Error::failure(format!(
                "the keepalive renewer did not start: {e}"
            ))),
        }
    }
}

/// A pidfd for `pid`: readable once that process has ended.
fn pidfd(pid: u32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let code = match e.raw_os_error() {
            Some(libc::ESRCH) => ExitCode::Usage,
            _ => ExitCode::Config,
        };
        return Err(Error::new(
            code,
            format!("cannot follow process {pid} (--follow): {e}"),
        ));
    }
    // SAFETY: a descriptor the kernel just gave us, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The follow setting as `lock` resolves it, for the lease's metadata.
fn followed_pid(follow: Follow) -> Option<u32> {
    match follow {
        Follow::Nothing => None,
        Follow::Parent => Some(std::os::unix::process::parent_id()),
        Follow::Pid(p) => Some(p),
    }
}

/// `meta` (the lease's holder metadata) with the renewer: its pid and the pid it follows.
/// Left out if it would not fit the metadata's cap.
pub fn with_renewer(meta: &str, pid: u32, follow: Follow) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(meta) else {
        return meta.to_string();
    };
    v["keepalive"] = json!({ "pid": pid, "follow": followed_pid(follow) });
    // The process that holds is no longer `lock`'s caller alone: it is the one whose end
    // ends the hold, or else the renewer (so `alive` says whether the hold can still end).
    v["holder_pid"] = json!(followed_pid(follow).unwrap_or(pid));
    let text = v.to_string();
    if text.len() <= crate::meta::MAX_META {
        text
    } else {
        meta.to_string()
    }
}

/// For `inspect --json`: `{pid, follow, alive}` of the renewer that keeps a holder's lease
/// alive, or null when it has none.
pub fn shown_json(meta: &Value) -> Value {
    let Some(k) = meta.get("keepalive") else {
        return Value::Null;
    };
    let pid = k.get("pid").and_then(Value::as_u64);
    json!({
        "pid": pid,
        "follow": k.get("follow").and_then(Value::as_u64),
        "alive": pid.and_then(|p| crate::meta::pid_alive(meta, p)),
    })
}

/// For `inspect`'s text: `kept alive by pid N (following pid M)`, `(exited)` when it ran on
/// this host and is gone.
pub fn shown_line(meta: &Value) -> Option<String> {
    let k = shown_json(meta);
    let pid = k.get("pid")?.as_u64()?;
    let follow = match k["follow"].as_u64() {
        Some(f) => format!(", following pid {f}"),
        None => String::new(),
    };
    let gone = if k["alive"] == json!(false) {
        " (exited)"
    } else {
        ""
    };
    Some(format!("kept alive by pid {pid}{gone}{follow}"))
}
