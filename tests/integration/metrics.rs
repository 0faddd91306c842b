//! Metrics for cron (issue 40): `--metrics-file` as node_exporter's textfile collector reads
//! it, and `list --format prometheus`, both parsed by Prometheus's own Python parser
//! (`prometheus_client`, through scripts/parse-prometheus): values after a success, a busy
//! skip, a failure and a lost lease; counters that go on across runs and names; a file that a
//! reader never sees half written.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// Every sample of a Prometheus text file, by sample name and `lock` label, as parsed by
/// prometheus_client; the families' types by name alongside.
struct Parsed {
    values: HashMap<(String, String), f64>,
    types: HashMap<String, String>,
}

impl Parsed {
    fn get(&self, sample: &str, lock: &str) -> Option<f64> {
        self.values.get(&(sample.into(), lock.into())).copied()
    }

    #[track_caller]
    fn value(&self, sample: &str, lock: &str) -> f64 {
        self.get(sample, lock)
            .unwrap_or_else(|| panic!("no {sample}{{lock={lock:?}}}"))
    }
}

/// `text` through prometheus_client's parser (the test fails, saying how to install it, where
/// it is missing).
fn parse(text: &str) -> Parsed {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut c = std::process::Command::new(format!("{root}/scripts/parse-prometheus"));
    c.arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("python3 (scripts/parse-prometheus)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "scripts/parse-prometheus failed (pip install prometheus_client): {}\n{text}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut parsed = Parsed {
        values: HashMap::new(),
        types: HashMap::new(),
    };
    for (family, f) in v.as_object().unwrap() {
        parsed
            .types
            .insert(family.clone(), f["type"].as_str().unwrap().to_string());
        for s in f["samples"].as_array().unwrap() {
            let lock = s["labels"]["lock"].as_str().unwrap_or_default().to_string();
            let key = (s["name"].as_str().unwrap().to_string(), lock);
            parsed.values.insert(key, s["value"].as_f64().unwrap());
        }
    }
    parsed
}

fn parse_file(path: &Path) -> Parsed {
    parse(&read(path))
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn the_metrics_file_records_a_success_a_busy_skip_a_failure_and_a_lost_lease() {
    let env = Env::file();
    let file = env.path("job.prom");
    let m = file.to_str().unwrap();
    let before = now();
    assert_code(
        &env.run(&["run", "job", "--metrics-file", m, "--", "sleep", "0.2"]),
        0,
    );
    let p = parse_file(&file);
    assert_eq!(p.value("dlock_last_exit_code", "job"), 0.0);
    let start = p.value("dlock_last_start_timestamp_seconds", "job");
    let success = p.value("dlock_last_success_timestamp_seconds", "job");
    assert!(before - 1.0 <= start && start <= success && success <= now() + 1.0);
    assert!(p.value("dlock_last_duration_seconds", "job") >= 0.2);
    assert!(p.value("dlock_last_wait_seconds", "job") >= 0.0);
    assert!(
        p.get("dlock_last_failure_timestamp_seconds", "job")
            .is_none()
    );
    assert_eq!(p.value("dlock_skipped_busy_total", "job"), 0.0);
    assert_eq!(p.value("dlock_lease_lost_total", "job"), 0.0);
    assert_eq!(p.types["dlock_skipped_busy"], "counter");
    assert_eq!(p.types["dlock_last_exit_code"], "gauge");

    // Busy, twice: the counter goes on across runs; the last run's values stay.
    let token = stdout(&env.run(&["lock", "job"]));
    for _ in 0..2 {
        let o = env.run(&["run", "job", "-w", "0", "--metrics-file", m, "--", "true"]);
        assert_code(&o, 75);
    }
    let p = parse_file(&file);
    assert_eq!(p.value("dlock_skipped_busy_total", "job"), 2.0);
    assert_eq!(p.value("dlock_last_exit_code", "job"), 0.0);
    assert_eq!(
        p.value("dlock_last_success_timestamp_seconds", "job"),
        success
    );
    assert_code(&env.run(&["unlock", "job", "--token", &token]), 0);

    // A failure, and another name in the same file: job's series are kept.
    let o = env.run(&[
        "run",
        "job",
        "--metrics-file",
        m,
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_code(&o, 3);
    assert_code(
        &env.run(&["run", "other", "--metrics-file", m, "--", "true"]),
        0,
    );
    let p = parse_file(&file);
    assert_eq!(p.value("dlock_last_exit_code", "job"), 3.0);
    assert!(p.value("dlock_last_failure_timestamp_seconds", "job") >= success);
    assert_eq!(
        p.value("dlock_last_success_timestamp_seconds", "job"),
        success
    );
    assert_eq!(p.value("dlock_skipped_busy_total", "job"), 2.0);
    assert_eq!(p.value("dlock_last_exit_code", "other"), 0.0);
    assert_eq!(p.value("dlock_skipped_busy_total", "other"), 0.0);

    // A lease lost while the command ran.
    let started = env.path("started");
    let script = format!("touch {}; exec sleep 60", started.display());
    let run = env.spawn_run(&["job", "--metrics-file", m], &script);
    assert!(wait_for(LIMIT, || started.exists()));
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    assert_code(&finish(run, LIMIT), 70);
    let p = parse_file(&file);
    assert_eq!(p.value("dlock_lease_lost_total", "job"), 1.0);
    assert_eq!(p.value("dlock_last_exit_code", "job"), 70.0);
    assert_eq!(p.value("dlock_lease_lost_total", "other"), 0.0);
}

/// `lock` records its wait and its busy skips too (it has no command of its own).
#[test]
fn lock_records_its_busy_skips() {
    let env = Env::file();
    let file = env.path("m.prom");
    let m = file.to_str().unwrap();
    assert_code(&env.run(&["lock", "a", "--metrics-file", m]), 0);
    assert_code(&env.run(&["lock", "a", "-n", "--metrics-file", m]), 75);
    let p = parse_file(&file);
    assert_eq!(p.value("dlock_skipped_busy_total", "a"), 1.0);
    assert_eq!(p.value("dlock_last_exit_code", "a"), 0.0);
}

/// A reader polling the file while runs rewrite it always finds a whole file: every family,
/// the last line complete, and a parse that succeeds.
#[test]
fn the_metrics_file_is_never_seen_half_written() {
    let env = Env::file();
    let file = env.path("job.prom");
    let m = file.to_str().unwrap().to_string();
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (file, done, reads) = (file.clone(), done.clone(), reads.clone());
        std::thread::spawn(move || {
            let mut bad = Vec::new();
            let mut whole = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let Ok(text) = std::fs::read_to_string(&file) else {
                    continue;
                };
                reads.fetch_add(1, Ordering::SeqCst);
                let complete = text.matches("# TYPE ").count() == 8
                    && text.ends_with('\n')
                    && text.contains("dlock_lease_lost_total{lock=\"job\"} ");
                if !complete {
                    bad.push(text);
                } else if whole.len() < 5 {
                    whole.push(text);
                }
            }
            (bad, whole)
        })
    };
    for i in 0..40 {
        let cmd = if i % 2 == 0 { "true" } else { "false" };
        env.run(&["run", "job", "--metrics-file", &m, "--", cmd]);
    }
    done.store(true, Ordering::SeqCst);
    let (bad, whole) = reader.join().unwrap();
    assert!(
        bad.is_empty(),
        "{} partial reads, e.g. {:?}",
        bad.len(),
        bad[0]
    );
    assert!(reads.load(Ordering::SeqCst) > 40, "the reader hardly read");
    for text in whole {
        parse(&text);
    }
    // The temporary files went with their renames.
    let left: Vec<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn list_as_prometheus_has_holders_their_age_and_waiters() {
    let env = Env::file();
    assert_code(&env.run(&["lock", "solo"]), 0);
    assert_code(&env.run(&["lock", "readers", "--shared"]), 0);
    assert_code(&env.run(&["lock", "readers", "--shared"]), 0);
    let events = env.path("events");
    let mut waiter = env.spawn(&["lock", "solo", "--events", events.to_str().unwrap()]);
    assert!(wait_for(LIMIT, || read(&events).contains("\"waiting\"")));
    let o = env.run(&["list", "--format", "prometheus"]);
    assert_code(&o, 0);
    let p = parse(&stdout(&o));
    assert_eq!(p.value("dlock_lock_holders", "solo"), 1.0);
    assert_eq!(p.value("dlock_lock_holders", "readers"), 2.0);
    assert!(p.value("dlock_lock_held_seconds", "solo") >= 0.0);
    assert_eq!(p.value("dlock_lock_waiters", "readers"), 0.0);
    assert_eq!(p.value("dlock_lock_waiters", "solo"), 1.0);
    signal(waiter.id(), libc::SIGINT);
    let _ = wait_child(&mut waiter, LIMIT);
    let o = env.run(&["--json", "list", "--format", "prometheus"]);
    assert_code(&o, 64);
}
