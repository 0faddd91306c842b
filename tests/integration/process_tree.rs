//! `dlock run` SIGKILLed (as `timeout -s KILL`, the OOM killer or a cancelled CI job do it)
//! while its command's tree works: no process of the tree may write once the next holder has
//! entered, and every one of them is gone before the ttl ends, including one that left the
//! command's process group and session (`setsid`) and forked again.

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

/// Kills whatever the pid file names when dropped, so a failing run leaves nothing behind.
struct Reaper(std::path::PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in pids(&self.0) {
            signal(pid, libc::SIGKILL);
        }
    }
}

fn pids(file: &std::path::Path) -> Vec<u32> {
    read(file)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A worker that does not stop on SIGTERM (it has work to finish) and appends the time to
/// the log every 20 ms; each process of the tree writes its pid to `pids` first.
fn worker(env: &Env) -> std::path::PathBuf {
    let script = env.path("worker.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntrap '' TERM\necho $$ >> {pids}\n\
             while :; do echo \"$(date +%s%N)\" >> {log}; sleep 0.02; done\n",
            pids = env.path("pids").display(),
            log = env.path("log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

/// What a SIGKILL of the holder's dlock came to, in nanoseconds after the kill.
struct Outcome {
    last_death: Duration,
    next_entry: Duration,
    writes_after_entry: usize,
}

fn kill_the_holder(env: &Env, setsid: bool) -> Outcome {
    let worker = worker(env);
    let pidfile = env.path("pids");
    let _reaper = Reaper(pidfile.clone());
    let w = worker.display();
    let p = pidfile.display();
    // The shell forks the worker (the worker is the command's grandchild); in the setsid
    // tree, a subshell also starts a new session whose shell forks a second worker.
    let script = if setsid {
        format!("echo $$ >> {p}; ( setsid sh -c 'echo $$ >> {p}; {w} & wait' & ); {w}; echo done")
    } else {
        format!("echo $$ >> {p}; {w}; echo done")
    };
    let ttl = Duration::from_secs(3);
    let mut holder = env.spawn_run(&["job", "--ttl", "3s"], &script);
    let expected = if setsid { 4 } else { 2 };
    assert!(
        wait_for(Duration::from_secs(10), || pids(&pidfile).len() >= expected
            && read(&env.path("log")).lines().count() >= 4),
        "the tree did not start: {:?}",
        pids(&pidfile)
    );
    let tree = pids(&pidfile);
    let killed = Instant::now();
    let killed_ns = now_ns();
    signal(holder.id(), libc::SIGKILL);
    holder.wait().unwrap();
    let gone = wait_for(ttl + Duration::from_secs(2), || {
        tree.iter().all(|&pid| !running(pid))
    });
    let last_death = killed.elapsed();
    let next = env.run(&["run", "job", "-w", "10s", "--", "sh", "-c", "date +%s%N"]);
    assert_code(&next, 0);
    let entered: u128 = stdout(&next).parse().unwrap();
    // Every writer of the tree was seen gone (or `gone` fails below): the log is final.
    let writes_after_entry = read(&env.path("log"))
        .lines()
        .filter_map(|l| l.parse::<u128>().ok())
        .filter(|&t| t > entered)
        .count();
    let alive: Vec<u32> = tree.iter().copied().filter(|&p| running(p)).collect();
    assert!(
        gone,
        "processes of the tree outlived the ttl after dlock was killed: {alive:?}"
    );
    assert_eq!(
        writes_after_entry, 0,
        "the tree wrote after the next holder entered"
    );
    assert!(
        last_death < ttl,
        "the last process of the tree died {last_death:?} after the kill, past the ttl {ttl:?}"
    );
    let outcome = Outcome {
        last_death,
        next_entry: Duration::from_nanos((entered.saturating_sub(killed_ns)) as u64),
        writes_after_entry,
    };
    eprintln!(
        "{} tree: last descendant died {:?} after the kill; next holder entered after {:?}; \
         {} writes after its entry",
        if setsid { "setsid" } else { "2-level" },
        outcome.last_death,
        outcome.next_entry,
        outcome.writes_after_entry
    );
    outcome
}

#[test]
fn a_killed_run_on_the_file_store_leaves_no_writer() {
    kill_the_holder(&Env::file(), false);
}

#[test]
fn a_killed_run_on_the_file_store_leaves_no_writer_that_called_setsid() {
    kill_the_holder(&Env::file(), true);
}

#[test]
fn a_killed_run_on_redis_leaves_no_writer() {
    let redis = RedisServer::start();
    kill_the_holder(&Env::with_stores(vec![redis.url()]), false);
}

#[test]
fn a_killed_run_on_redis_leaves_no_writer_that_called_setsid() {
    let redis = RedisServer::start();
    let o = kill_the_holder(&Env::with_stores(vec![redis.url()]), true);
    assert!(o.next_entry > o.last_death);
}

/// With `--leave-running`, a command that ends on its own leaves what it started on purpose
/// running (a deploy that starts a daemon): dlock releases and exits at once, without waiting
/// for it.
#[test]
fn a_daemon_the_command_started_outlives_a_run_that_leaves_it_running() {
    let env = Env::file();
    let pidfile = env.path("daemon.pid");
    let _reaper = Reaper(pidfile.clone());
    let script = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 30' > /dev/null 2>&1 < /dev/null & exit 0",
        pidfile.display()
    );
    let started = Instant::now();
    let o = env.run(&["run", "job", "--leave-running", "--", "sh", "-c", &script]);
    assert_code(&o, 0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(wait_for(Duration::from_secs(5), || !read(&pidfile).is_empty()));
    let daemon: u32 = read(&pidfile).trim().parse().unwrap();
    // A safety window: a stop that does not come has nothing to wait for.
    std::thread::sleep(Duration::from_millis(300));
    assert!(running(daemon), "the daemon was stopped");
    assert_code(&env.run(&["lock", "job", "-n"]), 0);
}

/// A lease the store says is gone (`unlock --force`): the whole tree is stopped, the part
/// that left the command's group included, before dlock exits 70.
#[test]
fn a_lost_lease_stops_the_part_of_the_tree_that_left_the_group() {
    let env = Env::file();
    let worker = worker(&env);
    let pidfile = env.path("pids");
    let _reaper = Reaper(pidfile.clone());
    let script = format!(
        "( setsid sh -c 'echo $$ >> {p}; {w} & wait' & ); trap 'exit 0' TERM; \
         while :; do sleep 0.05; done",
        p = pidfile.display(),
        w = worker.display()
    );
    let mut holder = env.spawn_run(&["job", "--ttl", "4s"], &script);
    assert!(wait_for(Duration::from_secs(10), || pids(&pidfile).len() >= 2));
    let tree = pids(&pidfile);
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    let status = wait_child(&mut holder, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(70));
    let alive: Vec<u32> = tree.iter().copied().filter(|&p| running(p)).collect();
    assert!(alive.is_empty(), "left running after exit 70: {alive:?}");
}

/// A frozen dlock (SIGSTOP) cannot stop its command: the watchdog stops the whole tree, the
/// part that called `setsid` included, before the lease runs out; dlock says 70 once it runs.
#[test]
fn a_frozen_run_has_its_whole_tree_stopped_before_the_lease_runs_out() {
    let env = Env::file();
    let worker = worker(&env);
    let pidfile = env.path("pids");
    let _reaper = Reaper(pidfile.clone());
    let script = format!(
        "( setsid sh -c 'echo $$ >> {p}; {w} & wait' & ); {w}",
        p = pidfile.display(),
        w = worker.display()
    );
    let mut holder = env.spawn_run(&["job", "--ttl", "2s"], &script);
    assert!(wait_for(Duration::from_secs(10), || pids(&pidfile).len() >= 3));
    let tree = pids(&pidfile);
    signal(holder.id(), libc::SIGSTOP);
    let gone = wait_for(Duration::from_secs(3), || tree.iter().all(|&p| !running(p)));
    let next = env.run(&["run", "job", "-w", "10s", "--", "sh", "-c", "date +%s%N"]);
    signal(holder.id(), libc::SIGCONT);
    let status = wait_child(&mut holder, Duration::from_secs(10)).expect("dlock exits");
    let alive: Vec<u32> = tree.iter().copied().filter(|&p| running(p)).collect();
    assert!(gone, "left running under a frozen dlock: {alive:?}");
    assert_code(&next, 0);
    let entered: u128 = stdout(&next).parse().unwrap();
    let late = read(&env.path("log"))
        .lines()
        .filter_map(|l| l.parse::<u128>().ok())
        .filter(|&t| t > entered)
        .count();
    assert_eq!(late, 0, "the tree wrote after the next holder entered");
    assert_eq!(status.code(), Some(70));
}

/// `--max-runtime` stops the whole tree, not only the command's group, before dlock exits.
#[test]
fn max_runtime_stops_the_part_of_the_tree_that_left_the_group() {
    let env = Env::file();
    let worker = worker(&env);
    let pidfile = env.path("pids");
    let _reaper = Reaper(pidfile.clone());
    let script = format!(
        "( setsid sh -c 'echo $$ >> {p}; {w} & wait' > /dev/null 2>&1 & ); sleep 30",
        p = pidfile.display(),
        w = worker.display()
    );
    let mut c = env.cmd();
    c.args(["run", "job", "--max-runtime", "1s", "--kill-grace", "300ms"])
        .args(["--", "sh", "-c", &script]);
    let o = output_within(c, Duration::from_secs(30));
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    let tree = pids(&pidfile);
    assert!(tree.len() >= 2, "the tree did not start: {tree:?}");
    let alive: Vec<u32> = tree.iter().copied().filter(|&p| running(p)).collect();
    assert!(
        alive.is_empty(),
        "left running after --max-runtime: {alive:?}"
    );
}
