//! The majority quorum over independent Redis servers: one down is fine, two down is exit 69
//! within the per-store timeout, and fences keep rising across stores that disagree.

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

fn three() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

fn urls(s: &[RedisServer]) -> Vec<String> {
    s.iter().map(|s| s.url()).collect()
}

/// `dlock ARGS` and how long it took, start-up included.
fn timed(env: &Env, args: &[&str]) -> (std::process::Output, Duration) {
    let start = Instant::now();
    let o = env.run(args);
    (o, start.elapsed())
}

/// What a stopped store may add to a command, over the same command with every store
/// answering (the baseline, taken in the same test: starting a process and connecting cost
/// what they cost on this machine now).
const STALL_ALLOWANCE: Duration = Duration::from_millis(1500);

#[test]
fn one_server_of_three_down_still_grants() {
    let mut servers = three();
    servers[2].kill();
    let env = Env::with_stores(urls(&servers));
    let o = env.run(&["run", "job", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    check_exclusion(&env, "busy", 4, &[]);
}

#[test]
fn one_server_of_three_frozen_costs_at_most_the_store_timeout() {
    let servers = three();
    let env = Env::with_stores(urls(&servers));
    let run = ["--store-timeout", "200ms", "run", "job", "--", "true"];
    let (o, baseline) = timed(&env, &run);
    assert_code(&o, 0);
    servers[0].pause();
    let (o, took) = timed(&env, &run);
    servers[0].resume();
    assert_code(&o, 0);
    // Acquire and release each wait out the frozen server once.
    assert!(
        took < baseline + STALL_ALLOWANCE,
        "took {took:?}, {baseline:?} with every server answering"
    );
}

#[test]
fn two_servers_of_three_down_is_exit_69() {
    let mut servers = three();
    servers[0].kill();
    servers[1].kill();
    let env = Env::with_stores(urls(&servers));
    let o = env.run(&["run", "job", "--", "true"]);
    assert_code(&o, 69);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("majority"), "{err}");
}

#[test]
fn two_servers_of_three_frozen_is_exit_69_within_the_store_timeout() {
    let servers = three();
    let env = Env::with_stores(urls(&servers));
    let (o, baseline) = timed(&env, &["--store-timeout", "300ms", "lock", "base"]);
    assert_code(&o, 0);
    servers[0].pause();
    servers[1].pause();
    let (o, took) = timed(&env, &["--store-timeout", "300ms", "lock", "job"]);
    servers[0].resume();
    servers[1].resume();
    assert_code(&o, 69);
    // Connect (bounded by the store timeout), one attempt, one clean-up release.
    assert!(
        took < baseline + STALL_ALLOWANCE,
        "took {took:?}, {baseline:?} with every server answering"
    );
    // Nothing half-granted stays behind on the server that answered.
    let env2 = Env::with_stores(vec![servers[2].url()]);
    assert_code(&env2.run(&["lock", "job", "-n"]), 0);
}

#[test]
fn fences_rise_across_a_server_restarted_empty() {
    let mut servers = three();
    let env = Env::with_stores(urls(&servers));
    let mut fences = Vec::new();
    let fence = |env: &Env| -> u64 {
        let o = env.run(&["run", "job", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
        assert_code(&o, 0);
        stdout(&o).parse().unwrap()
    };
    for _ in 0..3 {
        fences.push(fence(&env));
    }
    // A server that comes back empty answers with a low counter; the bakery rule must
    // still hand out a higher fence than before.
    servers[0].restart();
    fences.push(fence(&env));
    servers[1].restart();
    fences.push(fence(&env));
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
}

#[test]
fn a_stale_token_cannot_release_a_newer_holders_lease() {
    let servers = three();
    let env = Env::with_stores(urls(&servers));
    // A ttl of 1 s: each store gets a tenth of it to answer (a loaded machine needs it).
    let old = stdout(&env.run(&["lock", "job", "--ttl", "1s"]));
    assert!(wait_for(Duration::from_secs(10), || !env.held("job")));
    let new = env.run(&["lock", "job", "-n", "--ttl", "10s"]);
    assert_code(&new, 0);
    assert_code(&env.run(&["unlock", "job", "--token", &old]), 1);
    assert_code(&env.run(&["extend", "job", "--token", &old]), 1);
    assert_code(&env.run(&["lock", "job", "-n"]), 75);
    assert_code(&env.run(&["unlock", "job", "--token", &stdout(&new)]), 0);
}

#[test]
fn inspect_shows_each_stores_view() {
    let mut servers = three();
    servers[1].kill();
    let env = Env::with_stores(urls(&servers));
    assert_code(&env.run(&["lock", "job"]), 0);
    let o = env.run(&["--json", "inspect", "job"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["held"], true);
    assert_eq!(v["quorum"]["held"], 2);
    assert_eq!(v["quorum"]["unreachable"], 1);
    assert_eq!(v["stores"][1]["state"], "unreachable");
    let text = stdout(&env.run(&["inspect", "job"]));
    assert!(text.contains("2/3 held, 1 unreachable"), "{text}");
    // No persistence on these servers: inspect warns in a quorum.
    assert!(stderr(&env.run(&["inspect", "job"])).contains("appendonly"));
}

fn five() -> Vec<RedisServer> {
    (0..5).map(|_| RedisServer::start()).collect()
}

fn fence_of(env: &Env) -> u64 {
    let o = env.run(&["run", "job", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    stdout(&o).parse().unwrap()
}

#[test]
fn five_servers_survive_two_down_two_frozen_or_two_restarted_empty() {
    let mut servers = five();
    let env = Env::with_stores(urls(&servers));
    let mut fences = vec![fence_of(&env)];
    servers[0].kill();
    servers[3].kill();
    fences.push(fence_of(&env));
    check_exclusion(&env, "job2", 4, &[]);
    servers[0].restart();
    servers[3].restart();
    fences.push(fence_of(&env));
    servers[1].pause();
    servers[4].pause();
    fences.push(fence_of(&env));
    servers[1].resume();
    servers[4].resume();
    fences.push(fence_of(&env));
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
}

#[test]
fn five_servers_with_three_down_is_exit_69_within_the_store_timeout() {
    let mut servers = five();
    let env = Env::with_stores(urls(&servers));
    let run = ["--store-timeout", "300ms", "run", "job", "--", "true"];
    let (o, baseline) = timed(&env, &run);
    assert_code(&o, 0);
    servers[0].kill();
    servers[2].pause();
    servers[4].kill();
    let (o, took) = timed(&env, &run);
    servers[2].resume();
    assert_code(&o, 69);
    assert!(
        took < baseline + STALL_ALLOWANCE,
        "took {took:?}, {baseline:?} with every server answering"
    );
}
