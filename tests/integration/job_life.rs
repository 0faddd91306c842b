//! The lock lives exactly as long as the job: the command and every process it started.
//! Each test ends a holder's job the way an operator does (the command killed rather than
//! dlock, the command exiting with a worker left behind, `pkill dlock`, `kill -9` of dlock),
//! then lets the next holder in and checks that nothing of the first job wrote after that
//! entry, on the file store and on Redis.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

/// A worker: writes its pid to `pids`, then the time to `log` every 20 ms, `rounds` times
/// (0: for a minute). `deaf`: it ignores SIGTERM (it has work to finish).
fn worker(env: &Env, rounds: u32, deaf: bool) -> PathBuf {
    let script = env.path("worker.sh");
    let rounds = if rounds == 0 { 3000 } else { rounds };
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{trap}echo $$ >> {pids}\ni=0\n\
             while [ $i -lt {rounds} ]; do date +%s%N >> {log}; sleep 0.02; i=$((i+1)); done\n",
            trap = if deaf { "trap '' TERM\n" } else { "" },
            pids = env.path("pids").display(),
            log = env.path("log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

fn numbers(file: &Path) -> Vec<u128> {
    read(file)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills the job's processes when dropped, so that a failing test leaves nothing behind.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in numbers(&self.0) {
            signal(pid as u32, libc::SIGKILL);
        }
    }
}

/// How the first holder's job is ended.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Ending {
    /// `kill PID` of the command (a shell whose worker runs in the background).
    CommandTerm,
    /// `kill -9 PID` of the command.
    CommandKill,
    /// The command exits 0 on its own, its worker still running for a second.
    CommandExits,
    /// The same with `--leave-running`: the worker goes on outside the lock.
    LeaveRunning,
    /// `pkill dlock`: SIGTERM to every process whose name matches, the watchdog included.
    PkillDlock,
    /// `kill -9` of dlock alone, with the default 30 s ttl.
    KillDlock,
}

/// What the next holder saw.
struct Handoff {
    /// From the ending to the next holder's entry.
    next_entry: Duration,
    /// Writes of the first job after the next holder entered.
    late_writes: usize,
    /// The first holder's exit status and stderr (None: killed).
    code: Option<i32>,
    stderr: String,
    /// What the next holder was told: DLOCK_PREVIOUS and DLOCK_PREVIOUS_EXIT ("-": unset).
    previous: String,
}

