//! The lost-lock signal (issue 40): a job learns that its lease is gone before it is stopped,
//! from `--warn-signal`, `--on-lost` and the lease file (`DLOCK_LEASE_FILE`), whether another
//! client broke the lock (`unlock --force`) or the store went silent (a blackhole); and a late
//! renewal is its own event (`renew-late`) and state (`renewing-late`).

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::common::proxy::{Mode, Proxy};
use crate::common::redis::RedisServer;
use crate::common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A job (Python) that writes, in `dir`: `started` (the lease file's first line when it
/// began), `states` (each new first line of the lease file, as it polls it), `order` (the
/// signals it got, in the order it took them: `usr1 <lease file's first line>`, and `term
/// onlost` if the `--on-lost` hook had run by then, else `term -`; it ends on SIGTERM). It
/// takes the signals with `sigtimedwait`, one at a time, where a shell's traps may run one
/// inside another and cut the first short.
const JOB: &str = r#"
import os, signal, sys, time
d, lease = sys.argv[1], os.environ["DLOCK_LEASE_FILE"]
def state():
    try:
        with open(lease) as f:
            return f.readline().strip()
    except OSError:
        return "gone"
def append(name, line):
    with open(os.path.join(d, name), "a") as f:
        f.write(line + "\n")
sigs = {signal.SIGUSR1, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
append("started.tmp", state())
os.rename(os.path.join(d, "started.tmp"), os.path.join(d, "started"))
last = None
while True:
    s = state()
    if s != last:
        append("states", s)
        last = s
    got = signal.sigtimedwait(sigs, 0.05)
    if got is None:
        continue
    if got.si_signo == signal.SIGUSR1:
        append("order", "usr1 " + state())
        continue
    onlost = os.path.join(d, "onlost")
    for _ in range(200):
        if os.path.exists(onlost):
            break
        time.sleep(0.02)
    append("order", "term " + ("onlost" if os.path.exists(onlost) else "-"))
    sys.exit(143)
"#;

/// The `--on-lost` hook: the lease's variables and the reason, into `dir/onlost` at once.
fn hook(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"echo "$DLOCK_NAME $DLOCK_FENCE $DLOCK_LOST_REASON" > {d}/onlost.tmp && mv {d}/onlost.tmp {d}/onlost"#
    )
}

/// `dlock run job ARGS --warn-signal USR1 --on-lost HOOK --events FILE -- python3 -c JOB DIR`,
/// started and waited for until the job runs.
fn start(env: &Env, args: &[&str]) -> Child {
    let dir = env.dir.path();
    let events = env.path("events");
    let hook = hook(dir);
    let mut full = vec!["run", "job"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--warn-signal", "USR1", "--on-lost", &hook]);
    full.extend_from_slice(&["--events", events.to_str().unwrap()]);
    full.extend_from_slice(&["--", "python3", "-c", JOB, dir.to_str().unwrap()]);
    let mut run = env.spawn(&full);
    let started = env.path("started");
    assert!(
        wait_for(LIMIT, || started.exists()
            || matches!(run.try_wait(), Ok(Some(_)))),
        "the job did not start"
    );
    assert_eq!(
        read(&started).trim(),
        "state=held",
        "the lease file at the start"
    );
    run
}

fn lines(path: &Path) -> Vec<String> {
    read(path).lines().map(str::to_string).collect()
}

/// The event kinds of the run, in order.
fn kinds(env: &Env) -> Vec<String> {
    read(&env.path("events"))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["event"].as_str().unwrap().to_string()
        })
        .collect()
}

/// What every lost run shows: exit 70; the warning signal, with the lease file saying `lost`,
/// before the SIGTERM; the hook run (with the lease's variables) before the job was
/// stopped; the lease file gone with the run.
fn assert_warned_before_the_stop(env: &Env, run: Child) {
    let o = finish(run, LIMIT);
    assert_code(&o, 70);
    let order = lines(&env.path("order"));
    assert_eq!(order, ["usr1 state=lost", "term onlost"], "{}", stderr(&o));
    let acquired = read(&env.path("events"));
    let acquired: serde_json::Value =
        serde_json::from_str(acquired.lines().next().unwrap()).unwrap();
    let fence = acquired["fence"].as_u64().unwrap();
    let onlost = read(&env.path("onlost"));
    assert!(
        onlost.starts_with(&format!("job {fence} the lease on job")),
        "{onlost}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(env.path("runtime"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("dlock-lease-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "lease file left behind: {leftovers:?}"
    );
}

