//! `dlock lock --keepalive` (issue 40): a renewer holds the lease past its ttl until `unlock
//! --token` (which stops it and releases), a lost lease, or the followed process's end; and
//! `dlock check`, which a script asks before a step that must not run unlocked.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

// Short, so that three ttls pass quickly; long enough that a loaded machine renews in time.
const TTL: &str = "1500ms";
const LIMIT: Duration = Duration::from_secs(20);

/// `lock NAME --keepalive` with these extra flags and events in `events`: the token.
fn keepalive(env: &Env, name: &str, extra: &[&str], events: &str) -> String {
    let ev = env.path(events);
    let mut args = vec!["lock", name, "--keepalive", "--ttl", TTL, "--events"];
    args.push(ev.to_str().unwrap());
    args.extend_from_slice(extra);
    let o = env.run(&args);
    assert_code(&o, 0);
    stdout(&o)
}

fn count(env: &Env, events: &str, event: &str) -> usize {
    read(&env.path(events))
        .lines()
        .filter(|l| l.contains(&format!("\"event\":\"{event}\"")))
        .count()
}

/// The renewer's pid, as `inspect --json` shows it on the holder.
fn renewer(env: &Env, name: &str) -> u32 {
    let v = env.inspect(name);
    let k = &v["holders"][0]["keepalive"];
    assert_eq!(k["alive"], true, "{v}");
    k["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no keepalive pid: {v}")) as u32
}

fn busy(env: &Env, name: &str) -> bool {
    code(&env.run(&["lock", name, "-w", "0"])) == 75
}

fn free(env: &Env, name: &str) -> bool {
    let o = env.run(&["lock", name, "-n"]);
    if code(&o) != 0 {
        return false;
    }
    assert_code(&env.run(&["unlock", name, "--token", &stdout(&o)]), 0);
    true
}

/// Held through more than three ttls of renewals (a `-w 0` refused all along), then `unlock
/// --token` stops the renewer and frees the name in one step.
fn holds_past_three_ttls_until_unlock(env: &Env) {
    let token = keepalive(env, "deploy", &["--follow", "none"], "ev");
    let pid = renewer(env, "deploy");
    let text = stdout(&env.run(&["inspect", "deploy"]));
    assert!(text.contains(&format!("kept alive by pid {pid}")), "{text}");
    // ttl/3 per renewal: ten renewals span more than three ttls.
    let mut renewals = 0;
    while renewals < 10 {
        assert!(busy(env, "deploy"), "free after {renewals} renewals");
        assert_code(&env.run(&["check", "deploy", "--token", &token]), 0);
        renewals = count(env, "ev", "renewed");
    }
    assert!(running(pid));
    assert_code(&env.run(&["unlock", "deploy", "--token", &token]), 0);
    assert!(
        wait_for(LIMIT, || !running(pid)),
        "the renewer outlived unlock"
    );
    assert!(free(env, "deploy"));
    assert_eq!(count(env, "ev", "lost"), 0, "{}", read(&env.path("ev")));
}

/// Another client breaks the lock: the renewer's next renewal is refused, and it exits.
fn ends_when_the_lease_is_lost(env: &Env) {
    let token = keepalive(env, "lost", &["--follow", "none"], "ev");
    let pid = renewer(env, "lost");
    assert_code(&env.run(&["unlock", "lost", "--force"]), 0);
    assert!(wait_for(LIMIT, || !running(pid)), "renewer still runs");
    assert!(read(&env.path("ev")).contains("\"event\":\"lost\""));
    // The token no longer holds: `check` says so, with the documented code.
    let o = env.run(&["--json", "check", "lost", "--token", &token]);
    assert_code(&o, 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], false, "{v}");
    assert_eq!(v["error"]["kind"], "not_holder", "{v}");
}

/// The followed process ends (an explicit `--follow PID`, then the default: the shell that
/// ran `dlock lock`): the renewer releases, as a holder that failed.
fn ends_with_the_followed_process(env: &Env) {
    let mut sleeper = Command::new("sleep").arg("1000").spawn().unwrap();
    let pid = sleeper.id().to_string();
    keepalive(env, "follow", &["--follow", &pid], "ev");
    let renewer_pid = renewer(env, "follow");
    assert!(busy(env, "follow"));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(wait_for(LIMIT, || !running(renewer_pid)));
    assert!(free(env, "follow"));
    assert!(read(&env.path("ev")).contains("the followed process ended"));

    // The default: the calling shell. It waits on its stdin; closing that ends it.
    let mut shell = env.shell(&format!(
        "{} $STORES lock parent --keepalive --ttl {TTL} && read line",
        env!("CARGO_BIN_EXE_dlock")
    ));
    let mut shell: Child = shell.stdin(Stdio::piped()).spawn().unwrap();
    assert!(wait_for(LIMIT, || env.inspect("parent")["held"] == true));
    let renewer_pid = renewer(env, "parent");
    assert!(busy(env, "parent"));
    drop(shell.stdin.take());
    shell.wait().unwrap();
    assert!(wait_for(LIMIT, || !running(renewer_pid)));
    // Released by the renewer, as a holder that ended without unlocking.
    assert_eq!(env.inspect("parent")["previous"], "failed");
    assert!(free(env, "parent"));
}

/// `check`: 0 while the token holds, 1 for another token or after unlock; `--json` says
/// `held`.
fn check_answers_for_the_token(env: &Env) {
    let o = env.run(&["lock", "c", "--ttl", "1m"]);
    let token = stdout(&o);
    let o = env.run(&["--json", "check", "c", "--token", &token]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], true, "{v}");
    let other = "0123456789abcdef0123456789abcdef";
    assert_code(&env.run(&["check", "c", "--token", other]), 1);
    assert_code(&env.run(&["unlock", "c", "--token", &token]), 0);
    let o = env.run(&["check", "c", "--token", &token]);
    assert_code(&o, 1);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert_code(&env.run(&["check", "c", "--token", "nonsense"]), 64);
}

#[test]
fn keepalive_holds_past_three_ttls_until_unlock_on_the_file_store() {
    holds_past_three_ttls_until_unlock(&Env::file());
}

#[test]
fn keepalive_holds_past_three_ttls_until_unlock_on_redis() {
    let redis = RedisServer::start();
    holds_past_three_ttls_until_unlock(&Env::with_stores(vec![redis.url()]));
}

#[test]
fn keepalive_ends_when_the_lease_is_lost_on_the_file_store() {
    ends_when_the_lease_is_lost(&Env::file());
}

#[test]
fn keepalive_ends_when_the_lease_is_lost_on_redis() {
    let redis = RedisServer::start();
    ends_when_the_lease_is_lost(&Env::with_stores(vec![redis.url()]));
}

#[test]
fn keepalive_ends_with_the_followed_process_on_the_file_store() {
    ends_with_the_followed_process(&Env::file());
}

#[test]
fn keepalive_ends_with_the_followed_process_on_redis() {
    let redis = RedisServer::start();
    ends_with_the_followed_process(&Env::with_stores(vec![redis.url()]));
}

#[test]
fn check_answers_for_the_token_on_the_file_store() {
    check_answers_for_the_token(&Env::file());
}

#[test]
fn check_answers_for_the_token_on_redis() {
    let redis = RedisServer::start();
    check_answers_for_the_token(&Env::with_stores(vec![redis.url()]));
}
