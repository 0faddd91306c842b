//! A store's own life, ridden out (issue 28): a real redis-server killed and started again on
//! the same port and data directory while a holder renews and a waiter waits. With its data
//! kept, the holder keeps its lease; without, it learns at its first renewal after the restart;
//! a waiter waits through the outage for its whole `-w` and says how long the store has been
//! unreachable if that runs out.

use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

/// `run job --ttl TTL` holding until killed, and the moment it held (it touched `held`). Its
/// events go to `holder.events`.
fn holder(env: &Env, ttl: &str, hold: &str) -> (std::process::Child, Instant) {
    let held = env.path("held");
    let script = format!("touch {}; sleep {hold}", held.display());
    let events = env.path("holder.events").display().to_string();
    let child = env.spawn_run(&["job", "--ttl", ttl, "--events", &events], &script);
    assert!(
        wait_for(Duration::from_secs(10), || held.exists()),
        "the holder did not start its command"
    );
    (child, Instant::now())
}

/// `run job -w WAIT -- true`, started once the holder holds, and seen queued behind it (the
/// one waiter Redis lists).
fn waiter(env: &Env, wait: &str) -> std::process::Child {
    let child = env.spawn(&["run", "job", "-w", wait, "--", "true"]);
    assert!(
        wait_for(Duration::from_secs(10), || env.waiters("job") == 1),
        "the waiter never queued"
    );
    child
}

/// How many renewals the holder has reported (its `renewed` events).
fn renewals(env: &Env) -> usize {
    events(&env.path("holder.events"))
        .iter()
        .filter(|e| e["event"] == "renewed")
        .count()
}

/// A server restarted with its data (appendonly, fsync always) in about 50 ms: the holder
/// renews on a new connection and keeps its lease (exit 0), the waiter is served after it.
#[test]
fn a_restart_with_the_data_kept_costs_the_holder_nothing() {
    let mut redis = RedisServer::start_persistent();
    let env = Env::with_stores(vec![redis.url()]);
    let (h, _) = holder(&env, "3s", "4");
    let w = waiter(&env, "30s");
    redis.restart();
    assert_code(&finish(h, Duration::from_secs(30)), 0);
    assert_code(&finish(w, Duration::from_secs(40)), 0);
}

/// A server restarted empty (no persistence): the holder learns the store forgot its lease at
/// its first renewal after the restart and stops its command then (70), not at its old
/// deadline; the waiter is served.
#[test]
fn a_restart_without_the_data_is_learnt_at_the_next_renewal() {
    let mut redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let ttl = Duration::from_secs(6);
    let (h, _) = holder(&env, "6s", "60");
    let w = waiter(&env, "30s");
    redis.restart();
    let restarted = Instant::now();
    let o = finish(h, Duration::from_secs(30));
    assert_code(&o, 70);
    assert!(
        stderr(&o).contains("the store's data deleted"),
        "the store's answer, not the deadline: {}",
        stderr(&o)
    );
    assert!(restarted.elapsed() < ttl, "learnt only at the old deadline");
    assert_code(&finish(w, Duration::from_secs(40)), 0);
}

/// A store gone for longer than any fixed grace (7 s) but less than the wait: the waiter is
/// served once it is back.
#[test]
fn a_waiter_waits_through_an_outage_for_its_whole_wait() {
    let mut redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let (h, _) = holder(&env, "3s", "60");
    let w = waiter(&env, "30s");
    redis.kill();
    std::thread::sleep(Duration::from_secs(7));
    redis.start_again();
    assert_code(&finish(w, Duration::from_secs(40)), 0);
    assert_code(&finish(h, Duration::from_secs(30)), 70);
}

