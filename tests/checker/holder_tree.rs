//! The holder-kill fault with a process tree: the victim's command is a shell that forks a
//! writer (dlock's grandchild, which ignores SIGTERM and appends the kernel's monotonic time
//! to a log of its own every 5 ms) and then becomes the critical section. The checker SIGKILLs
//! the victim's `dlock run` in its section, as `timeout -s KILL`, the OOM killer or a
//! cancelled CI job would, or (`command-kill`) the victim's command itself, as `kill -9` of a
//! job's shell would; the whole tree must be gone, and the writer must not write once the
//! next holder has entered (`late-writes`, must be 0).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::signal;
use crate::{Fault, Injected, NAME, Run, Summary, mono_ns};

/// `checker writer LOG`: the grandchild. Ignores SIGTERM (it has work to finish), writes its
/// pid, then a time every 5 ms. It gives up after a minute, so that a failing check (an
/// old dlock that leaves it running) does not leave it running for ever.
pub(crate) fn writer(log: &Path) -> i32 {
    // SAFETY: setting a disposition.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(log)
        .expect("open the writer's log");
    let _ = writeln!(f, "pid {}", std::process::id());
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let _ = writeln!(f, "{}", mono_ns());
        thread::sleep(Duration::from_millis(5));
    }
    0
}

/// The writer's log: its pid, then its writes.
fn writes(log: &Path) -> (Option<u32>, Vec<u64>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let pid = text
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .and_then(|p| p.parse().ok());
    let times = text.lines().filter_map(|l| l.parse().ok()).collect();
    (pid, times)
}

impl Run {
    /// `fault`: HolderKill (SIGKILL of dlock) or CommandKill (of the command).
    pub(crate) fn holder_kill_fault(&self, n: usize, fault: Fault) -> Injected {
        let ttl = self.cfg.ttl;
        let victim = format!("v{n}-{}", fault.name());
        let wlog = self.env.path(&format!("writer-{n}.log"));
        let checker = std::env::current_exe().unwrap();
        let mut cmd = self.env.cmd();
        cmd.args(["run", NAME, "--ttl"])
            .arg(humantime::format_duration(ttl).to_string())
            .args(["-w", "60s", "--", "sh", "-c"])
            // The writer lets go of dlock's stderr, which the checker reads to its end.
            .arg(r#""$0" writer "$1" > /dev/null 2>&1 & exec "$0" section "$2" "$3""#)
            .arg(&checker)
            .arg(&wlog)
            .arg(&self.log)
            .arg((ttl * 4).as_micros().to_string())
            .env("CHECKER_CLIENT", &victim)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn the victim");
        let dlock_pid = child.id();
        let Some(pid) = self.wait_entered(&victim, &mut child, Duration::from_secs(60)) else {
            let code = self.finish(&mut child, Duration::from_secs(5));
            return Injected {
                fault,
                victim: Some(victim),
                at: None,
                exit: None,
                outcome: format!("never entered, exit {code}"),
            };
        };
        // The writer is writing: the tree is whole.
        let started = Instant::now();
        while writes(&wlog).1.is_empty() && started.elapsed() < Duration::from_secs(10) {
            thread::sleep(Duration::from_millis(1));
        }
        // The command is `pid`: the shell exec'ed the section after forking the writer.
        signal(
            if fault == Fault::CommandKill {
                pid
            } else {
                dlock_pid
            },
            libc::SIGKILL,
        );
        let at = mono_ns();
        let code = self.finish(&mut child, Duration::from_secs(10));
        let grandchild = writes(&wlog).0;
        let gone = self.wait_gone(pid, ttl + Duration::from_secs(5))
            && grandchild.is_none_or(|g| self.wait_gone(g, ttl + Duration::from_secs(5)));
        let tree_ms = (mono_ns() - at) / 1_000_000;
        // The next holder's entry, then long enough for a leftover writer to show.
        let next = self.next_entry(&victim, at, ttl * 4 + Duration::from_secs(10));
        thread::sleep(ttl / 2);
        if !gone && let Some(g) = grandchild {
            signal(g, libc::SIGKILL);
        }
        let late = next.map(|next| writes(&wlog).1.iter().filter(|&&t| t > next).count());
        Injected {
            fault,
            victim: Some(victim),
            at: Some(at),
            exit: None,
            outcome: format!(
                "dlock exit {code}, tree gone {gone} in {tree_ms} ms, next entry {} ms, \
                 late-writes={}",
                next.map_or("-".to_string(), |t| ((t - at) / 1_000_000).to_string()),
                late.map_or("-".to_string(), |l| l.to_string())
            ),
        }
    }

    /// When someone other than `victim` entered after `at`.
    fn next_entry(&self, victim: &str, at: u64, limit: Duration) -> Option<u64> {
        let start = Instant::now();
        while start.elapsed() < limit {
            let next = self
                .record
                .lock()
                .unwrap()
                .sections
                .iter()
                .filter(|s| s.enter > at && s.client != victim)
                .map(|s| s.enter)
                .min();
            if next.is_some() {
                return next;
            }
            thread::sleep(Duration::from_millis(1));
        }
        None
    }
}

/// Writes after the next entry, summed over the holder kills; each also counts as a late
/// stop (the tree outlived the lease), as does a tree not gone.
pub(crate) fn check(s: &mut Summary, faults: &[Injected]) {
    for f in faults
        .iter()
        .filter(|f| matches!(f.fault, Fault::HolderKill | Fault::CommandKill))
    {
        let late: usize = f
            .outcome
            .rsplit_once("late-writes=")
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0);
        *s.late_writes.get_or_insert(0) += late;
        if late > 0 || f.outcome.contains("tree gone false") {
            s.late_stops += 1;
            s.details
                .push(format!("{}: {:?}: {}", f.fault.name(), f.victim, f.outcome));
        }
    }
}
