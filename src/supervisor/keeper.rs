//! The watchdog's life, in the process dlock forks to run the command: it forks the command
//! itself, so the whole job descends from it, and as a child subreaper it inherits every
//! orphan of the job. It stops the whole tree (SIGTERM to all at once, SIGKILL before the
//! lease deadline) when the deadline comes without a renewal, when dlock says the lease is
//! gone, or when dlock dies; then it exits only once no descendant is left. Its own exit status
//! is the command's, so dlock waits for it as for the command.
//!
//! It runs in the forked child of a multithreaded process: only raw syscalls, no allocation.

use libc::{c_int, pid_t};

use super::tree;
use super::watchdog::{FIRED, KILL, STOPPED, TERMINATED, now_ns, send};

/// What the watchdog needs, all plain numbers captured before the fork.
#[derive(Clone, Copy)]
pub struct Setup {
    /// Read end of dlock's pipe (deadlines, TERMINATED, KILL); end-of-file: dlock is gone.
    pub orders: c_int,
    /// Write end of the pipe back to dlock (the command stopped; the watchdog fired).
    pub report: c_int,
    /// The lease deadline, kernel CLOCK_MONOTONIC nanoseconds.
    pub deadline: u64,
    pub grace: u64,
    pub margin: u64,
}

struct State {
    deadline: u64,
    grace: u64,
    margin: u64,
    /// The command's group (its pid).
    pgid: pid_t,
    /// The command's wait status, once it ended.
    status: Option<c_int>,
    /// SIGTERM went to the whole tree (by the watchdog, or by dlock to the group).
    term_sent: bool,
    /// The watchdog stopped the job for the deadline: dlock must say the lease ran out.
    fired: bool,
    /// dlock closed the pipe or died.
    orphaned: bool,
}

