//! `dlock run` supervising its child: environment, exit status, signals, dying holders, and a
//! lease lost while the child runs.

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

#[test]
fn the_child_sees_the_lease_in_its_environment() {
    let env = Env::file();
    let o = env.run(&[
        "run",
        "job",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_NAME; echo $DLOCK_TOKEN; echo $DLOCK_FENCE; echo $DLOCK_PREVIOUS",
    ]);
    assert_code(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "job");
    assert_eq!(lines[1].len(), 32);
    // Fences start at the store's clock (see `forget`), not at 1.
    let first: u64 = lines[2].parse().expect("a fence");
    assert!(first > 0);
    assert_eq!(lines[3], "none");
    let again = env.run(&[
        "run",
        "job",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_FENCE $DLOCK_PREVIOUS",
    ]);
    let again = stdout(&again).trim().to_string();
    let (fence, previous) = again.split_once(' ').expect("fence and previous");
    assert!(fence.parse::<u64>().expect("a fence") > first, "{again}");
    assert_eq!(previous, "released");
}

/// dlock looks the command up along PATH itself (so the child execs once): the first
/// executable match wins, a match that is not executable is passed over, and the command
/// sees the name it was given as its argv[0], as with execvp.
#[test]
fn the_command_is_found_along_path_as_execvp_would() {
    let env = Env::file();
    let (first, second) = (env.path("first"), env.path("second"));
    for (dir, word, mode) in [(&first, "first", 0o644), (&second, "second", 0o755)] {
        std::fs::create_dir_all(dir).unwrap();
        let tool = dir.join("tool");
        std::fs::write(&tool, format!("#!/bin/sh\necho {word} \"$0\"\n")).unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
    }
    let path = format!(
        "{}:{}:{}",
        first.display(),
        second.display(),
        std::env::var("PATH").unwrap()
    );
    let mut c = env.cmd();
    c.env("PATH", &path).args(["run", "job", "--", "tool"]);
    let o = output_within(c, Duration::from_secs(30));
    assert_code(&o, 0);
    // A script's $0 is the path it was run by; the first dir's tool is not executable.
    assert_eq!(
        stdout(&o),
        format!("second {}", second.join("tool").display())
    );
    let mut c = env.cmd();
    c.env("PATH", &path)
        .args(["run", "job", "--", "sh", "-c", "echo $0"]);
    let o = output_within(c, Duration::from_secs(30));
    assert_eq!(stdout(&o), "sh", "argv[0] is the name as given");
    let mut c = env.cmd();
    c.env("PATH", &path)
        .args(["run", "job", "--", "no-such-tool-here"]);
    assert_code(&output_within(c, Duration::from_secs(30)), 127);
}

