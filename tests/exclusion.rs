//! Mutual exclusion and fencing under contention, on each core store.

mod common;

use common::redis::RedisServer;
use common::*;

#[test]
fn eight_runs_on_the_file_store_never_overlap_and_fences_rise() {
    let env = Env::file();
    let fences = check_exclusion(&env, "backup", 8, &[]);
    assert_eq!(fences.len(), 8);
}

#[test]
fn eight_runs_on_redis_never_overlap_and_fences_rise() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    check_exclusion(&env, "deploy", 8, &[]);
}

#[test]
fn eight_runs_on_a_quorum_of_three_redis_never_overlap() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let env = Env::with_stores(servers.iter().map(|s| s.url()).collect());
    check_exclusion(&env, "deploy", 8, &[]);
}

#[test]
fn a_namespace_keeps_equal_names_apart() {
    let env = Env::file();
    let a = env.run(&["--namespace", "team-a", "lock", "job"]);
    assert_code(&a, 0);
    assert_code(&env.run(&["--namespace", "team-b", "lock", "job", "-n"]), 0);
    assert_code(
        &env.run(&["--namespace", "team-a", "lock", "job", "-n"]),
        75,
    );
}
