//! What the person or the job waiting for a lock gets (issue 17): the live waiting line on a
//! real pseudo-terminal, the holder's reason and CI job, `dlock wait`, what `unlock --force`
//! broke, and the `--events` log of a run.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::etcd::EtcdServer;
use crate::common::redis::RedisServer;
use crate::common::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

/// A holder of `name` whose command runs until `release` exists (so the test, not a clock,
/// decides when the lock is given back). Returns the running `dlock run` process.
fn hold(env: &Env, name: &str, release: &Path, extra: &[&str]) -> Child {
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", release.display());
    let mut c = env.cmd();
    c.args(["run", name])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = c.spawn().unwrap();
    assert!(
        wait_for(LIMIT, || inspect(env, name)["held"] == true),
        "the holder never got {name}"
    );
    child
}

fn inspect(env: &Env, name: &str) -> Value {
    serde_json::from_str(&stdout(&env.run(&["--json", "inspect", name]))).unwrap()
}

fn json(o: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// dlock with `args` on a real pseudo-terminal (util-linux `script`), 200 columns wide, with
/// the test's clean environment. Returns the process and everything the terminal received
/// so far (filled in by a reader thread).
fn on_terminal(env: &Env, args: &[&str]) -> (Child, Arc<Mutex<Vec<u8>>>) {
    let script = require("script", "util-linux");
    let mut line = format!(
        "stty cols 200 rows 40; exec {}",
        env!("CARGO_BIN_EXE_dlock")
    );
    for s in &env.stores {
        line.push_str(&format!(" --store {}", quote(s)));
    }
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    let mut c = Command::new(script);
    for (k, _) in std::env::vars() {
        if k.starts_with("DLOCK_") || k == "NO_COLOR" {
            c.env_remove(k);
        }
    }
    let runtime = env.dir.path().join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    c.env("DLOCK_STORE", file_store(&runtime))
        .env("XDG_RUNTIME_DIR", runtime)
        .args(["-qfec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let seen = read_all(child.stdout.take().unwrap());
    (child, seen)
}

/// Everything `from` gives, collected by a thread as it comes.
fn read_all(mut from: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    seen
}

/// What a person sees on the screen after these bytes: carriage returns go back to the
/// start of the line, `ESC [2K` clears it, other escape sequences (colours) show nothing.
fn screen(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<Vec<char>> = vec![Vec::new()];
    let mut col = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => col = 0,
            '\n' => {
                lines.push(Vec::new());
                col = 0;
            }
            '\x1b' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    let mut params = String::new();
                    for p in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&p) {
                            if p == 'K' && params == "2" {
                                lines.last_mut().unwrap().clear();
                            }
                            break;
                        }
                        params.push(p);
                    }
                }
            }
            c => {
                let line = lines.last_mut().unwrap();
                if col < line.len() {
                    line[col] = c;
                } else {
                    line.push(c);
                }
                col += 1;
            }
        }
    }
    lines
        .into_iter()
        .map(|l| l.into_iter().collect::<String>().trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn shown(seen: &Arc<Mutex<Vec<u8>>>) -> Vec<String> {
    screen(&seen.lock().unwrap())
}

#[test]
fn the_waiting_line_shows_the_holder_on_a_terminal_and_is_gone_once_acquired() {
    let env = Env::file();
    let release = env.path("release");
    let mut holder = hold(&env, "deploy", &release, &["--reason", "release 1.4"]);
    let (mut waiter, seen) = on_terminal(&env, &["run", "deploy", "--", "echo", "ACQUIRED"]);
    assert!(
        wait_for(LIMIT, || shown(&seen).iter().any(|l| l.contains("waited"))),
        "no waiting line: {:?}",
        shown(&seen)
    );
    let screen_now = shown(&seen);
    assert_eq!(screen_now.len(), 1, "{screen_now:?}");
    let line = &screen_now[0];
    assert!(line.starts_with("waiting for deploy: held by "), "{line}");
    assert!(line.contains(&format!(" pid {} ", holder.id())), "{line}");
    assert!(line.contains("reason: release 1.4"), "{line}");
    assert!(line.contains("expires in "), "{line}");
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut holder, LIMIT).unwrap().success());
    let status = wait_child(&mut waiter, LIMIT).expect("the waiter hung");
    assert!(status.success(), "{status:?}");
    // The reader thread may still be draining the pty.
    assert!(wait_for(LIMIT, || shown(&seen).contains(&"ACQUIRED".to_string())));
    assert_eq!(shown(&seen), vec!["ACQUIRED"], "the line was not cleared");
}

