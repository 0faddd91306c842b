//! Starting the job in two steps, so that no fork is left between the grant and the command.
//!
//! `prepare`, before the lock is asked for: a plain fork makes the watchdog (a child subreaper
//! in a group of its own), which closes dlock's own descriptors and waits. dlock goes on at
//! once: unlike `Command::spawn`, nothing waits for the child to be scheduled and report an
//! exec that never comes. `start`, once the lease is granted: dlock sends the deadline and the
//! lease's variables, and the watchdog starts the command (see `exec`), which puts itself in a
//! new process group and takes the terminal if dlock had it. The watchdog's status is the
//! command's; it also reports that status before it exits, and dlock releases on that word.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::alarm::{Alarm, Warnings};
use super::watchdog::exec::{LEASE_VARS, Launch};
use super::watchdog::process;
use super::watchdog::{self, Pipes, Watchdog};
use crate::engine::{Lease, previous};
use crate::exit::{Error, ExitCode, Result};
use crate::output::Output;

/// A watchdog forked and waiting to start the command.
pub struct Prepared {
    dog: Watchdog,
    command: Vec<OsString>,
    found: bool,
    room: usize,
    /// `DLOCK_STORE_ID`: the stores and namespace of the lease (see `with_store_id`).
    store_id: String,
    /// What to do when the lease is lost (see `with_warnings`).
    warnings: Warnings,
}

/// A started job: the command's process group, and dlock's end of the watchdog (dlock's
/// child, whose status is the command's).
pub struct Job {
    pub pgid: u32,
    pub dog: Watchdog,
    pub alarm: Alarm,
}

/// Fork the watchdog for `command`, to be started under a lease on some of `names` (each
/// lease's variables must fit the room made here).
pub fn prepare(
    command: &[OsString],
    names: &[String],
    grace: Duration,
    margin: Duration,
    leave_running: bool,
) -> Result<Prepared> {
    let cannot = |e: std::io::Error| Error::failure(format!("cannot start the watchdog: {e}"));
    let pipes = Pipes::new().map_err(cannot)?;
    // Every name twice (DLOCK_NAME, DLOCK_FENCES), a fence for each, a token, the store id,
    // the lease file's path, the rest.
    let room = 1024 + lease_file_room() + names.iter().map(|n| 2 * n.len() + 48).sum::<usize>();
    let launch = Box::into_raw(Box::new(Launch::new(
        command,
        room,
        [pipes.orders.0.as_raw_fd(), pipes.reports.1.as_raw_fd()],
    )));
    // SAFETY: from Box::into_raw just above, and never freed in this process (see below).
    let found = unsafe { (*launch).found() };
    let setup = process::Setup {
        orders: pipes.orders.0.as_raw_fd(),
        report: pipes.reports.1.as_raw_fd(),
        grace: grace.as_nanos() as u64,
        margin: margin.as_nanos() as u64,
        leave_running,
        launch,
    };
    // SAFETY: the child of a process that may have other threads makes only raw,
    // async-signal-safe syscalls (see `become_watchdog`) and never returns.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the forked child, as above.
        unsafe { become_watchdog(setup) }
    }
    let forked = if pid < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(pid)
    };
    // The Launch is left allocated here, on purpose: the watchdog has its own copy, and
    // freeing this one would write to each of its heap pages (every CString's drop and
    // free() do), which since the fork are shared copy-on-write, so each write copies a
    // page. That was 15 page faults in every run, for memory this process no longer reads
    // and returns to the system when it exits (`prepare` runs once per process).
    let dog = pipes
        .into_watchdog(forked.map_err(cannot)?)
        .map_err(cannot)?;
    Ok(Prepared {
        dog,
        command: command.to_vec(),
        found,
        room,
        store_id: String::new(),
        warnings: Warnings::default(),
    })
}