/// The watchdog's whole life. Never returns.
pub unsafe fn run(setup: Setup, command: pid_t) -> ! {
    // SAFETY: raw syscalls only, as the module says.
    unsafe {
        // Our two pipe ends become 0 and 1; everything else dlock had open goes, above all
        // the pipe through which dlock learns that the command's exec succeeded.
        libc::dup2(setup.orders, 0);
        libc::dup2(setup.report, 1);
        close_from(2);
        // The job's signals are dlock's to forward: none may end the watchdog. It is in a
        // group of its own (a stop aimed at dlock's or the command's group leaves it running).
        for s in super::signals::FORWARDED.into_iter().chain([
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
        ]) {
            libc::signal(s, libc::SIG_IGN);
        }
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        let sfd = libc::signalfd(-1, &chld, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        let mut st = State {
            deadline: setup.deadline,
            grace: setup.grace,
            margin: setup.margin,
            pgid: command,
            status: None,
            term_sent: false,
            fired: false,
            orphaned: false,
        };
        loop {
            let none_left = reap(&mut st);
            if st.status.is_some() && !st.term_sent && !st.orphaned {
                // dlock tells us before it signals the command: an order that explains the
                // command's end is in the pipe by now.
                wait(&mut st, sfd, 0);
            }
            if let Some(status) = st.status
                && (none_left || !st.term_sent)
            {
                // A plain ending leaves alone what the command started on purpose; a stopped
                // job's watchdog stays until the last of the tree is gone.
                finish(&st, status);
            }
            let now = now_ns();
            if now >= st.kill_at() {
                st.fired |= !st.orphaned;
                kill_all(&mut st);
            }
            if !st.term_sent && now >= st.term_at() {
                // Said at once (and again at the end): a dlock that wakes from a stop while
                // the tree is being stopped must not claim signals of its own.
                send(1, FIRED);
                tree::signal_all(libc::getpid(), libc::SIGTERM, 0);
                st.term_sent = true;
                st.fired = true;
            }
            let next = if st.term_sent {
                st.kill_at()
            } else {
                st.term_at()
            };
            wait(&mut st, sfd, next.saturating_sub(now));
        }
    }
}

impl State {
    fn term_at(&self) -> u64 {
        self.deadline.saturating_sub(self.grace - self.grace / 4)
    }
    fn kill_at(&self) -> u64 {
        self.deadline.saturating_sub(self.margin / 2)
    }
}

/// Reap every child that ended; true when no child (so no descendant) is left.
unsafe fn reap(st: &mut State) -> bool {
    loop {
        let mut w: c_int = 0;
        // SAFETY: waitpid on a valid pointer.
        let r = unsafe { libc::waitpid(-1, &mut w, libc::WNOHANG | libc::WUNTRACED) };
        if r < 0 {
            return true;
        }
        if r == 0 {
            return false;
        }
        if r == st.pgid {
            if libc::WIFSTOPPED(w) {
                // SAFETY: an 8-byte write to our pipe.
                unsafe { send(1, STOPPED) };
            } else {
                st.status = Some(w);
            }
        }
    }
}

/// SIGKILL to the whole tree until none of it is left, then end.
unsafe fn kill_all(st: &mut State) -> ! {
    // SAFETY: raw syscalls only.
    unsafe {
        let me = libc::getpid();
        loop {
            // A process forked between the scan and the kill is re-parented to us when its
            // parent dies, and found by the next scan.
            tree::signal_all(me, libc::SIGKILL, 0);
            let mut w: c_int = 0;
            let r = libc::waitpid(-1, &mut w, 0);
            if r < 0 && *libc::__errno_location() == libc::ECHILD {
                break;
            }
            if r == st.pgid && !libc::WIFSTOPPED(w) {
                st.status = Some(w);
            }
        }
        finish(st, st.status.unwrap_or(libc::SIGKILL))
    }
}

/// Wait for dlock's next message, a child's end or `timeout_ns`, whichever comes first.
unsafe fn wait(st: &mut State, sfd: c_int, timeout_ns: u64) {
    // Without anything to time (dlock keeps pushing), wait an hour at a time.
    let timeout_ns = timeout_ns.min(3_600_000_000_000);
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    let mut fds = [
        libc::pollfd {
            fd: if st.orphaned { -1 } else { 0 },
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: sfd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: raw ppoll (a preloaded library cannot stretch this timeout), reads into stack
    // buffers.
    unsafe {
        let rc = libc::syscall(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            2 as libc::nfds_t,
            &ts as *const libc::timespec,
            std::ptr::null::<libc::sigset_t>(),
            0usize,
        );
        if rc <= 0 {
            return;
        }
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            while libc::read(sfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
        }
        if fds[0].revents != 0 {
            let mut buf = [0u8; 64];
            let n = libc::read(0, buf.as_mut_ptr().cast(), buf.len());
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                orphaned(st);
            } else if n > 0 {
                for m in buf[..n as usize].chunks_exact(8) {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(m);
                    order(st, u64::from_ne_bytes(b));
                }
            }
        }
    }
}

/// One message from dlock. Messages are 8 bytes and a pipe write that small is atomic, so a
/// read never splits one.
unsafe fn order(st: &mut State, message: u64) {
    // SAFETY: raw syscalls only.
    unsafe {
        match message {
            // dlock sent SIGTERM to the command's group: the rest of the tree gets it too.
            TERMINATED => {
                if !st.term_sent {
                    tree::signal_all(libc::getpid(), libc::SIGTERM, st.pgid);
                }
                st.term_sent = true;
            }
            // dlock sent SIGKILL to the group (--max-runtime, a lost lease): all of it now.
            KILL => kill_all(st),
            deadline => st.deadline = deadline,
        }
    }
}

/// dlock is gone (killed, crashed) or let go of the pipe: nobody renews the lease any more.
/// SIGTERM to the whole tree at once, SIGKILL one kill grace later, before the deadline.
unsafe fn orphaned(st: &mut State) {
    st.orphaned = true;
    if st.status.is_some() && !st.term_sent {
        // The command had ended and dlock released the lease: what the command left running
        // on purpose is the user's (see `finish`).
        return;
    }
    // SAFETY: raw syscalls only.
    unsafe {
        if !st.term_sent {
            tree::signal_all(libc::getpid(), libc::SIGTERM, 0);
            st.term_sent = true;
        }
        let kill = now_ns() + st.grace;
        st.deadline = st.deadline.min(kill + st.margin / 2);
    }
}

/// End with the command's own status, so that dlock, waiting for us, sees the command's.
unsafe fn finish(st: &State, status: c_int) -> ! {
    // SAFETY: raw syscalls only.
    unsafe {
        if st.fired {
            send(1, FIRED);
        }
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            // Die of the same signal, without a core file of our own.
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            1
        })
    }
}

/// Close every descriptor from `first` up.
unsafe fn close_from(first: c_int) {
    // SAFETY: close_range, or close one by one where the kernel lacks it.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32) != 0 {
            for fd in first..4096 {
                libc::close(fd);
            }
        }
    }
}
