//! `--shard`: lock names spread over several stores (issue 15, part 2), on real Redis
//! servers. Placement, multilock across shards (all or none), inspect and list per shard,
//! a shard down, and the refusal of a client whose shard list differs.

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// `--shard URL` for each server, as arguments.
fn shard_args(servers: &[&RedisServer]) -> Vec<String> {
    servers
        .iter()
        .flat_map(|s| ["--shard".to_string(), s.url()])
        .collect()
}

/// dlock with these shards.
fn run(env: &Env, shards: &[String], args: &[&str]) -> Output {
    let mut c = env.cmd();
    c.args(shards).args(args);
    output_within(c, Duration::from_secs(60))
}

/// The shard (from 1) `inspect --json` says `name` lives on.
fn shard_of(env: &Env, shards: &[String], name: &str) -> u64 {
    let o = run(env, shards, &["--json", "inspect", name]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["shard"]["shard"]
        .as_u64()
        .expect("inspect names the shard")
}

/// Two names that live on different shards.
fn on_two_shards(env: &Env, shards: &[String]) -> (String, String) {
    let first = "name-0".to_string();
    let s0 = shard_of(env, shards, &first);
    let other = (1..100)
        .map(|i| format!("name-{i}"))
        .find(|n| shard_of(env, shards, n) != s0)
        .expect("100 names all on one shard");
    (first, other)
}

#[test]
fn names_spread_over_shards_and_each_one_excludes() {
    let s = servers(3);
    let shards = shard_args(&s.iter().collect::<Vec<_>>());
    let env = Env::file();
    let names: Vec<String> = (0..12).map(|i| format!("job/{i}")).collect();
    for n in &names {
        assert_code(&run(&env, &shards, &["lock", n, "-n"]), 0);
    }
    let o = run(&env, &shards, &["--json", "list"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let locks = v["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 12, "{v}");
    let mut used: Vec<u64> = locks.iter().map(|l| l["shard"].as_u64().unwrap()).collect();
    used.sort();
    used.dedup();
    assert!(used.len() >= 2, "12 names on one shard: {v}");
    // Each row's shard is the one inspect names, and the name's keys are on that server only.
    for l in locks {
        let name = l["name"].as_str().unwrap();
        let shard = shard_of(&env, &shards, name);
        assert_eq!(l["shard"].as_u64(), Some(shard));
    }
    let o = run(&env, &shards, &["inspect", &names[0]]);
    assert!(stdout(&o).contains("  shard     "), "{}", stdout(&o));
    let held: usize = s
        .iter()
        .map(|r| r.keys().iter().filter(|k| k.ends_with(":h")).count())
        .sum();
    assert_eq!(held, 12, "each name is held on exactly one server");
    // Exclusion on one name, with the shards given after the command.
    let extra: Vec<&str> = shards.iter().map(String::as_str).collect();
    check_exclusion(&env, "busy", 4, &extra);
}

#[test]
fn multilock_across_shards_is_all_or_none() {
    let s = servers(2);
    let shards = shard_args(&s.iter().collect::<Vec<_>>());
    let env = Env::file();
    let (a, b) = on_two_shards(&env, &shards);
    // b is held: a multilock of a and b gets neither, and leaves a free.
    let o = run(&env, &shards, &["lock", &b, "-n"]);
    assert_code(&o, 0);
    let token = stdout(&o).trim().to_string();
    assert_code(&run(&env, &shards, &["multilock", &a, &b, "-n"]), 75);
    assert_code(
        &run(&env, &shards, &["multilock", &a, &b, "-w", "300ms"]),
        75,
    );
    let v = {
        let o = run(&env, &shards, &["--json", "inspect", &a]);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    assert_eq!(v["held"], false, "the group taken first was kept: {v}");
    // Once b is free, both are taken; the child gets one fence per name.
    assert_code(&run(&env, &shards, &["unlock", &b, "--token", &token]), 0);
    let o = run(
        &env,
        &shards,
        &["multilock", &a, &b, "--", "sh", "-c", "echo $DLOCK_FENCE"],
    );
    assert_code(&o, 0);
    assert_eq!(stdout(&o).split_whitespace().count(), 2, "{}", stdout(&o));
}

/// A mixed multilock over two shards keeps each name's mode on its own shard: two of them
/// share the read name while each writes its own, and the child gets each name's fence.
#[test]
fn mixed_multilock_across_shards_keeps_each_names_mode() {
    let s = servers(2);
    let shards = shard_args(&s.iter().collect::<Vec<_>>());
    let env = Env::file();
    let (read, write) = on_two_shards(&env, &shards);
    let first = run(&env, &shards, &["multilock", &write, "--shared", &read]);
    assert_code(&first, 0);
    // Another reader of `read` (writing a name of its own) gets in beside the first.
    let other = format!("{write}-other");
    let o = run(
        &env,
        &shards,
        &[
            "multilock",
            &other,
            "--shared",
            &read,
            "-n",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_FENCES",
        ],
    );
    assert_code(&o, 0);
    let fences = stdout(&o);
    assert!(
        fences.contains(&format!("{read}=")) && fences.contains(&format!("{other}=")),
        "{fences}"
    );
    let v = {
        let o = run(&env, &shards, &["--json", "inspect", &read]);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let holders = v["holders"].as_array().unwrap();
    assert_eq!(
        holders.len(),
        1,
        "the second reader is gone, the first stays: {v}"
    );
    assert_eq!(holders[0]["mode"], "shared", "{v}");
    // A writer of the read name is refused while the first reader holds it.
    assert_code(&run(&env, &shards, &["multilock", &read, "-n"]), 75);
    let token = stdout(&first).trim().to_string();
    for n in [&read, &write] {
        assert_code(&run(&env, &shards, &["unlock", n, "--token", &token]), 0);
    }
}

#[test]
fn multilock_waits_for_a_later_shard_and_then_holds_all() {
    let s = servers(2);
    let shards = shard_args(&s.iter().collect::<Vec<_>>());
    let env = Env::file();
    let (a, b) = on_two_shards(&env, &shards);
    // b is held for a while by a run; the multilock waits for it, holding (and renewing)
    // whatever it took first, then gets both.
    let mut holder = env.cmd();
    holder
        .args(["run", &b])
        .args(&shards)
        .args(["--", "sleep", "1.5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut holder = holder.spawn().unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        let o = run(&env, &shards, &["--json", "inspect", &b]);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).is_ok_and(|v| v["held"] == true)
    }));
    let o = run(
        &env,
        &shards,
        &[
            "multilock",
            &a,
            &b,
            "--ttl",
            "600ms",
            "-w",
            "20s",
            "--",
            "true",
        ],
    );
    assert_code(&o, 0);
    wait_child(&mut holder, Duration::from_secs(10));
}

#[test]
fn clients_with_different_lists_never_both_hold_a_name() {
    let s = servers(2);
    let one = shard_args(&[&s[0]]);
    let two = shard_args(&[&s[0], &s[1]]);
    let env = Env::file();
    let log = env.path("sections.log");
    let script = critical_section(&log, 30);
    // Both lists start at once on fresh servers: one list's record wins, the other's
    // clients are refused; the winners' sections never overlap.
    let mut children: Vec<(bool, std::process::Child)> = (0..8)
        .map(|i| {
            let list = if i % 2 == 0 { &one } else { &two };
            let mut c = env.cmd();
            c.args(["run", "job", "-w", "30s"])
                .args(list)
                .args(["--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            (i % 2 == 0, c.spawn().unwrap())
        })
        .collect();
    let mut ok = Vec::new();
    for (first, c) in &mut children {
        let status = wait_child(c, Duration::from_secs(60)).expect("a dlock run hung");
        let code = status.code().unwrap_or(-1);
        assert!(code == 0 || code == 64, "exit {code}");
        if code == 0 {
            ok.push(*first);
        }
    }
    assert_eq!(
        ok.len(),
        4,
        "one list's clients all ran, the other's none: {ok:?}"
    );
    assert!(ok.iter().all(|f| *f == ok[0]), "both lists ran: {ok:?}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert_sections(&log, 4);
    // Any name, either order: the losing list is refused with one line that says how to
    // change the list.
    let loser = if ok[0] { &two } else { &one };
    for name in ["job", "other", "name-7"] {
        let o = run(&env, loser, &["lock", name, "-n"]);
        assert_code(&o, 64);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("another shard list") && err.contains("adopt"),
            "{err}"
        );
    }
}

#[test]
fn adopt_changes_the_list_only_while_nothing_is_held() {
    let s = servers(2);
    let one = shard_args(&[&s[0]]);
    let two = shard_args(&[&s[0], &s[1]]);
    let env = Env::file();
    let o = run(&env, &one, &["lock", "held", "-n"]);
    assert_code(&o, 0);
    let token = stdout(&o).trim().to_string();
    assert_code(&run(&env, &two, &["lock", "x", "-n"]), 64);
    let o = run(&env, &two, &["shards", "adopt"]);
    assert_code(&o, 75);
    assert!(stderr(&o).contains("held"), "{}", stderr(&o));
    assert_code(&run(&env, &one, &["unlock", "held", "--token", &token]), 0);
    assert_code(&run(&env, &two, &["shards", "adopt"]), 0);
    assert_code(&run(&env, &two, &["lock", "x", "-n"]), 0);
    assert_code(&run(&env, &one, &["lock", "y", "-n"]), 64);
}

#[test]
fn a_shard_down_stops_only_its_own_names() {
    let mut s = servers(3);
    let shards = shard_args(&s.iter().collect::<Vec<_>>());
    let env = Env::file();
    // The list is verified whole once, while every shard is up.
    assert_code(&run(&env, &shards, &["run", "warm-up", "--", "true"]), 0);
    let on: Vec<(String, u64)> = (0..30)
        .map(|i| format!("n{i}"))
        .map(|n| {
            let s = shard_of(&env, &shards, &n);
            (n, s)
        })
        .collect();
    // Stop the server of shard 1, as inspect names it.
    let first = &on
        .iter()
        .find(|(_, shard)| *shard == 1)
        .expect("a name on shard 1")
        .0;
    let o = run(&env, &shards, &["--json", "inspect", first]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let label = v["shard"]["stores"].as_str().unwrap().to_string();
    let down = s
        .iter()
        .position(|r| label.contains(&format!(":{}", r.port)))
        .unwrap_or_else(|| panic!("no server is {label}"));
    s[down].kill();
    for (name, shard) in &on {
        let o = run(
            &env,
            &shards,
            &["--store-timeout", "300ms", "run", name, "--", "true"],
        );
        assert_code(&o, if *shard == 1 { 69 } else { 0 });
    }
    // A list never verified whole cannot start with a shard down.
    let fresh = Env::file();
    let o = run(
        &fresh,
        &shards,
        &[
            "--namespace",
            "fresh",
            "--store-timeout",
            "300ms",
            "lock",
            "n0",
        ],
    );
    assert_code(&o, 69);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn bad_shard_lists_are_usage_errors() {
    let env = Env::file();
    let dir = env.path("s");
    std::fs::create_dir(&dir).unwrap();
    let a = format!("file://{}/a", dir.display());
    let b = format!("file://{}/b", dir.display());
    let cases: Vec<(Vec<String>, Option<String>)> = vec![
        (
            vec!["--shard".into(), a.clone(), "--store".into(), b.clone()],
            None,
        ),
        (vec!["--shard".into(), "".into()], None),
        (vec!["--shard".into(), format!("{a},bad://x")], None),
        (
            vec![
                "--shard".into(),
                a.clone(),
                "--shard".into(),
                format!("{b},{a}"),
            ],
            None,
        ),
        (vec![], Some(format!("{a};;{b}"))),
        (vec![], Some(format!("{a};nope"))),
    ];
    for (args, shards_env) in cases {
        let mut c = env.cmd();
        c.args(&args).args(["lock", "x", "-n"]);
        if let Some(e) = &shards_env {
            c.env("DLOCK_SHARDS", e).env_remove("DLOCK_STORE");
        }
        let o = output_within(c, Duration::from_secs(30));
        assert_code(&o, 64);
        assert_eq!(
            stderr(&o).lines().count(),
            1,
            "{args:?} {shards_env:?}: {}",
            stderr(&o)
        );
    }
    // DLOCK_SHARDS as the list: two shards, and the name lands on one of them.
    let mut c = env.cmd();
    c.env("DLOCK_SHARDS", format!("{a};{b}"))
        .env_remove("DLOCK_STORE")
        .args(["--json", "inspect", "x"]);
    let o = output_within(c, Duration::from_secs(30));
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["shard"]["of"], 2, "{v}");
}

/// The commands beside lock and run work on the shard a name lives on: `extend` and
/// `unlock` by token, `wait` until the name is free, `run --any` over names on both shards,
/// and `doctor` reports every store with its shard.
#[test]
fn extend_wait_any_and_doctor_work_per_shard() {
    let s = servers(2);
    let shards = shard_args(&s.iter().collect::<Vec<_>>());
    let env = Env::file();
    let (a, b) = on_two_shards(&env, &shards);
    let token = stdout(&run(&env, &shards, &["lock", &b, "--ttl", "2s"]));
    assert_code(
        &run(
            &env,
            &shards,
            &["extend", &b, "--token", &token, "--ttl", "60s"],
        ),
        0,
    );
    let v: serde_json::Value =
        serde_json::from_slice(&run(&env, &shards, &["--json", "inspect", &b]).stdout).unwrap();
    let left = v["holders"][0]["ttl_left_ms"].as_u64().unwrap();
    assert!(left > 2000, "extend did not reach b's shard: {v}");
    // `wait` on b is still waiting while it is held, and returns once it is released.
    assert_code(&run(&env, &shards, &["wait", &b, "-w", "300ms"]), 75);
    // `run --any` over a (free) and b (held) gets a, whichever it tries first.
    let o = run(
        &env,
        &shards,
        &[
            "run",
            "--any",
            &a,
            &b,
            "-n",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_NAME",
        ],
    );
    assert_code(&o, 0);
    assert_eq!(stdout(&o).trim(), a);
    assert_code(&run(&env, &shards, &["unlock", &b, "--token", &token]), 0);
    assert_code(&run(&env, &shards, &["wait", &b, "-w", "5s"]), 0);
    // doctor: each store, with its shard.
    let o = run(&env, &shards, &["--json", "doctor"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut seen: Vec<u64> = v["stores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| st["shard"].as_u64().expect("a store's shard"))
        .collect();
    seen.sort();
    assert_eq!(seen, [1, 2], "{v}");
    assert_eq!(v["shards"].as_array().map(Vec::len), Some(2), "{v}");
}

/// Issue 26: a plain `--store` client on a store that serves a shard list took a lock held on
/// another shard (two holders). Now every store of the list refuses it with one line that
/// names --shard, keeps nothing of it, and `inspect` and `doctor` say the store is a shard.
#[test]
fn a_plain_client_is_refused_on_a_store_that_is_a_shard() {
    let s = servers(2);
    let shards = shard_args(&[&s[0], &s[1]]);
    let env = Env::file();
    assert_code(&run(&env, &shards, &["lock", "nightly", "--ttl", "2m"]), 0);
    for server in &s {
        let plain = ["--store".to_string(), server.url()];
        for args in [
            &["lock", "nightly", "-n"][..],
            &["run", "nightly", "-n", "--", "true"][..],
            &["lock", "nightly", "-w", "1s"][..],
        ] {
            let o = run(&env, &plain, args);
            assert_code(&o, 64);
            let err = stderr(&o);
            assert!(
                err.lines().count() == 1 && err.contains("--shard") && err.contains("shard"),
                "{args:?}: {err}"
            );
            assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        }
        let o = run(&env, &plain, &["--json", "inspect", "nightly"]);
        assert!(stderr(&o).contains("is a shard"), "{}", stderr(&o));
        let o = run(&env, &plain, &["doctor"]);
        assert!(
            stdout(&o)
                .lines()
                .any(|l| l.contains("shards") && l.contains("VOID")),
            "{}",
            stdout(&o)
        );
        assert_ne!(code(&o), 0);
    }
    // Only the list's own holder, on its own shard: no plain grant stayed behind.
    let v: serde_json::Value =
        serde_json::from_slice(&run(&env, &shards, &["--json", "inspect", "nightly"]).stdout)
            .unwrap();
    assert_eq!(v["holders"].as_array().map(Vec::len), Some(1), "{v}");
    for server in &s {
        let plain = ["--store".to_string(), server.url()];
        let o = run(&env, &plain, &["--json", "list"]);
        assert_code(&o, 0);
    }
    assert_eq!(
        s.iter()
            .map(|server| {
                let o = run(
                    &env,
                    &["--store".to_string(), server.url()],
                    &["--json", "list"],
                );
                String::from_utf8_lossy(&o.stdout)
                    .matches("nightly")
                    .count()
            })
            .sum::<usize>(),
        1,
        "a plain grant stayed behind"
    );
}

/// The same refusal on the embedded file store, whose plain clients read the shard-list
/// record without the namespace's flock: a plain `lock` and `run` on a file store that is a
/// shard are refused, take nothing, and start no command, even while the list's own client
/// holds the name there.
#[test]
fn a_plain_client_is_refused_on_a_file_store_that_is_a_shard() {
    let env = Env::file();
    let dir = env.path("s");
    std::fs::create_dir(&dir).unwrap();
    let urls = [
        format!("file://{}/a", dir.display()),
        format!("file://{}/b", dir.display()),
    ];
    let shards: Vec<String> = urls
        .iter()
        .flat_map(|u| ["--shard".to_string(), u.clone()])
        .collect();
    assert_code(&run(&env, &shards, &["lock", "nightly", "--ttl", "2m"]), 0);
    let ran = env.path("ran");
    for url in &urls {
        let plain = ["--store".to_string(), url.clone()];
        for args in [
            &["lock", "other", "-n"][..],
            &["run", "other", "-n", "--", "touch", ran.to_str().unwrap()][..],
        ] {
            let o = run(&env, &plain, args);
            assert_code(&o, 64);
            assert!(stderr(&o).contains("--shard"), "{args:?}: {}", stderr(&o));
        }
        let o = run(&env, &plain, &["--json", "list"]);
        assert_code(&o, 0);
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("other"),
            "a plain grant stayed behind on {url}: {}",
            stdout(&o)
        );
    }
    assert!(!ran.exists(), "the refused run started its command");
}
