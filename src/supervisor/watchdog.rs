//! The second line of defence of `run`: the watchdog, a small process between dlock and the
//! command that stops the command's whole process tree before the lease can end, whatever
//! becomes of dlock.
//!
//! dlock itself stops the command before its lease can run out, but only while dlock runs. A
//! dlock that is frozen (SIGSTOP, a debugger) or dead (SIGKILL, the OOM killer, a crash) cannot
//! act, while the command and whatever it started run on after the store has let the lease go
//! and someone else has entered. So dlock forks the watchdog, and the watchdog starts the
//! command: every process of the job descends from the watchdog, and being a child subreaper
//! it inherits every orphan of the job, whatever group or session it moved to. dlock sends the
//! start (see `spawn`) and then each new deadline through a pipe; the watchdog times it on the
//! kernel's monotonic clock by raw syscalls (see `keeper` for its side) and reports back
//! through another. This file is dlock's side.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::sys;

/// Sent instead of a deadline: dlock has sent SIGTERM to the command's group itself.
pub const TERMINATED: u64 = u64::MAX;
/// Sent instead of a deadline: dlock has sent SIGKILL; the whole tree goes now.
pub const KILL: u64 = u64::MAX - 1;
/// Sent instead of a deadline, before dlock forwards a stopping signal (SIGINT, SIGTERM,
/// SIGHUP, SIGQUIT) to the command's group: the job is being stopped, so the command's end,
/// however it comes, takes the rest of the tree with it.
pub const ENDING: u64 = u64::MAX - 2;
/// From the watchdog: the command was stopped (Ctrl-Z, SIGSTOP).
pub const STOPPED: u64 = 1 << 62;
/// From the watchdog: it stopped the command for the deadline (dlock could not act).
pub const FIRED: u64 = 1 << 61;
/// From the watchdog, once the command's exec succeeded: its pid (and group), in the low bits.
pub const PID: u64 = 1 << 60;
/// From the watchdog: the command could not be run; the errno of its exec in the low bits.
pub const EXEC_FAILED: u64 = 1 << 59;
/// From the watchdog, the last word before it exits: the command's wait status in the low
/// bits. dlock releases on it, without waiting for the watchdog's own exit.
pub const EXITED: u64 = 1 << 58;
/// To the watchdog, once: start the command. The low 32 bits count the bytes of the lease's
/// variables that follow the deadline; bit 32 says the command takes the terminal.
pub const START: u64 = 1 << 57;
/// From the watchdog: the command exited on its own (its wait status in the low bits) and left
/// processes running; the watchdog holds on, and so must the lease, until they have exited.
pub const LINGERING: u64 = 1 << 56;
pub const FOREGROUND: u64 = 1 << 32;

/// What the watchdog reported, for dlock's supervision loop.
pub enum Event {
    /// The command was stopped (Ctrl-Z, SIGSTOP).
    Stopped,
    /// The command exited with this wait status, and processes it started still run.
    Lingering(i32),
    /// The command has ended, with this wait status (the watchdog's last word, or the
    /// watchdog's own status, which is the command's, when it ended without one).
    Exited(i32),
}

/// dlock's end of the watchdog.
pub struct Watchdog {
    /// The watchdog's pid; dlock's child, to be reaped once (`reaped`).
    pid: libc::pid_t,
    /// Its wait status, once reaped.
    reaped: Option<i32>,
    /// Write end of the pipe the deadlines go through; closing it tells the watchdog dlock
    /// let go of the command.
    orders: OwnedFd,
    /// Read end (non-blocking) of the pipe the watchdog reports through.
    reports: AsyncFd<OwnedFd>,
    fired: bool,
    /// The command stopped (Ctrl-Z), read while looking for something else.
    stop_seen: bool,
    /// The command exited leaving processes behind (its status), not yet handed out.
    lingering: Option<i32>,
    /// The command's wait status, once the watchdog reported its end.
    exited: Option<i32>,
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