#[test]
fn the_childs_exit_code_comes_back() {
    let env = Env::file();
    assert_code(&env.run(&["run", "job", "--", "sh", "-c", "exit 7"]), 7);
    assert_code(&env.run(&["run-with-lock", "job", "--", "true"]), 0);
    // The lock was released both times.
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

#[test]
fn a_child_killed_by_sigkill_gives_137() {
    let env = Env::file();
    assert_code(
        &env.run(&["run", "job", "--", "sh", "-c", "kill -9 $$"]),
        137,
    );
}

#[test]
fn a_missing_command_gives_127_and_releases() {
    let env = Env::file();
    let missing = env.path("no-such-command").display().to_string();
    let o = env.run(&["run", "job", "--", &missing]);
    assert_code(&o, 127);
    assert!(stderr(&o).contains("not found"), "{}", stderr(&o));
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

/// A file without a `#!` line is run by /bin/sh, as execvp runs it.
#[test]
fn a_script_without_an_interpreter_line_runs_under_sh() {
    let env = Env::file();
    let script = env.path("plain-script");
    std::fs::write(&script, "echo plain \"$1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = env.run(&["run", "job", "--", &script.display().to_string(), "word"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "plain word");
}

/// Give dlock a new file `path` as its descriptor 3, not close-on-exec (`3>path`); the file is
/// kept open by the caller while it needs it.
fn pass_as_fd3(c: &mut std::process::Command, path: &std::path::Path) -> std::fs::File {
    let file = std::fs::File::create(path).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: dup2 and fcntl in the forked child before exec; async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(c, move || {
            // dup2 onto itself keeps close-on-exec: clear it either way.
            if libc::dup2(fd, 3) < 0 || libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    file
}

/// A descriptor the caller opened for the job (`3>file`) reaches the command, as through any
/// program (the watchdog, forked before the wait, keeps it for the command).
#[test]
fn descriptors_the_caller_passes_on_reach_the_command() {
    let env = Env::file();
    let out = env.path("fd3.txt");
    let mut c = env.cmd();
    c.args(["run", "job", "--", "sh", "-c", "echo through-3 >&3"]);
    let _file = pass_as_fd3(&mut c, &out);
    let o = output_within(c, Duration::from_secs(30));
    assert_code(&o, 0);
    assert_eq!(read(&out).trim(), "through-3");
}

/// A run killed while it waits leaves nothing running: its watchdog, forked before the wait,
/// goes with it, and the lock is untouched.
#[test]
fn a_run_killed_while_it_waits_leaves_no_process_behind() {
    let env = Env::file();
    let held = env.run(&["lock", "job", "--ttl", "30s"]);
    assert_code(&held, 0);
    let mut waiter = env.spawn_run(&["job", "-w", "30s"], "echo ran");
    let id = waiter.id();
    assert!(
        wait_for(Duration::from_secs(10), || env.queued("job", id)),
        "the run never queued"
    );
    let forked = children_of(id);
    assert!(!forked.is_empty(), "no watchdog forked before the wait");
    signal(waiter.id(), libc::SIGKILL);
    let _ = waiter.wait();
    assert!(
        wait_for(Duration::from_secs(2), || forked
            .iter()
            .all(|&p| !running(p))),
        "a process of the killed waiter ran on: {forked:?}"
    );
    assert_code(&env.run(&["unlock", "job", "--token", &stdout(&held)]), 0);
    let o = env.run(&["run", "job", "-n", "--", "true"]);
    assert_code(&o, 0);
}

/// The watchdog, forked before the wait, holds none of dlock's own descriptors while dlock
/// waits (its runtime's, its store's: a file store's lock would outlive dlock in it), but
/// keeps those the caller passed on (`3>file`) for the command.
#[test]
fn the_waiting_watchdog_keeps_what_the_command_inherits_and_nothing_of_dlocks() {
    let env = Env::file();
    let held = env.run(&["lock", "job", "--ttl", "30s"]);
    assert_code(&held, 0);
    let passed = env.path("fd3.txt");
    let mut c = env.cmd();
    c.args([
        "run",
        "job",
        "-w",
        "30s",
        "--",
        "sh",
        "-c",
        "echo through-3 >&3",
    ]);
    let _file = pass_as_fd3(&mut c, &passed);
    let waiter = c.spawn().unwrap();
    let links = || -> Vec<String> {
        let Some(&watchdog) = children_of(waiter.id()).first() else {
            return Vec::new();
        };
        std::fs::read_dir(format!("/proc/{watchdog}/fd"))
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .map(|l| l.display().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    // dlock's runtime has both at any time; the watchdog, once armed, neither.
    let runtime = |l: &String| l.contains("eventpoll") || l.contains("eventfd");
    let mut seen = Vec::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            seen = links();
            !seen.is_empty() && !seen.iter().any(runtime)
        }),
        "dlock's runtime in the watchdog: {seen:?}"
    );
    assert!(
        seen.iter().any(|l| l.ends_with("fd3.txt")),
        "the passed file: {seen:?}"
    );
    assert_code(&env.run(&["unlock", "job", "--token", &stdout(&held)]), 0);
    assert_code(&finish(waiter, Duration::from_secs(30)), 0);
    assert_eq!(read(&passed).trim(), "through-3");
}

/// A watchdog killed from outside (the OOM killer, a careless `kill -9`) ends the run without
/// a last word: dlock hears its report pipe end, reaps it, ends with its status and releases;
/// the command, whose parent it was, goes with it.
#[test]
fn a_killed_watchdog_ends_the_run_and_frees_the_lock() {
    let env = Env::file();
    let pidfile = env.path("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let mut dlock = env.spawn_run(&["job"], &script);
    assert!(wait_for(Duration::from_secs(10), || !read(&pidfile)
        .trim()
        .is_empty()));
    let command: u32 = read(&pidfile).trim().parse().expect("the command's pid");
    let watchdog = children_of(dlock.id());
    assert_eq!(
        watchdog.len(),
        1,
        "dlock's one child is its watchdog: {watchdog:?}"
    );
    signal(watchdog[0], libc::SIGKILL);
    let status = wait_child(&mut dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(128 + libc::SIGKILL), "{status:?}");
    assert!(
        wait_for(Duration::from_secs(2), || !running(command)),
        "the command ran on"
    );
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

#[test]
fn sigterm_to_dlock_reaches_the_child_and_its_code_comes_back() {
    let env = Env::file();
    let log = env.path("log");
    let script = format!(
        "trap 'echo term >> {l}; exit 42' TERM; echo ready >> {l}; while :; do sleep 0.05; done",
        l = log.display()
    );
    let mut dlock = env.spawn_run(&["job"], &script);
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("ready")));
    signal(dlock.id(), libc::SIGTERM);
    let status = wait_child(&mut dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(42));
    assert!(read(&log).contains("term"));
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

#[test]
fn sigusr1_is_forwarded_and_the_child_goes_on() {
    let env = Env::file();
    let log = env.path("log");
    let script = format!(
        "trap 'echo usr1 >> {l}; touch {l}.go' USR1; echo ready >> {l}; \
         while [ ! -e {l}.go ]; do sleep 0.05; done; exit 5",
        l = log.display()
    );
    let mut dlock = env.spawn_run(&["job"], &script);
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("ready")));
    signal(dlock.id(), libc::SIGUSR1);
    let status = wait_child(&mut dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(5));
    assert!(read(&log).contains("usr1"));
}

/// SIGKILL a holder's dlock: its watchdog stops the child and releases the lease, and the
/// next `run` gets the lock within the ttl (2 s), told that its predecessor failed.
fn a_killed_holder_frees_the_lock_within_the_ttl(env: &Env) {
    let pidfile = env.path("child.pid");
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let mut holder = env.spawn_run(&["job", "--ttl", "2s"], &script);
    assert!(wait_for(Duration::from_secs(10), || !read(&pidfile).is_empty()));
    let child: u32 = read(&pidfile).trim().parse().unwrap();
    let killed = now_ms();
    signal(holder.id(), libc::SIGKILL);
    holder.wait().unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || !running(child)),
        "the child outlived its dlock"
    );
    let next = next_holder(env, "job");
    assert_eq!(next.previous, "failed");
    next.assert_freed_within((killed, "the kill"), Duration::from_millis(2500));
}

#[test]
fn a_killed_holder_on_the_file_store_frees_the_lock_within_the_ttl() {
    a_killed_holder_frees_the_lock_within_the_ttl(&Env::file());
}

#[test]
fn a_killed_holder_on_redis_frees_the_lock_within_the_ttl() {
    let redis = RedisServer::start();
    a_killed_holder_frees_the_lock_within_the_ttl(&Env::with_stores(vec![redis.url()]));
}

#[test]
fn a_forced_unlock_stops_the_child_and_exits_70() {
    let env = Env::file();
    let log = env.path("log");
    let script = format!(
        "trap 'echo term >> {l}; exit 0' TERM; echo ready >> {l}; while :; do sleep 0.05; done",
        l = log.display()
    );
    let mut dlock = env.spawn_run(&["job", "--ttl", "1s"], &script);
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("ready")));
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    let status = wait_child(&mut dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(70));
    assert!(read(&log).contains("term"));
}

