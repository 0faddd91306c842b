//! The command's start, prepared by dlock before it asks for the lock and carried out by the
//! watchdog once the lease is granted: no fork is left between the grant and the command.
//!
//! dlock builds everything the exec needs while it may still allocate (`Launch::new`): the
//! program's path, its argv, the environment without the lease's variables, room for those,
//! and a stack. The watchdog, a forked copy, holds that memory and waits for word
//! (`await_start`): the deadline and the lease's variables. It then starts the command with a
//! vfork-style clone (`launch`): the child shares the watchdog's memory until its exec, so no
//! page table is copied, and the watchdog resumes only once the exec succeeded or failed,
//! which it reports to dlock. Only raw syscalls and the prepared buffers are used after the
//! fork, as in `process`.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use libc::{c_char, c_int, c_void, pid_t};

use super::wire::{FRAME, Frame, Order};
use crate::supervisor::signals::FORWARDED;
use crate::supervisor::tree;

/// The signals the watchdog ignores (a stop aimed at a group must not stop it, and the job's
/// signals are dlock's to forward), besides the forwarded ones.
const IGNORED: [c_int; 4] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGPIPE];
/// Of those, the ones whose disposition the command inherits from dlock's caller, as it would
/// from any program (SIGPIPE the command gets at its default, as Rust's spawn gives it).
const INHERITED: [c_int; 3] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];
/// The vfork child's stack: it runs a few syscalls and execve.
const STACK: usize = 64 * 1024;

/// Everything the exec needs, built by dlock before the fork; the watchdog's copy is used.
pub struct Launch {
    /// The program found on PATH (or as given with a `/`); None: not found.
    path: Option<CString>,
    _args: Vec<CString>,
    argv: Vec<*const c_char>,
    /// For a file without a `#!` line (ENOEXEC), run by /bin/sh as execvp does.
    sh_argv: Vec<*const c_char>,
    _env: Vec<CString>,
    /// The environment: dlock's, then the lease's variables, then NULL (slots kept free).
    envp: Vec<*const c_char>,
    inherited_env: usize,
    /// Where the lease's variables arrive (NUL-separated); sized for the longest lease.
    vars: Vec<u8>,
    stack: Vec<u8>,
    /// The watchdog's two pipe ends, which it keeps besides what the command inherits.
    pipes: [c_int; 2],
    /// Filled in the watchdog: the dispositions to give back to the command.
    saved: [libc::sigaction; INHERITED.len()],
    foreground: bool,
    watchdog: pid_t,
    /// Set by the child if its exec failed.
    errno: c_int,
    /// The forwarded signals ignored when dlock started, as a mask (`signals::ignored_at_start`):
    /// the command gets them ignored too, as nohup promises.
    ignored: u64,
    /// dlock's own command line, for the release the watchdog execs after dlock's death.
    _self_args: Vec<CString>,
    self_argv: Vec<*const c_char>,
    /// `RELEASE_VAR=<status>` for that release, written in place at the time.
    marker: [u8; 48],
}

/// Set only in the environment of the release the watchdog execs once dlock has died and the
/// job's tree is gone: dlock then releases the lease its command line took, with the token
/// in DLOCK_TOKEN, as a job that ended with this status (see `supervisor::orphan`).
pub const RELEASE_VAR: &str = "DLOCK_WATCHDOG_RELEASE";

/// The variables the command gets from the lease (sent with `Order::Start`); dlock's own
/// values of them (a dlock run inside another's command) are not passed on.
pub const LEASE_VARS: [&str; 8] = [
    "DLOCK_NAME",
    "DLOCK_TOKEN",
    "DLOCK_FENCE",
    "DLOCK_FENCES",
    "DLOCK_PREVIOUS",
    // Only when the previous job failed with a known status; never inherited.
    "DLOCK_PREVIOUS_EXIT",
    "DLOCK_STORE_ID",
    // The lease file (see `alarm`), when one could be made.
    "DLOCK_LEASE_FILE",
];

/// How many variables dlock sends at the start, at most.
const VARS: usize = LEASE_VARS.len();