    /// dlock's end, once the watchdog (`pid`) has been forked.
    pub fn into_watchdog(self, pid: libc::pid_t) -> io::Result<Watchdog> {
        let (_, orders) = self.orders;
        let (reports, _) = self.reports;
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(reports.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(reports.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(Watchdog {
            pid,
            reaped: None,
            orders,
            // SAFETY: the descriptor is ours alone and lives as long as the AsyncFd.
            reports: unsafe { AsyncFd::register_with_interest(reports, Interest::READABLE)? },
            fired: false,
            stop_seen: false,
            lingering: None,
            exited: None,
        })
    }
}

/// A deadline on the runtime's clock as kernel CLOCK_MONOTONIC nanoseconds.
pub fn kernel_ns(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    (sys::monotonic() + left).as_nanos() as u64
}

impl Watchdog {
    /// The watchdog's pid: every process of the job descends from it.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Tell the watchdog to start the command: `deadline` (kernel nanoseconds) and the
    /// lease's variables (`NAME=value` strings, each ending in NUL).
    pub fn start(&self, deadline: u64, vars: &[u8], foreground: bool) -> io::Result<()> {
        let head = START | vars.len() as u64 | if foreground { FOREGROUND } else { 0 };
        let mut all = Vec::with_capacity(16 + vars.len());
        all.extend_from_slice(&head.to_ne_bytes());
        all.extend_from_slice(&deadline.to_ne_bytes());
        all.extend_from_slice(vars);
        let mut left = &all[..];
        while !left.is_empty() {
            // SAFETY: a write from a live buffer to a descriptor we own (blocking: the
            // watchdog reads as we write).
            let n =
                unsafe { libc::write(self.orders.as_raw_fd(), left.as_ptr().cast(), left.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            left = &left[n as usize..];
        }
        Ok(())
    }

    /// The watchdog's answer to `start`: the command's pid once its exec succeeded, or the
    /// exec's error.
    pub async fn started(&mut self) -> io::Result<Result<u32, io::Error>> {
        loop {
            match self.next().await {
                Some(m) if m & PID != 0 => return Ok(Ok((m & !PID) as u32)),
                Some(m) if m & EXEC_FAILED != 0 => {
                    return Ok(Err(io::Error::from_raw_os_error((m & !EXEC_FAILED) as i32)));
                }
                Some(m) => self.note(m),
                None => {
                    return Err(io::Error::other(
                        "the watchdog ended before the command started",
                    ));
                }
            }
        }
    }

    /// The next message (None once the watchdog has closed its end). Cancel-safe.
    async fn next(&mut self) -> Option<u64> {
        loop {
            let Ok(mut ready) = self.reports.readable().await else {
                return None;
            };
            let mut b = [0u8; 8];
            let fd = ready.get_inner().as_raw_fd();
            // SAFETY: reading 8 bytes into a stack buffer from a descriptor we own.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
            if n == 8 {
                return Some(u64::from_ne_bytes(b));
            }
            if n == 0 {
                return None;
            }
            ready.clear_ready();
        }
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
        if message & LINGERING != 0 && message & !(LINGERING | 0xffff_ffff) == 0 {
            self.lingering = Some((message & 0xffff_ffff) as u32 as i32);
        }
        if message & EXITED != 0 && message & (PID | EXEC_FAILED | FIRED | STOPPED) == 0 {
            self.exited = Some((message & 0xffff_ffff) as u32 as i32);
        }
    }

    /// The next thing the watchdog reports: the command stopped (Ctrl-Z), or ended. A
    /// watchdog gone without a word (killed) is reaped, and its status is the end. Cancel-safe.
    pub async fn event(&mut self) -> Event {
        loop {
            // Read by `fired` or `started` in passing.
            if std::mem::take(&mut self.stop_seen) {
                return Event::Stopped;
            }
            if let Some(status) = self.lingering.take() {
                return Event::Lingering(status);
            }
            if let Some(status) = self.exited {
                return Event::Exited(status);
            }
            match self.next().await {
                Some(m) => self.note(m),
                None => {
                    self.reap_now(0);
                    self.exited = self.reaped;
                }
            }
        }
    }

    /// The command's end: the watchdog reported it, or has exited (messages read so far).
    pub fn has_exited(&mut self) -> bool {
        self.drain();
        if self.exited.is_none() && self.reap_now(libc::WNOHANG) {
            self.drain();
            if self.exited.is_none() {
                self.exited = self.reaped;
            }
        }
        self.exited.is_some()
    }

    /// Wait until the watchdog has exited and reap it, so that dlock never ends before it.
    /// Its report pipe ends first (see the module's note).
    pub async fn reap(&mut self) {
        while self.reaped.is_none() {
            match self.next().await {
                Some(m) => self.note(m),
                None => {
                    self.reap_now(0);
                }
            }
        }
    }

    /// Reap the watchdog: if it has exited (`WNOHANG`), or waiting for it (0: once its
    /// report pipe has ended, it has closed its files and is a moment from being a zombie, so
    /// the wait blocks for no longer than that). True once reaped.
    fn reap_now(&mut self, flags: libc::c_int) -> bool {
        while self.reaped.is_none() {
            let mut w: libc::c_int = 0;
            // SAFETY: waitpid on our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut w, flags) };
            if r == self.pid {
                self.reaped = Some(w);
            } else if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                // Not ours to wait for any more (reaped elsewhere): nothing is left to wait for.
                self.reaped = Some(0);
            } else if r == 0 {
                // WNOHANG, still running.
                break;
            }
        }
        self.reaped.is_some()
    }

    /// Note every message already in the pipe.
    fn drain(&mut self) {
        while let Some(m) = self.read_one() {
            self.note(m);
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

    /// dlock is about to forward a stopping signal to the command's group (see `ENDING`).
    pub fn ending(&self) {
        self.send(ENDING);
    }

    /// dlock has sent SIGKILL to the command's group: the whole tree goes now.
    pub fn kill(&self) {
        self.send(KILL);
    }

    /// After the watchdog (the command's parent) has been reaped: true if it had stopped the
    /// command for the deadline.
    pub fn fired(&mut self) -> bool {
        self.drain();
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
