//! The few OS calls dlock needs that std does not offer, each wrapped once.

use std::io;
use std::time::Duration;

pub fn uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

pub fn pid() -> u32 {
    std::process::id()
}

/// Whether `path` is on a tmpfs (`statfs`' f_type, linux/magic.h); None if it cannot be
/// told (no such path, a path with a NUL).
pub fn tmpfs(path: &std::path::Path) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs fills the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_type == libc::TMPFS_MAGIC)
}

/// A named pipe at `path` with these permission bits (less the umask).
pub fn mkfifo(path: &std::path::Path, mode: u32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated path; mkfifo touches nothing else.
    if unsafe { libc::mkfifo(c.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Random bits straight from the kernel (getrandom(2)), for tokens and jitter. A user-space
/// generator (rand's ThreadRng) probes the CPU's features by `cpuid` when first used, and a
/// virtual machine traps every `cpuid`: that probe was 60-70 us of each `run` measured here,
/// for the one token a run needs.
pub fn random_u128() -> u128 {
    let mut b = [0u8; 16];
    fill_random(&mut b);
    u128::from_ne_bytes(b)
}

pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    fill_random(&mut b);
    u64::from_ne_bytes(b)
}

/// Uniform in [0, n) for n > 0 (the modulo's bias is below 2^-32 for any n dlock uses).
pub fn random_below(n: usize) -> usize {
    (random_u64() % n as u64) as usize
}

/// Uniform in [0, 1): the top 53 bits of a random u64, as many as an f64 holds exactly.
pub fn random_f64() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn fill_random(buf: &mut [u8]) {
    let mut off = 0;
    while off < buf.len() {
        let rest = &mut buf[off..];
        // SAFETY: rest is valid for writes of its length.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            off += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // A kernel before 3.17 (ENOSYS) or a sandbox refusing the call: the device instead.
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(rest))
            .expect("no random source: getrandom(2) and /dev/urandom both failed");
        return;
    }
}

/// Read a kernel clock by raw syscall. Going around libc's `clock_gettime` is the point: a
/// preloaded library (libfaketime, as used to test date logic) replaces that symbol and with
/// it CLOCK_MONOTONIC and CLOCK_BOOTTIME, which would let one process misjudge every lease.
fn kernel_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec for the kernel to fill in.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            clock,
            &mut ts as *mut libc::timespec,
        )
    };
    assert_eq!(rc, 0, "clock_gettime({clock}) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Time since boot, counting suspend: the file store's clock. Every process on the host reads
/// the same value, and it never jumps with the wall clock.
pub fn boottime() -> Duration {
    kernel_clock(libc::CLOCK_BOOTTIME)
}

/// The kernel's CLOCK_MONOTONIC, whatever the process's libc says.
pub fn monotonic() -> Duration {
    kernel_clock(libc::CLOCK_MONOTONIC)
}

/// How far the monotonic clock the process sees through libc (and so every timer of the
/// async runtime) is from the kernel's. Zero on an honest host; large under libfaketime.
pub fn clock_skew() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let before = monotonic();
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let after = monotonic();
    let seen = Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    );
    if seen < before {
        before - seen
    } else {
        seen.saturating_sub(after)
    }
}

/// The most `clock_skew` an honest process shows (two syscalls apart on a loaded host).
pub const HONEST_SKEW: Duration = Duration::from_millis(500);

/// Whether the runtime's timers read a bent clock (`clock_skew` past `HONEST_SKEW`): set
/// back, each timeout set since fires at once.
pub fn clock_bent() -> bool {
    clock_skew() > HONEST_SKEW
}