/// A wait that ends with the store still unreachable: 69, one line saying for how long. A
/// store never reached at all fails at once however long the wait (a mistyped URL).
#[test]
fn a_wait_that_ends_in_an_outage_says_how_long_it_lasted() {
    let mut redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let (h, _) = holder(&env, "3s", "60");
    let w = waiter(&env, "4s");
    redis.kill();
    let o = finish(w, Duration::from_secs(30));
    assert_code(&o, 69);
    let err = stderr(&o);
    assert!(err.contains("unreachable for"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(h);

    let nobody = format!("redis://127.0.0.1:{}", free_port());
    let env = Env::with_stores(vec![nobody]);
    let started = Instant::now();
    let o = env.run(&["run", "job", "-w", "1h", "--", "true"]);
    assert_code(&o, 69);
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// `-v` says "retrying" only of a wait that does retry: with two of three stores never
/// reached, the run gives up at once, and its lines say so, not that it is retrying.
#[test]
fn verbose_lines_promise_no_retry_a_wait_will_not_make() {
    let redis = RedisServer::start();
    let nobody = || format!("redis://127.0.0.1:{}", free_port());
    let env = Env::with_stores(vec![redis.url(), nobody(), nobody()]);
    let o = env.run(&["-v", "run", "job", "-w", "1h", "--", "true"]);
    assert_code(&o, 69);
    let err = stderr(&o);
    assert!(err.contains("not waited for"), "{err}");
    assert!(!err.contains("retrying"), "{err}");
}

/// A quorum of three with their data kept, restarted one at a time (a majority up at every
/// moment, nothing lost): the holder keeps its lease.
#[test]
fn a_quorum_restarted_member_by_member_keeps_the_lease() {
    let mut redis: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_persistent()).collect();
    let env = Env::with_stores(redis.iter().map(|r| r.url()).collect());
    let (h, _) = holder(&env, "3s", "5");
    for r in &mut redis {
        // A renewal between restarts: the lease is carried across each one.
        let before = renewals(&env);
        assert!(
            wait_for(Duration::from_secs(10), || renewals(&env) > before),
            "the holder did not renew"
        );
        r.restart();
    }
    assert_code(&finish(h, Duration::from_secs(30)), 0);
}

/// A Redis Cluster whose first seed is frozen (SIGSTOP) while it masters other slots: a new
/// process asks every seed at once and uses the first that answers, so `run -n` still works,
/// while the frozen master still holds its slots and after its replica took them over.
#[test]
fn a_frozen_cluster_seed_does_not_stop_a_new_process() {
    use crate::common::redis::RedisCluster;
    let cluster = RedisCluster::start(3, 1);
    let key = "dlock:{default:job}:h";
    let owner = cluster.master_of(key);
    let frozen = (0..cluster.nodes.len())
        .find(|&i| i != owner && cluster.is_master(i))
        .unwrap();
    let mut hosts = vec![format!("127.0.0.1:{}", cluster.nodes[frozen].port)];
    hosts.extend(
        (0..cluster.nodes.len())
            .filter(|&i| i != frozen)
            .map(|i| format!("127.0.0.1:{}", cluster.nodes[i].port)),
    );
    let env = Env::with_stores(vec![format!("redis+cluster://{}", hosts.join(","))]);
    let run = || env.run(&["run", "job", "-n", "--", "true"]);
    cluster.nodes[frozen].pause();
    // Before the other nodes count it failed (the node timeout, 1 s here).
    let started = Instant::now();
    assert_code(&run(), 0);
    // A figure for the record (`-- --nocapture`), not a bound: timed tests fail on busy machines.
    eprintln!("run -n with a frozen first seed: {:?}", started.elapsed());
    // After its replica took over (a cluster with a failed master answers CLUSTERDOWN on
    // every slot until then, whatever the client).
    let live = (0..cluster.nodes.len()).find(|&i| i != frozen).unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || {
            cluster.try_master_of_without(key, frozen).is_some() && cluster.nodes[live].cluster_ok()
        }),
        "the frozen master's replica did not take over"
    );
    assert_code(&run(), 0);
    cluster.nodes[frozen].resume();
}

/// A command started while its only server is down for a restart (here some 200 ms, the
/// server killed first) goes on: a refused connection at start-up is dialled again within the
/// store timeout (2 s here), where it used to fail at once with 69.
#[test]
fn a_run_started_during_a_restart_goes_on() {
    let mut redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    redis.kill();
    let mut c = env.cmd();
    c.args(["--store-timeout", "2s", "run", "job", "--", "true"]);
    let run = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    redis.start_again();
    assert_code(&finish(run, Duration::from_secs(20)), 0);
}

/// A holder on a server that goes away while its command runs and comes back (data kept):
/// `dlock ARGS... --events FILE -- CMD` tells `store-unreachable`, then `store-back`, while
/// the command runs on, and ends with the command's 0. `run` and `multilock -- CMD` share
/// this path (see the test in multilock.rs).
pub(crate) fn a_holder_tells_of_an_outage_while_its_command_runs(args: &[&str]) {
    let mut redis = RedisServer::start_persistent();
    let env = Env::with_stores(vec![redis.url()]);
    let (held, go, log) = (env.path("held"), env.path("go"), env.path("holder.events"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        go.display()
    );
    let log_arg = log.display().to_string();
    let mut full = args.to_vec();
    full.extend([
        "--ttl", "10s", "--events", &log_arg, "--", "sh", "-c", &script,
    ]);
    let holder = env.spawn(&full);
    assert!(
        wait_for(Duration::from_secs(10), || held.exists()),
        "the holder did not start its command"
    );
    redis.kill();
    assert!(
        wait_for(Duration::from_secs(20), || event(&log, "store-unreachable")
            .is_some()),
        "no store-unreachable event: {:?}",
        events(&log)
    );
    redis.start_again();
    assert!(
        wait_for(Duration::from_secs(20), || event(&log, "store-back")
            .is_some()),
        "no store-back event: {:?}",
        events(&log)
    );
    std::fs::write(&go, "").unwrap();
    assert_code(&finish(holder, Duration::from_secs(30)), 0);
}

#[test]
fn a_run_tells_of_an_outage_while_its_command_runs() {
    a_holder_tells_of_an_outage_while_its_command_runs(&["run", "job"]);
}