#[test]
fn on_a_terminal_with_verbose_the_line_gives_way_to_how_long_it_waited() {
    let env = Env::file();
    let release = env.path("release");
    let mut holder = hold(&env, "deploy", &release, &[]);
    let (mut waiter, seen) = on_terminal(&env, &["-v", "run", "deploy", "--", "true"]);
    assert!(
        wait_for(LIMIT, || shown(&seen).iter().any(|l| l.contains("held by"))),
        "{:?}",
        shown(&seen)
    );
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut holder, LIMIT).unwrap().success());
    assert!(wait_child(&mut waiter, LIMIT).unwrap().success());
    let done = || shown(&seen);
    assert!(
        wait_for(LIMIT, || done()
            .iter()
            .any(|l| l.starts_with("dlock: acquired deploy after waiting "))),
        "{:?}",
        done()
    );
    assert!(
        !done().iter().any(|l| l.contains("held by")),
        "{:?}",
        done()
    );
}

/// Where the store keeps a queue (etcd), the line says how many are ahead.
#[test]
fn the_waiting_line_counts_who_is_ahead_in_an_etcd_queue() {
    let etcd = EtcdServer::start();
    let env = Env::with_stores(vec![etcd.url()]);
    let release = env.path("release");
    let mut holder = hold(&env, "deploy", &release, &[]);
    let mut c = env.cmd();
    c.args(["run", "deploy", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut first = c.spawn().unwrap();
    assert!(wait_for(LIMIT, || inspect(&env, "deploy")["waiters"]
        .as_array()
        .is_some_and(|w| w.len() == 1)));
    let (mut waiter, seen) = on_terminal(&env, &["run", "deploy", "--", "echo", "ACQUIRED"]);
    assert!(
        wait_for(LIMIT, || shown(&seen)
            .iter()
            .any(|l| l.contains(", 1 ahead of you"))),
        "{:?}",
        shown(&seen)
    );
    std::fs::write(&release, "").unwrap();
    for c in [&mut holder, &mut first, &mut waiter] {
        assert!(wait_child(c, LIMIT).unwrap().success());
    }
    assert!(
        wait_for(LIMIT, || shown(&seen) == vec!["ACQUIRED"]),
        "{:?}",
        shown(&seen)
    );
}

#[test]
fn verbose_without_a_terminal_says_once_when_waiting_starts_and_once_when_it_ends() {
    let env = Env::file();
    let release = env.path("release");
    let mut holder = hold(&env, "job", &release, &["--reason", "nightly"]);
    let mut c = env.cmd();
    c.args(["-v", "run", "job", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut waiter = c.spawn().unwrap();
    let seen = read_all(waiter.stderr.take().unwrap());
    let said = || String::from_utf8_lossy(&seen.lock().unwrap()).to_string();
    assert!(
        wait_for(LIMIT, || said().contains("waiting for")),
        "{}",
        said()
    );
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut holder, LIMIT).unwrap().success());
    assert!(wait_child(&mut waiter, LIMIT).unwrap().success());
    assert!(
        wait_for(LIMIT, || said().contains("acquired job")),
        "{}",
        said()
    );
    let err = said();
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let waiting: Vec<&str> = err.lines().filter(|l| l.contains("waiting for")).collect();
    assert_eq!(waiting.len(), 1, "{err}");
    assert!(
        waiting[0].contains("held by") && waiting[0].contains("reason: nightly"),
        "{err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("acquired job after waiting"))
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn no_waiting_line_on_a_file_with_quiet_or_with_json() {
    let env = Env::file();
    let release = env.path("release");
    let mut holder = hold(&env, "busy", &release, &["--reason", "x"]);
    // stderr a file (here a pipe), not verbose: nothing but the pinned error at the end.
    let o = env.run(&["run", "busy", "-w", "1s", "--", "true"]);
    assert_code(&o, 75);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    // (The pinned error names the holder too, issue 26: look for the waiting line itself.)
    assert!(!stderr(&o).contains("waiting for busy:"), "{}", stderr(&o));
    // On a terminal, with -q or --json: the line is never drawn.
    for args in [
        &["-q", "run", "busy", "-w", "1s", "--", "true"][..],
        &["--json", "lock", "busy", "-w", "1s"][..],
        &["--json", "wait", "busy", "-w", "1s"][..],
    ] {
        let (mut waiter, seen) = on_terminal(&env, args);
        let status = wait_child(&mut waiter, LIMIT).expect("hung");
        assert_eq!(status.code(), Some(75), "{args:?}");
        let bytes = seen.lock().unwrap().clone();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("waiting for busy:"), "{args:?}: {text:?}");
        assert!(!text.contains("\x1b[2K"), "{args:?}: {text:?}");
    }
    // The same wait on the terminal without them does draw it (so the above means something).
    let (mut waiter, seen) = on_terminal(&env, &["wait", "busy", "-w", "1s"]);
    assert_eq!(wait_child(&mut waiter, LIMIT).unwrap().code(), Some(75));
    let text = String::from_utf8_lossy(&seen.lock().unwrap()).to_string();
    assert!(text.contains("waiting for busy: held by"), "{text:?}");
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut holder, LIMIT).unwrap().success());
}

#[test]
fn a_reason_and_the_ci_job_round_trip_through_inspect_and_list() {
    let env = Env::file();
    let mut c = env.cmd();
    c.args(["lock", "deploy", "--reason", "release 1.4 \x1b[31m"])
        .env("GITHUB_SERVER_URL", "https://github.com")
        .env("GITHUB_REPOSITORY", "acme/shop")
        .env("GITHUB_RUN_ID", "42");
    assert_code(&output_within(c, LIMIT), 0);
    let v = inspect(&env, "deploy");
    let meta = &v["holders"][0]["meta"];
    assert_eq!(meta["reason"], "release 1.4 \x1b[31m");
    assert_eq!(meta["ci"], "https://github.com/acme/shop/actions/runs/42");
    // Text output escapes what the holder wrote: no raw control characters reach a terminal.
    let text = stdout(&env.run(&["inspect", "deploy"]));
    assert!(text.contains("reason: release 1.4 \\u{1b}[31m"), "{text}");
    assert!(
        text.contains("ci: https://github.com/acme/shop/actions/runs/42"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");
    let listed = stdout(&env.run(&["list"]));
    assert!(
        listed.contains("reason: release 1.4 \\u{1b}[31m"),
        "{listed}"
    );
    assert!(!listed.contains('\x1b'), "{listed:?}");
    let j: Value = json(&env.run(&["--json", "list"]));
    assert_eq!(
        j["locks"][0]["holders"][0]["meta"]["reason"],
        "release 1.4 \x1b[31m"
    );

    // DLOCK_REASON stands in for the flag; GitLab's, Buildkite's and Jenkins' variables too.
    for (var, url) in [
        ("CI_JOB_URL", "https://gitlab.example/acme/-/jobs/7"),
        (
            "BUILDKITE_BUILD_URL",
            "https://buildkite.com/acme/shop/builds/9",
        ),
        ("BUILD_URL", "https://jenkins.example/job/shop/3/"),
    ] {
        let mut c = env.cmd();
        c.args(["run", "job", "--", "dlock", "--json", "inspect", "job"])
            .env("DLOCK_REASON", "nightly import")
            .env(var, url)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    Path::new(env!("CARGO_BIN_EXE_dlock"))
                        .parent()
                        .unwrap()
                        .display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        for k in [
            "GITHUB_RUN_ID",
            "CI_JOB_URL",
            "BUILDKITE_BUILD_URL",
            "BUILD_URL",
        ] {
            if k != var {
                c.env_remove(k);
            }
        }
        let o = output_within(c, LIMIT);
        assert_code(&o, 0);
        let seen = json(&o);
        assert_eq!(seen["holders"][0]["meta"]["reason"], "nightly import");
        assert_eq!(seen["holders"][0]["meta"]["ci"], url, "{var}");
    }
    // multilock keeps it on every name; an overlong reason is cut, the metadata stays capped.
    let long = "r".repeat(5000);
    assert_code(&env.run(&["multilock", "m1", "m2", "--reason", &long]), 0);
    for name in ["m1", "m2"] {
        let r = inspect(&env, name)["holders"][0]["meta"]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            r.len() <= 200 && r.starts_with("rrr") && r.ends_with('…'),
            "{r}"
        );
    }
}

/// Start `c` (a `dlock wait NAME`) with `-v`, and see it waiting: it says so on stderr once it
/// found the lock held (a `wait` takes no queue entry for inspect to show), and goes on.
fn seen_waiting(env: &Env, mut c: Command, name: &str) -> Child {
    let err = env.path(&format!("{name}.wait.err"));
    c.arg("-v").stderr(std::fs::File::create(&err).unwrap());
    let mut waiter = c.spawn().unwrap();
    assert!(
        wait_for(LIMIT, || read(&err)
            .contains(&format!("waiting for {name}"))
            || waiter.try_wait().unwrap().is_some()),
        "wait never said it waits: {}",
        read(&err)
    );
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "wait returned while held: {}",
        read(&err)
    );
    waiter
}

#[test]
fn wait_returns_0_when_the_holder_releases_and_75_on_timeout_and_never_takes_the_lock() {
    let env = Env::file();
    // Free already: 0 at once, and nothing taken.
    assert_code(&env.run(&["wait", "plan"]), 0);
    assert_eq!(inspect(&env, "plan")["fence"], 0);
    let release = env.path("release");
    let mut holder = hold(&env, "plan", &release, &[]);
    let fence = inspect(&env, "plan")["fence"].clone();
    assert_code(&env.run(&["wait", "plan", "-w", "300ms"]), 75);
    assert_code(&env.run(&["wait", "plan", "-w", "0"]), 75);
    assert_code(&env.run(&["wait", "plan", "-w", "300ms", "-E", "3"]), 3);
    let o = env.run(&["--json", "wait", "plan", "-w", "200ms"]);
    assert_code(&o, 75);
    assert_eq!(json(&o)["free"], false);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    let mut c = env.cmd();
    c.args(["--json", "wait", "plan", "-w", "30s"])
        .stdout(Stdio::piped());
    let mut waiter = seen_waiting(&env, c, "plan");
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut holder, LIMIT).unwrap().success());
    assert_eq!(wait_child(&mut waiter, LIMIT).unwrap().code(), Some(0));
    let mut out = String::new();
    waiter
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["free"], true);
    assert_eq!(v["name"], "plan");
    // Waiting took nothing: the lock is free and no grant was made.
    let after = inspect(&env, "plan");
    assert_eq!(after["held"], false);
    assert_eq!(after["fence"], fence);
    // Bad input is a usage error; no store to ask is 69.
    assert_code(&env.run(&["wait", "plan", "-w", "soon"]), 64);
    assert_code(&env.run(&["wait", "bad name"]), 64);
    let o = env.run(&["--store", "redis://127.0.0.1:1", "wait", "plan", "-w", "1s"]);
    assert_code(&o, 69);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn reason_and_wait_on_redis() {
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![redis.url()]);
    let t = stdout(&env.run(&["lock", "deploy", "--reason", "hotfix"]));
    let v = inspect(&env, "deploy");
    assert_eq!(v["holders"][0]["meta"]["reason"], "hotfix");
    assert_code(&env.run(&["wait", "deploy", "-w", "300ms"]), 75);
    let mut c = env.cmd();
    c.args(["wait", "deploy", "-w", "30s"])
        .stdout(Stdio::null());
    let mut waiter = seen_waiting(&env, c, "deploy");
    assert_code(&env.run(&["unlock", "deploy", "--token", &t]), 0);
    assert_eq!(wait_child(&mut waiter, LIMIT).unwrap().code(), Some(0));
    let o = env.run(&["--json", "unlock", "deploy", "--force"]);
    assert_code(&o, 0);
    assert_eq!(json(&o)["broken"], serde_json::json!([]));
}