impl Launch {
    /// `command` as the user gave it; `room`: the most bytes the lease's variables can take;
    /// `pipes`: the watchdog's ends of its pipes (kept open, close-on-exec).
    pub fn new(command: &[OsString], room: usize, pipes: [c_int; 2]) -> Launch {
        let path = crate::sys::find_program(&command[0])
            .map(|p| p.into_os_string())
            .or_else(|| {
                command[0]
                    .as_bytes()
                    .contains(&b'/')
                    .then(|| command[0].clone())
            })
            .map(|p| cstring(p.as_bytes()));
        let args: Vec<CString> = command.iter().map(|a| cstring(a.as_bytes())).collect();
        let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut sh_argv = vec![c"/bin/sh".as_ptr()];
        sh_argv.push(path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()));
        sh_argv.extend_from_slice(&argv[1..]);
        let env: Vec<CString> = std::env::vars_os()
            .filter(|(k, _)| k != RELEASE_VAR && !LEASE_VARS.iter().any(|v| k == v))
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                cstring(&b)
            })
            .collect();
        let mut envp: Vec<*const c_char> = env.iter().map(|e| e.as_ptr()).collect();
        let inherited_env = envp.len();
        // The lease's variables, a slot for the release's marker, and the closing NULL.
        envp.resize(inherited_env + VARS + 2, std::ptr::null());
        let self_args: Vec<CString> = std::env::args_os().map(|a| cstring(a.as_bytes())).collect();
        let mut self_argv: Vec<*const c_char> = self_args.iter().map(|a| a.as_ptr()).collect();
        self_argv.push(std::ptr::null());
        Launch {
            path,
            _args: args,
            argv,
            sh_argv,
            _env: env,
            envp,
            inherited_env,
            vars: vec![0; room],
            stack: vec![0; STACK],
            pipes,
            // SAFETY: sigaction is plain data; all zeroes is a valid value.
            saved: unsafe { std::mem::zeroed() },
            foreground: false,
            watchdog: 0,
            errno: 0,
            ignored: crate::supervisor::signals::ignored_at_start(),
            _self_args: self_args,
            self_argv,
            marker: [0; 48],
        }
    }

    pub fn found(&self) -> bool {
        self.path.is_some()
    }
}

/// A C string of `b`; the OS never hands out a NUL inside an argument or a variable.
fn cstring(b: &[u8]) -> CString {
    CString::new(b).unwrap_or_default()
}

/// In the watchdog: close dlock's own descriptors (its runtime's, a store's connection) but the
/// watchdog's `pipes`. dlock's own are all close-on-exec; those dlock's caller passed on are
/// not, and the command inherits them as from any program. Found here, in the watchdog, by
/// raw syscalls, while dlock goes on to ask for the lock.
unsafe fn close_own(pipes: [c_int; 2]) {
    // SAFETY: /proc read by raw syscalls; fcntl and close take no pointers.
    unsafe {
        let own = |fd: c_int| {
            fd > 2 && !pipes.contains(&fd) && {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                flags >= 0 && flags & libc::FD_CLOEXEC != 0
            }
        };
        // The listing goes by descriptor number: closing one listed already is safe.
        let listed = tree::each_number(c"/proc/self/fd", |fd, dir| {
            if let Ok(fd) = c_int::try_from(fd)
                && fd != dir
                && own(fd)
            {
                libc::close(fd);
            }
        });
        if !listed {
            // No /proc: the descriptors a caller plausibly passes on, one by one.
            for fd in 3..4096 {
                if own(fd) {
                    libc::close(fd);
                }
            }
        }
    }
}

/// Close every descriptor but those in `keep` (sorted).
pub unsafe fn close_except(keep: &[c_int]) {
    let mut from: u32 = 0;
    for &k in keep {
        if k < 0 {
            continue;
        }
        let k = k as u32;
        if k > from {
            // SAFETY: close_range takes no pointers.
            unsafe { close_range(from, k - 1) };
        }
        from = from.max(k + 1);
    }
    // SAFETY: as above.
    unsafe { close_range(from, u32::MAX) };
}

unsafe fn close_range(first: u32, last: u32) {
    // SAFETY: close_range, or close one by one where the kernel lacks it.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0u32) != 0 {
            for fd in first..last.min(4096) {
                libc::close(fd as c_int);
            }
        }
    }
}

/// In the watchdog, before it waits: close dlock's own descriptors (a connection, the other
/// ends of its pipes: dlock's going must reach it as an end of file) but what the command
/// inherits, and ignore the job's signals, keeping what the command is to get back.
pub unsafe fn arm(launch: *mut Launch) {
    // SAFETY: the watchdog's own copy of the launch; raw syscalls only.
    unsafe {
        let l = &mut *launch;
        close_own(l.pipes);
        for (i, &s) in INHERITED.iter().enumerate() {
            libc::sigaction(s, std::ptr::null(), &mut l.saved[i]);
        }
        for s in FORWARDED.into_iter().chain(IGNORED) {
            libc::signal(s, libc::SIG_IGN);
        }
    }
}

/// Read exactly `buf.len()` bytes; false at end of file (dlock is gone).
unsafe fn read_all(fd: c_int, buf: *mut u8, len: usize) -> bool {
    let mut got = 0;
    while got < len {
        // SAFETY: reading into the rest of a live buffer.
        let n = unsafe { libc::read(fd, buf.add(got).cast(), len - got) };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || unsafe { *libc::__errno_location() } != libc::EINTR {
            return false;
        }
    }
    true
}

