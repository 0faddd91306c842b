//! `dlock run --any`: take whichever of several names is free (a pool of devices, deploy
//! slots), wait on all of them when none is, and tell the command which one it got.

use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

/// 8 runs at once on a pool of 4 names, each holding its name 300 ms: every run is served,
/// no two ever hold one name, never more than 4 run at once, and the pool is used (not all
/// of them on the same name).
fn eight_runs_share_four_names(env: &Env) {
    let log = env.path("log");
    let script = format!(
        "echo \"$DLOCK_NAME start $(date +%s%N)\" >> {log}; sleep 0.3; \
         echo \"$DLOCK_NAME end $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..8)
        .map(|_| {
            env.spawn(&[
                "run", "--any", "d1", "d2", "d3", "d4", "-w", "60s", "--", "sh", "-c", &script,
            ])
        })
        .collect();
    for run in runs {
        let o = finish(run, Duration::from_secs(90));
        assert_code(&o, 0);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, bool, String)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[2].parse().unwrap(), f[1] == "start", f[0].to_string())
        })
        .collect();
    // At one instant an end sorts before a start: touching is not overlapping.
    events.sort_by_key(|(t, start, _)| (*t, *start));
    let (mut running, mut most) = (Vec::<String>::new(), 0);
    for (_, start, name) in &events {
        if *start {
            assert!(
                !running.contains(name),
                "two runs held {name} at once:\n{text}"
            );
            running.push(name.clone());
            most = most.max(running.len());
        } else {
            running.retain(|n| n != name);
        }
    }
    let starts = events.iter().filter(|e| e.1).count();
    assert_eq!(starts, 8, "every run is served:\n{text}");
    assert!(most <= 4, "{most} ran at once on 4 names");
    let used: std::collections::HashSet<_> = events.iter().map(|e| &e.2).collect();
    assert!(used.len() >= 2, "every run took the same name:\n{text}");
    assert!(
        used.iter()
            .all(|n| ["d1", "d2", "d3", "d4"].contains(&n.as_str())),
        "DLOCK_NAME is the name granted:\n{text}"
    );
}

#[test]
fn eight_runs_share_four_names_on_the_file_store() {
    eight_runs_share_four_names(&Env::file());
}

#[test]
fn eight_runs_share_four_names_on_redis() {
    let redis = RedisServer::start();
    eight_runs_share_four_names(&Env::with_stores(vec![redis.url()]));
}

/// With every name held, -n gives 75 at once and queues nothing. A waiting run queues on
/// every name; when one frees it takes that one, and withdraws from the others.
#[test]
fn a_run_waits_on_every_name_and_leaves_no_waiter_behind() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let tokens: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let o = env.run(&["lock", name, "--ttl", "60s"]);
            assert_code(&o, 0);
            stdout(&o)
        })
        .collect();
    let busy = env.run(&["run", "--any", "a", "b", "c", "-n", "--", "true"]);
    assert_code(&busy, 75);
    assert!(stderr(&busy).contains("each of"), "{}", stderr(&busy));
    assert_eq!(["a", "b", "c"].map(|n| env.waiters(n)), [0, 0, 0]);
    let run = env.spawn(&[
        "run",
        "--any",
        "a",
        "b",
        "c",
        "-w",
        "30s",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_NAME",
    ]);
    assert!(
        wait_for(Duration::from_secs(10), || ["a", "b", "c"]
            .iter()
            .all(|n| env.waiters(n) == 1)),
        "the run did not queue on every name"
    );
    assert_code(&env.run(&["unlock", "b", "--token", &tokens[1]]), 0);
    let o = finish(run, Duration::from_secs(20));
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "b");
    assert_eq!(["a", "b", "c"].map(|n| env.waiters(n)), [0, 0, 0]);
}

#[test]
fn any_needs_a_command_after_its_names() {
    let env = Env::file();
    // Without `--`, --any takes every word as a name.
    let o = env.run(&["run", "--any", "a", "b", "true"]);
    assert_code(&o, 64);
    assert!(stderr(&o).contains("no command to run"), "{}", stderr(&o));
}