/// Sleep `d` on the kernel's CLOCK_MONOTONIC: a timerfd armed by raw syscall, awaited by
/// the runtime as any descriptor. The runtime's own timers read the clock libc gives the
/// process, which a preloaded libfaketime bends: set back an hour, a timer set before the
/// step waits that hour and one set after it fires at once. What must end on time whatever
/// that clock says (a release asked again before dlock exits) waits here. Without a timerfd
/// (out of descriptors), the runtime's timer.
pub async fn sleep_kernel(d: Duration) {
    if d.is_zero() {
        return;
    }
    use tokio::io::{Interest, unix::AsyncFd};
    // SAFETY: the descriptor is ours alone and lives as long as the AsyncFd.
    if let Ok(fd) = kernel_timer(d)
        && let Ok(fd) = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
    {
        // Readable once it has expired; the descriptor closes with `fd`.
        let _ = fd.readable().await;
        return;
    }
    tokio::time::sleep(d).await
}

/// A timerfd on CLOCK_MONOTONIC that expires once, `d` (not zero: that disarms it) from now.
fn kernel_timer(d: Duration) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let flags = libc::TFD_NONBLOCK | libc::TFD_CLOEXEC;
    // SAFETY: plain syscall; the descriptor it returns is checked, then owned.
    let fd = unsafe { libc::syscall(libc::SYS_timerfd_create, libc::CLOCK_MONOTONIC, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor just opened for us alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let spec = libc::itimerspec {
        it_interval: zero,
        it_value: libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        },
    };
    // SAFETY: spec is a valid itimerspec; the old value is not asked for (null). By raw
    // syscall, like `kernel_clock`: libfaketime replaces the libc symbol.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_timerfd_settime,
            fd.as_raw_fd(),
            0,
            &spec as *const libc::itimerspec,
            std::ptr::null_mut::<libc::itimerspec>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Identifies this boot: a file store deadline from another boot is long past. Read once
/// per process (a run's file store and its host check both ask).
pub fn boot_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
    .clone()
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The login name of our uid (not $USER, which the environment may leave out or fake).
pub fn username() -> String {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 4096];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: pw, buf and result are valid for writes; buf outlives every read of pw's strings.
    let rc = unsafe {
        libc::getpwuid_r(
            uid(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return uid().to_string();
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside buf.
    unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }
        .to_string_lossy()
        .into_owned()
}

/// Send a signal to every process of a process group.
/// Where `execvp` would find `name`: the first executable `dir/name` along `PATH` (an empty
/// entry is the current directory). `None` for a name with a `/`, or one not found (then the
/// spawn reports it as before). Found here, in the parent, the child execs once instead of
/// trying every directory before the right one, between the grant and the command's start.
pub fn find_program(name: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if name.is_empty() || name.as_bytes().contains(&b'/') {
        return None;
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                std::path::PathBuf::from(".").join(name)
            } else {
                dir.join(name)
            }
        })
        .find(|p| {
            let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
                return false;
            };
            // SAFETY: access reads a NUL-terminated path we own.
            p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
        })
}

pub fn kill_group(pgid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: plain syscall; a negative pid addresses the group.
    let rc = unsafe { libc::kill(-(pgid as i32), signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether any process of the group is still alive.
pub fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-(pgid as i32), 0) == 0 }
}

pub fn is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// Name of a signal number, for messages.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// While alive, the terminal's foreground process group is the child's, so it can read the
/// terminal and Ctrl-C and Ctrl-Z reach it directly (as they would without dlock). Restored
/// on drop.
pub struct Foreground {
    previous: libc::pid_t,
    /// The child's group, once given.
    child: std::cell::Cell<libc::pid_t>,
}

/// `tcsetpgrp` on stdin with SIGTTOU ignored around it, so a background dlock is not stopped
/// by the switch.
fn set_foreground(pgid: libc::pid_t) -> bool {
    // SAFETY: signal and tcsetpgrp take no pointers.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        let ok = libc::tcsetpgrp(0, pgid) == 0;
        libc::signal(libc::SIGTTOU, old);
        ok
    }
}

impl Foreground {
    /// Whether dlock has the terminal now (its group is the foreground one): then the child
    /// takes it (`give`). None without a terminal, or in the background.
    pub fn ours() -> Option<Foreground> {
        // SAFETY: isatty/tcgetpgrp/getpgrp take no pointers.
        unsafe {
            let me = libc::getpgrp();
            (libc::isatty(0) == 1 && libc::tcgetpgrp(0) == me).then_some(Foreground {
                previous: me,
                child: std::cell::Cell::new(0),
            })
        }
    }

