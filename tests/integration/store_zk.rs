//! What only the ZooKeeper store promises, through the real binary against real servers: no
//! herd, sessions closed on exit, no node left behind, detached leases that expire on time
//! though their nodes linger, session expiry, auth, and failures. The store contract is in
//! conformance.rs; exclusion through the command line in exclusion.rs.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::zk::ZkServer;
use crate::common::*;

/// Where the queue of `name` lives in the default namespace.
fn queue(name: &str) -> String {
    format!("/dlock/default/{name}")
}

/// Start dlock in the background with its output in files under the env's dir.
fn spawn(env: &Env, tag: &str, args: &[&str]) -> Child {
    let mut c = env.cmd();
    c.args(args)
        .stdout(std::fs::File::create(env.path(&format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(env.path(&format!("{tag}.err"))).unwrap());
    c.spawn().expect("spawn dlock")
}

fn lines(path: &Path) -> Vec<String> {
    read(path).lines().map(str::to_string).collect()
}

/// A shell command that appends `start TAG` to `log`, waits until `gate` exists, appends
/// `end TAG`.
fn gated(log: &Path, tag: &str, gate: &Path) -> String {
    format!(
        "echo 'start {tag}' >> {log}; while [ ! -e {gate} ]; do sleep 0.02; done; echo 'end {tag}' >> {log}",
        log = log.display(),
        gate = gate.display()
    )
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// Paths watched under `prefix` and how many sessions watch each, from `wchp`.
fn watched(zk: &ZkServer, prefix: &str) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for line in zk.four(0, "wchp").lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(last) = out.last_mut() {
                last.1 += 1;
            }
        } else {
            out.push((line.trim().to_string(), 0));
        }
    }
    out.retain(|(p, _)| p.starts_with(prefix));
    out.sort();
    out
}

/// One server metric from `mntr`.
fn metric(zk: &ZkServer, key: &str) -> u64 {
    zk.four(0, "mntr")
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('\t')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in mntr"))
}

#[test]
fn twenty_waiters_one_release_wakes_exactly_one() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let (order, gate) = (env.path("order"), env.path("gate"));
    let mut holder = spawn(
        &env,
        "holder",
        &[
            "run",
            "herd",
            "--",
            "sh",
            "-c",
            &gated(&order, "holder", &gate),
        ],
    );
    assert!(wait_for(Duration::from_secs(10), || read(&order)
        .contains("start holder")));
    let mut waiters = Vec::new();
    for i in 0..20 {
        let cmd = format!("echo {i} >> {}", order.display());
        waiters.push(spawn(
            &env,
            &format!("w{i}"),
            &["run", "herd", "--", "sh", "-c", &cmd],
        ));
        // One at a time, each queued and watching before the next comes: a known order.
        assert!(
            wait_for(Duration::from_secs(10), || zk
                .children(&queue("herd"))
                .len()
                == i + 2
                && metric(&zk, "zk_watch_count") == i as u64 + 1),
            "waiter {i} did not queue"
        );
    }
    // Each queued waiter watches only its predecessor: 20 nodes watched, each by one session.
    let mut expected: Vec<String> = {
        let mut q = zk.children(&queue("herd"));
        q.sort_by_key(|n| n.rsplit('-').next().unwrap().to_string());
        q.pop(); // the tail is watched by no one
        q.iter().map(|n| format!("{}/{n}", queue("herd"))).collect()
    };
    expected.sort();
    let paths: Vec<String> = watched(&zk, &queue("herd"))
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(paths, expected);
    for (path, sessions) in watched(&zk, &queue("herd")) {
        assert_eq!(
            sessions, 1,
            "{path} is watched by {sessions} sessions: a herd"
        );
    }
    // Each of the 21 releases (holder, then every waiter but the last) fires one watch event.
    let fired = metric(&zk, "zk_sum_node_deleted_watch_count");
    std::fs::write(&gate, "").unwrap();
    assert!(
        wait_child(&mut holder, Duration::from_secs(10))
            .unwrap()
            .success()
    );
    for (i, w) in waiters.iter_mut().enumerate() {
        let st = wait_child(w, Duration::from_secs(30)).expect("waiter finished");
        assert!(
            st.success(),
            "waiter {i}: {}",
            read(&env.path(&format!("w{i}.err")))
        );
    }
    assert_eq!(metric(&zk, "zk_sum_node_deleted_watch_count") - fired, 20);
    assert_eq!(
        metric(&zk, "zk_max_node_deleted_watch_count"),
        1,
        "a release woke several waiters"
    );
    let mut want = vec!["start holder".to_string(), "end holder".to_string()];
    want.extend((0..20).map(|i| i.to_string()));
    assert_eq!(lines(&order), want, "not FIFO");
    assert!(zk.children(&queue("herd")).is_empty());
}