/// The store freezes while the child runs: no renewal can succeed, so the child must get
/// SIGTERM (and be gone) before the lease deadline, dlock exits 70, and nobody else enters
/// while the child still runs.
#[test]
fn a_frozen_redis_stops_the_child_before_the_lease_runs_out() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let log = env.path("log");
    let script = format!(
        "trap 'echo \"term $(date +%s%N)\" >> {l}; exit 0' TERM; echo \"enter $(date +%s%N)\" >> {l}; \
         while :; do sleep 0.02; done",
        l = log.display()
    );
    let ttl = Duration::from_secs(3);
    let mut holder = env.spawn_run(&["job", "--ttl", "3s", "--kill-grace", "1s"], &script);
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("enter")));
    let frozen_at = now_ns();
    redis.pause();
    let status = wait_child(&mut holder, Duration::from_secs(10)).expect("dlock exits");
    let stopped_by = now_ns();
    redis.resume();
    assert_eq!(status.code(), Some(70), "dlock should report the lost lock");
    let text = read(&log);
    let term: u128 = text
        .lines()
        .find_map(|l| l.strip_prefix("term "))
        .expect("the child got SIGTERM")
        .parse()
        .unwrap();
    // The last renewal was before the freeze, so the deadline is before freeze + ttl.
    assert!(
        term < frozen_at + ttl.as_nanos(),
        "SIGTERM came after the lease could have run out"
    );
    assert!(
        stopped_by < frozen_at + ttl.as_nanos() + 200_000_000,
        "dlock outlived the lease"
    );
    // Someone else gets the lock now, strictly after the child ended.
    let next = env.run(&["run", "job", "-w", "10s", "--", "sh", "-c", "date +%s%N"]);
    assert_code(&next, 0);
    let entered: u128 = stdout(&next).parse().unwrap();
    assert!(
        entered > term,
        "a second holder entered while the first child ran"
    );
}

