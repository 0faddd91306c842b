//! A renewal the store refuses because the lease is gone (here: `unlock --force` from another
//! process), with a command that ignores SIGTERM. Someone else may hold the lock from that
//! answer on, so the command must be SIGKILLed one kill grace after it, not left to run until
//! the old deadline: by dlock, by dlock while signals keep arriving, and by the watchdog when
//! dlock is stopped. The ttl is long (20 s) so that the old deadline is far off.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

/// A renewal comes every ttl/3 (+10% jitter): the refusal is heard within this of the unlock.
const HEARD_WITHIN: Duration = Duration::from_millis(7_400);
const GRACE: Duration = Duration::from_secs(1);
/// Room for a loaded machine; the old deadline is more than 12 s after the refusal.
const SLACK: Duration = Duration::from_millis(1_500);

struct Stubborn {
    dlock: Child,
    pid: u32,
    log: PathBuf,
}

/// `dlock run job --ttl 20s --kill-grace 1s` whose child (a shell) survives SIGTERM and
/// SIGINT, logging each; returns once the child runs.
fn stubborn_holder(env: &Env) -> Stubborn {
    let log = env.path("log");
    let pidfile = env.path("pid");
    let script = format!(
        "trap 'echo term >> {l}' TERM; trap 'echo int >> {l}' INT; echo $$ > {p}; \
         while :; do sleep 0.05; done",
        l = log.display(),
        p = pidfile.display()
    );
    let dlock = env.spawn_run(&["job", "--ttl", "20s", "--kill-grace", "1s"], &script);
    let read = || std::fs::read_to_string(&pidfile).unwrap_or_default();
    assert!(wait_for(Duration::from_secs(10), || read().ends_with('\n')));
    let pid = read().trim().parse().unwrap();
    Stubborn { dlock, pid, log }
}

impl Stubborn {
    fn got(&self, what: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .contains(what)
    }

    /// How long after `from` the child was gone (at most 30 s).
    fn gone_after(&self, from: Instant, mut meanwhile: impl FnMut()) -> Duration {
        assert!(
            wait_for(Duration::from_secs(30), || {
                meanwhile();
                !running(self.pid)
            }),
            "the command ran on for 30 s after the lease was gone"
        );
        from.elapsed()
    }

    /// Force the lock away and wait for dlock's SIGTERM to reach the child; returns when the
    /// unlock was done.
    fn force_and_await_term(&self, env: &Env) -> Instant {
        assert_code(&env.run(&["unlock", "job", "--force"]), 0);
        let forced = Instant::now();
        assert!(
            wait_for(HEARD_WITHIN + SLACK, || self.got("term")),
            "no SIGTERM after the forced unlock"
        );
        forced
    }
}

fn a_forced_unlock_kills_a_child_that_ignores_sigterm(env: &Env) {
    let mut h = stubborn_holder(env);
    let forced = h.force_and_await_term(env);
    let took = h.gone_after(forced, || {});
    assert!(
        took < HEARD_WITHIN + GRACE + SLACK,
        "the command ran on for {took:?} after the forced unlock"
    );
    let status = wait_child(&mut h.dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(70));
}

#[test]
fn a_forced_unlock_on_the_file_store_kills_a_child_that_ignores_sigterm() {
    a_forced_unlock_kills_a_child_that_ignores_sigterm(&Env::file());
}

#[test]
fn a_forced_unlock_on_redis_kills_a_child_that_ignores_sigterm() {
    let redis = RedisServer::start();
    a_forced_unlock_kills_a_child_that_ignores_sigterm(&Env::with_stores(vec![redis.url()]));
}

/// Ctrl-C pressed again and again while dlock stops the command: each SIGINT is forwarded,
/// and none may put off the SIGKILL.
#[test]
fn signals_forwarded_after_the_refusal_do_not_put_off_the_sigkill() {
    let env = Env::file();
    let mut h = stubborn_holder(&env);
    h.force_and_await_term(&env);
    let termed = Instant::now();
    let mut last = Instant::now();
    let took = h.gone_after(termed, || {
        if last.elapsed() > Duration::from_millis(100) {
            signal(h.dlock.id(), libc::SIGINT);
            last = Instant::now();
        }
    });
    assert!(h.got("int"), "the SIGINTs were not forwarded");
    assert!(
        took < GRACE + SLACK,
        "the command ran on for {took:?} after its SIGTERM"
    );
    let status = wait_child(&mut h.dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(70));
}

/// dlock is stopped right after its SIGTERM: its watchdog, told of the refusal, kills the
/// command one kill grace later, not at the old deadline.
#[test]
fn a_stopped_dlock_s_watchdog_kills_one_grace_after_the_refusal() {
    let env = Env::file();
    let mut h = stubborn_holder(&env);
    h.force_and_await_term(&env);
    signal(h.dlock.id(), libc::SIGSTOP);
    let stopped = Instant::now();
    let took = h.gone_after(stopped, || {});
    signal(h.dlock.id(), libc::SIGCONT);
    assert!(
        took < GRACE + SLACK,
        "the command of a stopped dlock ran on for {took:?} after its SIGTERM"
    );
    let status = wait_child(&mut h.dlock, Duration::from_secs(10)).expect("dlock exits");
    assert_eq!(status.code(), Some(70));
}