#[test]
fn sessions_close_when_dlock_exits() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let log = env.path("log");
    let cmd = format!("echo start >> {}; sleep 1", log.display());
    let mut holder = spawn(
        &env,
        "holder",
        &["run", "s", "--ttl", "30s", "--", "sh", "-c", &cmd],
    );
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("start")));
    assert_eq!(metric(&zk, "zk_ephemerals_count"), 1);
    assert_code(&env.run(&["lock", "s", "-n", "--ttl", "30s"]), 75);
    assert_code(&env.run(&["inspect", "s"]), 0);
    assert!(
        wait_child(&mut holder, Duration::from_secs(10))
            .unwrap()
            .success()
    );
    // Closed on exit, not left to time out (that would take the 30 s session timeout).
    assert_eq!(metric(&zk, "zk_global_sessions"), 0);
    assert_eq!(metric(&zk, "zk_ephemerals_count"), 0);
}

#[test]
fn interrupted_waiter_leaves_no_node() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let (log, gate) = (env.path("log"), env.path("gate"));
    let mut holder = spawn(
        &env,
        "holder",
        &["run", "q", "--", "sh", "-c", &gated(&log, "h", &gate)],
    );
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("start h")));
    let mut waiter = spawn(&env, "waiter", &["run", "q", "-w", "30s", "--", "true"]);
    assert!(wait_for(Duration::from_secs(10), || zk
        .children(&queue("q"))
        .len()
        == 2));
    signal(waiter.id(), libc::SIGINT);
    let st = wait_child(&mut waiter, Duration::from_secs(10)).expect("waiter stopped");
    assert_eq!(st.code(), Some(130));
    // Gone as soon as the waiter is, not a session timeout later.
    assert_eq!(zk.children(&queue("q")).len(), 1);
    let state = json(&env.run(&["--json", "inspect", "q"]));
    assert_eq!(state["waiters"].as_array().unwrap().len(), 0, "{state}");
    std::fs::write(&gate, "").unwrap();
    assert!(
        wait_child(&mut holder, Duration::from_secs(10))
            .unwrap()
            .success()
    );
    assert!(zk.children(&queue("q")).is_empty());
}

#[test]
fn locked_lease_expires_on_time_though_its_node_lingers() {
    let zk = ZkServer::start_lazy_ttl();
    let env = Env::with_stores(vec![zk.url()]);
    let taken = env.run(&["lock", "lease", "--ttl", "2s"]);
    assert_code(&taken, 0);
    let t0 = Instant::now();
    let token = stdout(&taken);
    assert_code(&env.run(&["lock", "lease", "-n"]), 75);
    while t0.elapsed() < Duration::from_millis(2300) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past its ttl the TTL node is still there (the server deletes them lazily) ...
    let nodes = zk.children(&queue("lease"));
    assert!(nodes.iter().any(|n| n.contains(&token)), "{nodes:?}");
    // ... but the lease is over: taken at once, and the next holder hears it expired.
    let next = env.run(&["--json", "lock", "lease", "-n", "--ttl", "10s"]);
    assert_code(&next, 0);
    assert_eq!(json(&next)["previous"], "expired");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    let nodes = zk.children(&queue("lease"));
    assert!(
        !nodes.iter().any(|n| n.contains(&token)),
        "expired node kept: {nodes:?}"
    );
    assert_code(&env.run(&["extend", "lease", "--token", &token]), 1);
}

#[test]
fn killed_holder_means_failed_clean_release_means_released() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let log = env.path("log");
    let cmd = format!("echo start >> {}; sleep 30", log.display());
    let mut holder = spawn(
        &env,
        "holder",
        &["run", "job", "--ttl", "2s", "--", "sh", "-c", &cmd],
    );
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("start")));
    let killed = now_ms();
    signal(holder.id(), libc::SIGKILL);
    let _ = holder.wait();
    let next = next_holder(&env, "job");
    // The watchdog stopped the job and released it for the dead dlock: the job failed.
    assert_eq!(next.previous, "failed");
    // Freed by that release, or at worst by the session's timeout (the ttl).
    next.assert_freed_within((killed, "the kill"), Duration::from_secs(5));
    assert_eq!(next_holder(&env, "job").previous, "released");
}