#[test]
fn unlock_force_says_what_it_broke() {
    let env = Env::file();
    assert_code(&env.run(&["lock", "a", "--reason", "migration 12"]), 0);
    let o = env.run(&["unlock", "a", "--force"]);
    assert_code(&o, 0);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("broke a: it was held by "), "{err}");
    assert!(err.contains("reason: migration 12"), "{err}");
    let fence = inspect(&env, "a")["fence"].as_u64().unwrap();
    assert!(
        err.contains(" for ") && err.contains(&format!("fence {fence}")),
        "{err}"
    );
    assert!(stdout(&o).is_empty());

    assert_code(&env.run(&["lock", "a", "--reason", "second"]), 0);
    let o = env.run(&["--json", "unlock", "a", "--force"]);
    assert_code(&o, 0);
    let v = json(&o);
    assert_eq!(v["released"], true);
    assert_eq!(v["broken"][0]["meta"]["reason"], "second");
    assert!(v["broken"][0]["fence"].as_u64() > Some(fence), "{v}");
    assert!(v["broken"][0]["held_for_ms"].is_u64(), "{v}");
    // Nothing held: nothing broken, still 0.
    let o = env.run(&["--json", "unlock", "a", "--force"]);
    assert_code(&o, 0);
    assert_eq!(json(&o)["released"], false);
    assert_eq!(json(&o)["broken"], serde_json::json!([]));
}