fn end_the_job(env: &Env, ending: Ending) -> Handoff {
    let exits = matches!(ending, Ending::CommandExits | Ending::LeaveRunning);
    let w = worker(env, if exits { 50 } else { 0 }, !exits);
    let pids = env.path("pids");
    let _reaper = Reaper(pids.clone());
    let tail = if exits { "exit 0" } else { "wait" };
    let script = format!(
        "echo $$ >> {p}; {w} > /dev/null 2>&1 & {tail}",
        p = pids.display(),
        w = w.display()
    );
    let mut args = vec!["job"];
    match ending {
        Ending::KillDlock => args.extend(["--kill-grace", "1s"]),
        Ending::LeaveRunning => args.extend(["--ttl", "5s", "--leave-running"]),
        _ => args.extend(["--ttl", "5s"]),
    }
    let mut holder = env.spawn_run(&args, &script);
    assert!(
        wait_for(Duration::from_secs(10), || numbers(&pids).len() >= 2
            && read(&env.path("log")).lines().count() >= 3),
        "the job did not start"
    );
    let command = numbers(&pids)[0] as u32;
    let ended = Instant::now();
    let ended_ns = now_ns();
    match ending {
        Ending::CommandTerm => signal(command, libc::SIGTERM),
        Ending::CommandKill => signal(command, libc::SIGKILL),
        Ending::PkillDlock => {
            let dog = children_of(holder.id());
            assert_eq!(dog.len(), 1, "dlock's one child is its watchdog");
            // What `pkill dlock` matches of this run: dlock and (by a pattern) its watchdog.
            signal(holder.id(), libc::SIGTERM);
            signal(dog[0], libc::SIGTERM);
        }
        Ending::KillDlock => signal(holder.id(), libc::SIGKILL),
        Ending::CommandExits | Ending::LeaveRunning => {}
    }
    let next = env.run(&[
        "run",
        "job",
        "-w",
        "40s",
        "--",
        "sh",
        "-c",
        "echo $(date +%s%N) $DLOCK_PREVIOUS ${DLOCK_PREVIOUS_EXIT:--}",
    ]);
    assert_code(&next, 0);
    let seen = stdout(&next);
    let (entered, previous) = seen.trim().split_once(' ').unwrap();
    let entered: u128 = entered.parse().unwrap();
    let status = wait_child(&mut holder, Duration::from_secs(10)).expect("dlock ends");
    // What of the job still runs now that the next holder is in: nothing, so the log is
    // final; with --leave-running the worker, which shows itself by writing (every 20 ms).
    let alive: Vec<_> = numbers(&pids)
        .into_iter()
        .filter(|&p| running(p as u32))
        .collect();
    let late = || {
        numbers(&env.path("log"))
            .into_iter()
            .filter(|&t| t > entered)
            .count()
    };
    if ending == Ending::LeaveRunning {
        wait_for(Duration::from_secs(10), || late() > 0);
    }
    let late_writes = late();
    let mut stderr = String::new();
    use std::io::Read;
    holder
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let handoff = Handoff {
        next_entry: Duration::from_nanos(entered.saturating_sub(ended_ns) as u64),
        late_writes,
        code: status.code(),
        stderr,
        previous: previous.to_string(),
    };
    eprintln!(
        "{ending:?}: next holder entered {:?} after the ending ({:?} of wall time); {} writes \
         after; told {}",
        handoff.next_entry,
        ended.elapsed(),
        handoff.late_writes,
        handoff.previous
    );
    if ending != Ending::LeaveRunning {
        assert!(
            alive.is_empty(),
            "{ending:?}: the job outlived its lock: {alive:?}"
        );
    }
    handoff
}

fn no_late_writes(env: &Env, ending: Ending) -> Handoff {
    let h = end_the_job(env, ending);
    assert_eq!(
        h.late_writes, 0,
        "{ending:?}: the first job wrote after the next holder entered; holder's stderr: {}",
        h.stderr
    );
    h
}

fn command_term(env: &Env) {
    let h = no_late_writes(env, Ending::CommandTerm);
    assert_eq!(h.code, Some(143), "{}", h.stderr);
    assert_eq!(h.previous, "failed 143");
}

fn command_kill(env: &Env) {
    let h = no_late_writes(env, Ending::CommandKill);
    assert_eq!(h.code, Some(137), "{}", h.stderr);
    assert_eq!(h.previous, "failed 137");
}

fn command_exits(env: &Env) {
    let h = no_late_writes(env, Ending::CommandExits);
    assert_eq!(h.code, Some(0), "{}", h.stderr);
    assert_eq!(h.previous, "released -");
    // The worker, and maybe the `sleep` it is in at that moment.
    let said = h.stderr.matches("exited 0 but left").count();
    assert_eq!(said, 1, "named once, with the option: {}", h.stderr);
    assert!(h.stderr.contains("--leave-running"), "{}", h.stderr);
    let worker = numbers(&env.path("pids"))[1];
    assert!(h.stderr.contains(&format!("{worker} (")), "{}", h.stderr);
}

fn leave_running(env: &Env) {
    let h = end_the_job(env, Ending::LeaveRunning);
    assert_eq!(h.code, Some(0), "{}", h.stderr);
    assert_eq!(h.previous, "released -");
    assert!(
        h.late_writes > 0,
        "--leave-running held the lock for the worker"
    );
}

fn pkill_dlock(env: &Env) {
    let h = no_late_writes(env, Ending::PkillDlock);
    assert_eq!(h.code, Some(143), "{}", h.stderr);
    assert_eq!(h.previous, "failed 143");
}

