//! Finding and signalling every descendant of the watchdog, from the forked watchdog itself:
//! only raw syscalls on stack buffers (async-signal-safe, no allocation).
//!
//! The watchdog is a child subreaper, so a process of the job whose parent dies is re-parented
//! to it, never to init: every process the job started, in whatever group or session, stays a
//! descendant of the watchdog. No kernel file lists descendants directly (`/proc/PID/task/TID/
//! children` needs a kernel option and lists one thread's children), so this walks `/proc`
//! and follows each process's parent chain up to the watchdog.

use libc::{c_int, pid_t};

/// What `/proc/PID/stat` says of a process: its parent, its group, whether it is stopped.
#[derive(Clone, Copy)]
struct Stat {
    ppid: pid_t,
    pgid: pid_t,
    stopped: bool,
}

/// Parse a decimal number; None for anything else (a `/proc` entry that is not a process).
fn number(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 18 {
        return None;
    }
    let mut n = 0i64;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(b - b'0');
    }
    Some(n)
}

/// Write `n` in decimal at the start of `out` (room for 10 digits); returns how many bytes.
/// Async-signal-safe: no allocation, for the forked watchdog.
pub(super) fn decimal(mut n: u32, out: &mut [u8]) -> usize {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (o, d) in out.iter_mut().zip(digits[..len].iter().rev()) {
        *o = *d;
    }
    len
}

/// `/proc/PID/stat` into `buf`, as a NUL-terminated path built on the stack.
unsafe fn stat(pid: pid_t) -> Option<Stat> {
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    path[..prefix.len()].copy_from_slice(prefix);
    let at = prefix.len() + decimal(pid as u32, &mut path[prefix.len()..]);
    path[at..at + 5].copy_from_slice(b"/stat");
    let mut buf = [0u8; 512];
    // SAFETY: open/read/close on a NUL-terminated path and a stack buffer.
    let n = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return None;
    }
    parse_stat(&buf[..n as usize])
}

/// "PID (COMM) STATE PPID PGRP ...": COMM may hold anything, so fields count from its last `)`.
fn parse_stat(s: &[u8]) -> Option<Stat> {
    let close = s.iter().rposition(|&b| b == b')')?;
    let mut fields = s[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let state = fields.next()?;
    let ppid = number(fields.next()?)? as pid_t;
    let pgid = number(fields.next()?)? as pid_t;
    Some(Stat {
        ppid,
        pgid,
        stopped: matches!(state.first(), Some(b'T' | b't')),
    })
}

/// Whether a process whose parent is `ppid` descends from `root`.
unsafe fn descends(mut ppid: pid_t, root: pid_t) -> bool {
    // A tree deeper than this is not a job's; the bound keeps a loop in /proc from hanging us.
    for _ in 0..256 {
        if ppid == root {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        // SAFETY: see `stat`.
        match unsafe { stat(ppid) } {
            Some(s) => ppid = s.ppid,
            None => return false,
        }
    }
    false
}

/// Call `f` with each entry of the directory `path` named by a decimal number (a process in
/// /proc, a descriptor in /proc/self/fd) and the directory's own descriptor, by raw syscalls
/// on a stack buffer. False if the directory cannot be opened.
pub(super) unsafe fn each_number(path: &std::ffi::CStr, mut f: impl FnMut(i64, c_int)) -> bool {
    // SAFETY: open/getdents64/close with a stack buffer.
    unsafe {
        let dir = libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return false;
        }
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let n = n as usize;
            let mut at = 0usize;
            while at + 19 < n {
                // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name NUL-ended.
                let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                let name = &buf[at + 19..(at + reclen).min(n)];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                at += reclen.max(1);
                if let Some(number) = number(name) {
                    f(number, dir);
                }
            }
        }
        libc::close(dir);
        true
    }
}

/// Send `sig` to every descendant of `root` (the calling watchdog) except the members of group
/// `skip` (0: none), with SIGCONT after it to a stopped one (a stopped process acts on SIGTERM
/// only once continued). Returns how many were signalled.
pub unsafe fn signal_all(root: pid_t, sig: c_int, skip: pid_t) -> usize {
    let mut count = 0;
    // SAFETY: /proc read by raw syscalls; kill takes no pointers.
    unsafe {
        each_number(c"/proc", |pid, _| {
            let pid = pid as pid_t;
            if pid == root {
                return;
            }
            let Some(s) = stat(pid) else { return };
            if (skip != 0 && s.pgid == skip) || !descends(s.ppid, root) {
                return;
            }
            libc::kill(pid, sig);
            if s.stopped && sig != libc::SIGKILL {
                libc::kill(pid, libc::SIGCONT);
            }
            count += 1;
        });
    }
    count
}

/// The processes below `root` (the watchdog, seen from dlock) and their command lines, for a
/// message. On dlock's side, which may allocate.
pub fn running_below(root: pid_t) -> Vec<(pid_t, String)> {
    let mut found = Vec::new();
    // SAFETY: /proc read by raw syscalls.
    unsafe {
        each_number(c"/proc", |pid, _| {
            let pid = pid as pid_t;
            if pid != root
                && let Some(s) = stat(pid)
                && descends(s.ppid, root)
            {
                found.push(pid);
            }
        });
    }
    found.sort_unstable();
    found.into_iter().map(|p| (p, command_line(p))).collect()
}

/// A process's command line, its words joined by spaces ("?" once it has exited).
fn command_line(pid: pid_t) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<_> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(String::from_utf8_lossy)
        .collect();
    if words.is_empty() {
        return "?".into();
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_written_without_allocating() {
        let mut out = [0u8; 12];
        for n in [0u32, 7, 42, 137, 4_294_967_295] {
            let len = decimal(n, &mut out);
            assert_eq!(&out[..len], n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_stat_line_is_read_past_any_command_name() {
        let s = parse_stat(b"42 (a) b) (c) T 7 42 42 0 -1 4194560").unwrap();
        assert_eq!((s.ppid, s.pgid, s.stopped), (7, 42, true));
        let s = parse_stat(b"9 (sh) S 1 9 9").unwrap();
        assert_eq!((s.ppid, s.pgid, s.stopped), (1, 9, false));
        assert!(parse_stat(b"9 (sh").is_none());
    }

    #[test]
    fn this_process_descends_from_its_parent() {
        // SAFETY: reads /proc only.
        unsafe {
            let me = stat(libc::getpid()).unwrap();
            assert!(descends(me.ppid, libc::getppid()));
            assert!(!descends(me.ppid, libc::getpid()));
        }
    }
}
