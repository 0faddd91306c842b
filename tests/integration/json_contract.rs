//! The versioned `--json` contract (docs/json.md): every command prints exactly one object on
//! stdout on every exit code it can end with, `"v": 1`, `"ok"`, `"code"` (the exit code) and,
//! on a failure, `"error": {"kind", "message"}`; and every object conforms to the schema in
//! docs/dlock.schema.json, checked with Python's `jsonschema` (scripts/check-json).

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

const STRANGER: &str = "0123456789abcdef0123456789abcdef";

/// One output: its one line parsed, the envelope checked against the exit code and the
/// expected error kind (None: success), and saved for the schema check.
#[track_caller]
fn envelope(o: &Output, what: &str, kind: Option<&str>, saved: &mut Vec<(String, String)>) {
    let out = stdout(o);
    assert_eq!(out.lines().count(), 1, "{what}: not one line: {out:?}");
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out:?} {}", stderr(o)));
    let code = code(o);
    assert_eq!(v["v"], 1, "{what}: {v}");
    assert_eq!(v["code"], code, "{what}: {v}");
    assert_eq!(v["ok"], code == 0, "{what}: {v}");
    match kind {
        None => assert!(v.get("error").is_none() && code == 0, "{what}: {v}"),
        Some(k) => {
            assert_eq!(v["error"]["kind"], k, "{what}: {v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        }
    }
    saved.push((what.to_string(), out));
}

/// Every saved object through the schema, in one Python run.
fn conforms(env: &Env, saved: &[(String, String)]) {
    let files: Vec<_> = saved
        .iter()
        .enumerate()
        .map(|(i, (what, out))| {
            let p = env.path(&format!("{i}-{}.json", what.replace([' ', '/'], "_")));
            std::fs::write(&p, out).unwrap();
            p
        })
        .collect();
    check_json(&[], &files, "outputs");
}

/// Every line of an `--events` log through the schema's `$defs/event`.
pub fn events_conform(log: &std::path::Path) {
    check_json(&["--events"], &[log.to_path_buf()], "events");
}

/// scripts/check-json `flags` SCHEMA `files`: each must conform (`what` names them).
fn check_json(flags: &[&str], files: &[std::path::PathBuf], what: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let o = std::process::Command::new(format!("{root}/scripts/check-json"))
        .args(flags)
        .arg(format!("{root}/docs/dlock.schema.json"))
        .args(files)
        .output()
        .expect("python3 with jsonschema (pip install jsonschema)");
    assert!(
        o.status.success(),
        "{what} that do not conform to the schema:\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}

/// The events of a run that waited, renewed and released, and of one that lost its lease.
#[test]
fn every_event_line_conforms_to_the_schema() {
    let env = Env::file();
    let log = env.path("events");
    let log_s = log.to_str().unwrap();
    let token = stdout(&env.run(&["lock", "a"]));
    let waiter = env.spawn(&[
        "run", "a", "--ttl", "1s", "--events", log_s, "--", "sleep", "0.6",
    ]);
    assert!(wait_for(Duration::from_secs(20), || read(&log)
        .contains("\"waiting\"")));
    assert_code(&env.run(&["unlock", "a", "--token", &token]), 0);
    assert_code(&finish(waiter, Duration::from_secs(30)), 0);
    let lost = env.spawn(&["run", "a", "--events", log_s, "--", "sleep", "60"]);
    assert!(wait_for(Duration::from_secs(20), || read(&log)
        .matches("\"acquired\"")
        .count()
        == 2));
    assert_code(&env.run(&["unlock", "a", "--force"]), 0);
    assert_code(&finish(lost, Duration::from_secs(30)), 70);
    let text = read(&log);
    for kind in ["waiting", "acquired", "renewed", "released", "lost"] {
        assert!(
            text.contains(&format!("\"event\":\"{kind}\"")),
            "{kind}: {text}"
        );
    }
    events_conform(&log);
}

#[test]
fn every_command_prints_one_versioned_object_on_every_exit() {
    let env = Env::file();
    let mut saved = Vec::new();
    // A command that is not there: under the test's own dir, so nobody can have made it.
    let missing = env.path("no-such-cmd");
    let missing = missing.to_str().unwrap();
    let case = |saved: &mut Vec<(String, String)>, args: &[&str], kind: Option<&str>| {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        envelope(&env.run(&full), &args.join(" "), kind, saved);
    };
    // Success, each command.
    case(&mut saved, &["lock", "a"], None);
    case(&mut saved, &["lock", "s", "--shared"], None);
    case(&mut saved, &["multilock", "m1", "m2"], None);
    case(&mut saved, &["inspect", "a"], None);
    case(&mut saved, &["inspect", "free"], None);
    case(&mut saved, &["list"], None);
    case(&mut saved, &["list", "m"], None);
    case(&mut saved, &["wait", "free", "-w", "0"], None);
    case(&mut saved, &["doctor"], None);
    case(&mut saved, &["unlock", "s", "--force"], None);
    case(&mut saved, &["unlock", "never-held", "--force"], None);
    // A hold kept alive, shown by inspect, checked, unlocked; a token that does not hold it.
    case(
        &mut saved,
        &["lock", "k", "--keepalive", "--follow", "none"],
        None,
    );
    let kept: serde_json::Value = serde_json::from_str(&saved.last().unwrap().1).unwrap();
    let token = kept["token"].as_str().unwrap().to_string();
    case(&mut saved, &["inspect", "k"], None);
    case(&mut saved, &["check", "k", "--token", &token], None);
    case(&mut saved, &["unlock", "k", "--token", &token], None);
    case(
        &mut saved,
        &["check", "k", "--token", STRANGER],
        Some("not_holder"),
    );
    // Failures: busy (75 or -E), a token that does not hold (1), usage (64), a command that
    // could not run (127).
    case(&mut saved, &["lock", "a", "-n"], Some("not_acquired"));
    case(
        &mut saved,
        &["lock", "a", "-w", "100ms"],
        Some("not_acquired"),
    );
    case(
        &mut saved,
        &["lock", "a", "-n", "-E", "3"],
        Some("not_acquired"),
    );
    case(
        &mut saved,
        &["multilock", "free", "a", "-n"],
        Some("not_acquired"),
    );
    case(
        &mut saved,
        &["run", "a", "-n", "--", "true"],
        Some("not_acquired"),
    );
    case(&mut saved, &["wait", "a", "-w", "0"], Some("not_acquired"));
    case(
        &mut saved,
        &["unlock", "a", "--token", STRANGER],
        Some("not_holder"),
    );
    case(
        &mut saved,
        &["extend", "a", "--token", STRANGER],
        Some("not_holder"),
    );
    case(&mut saved, &["lock", ""], Some("usage"));
    case(&mut saved, &["lock", "a", "--ttl", "soon"], Some("usage"));
    case(&mut saved, &["lock", "a", "--frob"], Some("usage"));
    case(&mut saved, &["frobnicate"], Some("usage"));
    case(&mut saved, &[], Some("usage"));
    case(
        &mut saved,
        &["--store", "memcached://h", "inspect", "a"],
        Some("usage"),
    );
    case(&mut saved, &["run", "a"], Some("usage"));
    case(&mut saved, &["run", "free", "--", missing], Some("not_run"));
    // Stores that cannot be used: unreachable (69).
    case(
        &mut saved,
        &["--store", "redis://127.0.0.1:1", "lock", "a"],
        Some("unavailable"),
    );
    case(
        &mut saved,
        &["--store", "redis://127.0.0.1:1", "inspect", "a"],
        Some("unavailable"),
    );
    // The token of the lease taken above, for extend and unlock.
    let v: serde_json::Value = serde_json::from_str(&saved[0].1).unwrap();
    assert_eq!(v["acquired"], true, "{v}");
    let token = v["token"].as_str().unwrap().to_string();
    case(&mut saved, &["extend", "a", "--token", &token], None);
    case(&mut saved, &["unlock", "a", "--token", &token], None);

    // Refused by the store (77).
    let guarded = RedisServer::start_with(&["--requirepass", "right"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", guarded.port);
    let o = env.run(&["--json", "--store", &url, "lock", "a"]);
    envelope(&o, "lock refused", Some("refused"), &mut saved);
    // doctor on a server that tells its connection limit (`stores[].connections`).
    let open = RedisServer::start_with(&["--maxclients", "20"]);
    let o = env.run(&["--json", "--store", &open.url(), "doctor"]);
    envelope(&o, "doctor on redis", None, &mut saved);
    // A bent clock (78).
    let mut c = env.cmd();
    c.args(["--json", "lock", "a"])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", "+0");
    let o = output_within(c, Duration::from_secs(30));
    envelope(&o, "lock faked clock", Some("config"), &mut saved);
    // Interrupted while waiting (128+N).
    assert_code(&env.run(&["lock", "a"]), 0);
    let events = env.path("events");
    let events_arg = events.to_str().unwrap();
    let waiter = env.spawn(&["--json", "lock", "a", "--events", events_arg]);
    assert!(wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(&events).is_ok_and(|e| e.contains("\"waiting\""))
    }));
    signal(waiter.id(), libc::SIGINT);
    let o = finish(waiter, Duration::from_secs(20));
    assert_code(&o, 130);
    envelope(&o, "lock interrupted", Some("interrupted"), &mut saved);

    conforms(&env, &saved);
}

/// Once `run`'s command starts, stdout is the command's: dlock adds no object to it.
#[test]
fn a_started_command_owns_stdout() {
    let env = Env::file();
    let o = env.run(&["--json", "run", "a", "--", "echo", "hi"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "hi");
    let o = env.run(&["--json", "run", "a", "--", "sh", "-c", "exit 3"]);
    assert_code(&o, 3);
    assert_eq!(stdout(&o), "");
}

/// A `lock` that cannot write its object (stdout a full disk) releases and exits 74: the one
/// case where no object can arrive, since stdout itself is what failed.
#[test]
fn a_lock_whose_object_cannot_be_written_is_74_and_released() {
    let env = Env::file();
    let mut c = env.cmd();
    c.args(["--json", "lock", "a"])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let status = wait_child(&mut child, Duration::from_secs(30)).expect("lock ends");
    assert_eq!(status.code(), Some(74));
    assert_eq!(env.inspect("a")["held"], false);
}