fn kinds(ev: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = ev
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    // Renewals repeat as often as the timing allows; one stands for them all.
    k.dedup();
    k
}

#[test]
fn events_follow_a_run_from_waiting_to_released() {
    let env = Env::file();
    let release = env.path("release");
    let mut holder = hold(&env, "job", &release, &[]);
    let log = env.path("events.jsonl");
    let log_s = log.display().to_string();
    let mut c = env.cmd();
    // The child runs until the test sees its lease renewed: no timing guess.
    let script = format!("while ! grep -q renewed {log_s}; do sleep 0.05; done; exit 3");
    c.args([
        "run", "job", "--ttl", "1500ms", "--events", &log_s, "--", "sh", "-c", &script,
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut run = c.spawn().unwrap();
    assert!(wait_for(LIMIT, || std::fs::read_to_string(&log)
        .is_ok_and(|t| t.contains("waiting"))));
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut holder, LIMIT).unwrap().success());
    assert_eq!(wait_child(&mut run, LIMIT).unwrap().code(), Some(3));
    let ev = events(&log);
    assert_eq!(
        kinds(&ev),
        ["waiting", "acquired", "renewed", "released"],
        "{ev:?}"
    );
    let fence = ev[1]["fence"].as_u64().unwrap();
    assert!(fence >= 2, "{ev:?}");
    for e in &ev {
        assert_eq!(e["name"], "job");
        assert!(e["time"].as_str().unwrap().ends_with('Z'), "{e}");
        assert!(e["unix_ms"].as_u64().unwrap() > 1_600_000_000_000, "{e}");
    }
    for e in &ev[1..] {
        assert_eq!(e["fence"], fence, "{e}");
    }
    assert_eq!(ev.last().unwrap()["exit_code"], 3);
    assert_eq!(ev[1]["previous"], "released");
}

