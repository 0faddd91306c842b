//! Starting the job: dlock forks the watchdog, the watchdog forks the command.
//!
//! One `Command::spawn`: its forked child becomes the watchdog (a child subreaper in a group
//! of its own) and, still inside the pre-exec hook, forks again; that second child puts itself
//! in a new process group, takes the terminal if dlock had it, names itself to dlock, and goes
//! on to exec the command. The watchdog never returns from the hook: it closes every inherited
//! descriptor (so `spawn` sees the command's exec, not its own) and watches until the job is
//! over, then exits with the command's status. dlock's `Child` is therefore the watchdog, and
//! waiting for it is waiting for the command.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::process::Command;

use super::keeper;
use super::watchdog::{self, PID, Pipes, Watchdog};
use crate::engine::{Lease, previous};
use crate::exit::{Error, ExitCode, Result};
use crate::sys;

/// A started job: the watchdog (dlock's child, whose status is the command's), the command's
/// process group, and dlock's end of the watchdog's pipes.
pub struct Job {
    pub child: tokio::process::Child,
    pub pgid: u32,
    pub dog: Watchdog,
}

/// Start `command` under the watchdog, with the lease in its environment. `foreground`: dlock
/// has the terminal, and the command's group takes it before exec.
pub fn start(
    lease: &Lease,
    command: &[OsString],
    grace: Duration,
    margin: Duration,
    foreground: bool,
) -> Result<Job> {
    let mut cmd = build(lease, command);
    let pipes =
        Pipes::new().map_err(|e| Error::failure(format!("cannot start the watchdog: {e}")))?;
    let setup = keeper::Setup {
        orders: pipes.orders.0.as_raw_fd(),
        report: pipes.reports.1.as_raw_fd(),
        deadline: watchdog::kernel_ns(lease.deadline),
        grace: grace.as_nanos() as u64,
        margin: margin.as_nanos() as u64,
    };
    // SAFETY: the hook runs in the forked child of a multithreaded process and makes only
    // raw, async-signal-safe syscalls (see `fork_job`).
    unsafe { cmd.pre_exec(move || fork_job(setup, foreground)) };
    let child = cmd.spawn().map_err(|e| not_run(command, e))?;
    let mut dog = pipes
        .into_watchdog()
        .map_err(|e| Error::failure(format!("cannot watch the command: {e}")))?;
    let pgid = dog
        .command_pid()
        .map_err(|e| Error::failure(format!("cannot watch the command: {e}")))?;
    Ok(Job { child, pgid, dog })
}

/// In dlock's forked child: become the watchdog and fork the command. Returns (to exec) only
/// in the command's process.
fn fork_job(setup: keeper::Setup, foreground: bool) -> std::io::Result<()> {
    // SAFETY: raw syscalls; the watchdog branch never returns.
    unsafe {
        libc::setpgid(0, 0);
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let watchdog = libc::getpid();
        // A raw clone: the watchdog is single-threaded, and libc's fork would run handlers
        // registered by the multithreaded dlock.
        let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0);
        match pid {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                // The command: a group of its own, as a shell gives a job.
                libc::setpgid(0, 0);
                if foreground {
                    // As shells do, the child takes the terminal itself too, so that it never
                    // reads it from a background group (and stops) before dlock gets to it.
                    let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                    libc::tcsetpgrp(0, libc::getpid());
                    libc::signal(libc::SIGTTOU, old);
                }
                // If the watchdog is killed, the command goes with it.
                sys::die_with_parent(watchdog)?;
                watchdog::send(setup.report, PID | libc::getpid() as u64);
                Ok(())
            }
            command => keeper::run(setup, command as libc::pid_t),
        }
    }
}

fn build(lease: &Lease, command: &[OsString]) -> Command {
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
        .env("DLOCK_PREVIOUS", previous(lease).as_str());
    cmd
}

/// Why the command could not be run, as the shell says it.
fn not_run(command: &[OsString], e: std::io::Error) -> Error {
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
}
