//! `dlock run` as a shell job in a real pseudo-terminal (tmux): Ctrl-Z suspends the whole job
//! and gives the shell its prompt back, `fg` resumes it, Ctrl-C then reaches the command,
//! and a job suspended past its lease is stopped before the lease runs out.

use std::time::Duration;

use crate::common::terminal::Terminal;
use crate::common::*;

fn ticks(env: &Env) -> usize {
    std::fs::read_to_string(env.path("log"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The command's shell, which wrote its pid.
fn command(env: &Env) -> u32 {
    read(&env.path("pid"))
        .trim()
        .parse()
        .expect("the command's pid")
}

/// Start a job that appends a line to the log every 50 ms, and wait until it writes.
fn start_job(env: &Env, t: &Terminal, ttl: &str) {
    t.line(&format!(
        "dlock run jc --ttl {ttl} -- sh -c 'echo $$ > {}; while :; do echo tick >> {}; sleep 0.05; done'",
        env.path("pid").display(),
        env.path("log").display()
    ));
    assert!(
        wait_for(Duration::from_secs(10), || ticks(env) >= 3),
        "the job did not start: {}",
        t.screen()
    );
}

/// Ctrl-Z: the prompt comes back, and the whole job is suspended.
fn suspend(env: &Env, t: &Terminal) {
    t.keys(&["C-z"]);
    assert!(
        wait_for(Duration::from_secs(10), || t.at_prompt()),
        "Ctrl-Z did not give the prompt back: {}",
        t.screen()
    );
    assert!(t.screen().contains("Stopped"), "{}", t.screen());
    let before = ticks(env);
    assert!(
        wait_for(Duration::from_secs(10), || state(command(env)) == Some('T')),
        "the command was not stopped: {:?}",
        state(command(env))
    );
    assert_eq!(
        ticks(env),
        before,
        "the command ran on while its job was suspended"
    );
}

#[test]
fn ctrl_z_gives_the_prompt_back_and_fg_resumes_the_job() {
    let env = Env::file();
    let t = Terminal::start(&env);
    start_job(&env, &t, "30s");
    suspend(&env, &t);
    // Suspended, the job still holds its lock.
    assert_code(&env.run(&["lock", "jc", "-n"]), 75);
    t.line("fg");
    let resumed = ticks(&env);
    assert!(
        wait_for(Duration::from_secs(10), || ticks(&env) > resumed + 3),
        "fg did not resume the job: {}",
        t.screen()
    );
    assert!(!t.at_prompt(), "the job is in the foreground again");
    t.keys(&["C-c"]);
    assert!(wait_for(Duration::from_secs(10), || t.at_prompt()));
}

#[test]
fn ctrl_c_after_ctrl_z_and_fg_ends_the_job_and_releases_the_lock() {
    let env = Env::file();
    let t = Terminal::start(&env);
    start_job(&env, &t, "30s");
    suspend(&env, &t);
    t.line("fg");
    let resumed = ticks(&env);
    assert!(wait_for(Duration::from_secs(10), || ticks(&env) > resumed));
    t.keys(&["C-c"]);
    assert!(
        wait_for(Duration::from_secs(10), || t.at_prompt()),
        "Ctrl-C did not end the job: {}",
        t.screen()
    );
    t.line("echo rc=$?");
    assert!(
        wait_for(Duration::from_secs(10), || t.screen().contains("rc=130")),
        "{}",
        t.screen()
    );
    assert_code(&env.run(&["lock", "jc", "-n"]), 0);
}

/// A job left suspended past its lease is stopped (SIGTERM with SIGCONT) by the watchdog
/// before the lease runs out, so the next holder never meets it; `fg` then reports the lost
/// lock (70).
#[test]
fn a_job_suspended_past_its_lease_is_stopped_before_the_next_holder_enters() {
    let env = Env::file();
    let t = Terminal::start(&env);
    start_job(&env, &t, "2s");
    suspend(&env, &t);
    let stopped_at = ticks(&env);
    let next = env.run(&["run", "jc", "-w", "10s", "--", "sh", "-c", "echo inside"]);
    assert_code(&next, 0);
    assert_eq!(stdout(&next), "inside");
    // Stopped for good before the next holder entered (a zombie until dlock, suspended
    // itself, reaps it), so it can write no more.
    assert!(
        !running(command(&env)),
        "the suspended job outlived its lease"
    );
    assert_eq!(ticks(&env), stopped_at, "the suspended job ran again");
    t.line("fg");
    assert!(wait_for(Duration::from_secs(10), || t.at_prompt()));
    t.line("echo rc=$?");
    assert!(
        wait_for(Duration::from_secs(10), || t.screen().contains("rc=70")),
        "{}",
        t.screen()
    );
    assert_eq!(ticks(&env), stopped_at, "the job ran after its lease");
    // The user's pause is named as the cause, not a guess that dlock was stopped.
    let screen = t.screen();
    assert!(
        screen.contains("while the job was suspended (Ctrl-Z)"),
        "{screen}"
    );
    assert!(!screen.contains("was dlock stopped?"), "{screen}");
}