fn kill_dlock(env: &Env) {
    let h = no_late_writes(env, Ending::KillDlock);
    // Released by the watchdog for the dead dlock, with the command's status (its shell died
    // of the SIGTERM the watchdog sent).
    assert_eq!(h.previous, "failed 143");
    // The worker ignores SIGTERM: SIGKILL comes one kill grace (1s) after dlock's death, then
    // the watchdog releases. Without that release the next holder waits out the 30 s ttl.
    assert!(
        h.next_entry < Duration::from_secs(15),
        "the next holder entered {:?} after dlock was killed: the lease ran out instead of \
         being released",
        h.next_entry
    );
}

macro_rules! on_each_store {
    ($($case:ident),*) => {
        mod file {
            $(
                #[test]
                fn $case() {
                    super::$case(&crate::common::Env::file());
                }
            )*
        }
        mod redis {
            $(
                #[test]
                fn $case() {
                    let redis = super::RedisServer::start();
                    super::$case(&crate::common::Env::with_stores(vec![redis.url()]));
                }
            )*
        }
    };
}

on_each_store!(
    command_term,
    command_kill,
    command_exits,
    leave_running,
    pkill_dlock,
    kill_dlock,
    hangup_ignored_at_start
);

/// The watchdog is not "dlock" to `ps`, `killall dlock` or `pkill -x dlock`.
#[test]
fn the_watchdog_has_a_name_of_its_own() {
    let env = Env::file();
    let mut holder = env.spawn_run(&["job"], "sleep 30");
    let dog = wait_for(Duration::from_secs(10), || {
        children_of(holder.id()).len() == 1
            && read(&PathBuf::from(format!(
                "/proc/{}/comm",
                children_of(holder.id())[0]
            )))
            .starts_with("dlock-watchdog")
    });
    let watchdog = children_of(holder.id())[0];
    let comm = read(&PathBuf::from(format!("/proc/{watchdog}/comm")));
    let cmdline = read(&PathBuf::from(format!("/proc/{watchdog}/cmdline")));
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(dog, "the watchdog's name: {comm:?}");
    assert!(cmdline.starts_with("dlock-watchdog"), "{cmdline:?}");
    let dlock = read(&PathBuf::from(format!("/proc/{}/comm", holder.id())));
    assert!(dlock.is_empty() || dlock.trim() == "dlock", "{dlock:?}");
}

/// `nohup dlock run ...`: a SIGHUP ignored when dlock starts stays ignored, by dlock and by
/// the command, which runs to its end as under `nohup flock`.
fn hangup_ignored_at_start(env: &Env) {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "grep SigIgn /proc/self/status > {ign}; echo $$ > {pid}; \
         while [ ! -e {go} ]; do sleep 0.02; done; echo done > {done}",
        ign = env.path("ign").display(),
        pid = env.path("pid").display(),
        go = env.path("go").display(),
        done = env.path("done").display()
    );
    let mut c = env.cmd();
    c.args(["run", "job", "--", "sh", "-c", &script]);
    // SAFETY: setting a disposition between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut holder = c.spawn().unwrap();
    assert!(wait_for(Duration::from_secs(10), || !read(
        &env.path("pid")
    )
    .is_empty()));
    let command: u32 = read(&env.path("pid")).trim().parse().unwrap();
    // The terminal's close: SIGHUP to dlock and to the job.
    signal(holder.id(), libc::SIGHUP);
    signal(command, libc::SIGHUP);
    std::fs::write(env.path("go"), "").unwrap();
    let status = wait_child(&mut holder, Duration::from_secs(10)).expect("dlock ends");
    assert_eq!(status.code(), Some(0));
    assert_eq!(read(&env.path("done")).trim(), "done");
    let mask = read(&env.path("ign"));
    let mask = u64::from_str_radix(mask.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_ne!(mask & 1, 0, "the command does not ignore SIGHUP: {mask:#x}");
}