#[test]
fn a_forced_unlock_warns_the_job_and_runs_on_lost_before_the_stop() {
    let env = Env::file();
    let run = start(&env, &["--ttl", "30s"]);
    assert_code(&env.run(&["unlock", "job", "--force"]), 0);
    assert_warned_before_the_stop(&env, run);
    assert_eq!(lines(&env.path("states"))[0], "state=held");
    assert!(kinds(&env).contains(&"lost".to_string()));
}

#[test]
fn a_blackholed_store_is_late_then_lost_and_the_job_is_warned_before_the_stop() {
    let redis = RedisServer::start();
    let proxy = Proxy::to_port(redis.port);
    let env = Env::with_stores(vec![format!("redis://{}", proxy.addr())]);
    // SIGTERM 2.5s before the deadline, SIGKILL some 1.9s after it: time for the hook.
    let run = start(
        &env,
        &[
            "--ttl",
            "6s",
            "--kill-grace",
            "2500ms",
            "--store-timeout",
            "200ms",
        ],
    );
    // One renewal through the proxy first: the connection is up when the network goes.
    assert!(wait_for(LIMIT, || kinds(&env).contains(&"renewed".into())));
    proxy.set(Mode::Blackhole);
    assert_warned_before_the_stop(&env, run);
    proxy.set(Mode::Pass);
    // `lost` the job saw with USR1 (above); its polling may see it too, before the TERM.
    let states = lines(&env.path("states"));
    assert_eq!(
        states[..2],
        ["state=held", "state=renewing-late"],
        "{states:?}"
    );
    assert!(states[2..].iter().all(|s| s == "state=lost"), "{states:?}");
    let kinds = kinds(&env);
    let late = kinds
        .iter()
        .position(|k| k == "renew-late")
        .expect("renew-late");
    let lost = kinds.iter().position(|k| k == "lost").expect("lost");
    assert!(late < lost, "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "renew-late").count(),
        1,
        "{kinds:?}"
    );
}

/// `multilock -- CMD` shares the supervision: the same warning for a lease on several names.
#[test]
fn multilock_warns_its_command_too() {
    let env = Env::file();
    let dir = env.dir.path();
    let hook = hook(dir);
    let mut run = env.spawn(&[
        "multilock",
        "job",
        "other",
        "--warn-signal",
        "SIGUSR1",
        "--on-lost",
        &hook,
        "--",
        "python3",
        "-c",
        JOB,
        dir.to_str().unwrap(),
    ]);
    assert!(wait_for(LIMIT, || env.path("started").exists()
        || matches!(run.try_wait(), Ok(Some(_)))));
    assert_code(&env.run(&["unlock", "other", "--force"]), 0);
    let o = finish(run, LIMIT);
    assert_code(&o, 70);
    assert_eq!(
        lines(&env.path("order")),
        ["usr1 state=lost", "term onlost"]
    );
}

#[test]
fn a_signal_that_cannot_warn_is_a_usage_error() {
    let env = Env::file();
    for bad in ["KILL", "USR3", "0", "65"] {
        let o = env.run(&["run", "job", "--warn-signal", bad, "--", "true"]);
        assert_code(&o, 64);
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(stderr(&o).contains(bad), "{}", stderr(&o));
    }
}

/// A run without a runtime dir (cron, CI, a service) keeps its lease file in memory: in
/// /dev/shm, a tmpfs on every Linux with glibc, not in /tmp, which is often on disk (every
/// create and remove a journalled write). It is whole from the start and goes with the run.
#[test]
fn without_a_runtime_dir_the_lease_file_is_in_memory_and_goes_with_the_run() {
    let env = Env::file();
    let mut c = env.cmd();
    c.env_remove("XDG_RUNTIME_DIR");
    c.args(["run", "job", "--", "sh", "-c"]);
    c.arg(r#"echo "$DLOCK_LEASE_FILE"; head -n 1 "$DLOCK_LEASE_FILE""#);
    let o = output_within(c, LIMIT);
    assert_code(&o, 0);
    let out = stdout(&o);
    let mut said = out.lines();
    let path = Path::new(said.next().unwrap_or_default());
    assert!(
        path.starts_with("/dev/shm") && path.to_string_lossy().contains("/dlock-lease-"),
        "lease file at {path:?}; {}",
        stderr(&o)
    );
    assert_eq!(said.next(), Some("state=held"), "{out}");
    let dir = path.parent().unwrap();
    assert!(!dir.exists(), "{dir:?} left behind");
}
