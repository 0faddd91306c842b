//! The second line of defence of `run`: the watchdog, a small process between dlock and the
//! command that stops the command's whole process tree before the lease can end, whatever
//! becomes of dlock.
//!
//! dlock itself stops the command before its lease can run out, but only while dlock runs. A
//! dlock that is frozen (SIGSTOP, a debugger) or dead (SIGKILL, the OOM killer, a crash) cannot
//! act, while the command and whatever it started run on after the store has let the lease go
//! and someone else has entered. So dlock forks the watchdog, and the watchdog forks the
//! command: every process of the job descends from the watchdog, and being a child subreaper
//! it inherits every orphan of the job, whatever group or session it moved to. dlock pushes
//! each new deadline through a pipe; the watchdog times it on the kernel's monotonic clock by
//! raw syscalls (see `keeper` for its side). This file is dlock's side.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::sys;

/// Sent instead of a deadline: dlock has sent SIGTERM to the command's group itself.
pub const TERMINATED: u64 = u64::MAX;
/// Sent instead of a deadline: dlock has sent SIGKILL; the whole tree goes now.
pub const KILL: u64 = u64::MAX - 1;
/// From the watchdog: the command was stopped (Ctrl-Z, SIGSTOP).
pub const STOPPED: u64 = 1 << 62;
/// From the watchdog: it stopped the command for the deadline (dlock could not act).
pub const FIRED: u64 = 1 << 61;
/// From the command's forked child, before exec: its pid (and group), in the low bits.
pub const PID: u64 = 1 << 60;

/// dlock's end of the watchdog.
pub struct Watchdog {
    /// Write end of the pipe the deadlines go through; closing it tells the watchdog dlock
    /// let go of the command.
    orders: OwnedFd,
    /// Read end (non-blocking) of the pipe the watchdog reports through.
    reports: AsyncFd<OwnedFd>,
    fired: bool,
    /// The command stopped (Ctrl-Z), read while looking for something else.
    stop_seen: bool,
}

/// The pipes of a watchdog about to be forked, and the numbers it is forked with.
pub struct Pipes {
    pub orders: (OwnedFd, OwnedFd),
    pub reports: (OwnedFd, OwnedFd),
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Pipes {
    pub fn new() -> io::Result<Pipes> {
        Ok(Pipes {
            orders: pipe()?,
            reports: pipe()?,
        })
    }

    /// dlock's end, once the watchdog and the command have been forked.
    pub fn into_watchdog(self) -> io::Result<Watchdog> {
        let (_, orders) = self.orders;
        let (reports, _) = self.reports;
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(reports.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(reports.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(Watchdog {
            orders,
            // SAFETY: the descriptor is ours alone and lives as long as the AsyncFd.
            reports: unsafe { AsyncFd::register_with_interest(reports, Interest::READABLE)? },
            fired: false,
            stop_seen: false,
        })
    }
}

/// A deadline on the runtime's clock as kernel CLOCK_MONOTONIC nanoseconds.
pub fn kernel_ns(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    (sys::monotonic() + left).as_nanos() as u64
}

impl Watchdog {
    /// The command's pid, which its forked child wrote before exec: by the time its spawn
    /// returned, it is in the pipe (or the spawn failed).
    pub fn command_pid(&mut self) -> io::Result<u32> {
        for _ in 0..100 {
            match self.read_one() {
                Some(m) if m & PID != 0 => return Ok((m & !PID) as u32),
                Some(m) => self.note(m),
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        Err(io::Error::other("the command's process did not report"))
    }

    fn read_one(&self) -> Option<u64> {
        let mut b = [0u8; 8];
        // SAFETY: reading 8 bytes into a stack buffer from a descriptor we own.
        let n = unsafe { libc::read(self.reports.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        (n == 8).then(|| u64::from_ne_bytes(b))
    }

    fn note(&mut self, message: u64) {
        if message == FIRED {
            self.fired = true;
        }
        if message == STOPPED {
            self.stop_seen = true;
        }
    }

    /// The next time the watchdog saw the command stop (Ctrl-Z). Cancel-safe.
    pub async fn stopped(&mut self) {
        // A stop read by `fired` or `command_pid` in passing.
        if std::mem::take(&mut self.stop_seen) {
            return;
        }
        loop {
            let Ok(mut ready) = self.reports.readable().await else {
                return std::future::pending().await;
            };
            let mut b = [0u8; 8];
            let fd = ready.get_inner().as_raw_fd();
            // SAFETY: as in read_one.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
            if n == 8 {
                let m = u64::from_ne_bytes(b);
                if m == STOPPED {
                    return;
                }
                self.note(m);
                continue;
            }
            if n == 0 {
                // The watchdog has ended; nothing more will come.
                return std::future::pending().await;
            }
            ready.clear_ready();
        }
    }

    /// A new deadline: later when the lease was renewed, sooner when the store said it is
    /// gone (the watchdog then has to kill sooner too).
    pub fn push(&self, deadline: Instant) {
        self.send(kernel_ns(deadline));
    }

    fn send(&self, message: u64) {
        // SAFETY: a write to a descriptor we own.
        unsafe { send(self.orders.as_raw_fd(), message) };
    }

    /// dlock has sent SIGTERM to the command's group: the watchdog sends it to the rest of
    /// the tree and stays until all of it is gone.
    pub fn terminated(&self) {
        self.send(TERMINATED);
    }

    /// dlock has sent SIGKILL to the command's group: the whole tree goes now.
    pub fn kill(&self) {
        self.send(KILL);
    }

    /// After the watchdog (the command's parent) has been reaped: true if it had stopped the
    /// command for the deadline.
    pub fn fired(&mut self) -> bool {
        while let Some(m) = self.read_one() {
            self.note(m);
        }
        self.fired
    }
}

/// One message through a pipe. Async-signal-safe: an 8-byte write from the stack.
pub unsafe fn send(fd: libc::c_int, message: u64) {
    let b = message.to_ne_bytes();
    // SAFETY: writing 8 bytes from a valid buffer; a pipe write this small is atomic. If the
    // other end is gone the write fails (SIGPIPE is ignored by Rust programs and the watchdog).
    unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
}

/// The kernel's monotonic clock in nanoseconds, by raw syscall. Async-signal-safe.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a raw syscall filling a valid timespec (async-signal-safe).
    unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