    /// The terminal to the child's group (which also takes it itself before exec).
    pub fn give(&self, pgid: u32) {
        self.child.set(pgid as libc::pid_t);
        set_foreground(pgid as libc::pid_t);
    }

    /// Back to dlock's group, before dlock stops itself with its job.
    pub fn take_back(&self) {
        set_foreground(self.previous);
    }

    /// After the shell continued dlock: the terminal to the child's group if the shell gave
    /// it to dlock (`fg`), not if the job goes on in the background (`bg`).
    pub fn give_again(&self, pgid: u32) {
        // SAFETY: tcgetpgrp takes no pointers.
        if unsafe { libc::tcgetpgrp(0) } == self.previous {
            self.give(pgid);
        }
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        // SAFETY: tcgetpgrp takes no pointers.
        let now = unsafe { libc::tcgetpgrp(0) };
        // Only if the terminal is still the child's: not the shell's after a `bg`.
        if now == self.child.get() {
            set_foreground(self.previous);
        }
    }
}

/// Whether stdout was closed when dlock started (see `standard_fds`).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Open /dev/null on any of descriptors 0, 1, 2 that dlock was started without (`dlock lock
/// x >&-`), as std's own start-up does (which `main` skips): otherwise the first socket or
/// file dlock opens takes the number, and the token meant for stdout would be written into a
/// store's connection. A closed stdout is remembered, so that writing a result fails as it
/// would have, instead of vanishing into /dev/null.
pub fn standard_fds() {
    for fd in 0..3 {
        // SAFETY: fcntl and open take no pointers of ours but the literal path.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if fd == 1 {
                    STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }
}

/// Whether dlock was started with stdout closed.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// When this process started its work, for messages that say how long something took.
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// The instant `started` was first called (`app` calls it first thing).
pub fn started() -> std::time::Instant {
    *STARTED.get_or_init(std::time::Instant::now)
}

/// Where the process's own argument strings lie (`/proc/PID/cmdline` reads them from there),
/// noted by the binary's `main` from the argv it is handed; 0 bytes when unknown (tests).
static ARGS_AT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static ARGS_LEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Note the argument area from `main`'s `argc` and `argv`: the strings the kernel laid out
/// one after another, as far as they are contiguous.
///
/// # Safety
/// `argv` must be the argument vector the process was started with, of `argc` strings.
pub unsafe fn note_args(argc: libc::c_int, argv: *const *const libc::c_char) {
    use std::sync::atomic::Ordering::Relaxed;
    if argc < 1 || argv.is_null() {
        return;
    }
    // SAFETY: argc valid NUL-terminated strings, as the caller promises.
    unsafe {
        let first = *argv;
        let mut end = first.add(libc::strlen(first) + 1);
        for i in 1..argc as usize {
            let arg = *argv.add(i);
            if arg != end {
                break;
            }
            end = arg.add(libc::strlen(arg) + 1);
        }
        ARGS_AT.store(first as usize, Relaxed);
        ARGS_LEN.store(end as usize - first as usize, Relaxed);
    }
}

/// Show `title` as this process's command line (`ps -f`, `pgrep -f`), over its own argument
/// strings (after a fork, the copy is this process's alone). Async-signal-safe: a forked
/// child of a multithreaded dlock may call it.
pub fn retitle(title: &std::ffi::CStr) {
    use std::sync::atomic::Ordering::Relaxed;
    let (at, len) = (ARGS_AT.load(Relaxed), ARGS_LEN.load(Relaxed));
    if at == 0 || len == 0 {
        return;
    }
    let title = title.to_bytes();
    // SAFETY: the area noted by `note_args`, `len` bytes of this process's own memory; the
    // last byte stays NUL so that the kernel reads one string.
    unsafe {
        let area = std::slice::from_raw_parts_mut(at as *mut u8, len);
        let n = title.len().min(len - 1);
        area[..n].copy_from_slice(&title[..n]);
        area[n..].fill(0);
    }
}
