//! The watchdog's life, in the process dlock forks before it asks for the lock: it starts the
//! command itself once dlock has the lease (see `exec`), so the whole job descends from it, and
//! as a child subreaper it inherits every orphan of the job. It stops the whole tree (SIGTERM
//! to all at once, SIGKILL before the lease deadline) when the deadline comes without a
//! renewal, when dlock says the lease is gone, or when dlock dies; then it exits only once no
//! descendant is left. Its own exit status is the command's, and it says so to dlock first:
//! dlock releases the lease on that word, so the word waits until no process of the job runs.
//!
//! The job outlives its command in two ways, and neither may run unlocked:
//! - the command was killed (a signal, Ctrl-C, `kill` of the shell) or dlock is stopping the
//!   job: the rest of the tree gets SIGTERM at the command's end, SIGKILL one kill grace later;
//! - the command exited on its own and left processes running (`worker & exit 0`): they keep
//!   the lease, as flock's inherited descriptor would, until the last of them exits; dlock is
//!   told once (`Report::Lingering`) so that it can name them. `--leave-running` keeps the older
//!   behaviour instead: the command's end is the job's, whatever it left.
//!
//! When dlock is gone (killed, crashed) the watchdog stops the tree and then releases the
//! lease itself, by exec'ing dlock's own command line as a release (see `exec::release`): the
//! next holder enters about a kill grace after the crash, not a ttl later.
//!
//! It runs in the forked child of a multithreaded process: only raw syscalls, no allocation.

use libc::{c_int, pid_t};

use super::exec::{self, Launch};
use super::wire::{FRAME, Frame, Order, Report, now_ns};
use crate::supervisor::tree;

/// Tell dlock. Async-signal-safe.
unsafe fn report(fd: c_int, r: Report) {
    // SAFETY: one frame from the stack.
    unsafe { super::wire::send(fd, r.encode()) };
}

/// What the watchdog needs, all captured before the fork.
#[derive(Clone, Copy)]
pub struct Setup {
    /// Read end of dlock's pipe (its `Order`s); end-of-file: dlock is gone.
    pub orders: c_int,
    /// Write end of the pipe back to dlock (its `Report`s: the command started, stopped,
    /// ended; the watchdog fired).
    pub report: c_int,
    pub grace: u64,
    pub margin: u64,
    /// `--leave-running`: the command's own end is the job's; what it leaves is not waited for.
    pub leave_running: bool,
    /// dlock's prepared exec, in the watchdog's copy of dlock's memory.
    pub launch: *mut Launch,
}

// SAFETY: the pointer is only followed in the forked watchdog, which has its own copy.
unsafe impl Send for Setup {}
// SAFETY: as above.
unsafe impl Sync for Setup {}

struct State {
    orders: c_int,
    report: c_int,
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
    /// `--leave-running` (see `Setup`).
    leave_running: bool,
    /// The job is ending: dlock forwarded a stopping signal (Ctrl-C, SIGTERM) to the
    /// command's group, so the command's end, however it comes, takes the rest of the tree.
    ending: bool,
    /// LINGERING was said (once) for a command that exited and left processes running.
    lingering: bool,
    /// When the SIGKILL is due for a tree stopped apart from the lease's deadline (after the
    /// command was killed, or dlock died): one kill grace after its SIGTERM. u64::MAX: none.
    rest_kill_at: u64,
    /// The prepared exec, for the release after dlock's death.
    launch: *mut Launch,
}

