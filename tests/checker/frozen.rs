//! The fault "member frozen for the whole run" (issue 41), in the setups `quorum3-frozen` and
//! `quorum5-frozen`: the last Redis of the quorum is stopped (SIGSTOP: it keeps its socket
//! open and never answers) before the first client starts and stays so until every client
//! is done, while the holder faults run as usual. Safety is judged as in every setup; beside
//! it the line reports what a user pays: the median `dlock run -- true` with the member
//! frozen, and the same once it answers again.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::common::Env;
use super::common::redis::RedisServer;
use super::{Setup, Stores};

/// A setup named so runs its quorum with one member frozen throughout.
pub(super) const SUFFIX: &str = "-frozen";

/// The lock name the latency is measured on, apart from the clients' one.
const PROBE: &str = "frozen-probe";

/// Runs per median.
const RUNS: usize = 7;

pub(super) fn is_frozen(name: &str) -> bool {
    name.ends_with(SUFFIX)
}

/// The member frozen: the last one, so the faults aimed at a minority (the first servers)
/// never add to it.
fn member(setup: &Setup) -> &RedisServer {
    match &setup.stores {
        Stores::Redis(s) => s.last().expect("a quorum"),
        _ => unreachable!("a frozen member is a quorum's"),
    }
}

/// Freeze the member, once the probe name has been used (every member keeps its marker: a
/// name's first use with a member frozen waits for it, by the amnesia rule).
pub(super) fn freeze(setup: &Setup, env: &Env, ttl: Duration) {
    run_once(env, ttl);
    super::signal(member(setup).pid(), libc::SIGSTOP);
}

/// Let the member answer again; the latency with it frozen and after, as the line shows it,
/// and whether it kept clear of the store timeout (what it cost before issue 41).
pub(super) fn thaw(setup: &Setup, env: &Env, ttl: Duration) -> (String, bool) {
    let frozen = median_run(env, ttl);
    super::signal(member(setup).pid(), libc::SIGCONT);
    let healthy = median_run(env, ttl);
    // The default store timeout for this ttl (a tenth, at least 10 ms).
    let store_timeout = (ttl / 10).max(Duration::from_millis(10));
    let line = format!(
        " frozen-member-run-ms={:.1} healthy-run-ms={:.1}",
        frozen.as_secs_f64() * 1000.0,
        healthy.as_secs_f64() * 1000.0
    );
    (line, frozen < store_timeout)
}

fn median_run(env: &Env, ttl: Duration) -> Duration {
    let mut took: Vec<Duration> = (0..RUNS).map(|_| run_once(env, ttl)).collect();
    took.sort();
    took[RUNS / 2]
}

/// One `dlock run PROBE -- true`, waited for by a blocking wait.
fn run_once(env: &Env, ttl: Duration) -> Duration {
    let ttl = humantime::format_duration(ttl).to_string();
    let mut c: Command = env.cmd();
    c.args(["run", PROBE, "--ttl", &ttl, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let status = c.status().expect("spawn dlock");
    assert!(status.success(), "dlock run {PROBE}: {status}");
    start.elapsed()
}
