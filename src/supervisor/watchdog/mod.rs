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
//! kernel's monotonic clock by raw syscalls and reports back through another.
//!
//! The wing: this file is dlock's side; `process` is the watchdog's life, `exec` the command's
//! start it carries out (prepared by dlock before the fork), `wire` what goes through the
//! pipes.

pub(super) mod exec;
pub(super) mod process;
pub(super) mod wire;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::sys;
use wire::{FRAME, Frame, Order, Report};

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
        let head = Order::Start {
            deadline,
            vars: vars.len() as u32,
            foreground,
        };
        let mut all = Vec::with_capacity(FRAME + vars.len());
        all.extend_from_slice(&head.encode());
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
                Some(Report::Started(pid)) => return Ok(Ok(pid)),
                Some(Report::ExecFailed(errno)) => {
                    return Ok(Err(io::Error::from_raw_os_error(errno)));
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

    /// The next report (None once the watchdog has closed its end). A frame that is no
    /// report is passed over. Cancel-safe.
    async fn next(&mut self) -> Option<Report> {
        loop {
            let Ok(mut ready) = self.reports.readable().await else {
                return None;
            };
            let mut f: Frame = [0; FRAME];
            let fd = ready.get_inner().as_raw_fd();
            // SAFETY: reading one frame into a stack buffer from a descriptor we own.
            let n = unsafe { libc::read(fd, f.as_mut_ptr().cast(), FRAME) };
            if n == FRAME as isize {
                match Report::decode(&f) {
                    Some(r) => return Some(r),
                    None => continue,
                }
            }
            if n == 0 {
                return None;
            }
            ready.clear_ready();
        }
    }

    /// A report already in the pipe, if any (a frame that is no report is passed over).
    fn read_one(&self) -> Option<Report> {
        loop {
            let mut f: Frame = [0; FRAME];
            // SAFETY: reading one frame into a stack buffer from a descriptor we own.
            let n = unsafe { libc::read(self.reports.as_raw_fd(), f.as_mut_ptr().cast(), FRAME) };
            if n != FRAME as isize {
                return None;
            }
            if let Some(r) = Report::decode(&f) {
                return Some(r);
            }
        }
    }

    /// Keep what a report says until it is asked for (`event`, `fired`).
    fn note(&mut self, report: Report) {
        match report {
            Report::Fired => self.fired = true,
            Report::Stopped => self.stop_seen = true,
            Report::Lingering(status) => self.lingering = Some(status),
            Report::Exited(status) => self.exited = Some(status),
            // Answers to `start`, which reads them itself.
            Report::Started(_) | Report::ExecFailed(_) => {}
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
        self.send(Order::Deadline(kernel_ns(deadline)));
    }

    fn send(&self, order: Order) {
        // SAFETY: a write to a descriptor we own.
        unsafe { wire::send(self.orders.as_raw_fd(), order.encode()) };
    }

    /// dlock has sent SIGTERM to the command's group: the watchdog sends it to the rest of
    /// the tree and stays until all of it is gone.
    pub fn terminated(&self) {
        self.send(Order::Terminated);
    }

    /// dlock is about to forward a stopping signal to the command's group (see
    /// `Order::Ending`).
    pub fn ending(&self) {
        self.send(Order::Ending);
    }

    /// dlock has sent SIGKILL to the command's group: the whole tree goes now.
    pub fn kill(&self) {
        self.send(Order::Kill);
    }

    /// After the watchdog (the command's parent) has been reaped: true if it had stopped the
    /// command for the deadline.
    pub fn fired(&mut self) -> bool {
        self.drain();
        self.fired
    }
}
