//! The ZooKeeper store through the real binary, against real ZooKeeper servers: exit codes,
//! exclusion and fences (standalone and a 3-node ensemble), no herd, nothing left behind,
//! detached leases that expire on time, read/write fairness, previous, auth, and failures.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::zk::ZkServer;
use common::*;

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

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
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

#[test]
fn lock_unlock_extend_exit_codes() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let first = env.run(&["lock", "job", "--ttl", "10s"]);
    assert_code(&first, 0);
    let token = stdout(&first);
    assert_eq!(token.len(), 32, "{token}");
    assert_code(&env.run(&["lock", "job", "-n"]), 75);
    assert_code(&env.run(&["lock", "job", "-n", "-E", "3"]), 3);
    assert_code(
        &env.run(&["extend", "job", "--token", &token, "--ttl", "20s"]),
        0,
    );
    let other = "0123456789abcdef0123456789abcdef";
    assert_code(&env.run(&["extend", "job", "--token", other]), 1);
    assert_code(&env.run(&["unlock", "job", "--token", other]), 1);
    let held = json(&env.run(&["--json", "inspect", "job"]));
    let left = held["holders"][0]["ttl_left_ms"].as_u64().unwrap();
    assert!(
        left > 10_000,
        "extend did not push the expiry: {left} ms left"
    );
    assert_code(&env.run(&["unlock", "job", "--token", &token]), 0);
    assert_code(&env.run(&["unlock", "job", "--token", &token]), 1);
    let again = env.run(&["--json", "lock", "job", "-n"]);
    assert_code(&again, 0);
    assert_eq!(json(&again)["previous"], "released");
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    assert!(zk.children(&queue("job")).is_empty());
}

/// 8 concurrent `run`s appending to one file: never two inside, fences rise in entry order.
fn exclusion(zk: &ZkServer) {
    let env = Env::with_stores(vec![zk.url()]);
    let log = env.path("log");
    let script = format!(
        "echo \"enter $DLOCK_FENCE\" >> {log}; sleep 0.02; echo \"exit $DLOCK_FENCE\" >> {log}",
        log = log.display()
    );
    let children: Vec<Child> = (0..8)
        .map(|i| {
            spawn(
                &env,
                &format!("r{i}"),
                &["run", "ex", "--ttl", "10s", "--", "sh", "-c", &script],
            )
        })
        .collect();
    for (i, mut c) in children.into_iter().enumerate() {
        let status = wait_child(&mut c, Duration::from_secs(60)).expect("run finished");
        assert!(
            status.success(),
            "run {i}: {}",
            read(&env.path(&format!("r{i}.err")))
        );
    }
    let lines = lines(&log);
    assert_eq!(lines.len(), 16, "{lines:?}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let fence: u64 = pair[0]
            .strip_prefix("enter ")
            .expect("enter")
            .parse()
            .unwrap();
        assert_eq!(pair[1], format!("exit {fence}"), "interleaved: {lines:?}");
        assert!(fence > last, "fences not rising: {lines:?}");
        last = fence;
    }
    assert!(zk.children(&queue("ex")).is_empty(), "entries left behind");
}

#[test]
fn exclusion_and_fences_standalone() {
    exclusion(&ZkServer::start());
}

#[test]
fn exclusion_and_fences_three_node_ensemble() {
    exclusion(&ZkServer::ensemble(3));
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
fn readers_share_and_a_writer_waits_fairly() {
    let zk = ZkServer::start();
    let env = Env::with_stores(vec![zk.url()]);
    let log = env.path("log");
    let gate = |t: &str| env.path(&format!("gate-{t}"));
    let reader = |t: &str| {
        spawn(
            &env,
            t,
            &[
                "run",
                "rw",
                "--shared",
                "--",
                "sh",
                "-c",
                &gated(&log, t, &gate(t)),
            ],
        )
    };
    let mut r1 = reader("r1");
    let mut r2 = reader("r2");
    assert!(
        wait_for(Duration::from_secs(10), || read(&log).contains("start r1")
            && read(&log).contains("start r2")),
        "readers did not share: {}",
        read(&log)
    );
    let mut w = spawn(
        &env,
        "w",
        &["run", "rw", "--", "sh", "-c", &gated(&log, "w", &gate("w"))],
    );
    assert!(wait_for(Duration::from_secs(10), || zk
        .children(&queue("rw"))
        .len()
        == 3));
    // A reader that comes after the queued writer waits behind it.
    let mut r3 = reader("r3");
    std::fs::write(gate("r3"), "").unwrap();
    assert!(wait_for(Duration::from_secs(10), || zk
        .children(&queue("rw"))
        .len()
        == 4));
    let state = json(&env.run(&["--json", "inspect", "rw"]));
    assert_eq!(state["holders"].as_array().unwrap().len(), 2, "{state}");
    let modes: Vec<&str> = state["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["exclusive", "shared"], "{state}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !read(&log).contains("start w") && !read(&log).contains("start r3"),
        "{}",
        read(&log)
    );
    std::fs::write(gate("r1"), "").unwrap();
    std::fs::write(gate("r2"), "").unwrap();
    assert!(wait_for(Duration::from_secs(10), || read(&log).contains("start w")));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !read(&log).contains("start r3"),
        "a reader joined the writer: {}",
        read(&log)
    );
    std::fs::write(gate("w"), "").unwrap();
    for c in [&mut r1, &mut r2, &mut w, &mut r3] {
        assert!(wait_child(c, Duration::from_secs(10)).unwrap().success());
    }
    let got = lines(&log);
    let at = |l: &str| {
        got.iter()
            .position(|x| x == l)
            .unwrap_or_else(|| panic!("{l} missing: {got:?}"))
    };
    assert!(at("start w") > at("end r1").max(at("end r2")), "{got:?}");
    assert!(at("start r3") > at("end w"), "{got:?}");
}

#[test]
fn killed_holder_means_expired_clean_release_means_released() {
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
    signal(holder.id(), libc::SIGKILL);
    let _ = holder.wait();
    let (previous, took) = next_holder_previous(&env);
    assert_eq!(previous, "expired");
    // Freed by the session's timeout (the ttl), not much later.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(next_holder_previous(&env).0, "released");
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
fn multilock_is_all_or_nothing() {
    let zk = ZkServer::ensemble(3);
    let env = Env::with_stores(vec![zk.url()]);
    let o = env.run(&["multilock", "a", "b", "--ttl", "10s"]);
    assert_code(&o, 0);
    let token = stdout(&o);
    assert_code(&env.run(&["lock", "a", "-n"]), 75);
    assert_code(&env.run(&["lock", "b", "-n"]), 75);
    // c is free but b is not: nothing taken, nothing left on c.
    assert_code(&env.run(&["multilock", "b", "c", "-n"]), 75);
    assert!(zk.children(&queue("c")).is_empty());
    assert_code(&env.run(&["unlock", "a", "--token", &token]), 0);
    assert_code(&env.run(&["multilock", "a", "c", "-n", "--", "true"]), 0);
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
    assert!(!alive(child), "the command outlived the lease");
    assert!(
        read(&env.path("a.err")).contains("lost"),
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
    let o = env.run(&["lock", "job", "--ttl", "10s"]);
    assert_ne!(code(&o), 0);
    let msg = stderr(&o);
    assert!(
        msg.contains("extendedTypesEnabled=true") && msg.lines().count() == 1,
        "{msg}"
    );
    assert!(zk.children(&queue("job")).is_empty());
}