/// The watchdog's whole life. Never returns.
pub unsafe fn run(setup: Setup) -> ! {
    // SAFETY: raw syscalls only, as the module says.
    unsafe {
        exec::arm(setup.launch);
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        // dlock gone before it had the lease: nothing was started, nothing to stop.
        let Some(deadline) = exec::await_start(setup.launch, setup.orders) else {
            libc::_exit(0)
        };
        let command = match exec::launch(setup.launch) {
            Ok(pid) => {
                report(setup.report, Report::Started(pid as u32));
                pid
            }
            Err(errno) => {
                report(setup.report, Report::ExecFailed(errno));
                // A child that could not exec has exited (127): reaped below as any other.
                0
            }
        };
        let sfd = libc::signalfd(-1, &chld, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        // The command has its own copies of dlock's terminal and of what dlock inherited.
        exec::close_except(&sorted([setup.orders, setup.report, sfd]));
        if command == 0 {
            reap_all_and_exit(setup.report);
        }
        watch(State::new(setup, deadline, command), sfd)
    }
}

/// Until the job is over: reap, follow dlock's orders and the deadlines, stop the tree when
/// it must stop. Never returns (`finish` and `kill_all` end the watchdog).
unsafe fn watch(mut st: State, sfd: c_int) -> ! {
    // SAFETY: raw syscalls only.
    unsafe {
        loop {
            let none_left = reap(&mut st);
            if st.status.is_some() && !st.term_sent && !st.orphaned {
                // dlock tells us before it signals the command: an order that explains the
                // command's end is in the pipe by now.
                wait(&mut st, sfd, 0);
            }
            if let Some(status) = st.status {
                after_end(&mut st, status, none_left);
            }
            let now = now_ns();
            if now >= st.kill_at() {
                st.fired |= !st.orphaned;
                kill_all(&mut st);
            }
            if now >= st.rest_kill_at {
                kill_all(&mut st);
            }
            if !st.term_sent && now >= st.term_at() {
                // Said at once (and again at the end): a dlock that wakes from a stop while
                // the tree is being stopped must not claim signals of its own.
                report(st.report, Report::Fired);
                tree::signal_all(libc::getpid(), libc::SIGTERM, 0);
                st.term_sent = true;
                st.fired = true;
            }
            let next = if st.term_sent {
                st.kill_at()
            } else {
                st.term_at()
            }
            .min(st.rest_kill_at);
            wait(&mut st, sfd, next.saturating_sub(now));
        }
    }
}

/// The command has ended with `status`. The job ends with it once none of its tree is left;
/// until then the rest of the tree is stopped (the command was killed, or the job is being
/// stopped), or kept under the lease (the command exited on its own), as the module says.
unsafe fn after_end(st: &mut State, status: c_int, none_left: bool) {
    // SAFETY: raw syscalls only.
    unsafe {
        if none_left || (st.leave_running && !st.term_sent) {
            finish(st, status);
        }
        if st.term_sent {
            // Being stopped already (a lost lease, --max-runtime, dlock's death): the kill
            // follows at its own time.
            return;
        }
        if libc::WIFSIGNALED(status) || st.ending || st.orphaned {
            stop_rest(st);
        } else if !st.lingering {
            report(st.report, Report::Lingering(status));
            st.lingering = true;
        }
    }
}

/// SIGTERM to the whole tree now, SIGKILL one kill grace later (or at the lease's deadline,
/// whichever comes first).
unsafe fn stop_rest(st: &mut State) {
    // SAFETY: raw syscalls only.
    unsafe { tree::signal_all(libc::getpid(), libc::SIGTERM, 0) };
    st.term_sent = true;
    st.rest_kill_at = st.rest_kill_at.min(now_ns() + st.grace);
}

/// Three descriptors in order, for `close_except`.
fn sorted(mut fds: [c_int; 3]) -> [c_int; 3] {
    fds.sort_unstable();
    fds
}

/// The command could not be run: reap its process and end with the shell's 127.
unsafe fn reap_all_and_exit(report: c_int) -> ! {
    // SAFETY: raw syscalls only.
    unsafe {
        let mut w: c_int = 0;
        while libc::waitpid(-1, &mut w, 0) > 0 {}
        self::report(report, Report::Exited(127 << 8));
        libc::_exit(127)
    }
}

impl State {
    fn new(setup: Setup, deadline: u64, command: pid_t) -> State {
        State {
            orders: setup.orders,
            report: setup.report,
            deadline,
            grace: setup.grace,
            margin: setup.margin,
            pgid: command,
            status: None,
            term_sent: false,
            fired: false,
            orphaned: false,
            leave_running: setup.leave_running,
            ending: false,
            lingering: false,
            rest_kill_at: u64::MAX,
            launch: setup.launch,
        }
    }

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
                // SAFETY: one frame to our pipe.
                unsafe { report(st.report, Report::Stopped) };
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
            fd: if st.orphaned { -1 } else { st.orders },
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
            // Whole frames only: a multiple of FRAME, and each frame was written at once.
            let mut buf = [0u8; 4 * FRAME];
            let n = libc::read(st.orders, buf.as_mut_ptr().cast(), buf.len());
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                orphaned(st);
            } else if n > 0 {
                for m in buf[..n as usize].chunks_exact(FRAME) {
                    let mut f: Frame = [0; FRAME];
                    f.copy_from_slice(m);
                    if let Some(o) = Order::decode(&f) {
                        order(st, o);
                    }
                }
            }
        }
    }
}

/// One order from dlock (see `wire`).
unsafe fn order(st: &mut State, order: Order) {
    // SAFETY: raw syscalls only.
    unsafe {
        match order {
            // dlock sent SIGTERM to the command's group: the rest of the tree gets it too.
            Order::Terminated => {
                if !st.term_sent {
                    tree::signal_all(libc::getpid(), libc::SIGTERM, st.pgid);
                }
                st.term_sent = true;
            }
            // dlock sent SIGKILL to the group (--max-runtime, a lost lease): all of it now.
            Order::Kill => kill_all(st),
            // dlock forwarded a stopping signal to the command's group.
            Order::Ending => st.ending = true,
            Order::Deadline(at) => st.deadline = at,
            // The start was read before the command ran (`exec::await_start`): not again.
            Order::Start { .. } => {}
        }
    }
}

/// dlock is gone (killed, crashed) or let go of the pipe: nobody renews the lease any more.
/// SIGTERM to the whole tree at once, SIGKILL one kill grace later, before the deadline; the
/// lease is released once none of the tree is left (see `finish`).
unsafe fn orphaned(st: &mut State) {
    st.orphaned = true;
    if st.term_sent {
        st.rest_kill_at = st.rest_kill_at.min(now_ns() + st.grace);
        return;
    }
    if st.status.is_some() && st.leave_running {
        // The command's end is the job's: `finish` follows and releases.
        return;
    }
    // SAFETY: raw syscalls only.
    unsafe { stop_rest(st) };
}

/// A wait status as a shell's exit code (128 + the signal for a killed process).
fn exit_code(status: c_int) -> i32 {
    if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    }
}

/// End with the command's own status, so that dlock, waiting for us, sees the command's.
unsafe fn finish(st: &State, status: c_int) -> ! {
    // SAFETY: raw syscalls only.
    unsafe {
        if st.fired {
            report(st.report, Report::Fired);
        }
        // dlock releases the lease on this word, without waiting for our own exit.
        report(st.report, Report::Exited(status));
        if st.orphaned {
            // Nobody heard that word: release the lease ourselves, now that none of the job
            // is left. Returns only if the exec failed; the lease then runs out on the store.
            exec::release(st.launch, exit_code(status));
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