/// A stopped dlock cannot stop its child itself. Its child must still be gone before the
/// lease can run out, so that nobody else enters while it runs; dlock reports the loss (70)
/// once it runs again.
#[test]
fn a_stopped_dlock_run_still_stops_its_child_before_the_lease_runs_out() {
    a_stopped_run_has_its_child_stopped(false);
}

/// The same after the run waited for its lock: its watchdog was started while it waited,
/// before it had a deadline, and must act on the lease it got.
#[test]
fn a_stopped_dlock_run_that_waited_first_still_stops_its_child() {
    a_stopped_run_has_its_child_stopped(true);
}

fn a_stopped_run_has_its_child_stopped(wait_first: bool) {
    let env = Env::file();
    let pidfile = env.path("child.pid");
    let script = format!(
        "echo $$ > {}; while :; do sleep 0.02; done",
        pidfile.display()
    );
    let token = wait_first.then(|| {
        let held = env.run(&["lock", "job", "--ttl", "30s"]);
        assert_code(&held, 0);
        stdout(&held)
    });
    let mut holder = env.spawn_run(&["job", "--ttl", "1s", "-w", "30s"], &script);
    if let Some(token) = token {
        let id = holder.id();
        assert!(
            wait_for(Duration::from_secs(10), || env.queued("job", id)),
            "the run did not wait"
        );
        // Then longer than the run's ttl (the time itself is what is tested): a deadline
        // taken when the watchdog started would be gone.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(read(&pidfile).is_empty(), "the run did not wait");
        assert_code(&env.run(&["unlock", "job", "--token", &token]), 0);
    }
    assert!(wait_for(Duration::from_secs(10), || !read(&pidfile).is_empty()));
    let child: u32 = read(&pidfile).trim().parse().unwrap();
    signal(holder.id(), libc::SIGSTOP);
    let stopped = Instant::now();
    let gone = wait_for(Duration::from_secs(5), || !running(child));
    let took = stopped.elapsed();
    // Someone else gets the lock, but only once the child is gone.
    let next = env.run(&["lock", "job", "-w", "5s"]);
    let child_ran_on = running(child);
    signal(holder.id(), libc::SIGCONT);
    let status = wait_child(&mut holder, Duration::from_secs(10)).expect("dlock exits");
    assert!(gone, "the child of a stopped dlock ran on for {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "the child outlived the lease: {took:?}"
    );
    assert_code(&next, 0);
    assert!(!child_ran_on);
    assert_eq!(status.code(), Some(70));
}

/// A reader that goes away (`dlock run --events - ... | head -c0`, a pipeline cut short) makes
/// dlock's writes fail, not kill it with the lease held: the command runs to its end, dlock
/// exits with its status and the lock is free. The command gets SIGPIPE at its default, as
/// from any program, not dlock's ignoring of it.
#[test]
fn a_closed_stdout_does_not_kill_dlock_and_the_command_keeps_sigpipe() {
    let env = Env::file();
    let sig_ign = env.path("sigign");
    let mut c = env.cmd();
    c.args(["run", "--events", "-", "piped", "--", "sh", "-c"])
        .arg(format!(
            "grep SigIgn /proc/$$/status > {}; sleep 0.3; exit 3",
            sig_ign.display()
        ));
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn dlock");
    // The reader goes before dlock writes its first event (the grant).
    drop(child.stdout.take());
    let o = finish(child, Duration::from_secs(30));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        o.status.signal(),
        None,
        "dlock died by a signal: {}",
        stderr(&o)
    );
    assert_code(&o, 3);
    let ignored = read(&sig_ign);
    let mask = u64::from_str_radix(ignored.trim().trim_start_matches("SigIgn:").trim(), 16)
        .unwrap_or_else(|e| panic!("{ignored:?}: {e}"));
    assert_eq!(
        mask & (1 << (libc::SIGPIPE - 1)),
        0,
        "the command was started with SIGPIPE ignored"
    );
    assert_eq!(
        env.inspect("piped")["held"],
        false,
        "the lock is still held"
    );
}