/// Wait for dlock's word to start: the deadline (kernel nanoseconds), or None if dlock went
/// away (or sent something else) before it was granted the lease.
pub unsafe fn await_start(launch: *mut Launch, orders: c_int) -> Option<u64> {
    // SAFETY: as `arm`.
    unsafe {
        let l = &mut *launch;
        let mut head: Frame = [0; FRAME];
        if !read_all(orders, head.as_mut_ptr(), FRAME) {
            return None;
        }
        let Some(Order::Start {
            deadline,
            vars,
            foreground,
        }) = Order::decode(&head)
        else {
            return None;
        };
        let len = vars as usize;
        if len > l.vars.len() {
            return None;
        }
        if !read_all(orders, l.vars.as_mut_ptr(), len) {
            return None;
        }
        l.foreground = foreground;
        // Each variable ends in NUL; point the free slots of envp at them.
        let mut slot = l.inherited_env;
        let mut begin = 0;
        for i in 0..len {
            if l.vars[i] == 0 {
                if slot < l.inherited_env + VARS {
                    *l.envp.as_mut_ptr().add(slot) = l.vars.as_ptr().add(begin).cast();
                    slot += 1;
                }
                begin = i + 1;
            }
        }
        Some(deadline)
    }
}

/// Start the command: a vfork-style clone that execs it. Returns its pid once the exec
/// succeeded, or Err(errno).
pub unsafe fn launch(launch: *mut Launch) -> Result<pid_t, c_int> {
    // SAFETY: as `arm`; the child runs on the launch's own stack, and the watchdog is
    // suspended until the child's exec or exit (CLONE_VFORK), so sharing memory is safe.
    unsafe {
        let l = &mut *launch;
        if l.path.is_none() {
            return Err(libc::ENOENT);
        }
        l.watchdog = libc::getpid();
        l.errno = 0;
        // Stacks grow down; keep the top 16-byte aligned.
        let top = (l.stack.as_mut_ptr().add(l.stack.len()) as usize & !15) as *mut c_void;
        let pid = libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            launch.cast(),
        );
        if pid < 0 {
            return Err(*libc::__errno_location());
        }
        let errno = std::ptr::read_volatile(&l.errno);
        if errno != 0 {
            // The child has exited (127); the watchdog reaps it as any child.
            return Err(errno);
        }
        Ok(pid)
    }
}

/// The command's process until its exec: on its own stack, in the watchdog's memory.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: raw syscalls on the launch prepared before the fork.
    unsafe {
        let l = &mut *(arg as *mut Launch);
        // A group of its own, as a shell gives a job.
        libc::setpgid(0, 0);
        if l.foreground {
            // As shells do, the child takes the terminal itself too, so that it never reads
            // it from a background group (and stops) before dlock gets to it. SIGTTOU is
            // still ignored here.
            libc::tcsetpgrp(0, libc::getpid());
        }
        // If the watchdog is killed, the command goes with it; it may have died already.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != l.watchdog
        {
            std::ptr::write_volatile(&mut l.errno, libc::ESRCH);
            libc::_exit(127);
        }
        // The signals as dlock's caller would give them: dlock catches the forwarded ones
        // (an exec resets them to their default), the stops as inherited, nothing blocked.
        for s in FORWARDED.into_iter().chain([libc::SIGPIPE]) {
            if l.ignored & (1 << s) == 0 {
                libc::signal(s, libc::SIG_DFL);
            }
        }
        for (i, &s) in INHERITED.iter().enumerate() {
            libc::sigaction(s, &l.saved[i], std::ptr::null_mut());
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let path = l.path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        libc::execve(path, l.argv.as_ptr(), l.envp.as_ptr());
        let mut errno = *libc::__errno_location();
        if errno == libc::ENOEXEC {
            libc::execve(c"/bin/sh".as_ptr(), l.sh_argv.as_ptr(), l.envp.as_ptr());
            errno = *libc::__errno_location();
        }
        std::ptr::write_volatile(&mut l.errno, errno.max(1));
        libc::_exit(127)
    }
}

/// In the watchdog, once dlock has died and the job's tree is gone: become a dlock that
/// releases the lease, by exec'ing dlock's own command line with the job's variables and
/// `RELEASE_VAR=<code>` (the status the job ended with). Returns only if the exec failed; the
/// lease then runs out on the store as before.
pub unsafe fn release(launch: *mut Launch, code: i32) {
    // SAFETY: as `arm`: the watchdog's own copy of the launch, raw syscalls only.
    unsafe {
        let l = &mut *launch;
        let prefix = RELEASE_VAR.as_bytes();
        let mut at = prefix.len();
        l.marker[..at].copy_from_slice(prefix);
        l.marker[at] = b'=';
        at += 1;
        at += tree::decimal(code.unsigned_abs(), &mut l.marker[at..]);
        l.marker[at] = 0;
        // After the lease's variables (the first free slot), before the closing NULL.
        let mut slot = l.inherited_env;
        while !(*l.envp.as_ptr().add(slot)).is_null() {
            slot += 1;
        }
        *l.envp.as_mut_ptr().add(slot) = l.marker.as_ptr().cast();
        // Nothing of the job's terminal or pipes: the release prints nothing, and a socket it
        // opens must not land on descriptor 1 or 2.
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        for s in FORWARDED.into_iter().chain(IGNORED) {
            libc::signal(s, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(
            c"/proc/self/exe".as_ptr(),
            l.self_argv.as_ptr(),
            l.envp.as_ptr(),
        );
    }
}
