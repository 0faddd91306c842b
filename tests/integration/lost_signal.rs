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

/// A bash job that writes, in `dir`: `started` (the lease file's first line when it began),
/// `states` (each new first line of the lease file, as it polls it), `order` (its USR1 and
/// TERM traps, in the order they ran: `usr1`, then `term <lease file's first line> onlost`,
/// without `onlost` if the `--on-lost` hook had not run by then). The USR1 trap is one
/// builtin: bash runs a pending trap between two commands, even inside another trap, so a
/// TERM could cut a longer one short.
fn job_script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"read -r s < "$DLOCK_LEASE_FILE"; echo "$s" > {d}/started.tmp; mv {d}/started.tmp {d}/started
trap 'echo usr1 >> {d}/order' USR1
trap 'read -r s < "$DLOCK_LEASE_FILE"; i=0
  while [ ! -e {d}/onlost ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done
  if [ -e {d}/onlost ]; then echo "term $s onlost" >> {d}/order; else echo "term $s" >> {d}/order; fi
  exit 143' TERM
last=
while :; do
  if read -r s < "$DLOCK_LEASE_FILE" && [ "$s" != "$last" ]; then echo "$s" >> {d}/states; last=$s; fi
  sleep 0.05 & wait $!
done"#
    )
}

/// The `--on-lost` hook: the lease's variables and the reason, into `dir/onlost` at once.
fn hook(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"echo "$DLOCK_NAME $DLOCK_FENCE $DLOCK_LOST_REASON" > {d}/onlost.tmp && mv {d}/onlost.tmp {d}/onlost"#
    )
}

/// `dlock run job ARGS --warn-signal USR1 --on-lost HOOK --events FILE -- bash -c JOB`,
/// started and waited for until the job runs.
fn start(env: &Env, args: &[&str]) -> Child {
    let dir = env.dir.path();
    let events = env.path("events");
    let (script, hook) = (job_script(dir), hook(dir));
    let mut full = vec!["run", "job"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--warn-signal", "USR1", "--on-lost", &hook]);
    full.extend_from_slice(&["--events", events.to_str().unwrap()]);
    full.extend_from_slice(&["--", "bash", "-c", &script]);
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

/// What every lost run shows: exit 70; the warning signal before the SIGTERM, and the lease
/// file saying `lost` by then; the hook run (with the lease's variables) before the job was
/// stopped; the lease file gone with the run.
fn assert_warned_before_the_stop(env: &Env, run: Child) {
    let o = finish(run, LIMIT);
    assert_code(&o, 70);
    let order = lines(&env.path("order"));
    assert_eq!(order, ["usr1", "term state=lost onlost"], "{}", stderr(&o));
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
    let run = start(
        &env,
        &[
            "--ttl",
            "4s",
            "--kill-grace",
            "1500ms",
            "--store-timeout",
            "200ms",
        ],
    );
    // One renewal through the proxy first: the connection is up when the network goes.
    assert!(wait_for(LIMIT, || kinds(&env).contains(&"renewed".into())));
    proxy.set(Mode::Blackhole);
    assert_warned_before_the_stop(&env, run);
    proxy.set(Mode::Pass);
    // `lost` the TERM trap saw (above); the polling loop may see it too, before the TERM.
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
    let (script, hook) = (job_script(dir), hook(dir));
    let mut run = env.spawn(&[
        "multilock",
        "job",
        "other",
        "--warn-signal",
        "SIGUSR1",
        "--on-lost",
        &hook,
        "--",
        "bash",
        "-c",
        &script,
    ]);
    assert!(wait_for(LIMIT, || env.path("started").exists()
        || matches!(run.try_wait(), Ok(Some(_)))));
    assert_code(&env.run(&["unlock", "other", "--force"]), 0);
    let o = finish(run, LIMIT);
    assert_code(&o, 70);
    assert_eq!(
        lines(&env.path("order")),
        ["usr1", "term state=lost onlost"]
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
