//! What dlock and its watchdog say to each other through their two pipes: dlock's `Order`s,
//! the watchdog's `Report`s, each one fixed-size `Frame`.
//!
//! The watchdog is a forked copy of a multithreaded process: it may not allocate, so a
//! message is encoded into and decoded from a buffer on the stack. A frame (16 bytes) is
//! written whole by one `write`, which a pipe keeps atomic (far below PIPE_BUF), so a reader
//! whose buffer is a multiple of `FRAME` never sees part of one. Layout: the kind (u16), a
//! flag (u16), a small value (u32), a large value (u64), in the machine's own byte order
//! (both ends are the same binary).

/// The size of every message.
pub const FRAME: usize = 16;

/// One message, as it goes through a pipe.
pub type Frame = [u8; FRAME];

/// dlock to its watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Once, when the lease is granted: start the command. `vars` bytes of the lease's
    /// variables (`NAME=value`, each ending in NUL) follow the frame; `foreground`: the
    /// command's group takes the terminal.
    Start {
        deadline: u64,
        vars: u32,
        foreground: bool,
    },
    /// A new deadline (kernel CLOCK_MONOTONIC nanoseconds): later when the lease was renewed,
    /// sooner when the store said it is gone.
    Deadline(u64),
    /// dlock has sent SIGTERM to the command's group itself: the rest of the tree gets it too.
    Terminated,
    /// dlock has sent SIGKILL to the command's group: the whole tree goes now.
    Kill,
    /// dlock is about to forward a stopping signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) to the
    /// command's group: the job is being stopped, so the command's end, however it comes,
    /// takes the rest of the tree with it.
    Ending,
}

/// The watchdog to dlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The command's exec succeeded: its pid, which is its process group.
    Started(u32),
    /// The command could not be run: the errno of its exec.
    ExecFailed(i32),
    /// The command was stopped (Ctrl-Z, SIGSTOP).
    Stopped,
    /// The watchdog stopped the command for the deadline (dlock could not act).
    Fired,
    /// The command exited on its own (its wait status) and left processes running: the
    /// watchdog holds on, and so must the lease, until they have exited.
    Lingering(i32),
    /// The last word before the watchdog exits: the command's wait status. dlock releases on
    /// it, without waiting for the watchdog's own exit.
    Exited(i32),
}

// The kinds, one number space for both directions (a frame read the wrong way is refused).
const START: u16 = 1;
const DEADLINE: u16 = 2;
const TERMINATED: u16 = 3;
const KILL: u16 = 4;
const ENDING: u16 = 5;
const STARTED: u16 = 16;
const EXEC_FAILED: u16 = 17;
const STOPPED: u16 = 18;
const FIRED: u16 = 19;
const LINGERING: u16 = 20;
const EXITED: u16 = 21;

fn frame(kind: u16, flag: u16, small: u32, large: u64) -> Frame {
    let mut f = [0u8; FRAME];
    f[0..2].copy_from_slice(&kind.to_ne_bytes());
    f[2..4].copy_from_slice(&flag.to_ne_bytes());
    f[4..8].copy_from_slice(&small.to_ne_bytes());
    f[8..16].copy_from_slice(&large.to_ne_bytes());
    f
}

/// A frame's (kind, flag, small, large).
fn fields(f: &Frame) -> (u16, u16, u32, u64) {
    let mut two = [0u8; 2];
    let mut four = [0u8; 4];
    let mut eight = [0u8; 8];
    two.copy_from_slice(&f[0..2]);
    let kind = u16::from_ne_bytes(two);
    two.copy_from_slice(&f[2..4]);
    let flag = u16::from_ne_bytes(two);
    four.copy_from_slice(&f[4..8]);
    eight.copy_from_slice(&f[8..16]);
    (
        kind,
        flag,
        u32::from_ne_bytes(four),
        u64::from_ne_bytes(eight),
    )
}

impl Order {
    pub fn encode(self) -> Frame {
        match self {
            Order::Start {
                deadline,
                vars,
                foreground,
            } => frame(START, u16::from(foreground), vars, deadline),
            Order::Deadline(at) => frame(DEADLINE, 0, 0, at),
            Order::Terminated => frame(TERMINATED, 0, 0, 0),
            Order::Kill => frame(KILL, 0, 0, 0),
            Order::Ending => frame(ENDING, 0, 0, 0),
        }
    }

    /// None for a frame that is no order.
    pub fn decode(f: &Frame) -> Option<Order> {
        let (kind, flag, small, large) = fields(f);
        Some(match kind {
            START => Order::Start {
                deadline: large,
                vars: small,
                foreground: flag != 0,
            },
            DEADLINE => Order::Deadline(large),
            TERMINATED => Order::Terminated,
            KILL => Order::Kill,
            ENDING => Order::Ending,
            _ => return None,
        })
    }
}

impl Report {
    pub fn encode(self) -> Frame {
        // Statuses and errnos travel as their bits.
        match self {
            Report::Started(pid) => frame(STARTED, 0, pid, 0),
            Report::ExecFailed(errno) => frame(EXEC_FAILED, 0, errno as u32, 0),
            Report::Stopped => frame(STOPPED, 0, 0, 0),
            Report::Fired => frame(FIRED, 0, 0, 0),
            Report::Lingering(status) => frame(LINGERING, 0, status as u32, 0),
            Report::Exited(status) => frame(EXITED, 0, status as u32, 0),
        }
    }

    /// None for a frame that is no report.
    pub fn decode(f: &Frame) -> Option<Report> {
        let (kind, _, small, _) = fields(f);
        Some(match kind {
            STARTED => Report::Started(small),
            EXEC_FAILED => Report::ExecFailed(small as i32),
            STOPPED => Report::Stopped,
            FIRED => Report::Fired,
            LINGERING => Report::Lingering(small as i32),
            EXITED => Report::Exited(small as i32),
            _ => return None,
        })
    }
}

/// Write one frame to `fd`. Async-signal-safe: one write from the stack, which a pipe keeps
/// atomic. If the other end is gone the write fails (SIGPIPE is ignored by Rust programs and
/// by the watchdog), and nobody is left to tell.
pub unsafe fn send(fd: libc::c_int, f: Frame) {
    // SAFETY: writing FRAME bytes from a valid buffer.
    unsafe { libc::write(fd, f.as_ptr().cast(), FRAME) };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_comes_back_as_sent() {
        let orders = [
            Order::Start {
                deadline: u64::MAX - 7,
                vars: 1234,
                foreground: true,
            },
            Order::Start {
                deadline: 5,
                vars: 0,
                foreground: false,
            },
            Order::Deadline(u64::MAX),
            Order::Terminated,
            Order::Kill,
            Order::Ending,
        ];
        for o in orders {
            assert_eq!(Order::decode(&o.encode()), Some(o));
            assert_eq!(Report::decode(&o.encode()), None, "{o:?}");
        }
        let reports = [
            Report::Started(4_000_000),
            Report::ExecFailed(libc::ENOENT),
            Report::Stopped,
            Report::Fired,
            Report::Lingering(-1),
            Report::Exited(9 << 8),
        ];
        for r in reports {
            assert_eq!(Report::decode(&r.encode()), Some(r));
            assert_eq!(Order::decode(&r.encode()), None, "{r:?}");
        }
    }
}