#[test]
fn events_of_a_lost_lease_end_with_lost() {
    let env = Env::file();
    let log = env.path("events.jsonl");
    let log_s = log.display().to_string();
    let mut c = env.cmd();
    c.args([
        "run", "job", "--ttl", "2s", "--events", &log_s, "--", "sleep", "30",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut run = c.spawn().unwrap();
    assert!(wait_for(LIMIT, || std::fs::read_to_string(&log)
        .is_ok_and(|t| t.contains("renewed"))));
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    assert_eq!(wait_child(&mut run, LIMIT).unwrap().code(), Some(70));
    let ev = events(&log);
    assert_eq!(kinds(&ev), ["acquired", "renewed", "lost"], "{ev:?}");
    assert!(
        ev.last().unwrap()["reason"]
            .as_str()
            .unwrap()
            .contains("lost"),
        "{ev:?}"
    );
}

#[test]
fn events_to_stdout_only_where_stdout_carries_no_result() {
    let env = Env::file();
    let o = env.run(&["run", "e", "--events", "-", "--", "true"]);
    assert_code(&o, 0);
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(kinds(&lines), ["acquired", "released"]);
    // lock and multilock without a command print the token there: a usage error.
    for args in [
        &["lock", "e", "--events", "-"][..],
        &["multilock", "e", "f", "--events", "-"][..],
    ] {
        let o = env.run(args);
        assert_code(&o, 64);
        assert_eq!(stderr(&o).lines().count(), 1);
        assert!(stdout(&o).is_empty());
    }
    // A file that cannot be opened is a usage error before anything is taken.
    let fence = inspect(&env, "e")["fence"].clone();
    // In the test's own dir, whose `missing` subdirectory nobody creates.
    let unopenable = env.path("missing/dir/ev").display().to_string();
    let o = env.run(&["run", "e", "--events", &unopenable, "--", "true"]);
    assert_code(&o, 64);
    assert_eq!(inspect(&env, "e")["fence"], fence);
    // lock writes its events to a file: acquired (nothing is released by lock itself).
    let log = env.path("lock.jsonl");
    assert_code(
        &env.run(&["lock", "e", "--events", &log.display().to_string()]),
        0,
    );
    assert_eq!(kinds(&events(&log)), ["acquired"]);
}

/// The inotify descriptors in process `pid`.
fn watches(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("inotify"))
        .count()
}

/// A run that waited on the file store gives its inotify watch back while its command runs
/// (closed off the handoff's path, once the command has run a moment): a long job keeps no
/// watch on the namespace, and no descriptor of it, for the rest of its life.
#[test]
fn a_run_that_waited_on_the_file_store_closes_its_watch_while_its_command_runs() {
    let env = Env::file();
    let release = env.path("release");
    let mut holder = hold(&env, "nightly", &release, &[]);
    let (started, done) = (env.path("started"), env.path("done"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        done.display()
    );
    let waiter = env.spawn_run(&["nightly", "-w", "30s"], &script);
    assert!(
        wait_for(LIMIT, || watches(waiter.id()) == 1),
        "the waiter never watched the namespace"
    );
    std::fs::write(&release, "").unwrap();
    assert!(wait_for(LIMIT, || started.exists()), "the waiter never ran");
    assert!(
        wait_for(Duration::from_secs(5), || watches(waiter.id()) == 0),
        "the waiter, now the holder, still has its watch after 5 s of its command"
    );
    std::fs::write(&done, "").unwrap();
    assert_code(&finish(waiter, LIMIT), 0);
    assert_eq!(
        wait_child(&mut holder, LIMIT).and_then(|s| s.code()),
        Some(0)
    );
}