#[test]
fn digest_auth_protects_the_nodes_and_never_shows_the_password() {
    let zk = ZkServer::start();
    let host = zk.url().trim_start_matches("zk://").to_string();
    let alice = Env::with_stores(vec![format!("zk://alice:right-pw@{host}/app")]);
    assert_code(&alice.run(&["lock", "secret", "--ttl", "10s"]), 0);
    let wrong = Env::with_stores(vec![format!("zk://alice:wrong-pw@{host}/app")]);
    let o = wrong.run(&["lock", "secret", "-n"]);
    assert_code(&o, 77);
    assert!(
        !stderr(&o).contains("wrong-pw") && stderr(&o).contains("alice:***"),
        "{}",
        stderr(&o)
    );
    let nobody = Env::with_stores(vec![format!("zk://{host}/app")]);
    assert_code(&nobody.run(&["lock", "secret", "-n"]), 77);
    assert_code(&nobody.run(&["unlock", "secret", "--force"]), 77);
    // Anyone may look.
    let seen = nobody.run(&["--json", "inspect", "secret"]);
    assert_code(&seen, 0);
    assert_eq!(json(&seen)["held"], true);
    // The password may come from the environment instead of the URL.
    let mut c = Env::with_stores(vec![format!("zk://alice@{host}/app?password_env=ZKPW")]).cmd();
    c.env("ZKPW", "right-pw")
        .args(["unlock", "secret", "--force"]);
    let o = output_within(c, Duration::from_secs(30));
    assert_code(&o, 0);
    assert!(zk.children("/app/dlock/default/secret").is_empty());
}

#[test]
fn leader_killed_during_a_run_gives_no_second_holder() {
    let mut zk = ZkServer::ensemble(3);
    let env = Env::with_stores(vec![zk.url()]);
    let log = env.path("log");
    let cmd = format!(
        "echo start >> {l}; sleep 6; echo done >> {l}",
        l = log.display()
    );
    let mut a = spawn(
        &env,
        "a",
        &["run", "job", "--ttl", "10s", "--", "sh", "-c", &cmd],
    );
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("start")));
    let leader = zk.leader().expect("a leader");
    zk.kill(leader);
    assert!(
        wait_for(Duration::from_secs(20), || zk.leader().is_some()),
        "no new leader"
    );
    let b = env.run(&[
        "run",
        "job",
        "-w",
        "2s",
        "--",
        "sh",
        "-c",
        &format!("echo second >> {}", log.display()),
    ]);
    assert_code(&b, 75);
    let st = wait_child(&mut a, Duration::from_secs(30)).expect("holder finished");
    assert!(st.success(), "{}", read(&env.path("a.err")));
    assert_eq!(lines(&log), ["start", "done"]);
}

#[test]
fn isolated_holder_stops_its_command_with_70() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let log = env.path("log");
    let cmd = format!("echo $$ >> {}; exec sleep 30", log.display());
    let mut a = spawn(
        &env,
        "a",
        &["run", "job", "--ttl", "2s", "--", "sh", "-c", &cmd],
    );
    assert!(wait_for(Duration::from_secs(10), || !read(&log).is_empty()));
    let child: u32 = read(&log).trim().parse().unwrap();
    zk.pause(0);
    let st = wait_child(&mut a, Duration::from_secs(10));
    zk.resume(0);
    assert_eq!(
        st.expect("dlock stopped").code(),
        Some(70),
        "{}",
        read(&env.path("a.err"))
    );
    assert!(!running(child), "the command outlived the lease");
    assert!(
        read(&env.path("a.err")).contains("could not be renewed"),
        "{}",
        read(&env.path("a.err"))
    );
}

#[test]
fn server_limits_are_reported_with_the_fix() {
    let zk = ZkServer::start_with(&["maxSessionTimeout=4000", "extendedTypesEnabled=false"]);
    let env = Env::with_stores(vec![zk.url()]);
    let o = env.run(&["run", "job", "--ttl", "10s", "--", "true"]);
    // A ttl the server's session limits cannot honour is a usage error, with the fix.
    assert_code(&o, 64);
    assert!(
        stderr(&o).contains("maxSessionTimeout") && stderr(&o).contains("--ttl 4s"),
        "{}",
        stderr(&o)
    );
    assert_code(&env.run(&["run", "job", "--ttl", "4s", "--", "true"]), 0);
    // A setting no retry can change: EX_CONFIG (78), not "unavailable" (69), for `lock` and
    // for `run --hold-min` (whose lease also outlives the process), even when told to wait.
    for args in [
        &["lock", "job", "--ttl", "10s"][..],
        &["lock", "job", "--ttl", "4s", "-w", "30s"][..],
        &[
            "run",
            "job",
            "--ttl",
            "4s",
            "--hold-min",
            "1m",
            "--",
            "true",
        ][..],
    ] {
        let o = env.run(args);
        assert_code(&o, 78);
        let msg = stderr(&o);
        assert!(
            msg.contains("extendedTypesEnabled=true") && msg.lines().count() == 1,
            "{args:?}: {msg}"
        );
    }
    assert!(zk.children(&queue("job")).is_empty());
}
