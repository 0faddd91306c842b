//! The second line of defence of `run`: a small forked process that stops the child's group
//! at the lease deadline unless dlock keeps pushing the deadline out.
//!
//! dlock itself stops the child before its lease can run out, but only while dlock runs. A
//! dlock that is frozen (SIGSTOP, a debugger, a stopped job) cannot act, while its child, in a
//! process group of its own, runs on after the store has let the lease go and someone else
//! has entered. The watchdog is a separate process in a group of its own, so freezing dlock
//! does not freeze it; it times the deadline on the kernel's monotonic clock by raw syscalls,
//! and does nothing else: after the fork it may only make async-signal-safe calls.

use std::io;
use std::time::Duration;

use tokio::time::Instant;

use crate::sys;

/// The watchdog's exit status when it had to stop the command (SIGTERM or SIGKILL).
const FIRED: i32 = 3;
/// Sent instead of a deadline: dlock has sent SIGTERM itself.
const TERMINATED: u64 = u64::MAX;
/// Marks a message that carries the child's process group instead of a deadline.
const GROUP: u64 = 1 << 63;

pub struct Watchdog {
    pid: libc::pid_t,
    /// Write end of the pipe the deadlines go through; closing it ends the watchdog.
    fd: libc::c_int,
}

/// A deadline on the runtime's clock as kernel CLOCK_MONOTONIC nanoseconds.
fn kernel_ns(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    (sys::monotonic() + left).as_nanos() as u64
}

impl Watchdog {
    /// Start watching, before the command exists (forked while its run still waits for the
    /// lock, so that no fork but the command's lies between grant and command): with no
    /// deadline yet, it acts on nothing until `push` gives it one and the command names its
    /// process group itself, through `announcer`, before exec. The watchdog acts a little
    /// after the moments the supervisor uses (SIGTERM at `deadline - grace`, SIGKILL at
    /// `deadline - margin`), so a running dlock always acts first and the command never gets a
    /// signal twice; a dlock that cannot act still has its command stopped before the deadline.
    pub fn start(grace: Duration, margin: Duration) -> io::Result<Watchdog> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds has room for the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (grace, margin) = (grace.as_nanos() as u64, margin.as_nanos() as u64);
        // SAFETY: the child runs only `watch`, which makes raw syscalls and allocates nothing.
        match unsafe { libc::fork() } {
            -1 => {
                let e = io::Error::last_os_error();
                // SAFETY: closing descriptors we own.
                unsafe {
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                }
                Err(e)
            }
            0 => {
                // SAFETY: in the forked child; see `watch`.
                // No deadline yet: it acts on none until a group is named, and `push`
                // comes first.
                unsafe { watch(fds, u64::MAX, grace, margin) }
            }
            pid => {
                // SAFETY: the read end is the watchdog's now.
                unsafe { libc::close(fds[0]) };
                Ok(Watchdog { pid, fd: fds[1] })
            }
        }
    }

    /// What the forked child uses to name its own group to the watchdog, before exec.
    pub fn announcer(&self) -> Announcer {
        Announcer(self.fd)
    }

    /// A new deadline: later when the lease was renewed, sooner when the store said it is
    /// gone (the watchdog then has to kill sooner too).
    pub fn push(&self, deadline: Instant) {
        self.send(kernel_ns(deadline));
    }

    fn send(&self, message: u64) {
        send(self.fd, message);
    }

    /// dlock has sent SIGTERM itself: the watchdog is left only the SIGKILL.
    pub fn terminated(&self) {
        self.send(TERMINATED);
    }

    /// End the watchdog; true if it had stopped the command.
    pub fn stop(mut self) -> bool {
        let mut status = 0;
        // SAFETY: closing our write end gives the watchdog end-of-file, and it exits; then we
        // reap it, retrying on EINTR.
        unsafe {
            libc::close(std::mem::replace(&mut self.fd, -1));
            while libc::waitpid(self.pid, &mut status, 0) < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == FIRED
    }
}