/// In dlock's forked child: become the watchdog. Never returns.
unsafe fn become_watchdog(setup: process::Setup) -> ! {
    // SAFETY: raw syscalls; process::run never returns.
    unsafe {
        // Nothing blocked that dlock's threads may have blocked (the watchdog blocks SIGCHLD
        // itself), as a spawned child starts.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::setpgid(0, 0);
        // Not "dlock" in `ps`, `killall dlock` or `pkill -x dlock`: a kill of dlock by name
        // must reach dlock, which stops the job, never the watchdog, which outlives dlock
        // to stop it (and ignores the signals dlock handles: see `exec::arm`).
        libc::prctl(libc::PR_SET_NAME, c"dlock-watchdog".as_ptr());
        crate::sys::retitle(c"dlock-watchdog");
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) != 0 {
            // A kernel before 3.4: dlock hears the watchdog ended before the command started.
            libc::_exit(126);
        }
        process::run(setup)
    }
}

impl Prepared {
    /// Tell the command which stores and namespace its lease is on (`Shards::store_id`), so
    /// that a `dlock run` of the same name inside it passes through.
    pub fn with_store_id(mut self, id: String) -> Prepared {
        self.store_id = id;
        self
    }

    /// `--on-lost` and `--warn-signal`, for the alarm of the lease (see `alarm`).
    pub fn with_warnings(mut self, warnings: Warnings) -> Prepared {
        self.warnings = warnings;
        self
    }

    /// The command's first word, as the user gave it.
    pub fn program(&self) -> &std::ffi::OsStr {
        &self.command[0]
    }

    /// Start the command under `lease`, with its alarm (and lease file). `foreground`: dlock
    /// has the terminal, and the command's group takes it before exec.
    pub async fn start(mut self, lease: &Lease, foreground: bool, out: &Output) -> Result<Job> {
        if !self.found {
            return Err(not_run(&self.command, std::io::ErrorKind::NotFound.into()));
        }
        let alarm = Alarm::new(
            lease,
            self.warnings.clone(),
            lease_env(lease, &self.store_id),
            out,
        );
        let vars = encode(alarm.env());
        let lost = |e: std::io::Error| Error::failure(format!("cannot start the command: {e}"));
        if vars.len() > self.room {
            return Err(lost(std::io::Error::other("too many lock names")));
        }
        self.dog
            .start(watchdog::kernel_ns(lease.deadline), &vars, foreground)
            .map_err(lost)?;
        match self.dog.started().await.map_err(lost)? {
            Ok(pgid) => Ok(Job {
                pgid,
                dog: self.dog,
                alarm,
            }),
            Err(e) => Err(not_run(&self.command, e)),
        }
    }
}

/// The lease's variables, in the order of `LEASE_VARS` (the lease file's is added by the
/// alarm, which makes the file).
fn lease_env(lease: &Lease, store_id: &str) -> Vec<(&'static str, String)> {
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
    let previous = previous(lease);
    let values = [
        Some(req.names.join(" ")),
        Some(req.token.clone()),
        Some(fences.join(" ")),
        Some(pairs.join(",")),
        Some(previous.kind().to_string()),
        previous.exit().map(|code| code.to_string()),
        Some(store_id.to_string()),
    ];
    LEASE_VARS
        .iter()
        .zip(values)
        .filter_map(|(name, value)| Some((*name, value?)))
        .collect()
}

/// Variables as the watchdog takes them: each `NAME=value` ending in NUL.
fn encode(env: &[(&'static str, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in env {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out
}

/// Room for `DLOCK_LEASE_FILE=<path>`: the runtime dir's path and the file's own name.
fn lease_file_room() -> usize {
    std::env::var_os("XDG_RUNTIME_DIR").map_or(0, |d| d.len())
        + std::env::temp_dir().as_os_str().len()
        + 80
}

/// Why the command could not be run, as the shell says it.
pub(crate) fn not_run(command: &[OsString], e: std::io::Error) -> Error {
    // The user's word, escaped: it must not reach the terminal raw.
    let shown = format!("{:?}", command[0].to_string_lossy());
    // The shell's conventions: 127 not found, 126 found but not runnable.
    let e = match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::new(ExitCode::Raw(127), format!("{shown}: command not found"))
        }
        std::io::ErrorKind::PermissionDenied => {
            Error::new(ExitCode::Raw(126), format!("{shown}: permission denied"))
        }
        _ => Error::new(ExitCode::Raw(126), format!("cannot run {shown}: {e}")),
    };
    e.with_kind("not_run")
}