/// A watchdog never given a command (its run did not get the lock) ends as soon as its pipe
/// closes; dlock, about to exit, does not wait for it.
impl Drop for Watchdog {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: closing the write end we own, once.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// The watchdog's pipe as seen from the command's forked child (before exec, where the
/// descriptor is still open: it is close-on-exec).
pub struct Announcer(libc::c_int);

impl Announcer {
    /// In the forked child: "my process group is my pid". Async-signal-safe.
    pub fn announce(&self) {
        // SAFETY: getpid is async-signal-safe.
        send(self.0, GROUP | unsafe { libc::getpid() } as u64);
    }
}

/// One message to the watchdog. Async-signal-safe: an 8-byte write from the stack.
fn send(fd: libc::c_int, message: u64) {
    let b = message.to_ne_bytes();
    // SAFETY: writing 8 bytes from a valid buffer; a pipe write this small is atomic. If the
    // watchdog is gone the write fails (SIGPIPE is ignored by Rust programs).
    unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
}

fn now_ns() -> u64 {
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

/// Apply every message of one read, in order: the group may arrive in one read together with
/// a deadline, and neither may be lost. Messages are 8 bytes and a pipe write that small is
/// atomic, so a read never splits one. Async-signal-safe (no allocation).
fn decode(bytes: &[u8], deadline: &mut u64, pgid: &mut libc::pid_t, term_sent: &mut bool) {
    for m in bytes.chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(m);
        match u64::from_ne_bytes(b) {
            TERMINATED => *term_sent = true,
            g if g & GROUP != 0 => *pgid = (g & !GROUP) as libc::pid_t,
            d => *deadline = d,
        }
    }
}

/// The watchdog's whole life, in the forked child of a multithreaded process: only
/// async-signal-safe calls, no allocation, never returns.
unsafe fn watch(fds: [libc::c_int; 2], mut deadline: u64, grace: u64, margin: u64) -> ! {
    unsafe {
        libc::close(fds[1]);
        // Out of dlock's process group (a stop or interrupt aimed at dlock's job leaves the
        // watchdog running) and away from its terminal and pipes.
        libc::setpgid(0, 0);
        for fd in 0..3 {
            libc::close(fd);
        }
        // dlock's handlers were inherited: a SIGTERM for the watchdog should end it.
        for s in super::signals::FORWARDED {
            libc::signal(s, libc::SIG_DFL);
        }
        // Nothing to stop until dlock names the child's group.
        let mut pgid: libc::pid_t = 0;
        let mut term_sent = false;
        // Whether the watchdog sent the SIGTERM itself: a command that ends on it ended for
        // the lease, and dlock must say so (exit 70) when it reaps the watchdog.
        let mut fired = false;
        let mut buf = [0u8; 64];
        loop {
            let now = now_ns();
            let term_at = deadline.saturating_sub(grace - grace / 4);
            let kill_at = deadline.saturating_sub(margin / 2);
            if pgid != 0 && now >= kill_at {
                libc::kill(-pgid, libc::SIGKILL);
                libc::_exit(FIRED);
            }
            if pgid != 0 && !term_sent && now >= term_at {
                libc::kill(-pgid, libc::SIGTERM);
                term_sent = true;
                fired = true;
            }
            let next = if term_sent { kill_at } else { term_at };
            // Without a group yet, wait for dlock's next message however long it takes.
            let wait = if pgid == 0 {
                3_600_000_000_000
            } else {
                next.saturating_sub(now)
            };
            let ts = libc::timespec {
                tv_sec: (wait / 1_000_000_000) as libc::time_t,
                tv_nsec: (wait % 1_000_000_000) as libc::c_long,
            };
            let mut pfd = libc::pollfd {
                fd: fds[0],
                events: libc::POLLIN,
                revents: 0,
            };
            // Raw ppoll: a preloaded library cannot stretch this timeout either.
            let rc = libc::syscall(
                libc::SYS_ppoll,
                &mut pfd as *mut libc::pollfd,
                1 as libc::nfds_t,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            );
            if rc <= 0 {
                continue;
            }
            let n = libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
            if n == 0 {
                // dlock closed its end (or died): nothing left to watch.
                libc::_exit(if fired { FIRED } else { 0 });
            }
            if n > 0 {
                decode(&buf[..n as usize], &mut deadline, &mut pgid, &mut term_sent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_of_a_read_counts() {
        let mut bytes = Vec::new();
        bytes.extend((GROUP | 4242).to_ne_bytes());
        bytes.extend(7_000u64.to_ne_bytes());
        let (mut deadline, mut pgid, mut term) = (1u64, 0, false);
        decode(&bytes, &mut deadline, &mut pgid, &mut term);
        assert_eq!((deadline, pgid, term), (7_000, 4242, false));
        decode(
            &TERMINATED.to_ne_bytes(),
            &mut deadline,
            &mut pgid,
            &mut term,
        );
        assert!(term);
    }
}
