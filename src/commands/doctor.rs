//! `dlock doctor`: for each store, what dlock's guarantees need from it: reachable (and how
//! fast), permitted (a real grant and release on a scratch name, of both kinds: a `run`
//! lease and a `lock` lease that outlives the process), the server's version and clock, the
//! settings a restart's safety depends on, and whether the stores together make a majority.
//!
//! Exit: 0 healthy; 77 a store refused us; 69 a store is unreachable; 78 a store as it is set
//! up can never serve some command (ZooKeeper without TTL nodes for `lock`); 1 a setting voids
//! a guarantee. (The worst wins in that order: a refusal needs a person, not a retry.)

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;
use serde_json::json;
use tokio::time::{Instant, timeout};

use super::Ctx;

#[path = "doctor_memory.rs"]
mod memory;
use crate::cli::DoctorArgs;
use crate::exit::{Error, ExitCode, Result};
use crate::store::{
    Acquire, Attempt, ErrorKind, Finding, HealthQuery, Mode, Outcome, Previous, Severity, Store,
    StoreError,
};

/// What one store showed.
#[derive(Serialize)]
struct Report {
    store: String,
    reachable: bool,
    refused: bool,
    /// A read of the scratch name, start to answer.
    rtt_ms: Option<f64>,
    version: Option<String>,
    clock_offset_ms: Option<i64>,
    findings: Vec<Finding>,
    /// A `run` lease could be taken and released (the kind every quorum member must grant).
    #[serde(skip)]
    takes_run_leases: bool,
    /// What the store remembers, and what a restart without its data would do now.
    memory: Option<memory::Memory>,
    /// The server's connection limit and how many waiters it allows, where it tells.
    connections: Option<crate::store::conns::ConnLimit>,
    /// Some command can never work on this store as it is configured (exit 78 everywhere).
    #[serde(skip)]
    misconfigured: bool,
}

impl Report {
    /// Could take and release a lease: counts toward a majority.
    fn usable(&self) -> bool {
        self.reachable && !self.refused && self.takes_run_leases
    }
}

/// Per shard: (stores usable, stores in it, stores needed).
type Quorum = (usize, usize, usize);

pub async fn run(args: DoctorArgs, ctx: &Ctx) -> Result<i32> {
    let shards = ctx.shards.all();
    // Every store of every shard at once; each judged as a member of its own shard's quorum.
    let stores: Vec<(usize, &Arc<dyn Store>)> = shards
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.engine.stores().iter().map(move |st| (i, st)))
        .collect();
    let mut reports = survey(&args, ctx, &stores).await;
    // Per shard: stores usable, and how many are needed.
    let quorums: Vec<Quorum> = shards
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mine = stores.iter().zip(&reports).filter(|((j, _), _)| *j == i);
            let usable = mine.clone().filter(|(_, r)| r.usable()).count();
            (usable, mine.count(), s.engine.majority())
        })
        .collect();
    let mut host = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let members: Vec<usize> = (0..stores.len()).filter(|&k| stores[k].0 == i).collect();
        host.extend(memory::judge(
            &mut reports,
            &members,
            shard.engine.majority(),
        ));
    }
    if let Err(e) = super::trust_clock() {
        host.push(Finding::new("host clock", Severity::Void, e.message));
    }
    let (code, verdict) = judge(&reports, &host);
    let shard_of: Vec<usize> = stores.iter().map(|(i, _)| *i).collect();
    let seen = Seen {
        reports: &reports,
        shard_of: &shard_of,
        host: &host,
        quorums: &quorums,
        healthy: code == ExitCode::Success,
        verdict: &verdict,
    };
    if ctx.out.json {
        print_json(ctx, &seen);
    } else {
        print_text(ctx, &seen);
    }
    if code == ExitCode::Success {
        Ok(0)
    } else {
        Err(Error::new(code, format!("doctor: {verdict}")))
    }
}

/// Examine every store at once, and find the stores that are shards of a list this client
/// was not given.
async fn survey(args: &DoctorArgs, ctx: &Ctx, stores: &[(usize, &Arc<dyn Store>)]) -> Vec<Report> {
    let shards = ctx.shards.all();
    let limit = shards[0].engine.store_timeout().max(Duration::from_secs(2));
    let scratch = scratch_name();
    let (mut reports, shard_records) = tokio::join!(
        join_all(stores.iter().map(|(i, s)| {
            let query = HealthQuery {
                ttl: args.ttl,
                in_quorum: shards[*i].engine.stores().len() > 1,
            };
            examine(s.as_ref(), &scratch, query, limit)
        })),
        ctx.shards.shard_records()
    );
    // A store that is a shard, used without --shard: every lock would be refused (issue 26).
    for (store, fp) in shard_records {
        if let Some(r) = reports.iter_mut().find(|r| r.store == store) {
            r.findings.push(Finding::new(
                "shards",
                Severity::Void,
                format!(
                    "a shard of a shard list (fingerprint {fp}): without that list's --shard \
                     flags lock, run and multilock are refused"
                ),
            ));
        }
    }
    reports
}

/// The exit code and the verdict: the worst of what the stores and the host showed.
fn judge(reports: &[Report], host: &[Finding]) -> (ExitCode, String) {
    let refused = reports.iter().filter(|r| r.refused).count();
    let unreachable = reports.iter().filter(|r| !r.reachable).count();
    let misconfigured = reports.iter().filter(|r| r.misconfigured).count();
    let void = reports
        .iter()
        .flat_map(|r| &r.findings)
        .chain(host)
        .filter(|f| f.severity == Severity::Void)
        .count();
    if refused > 0 {
        (
            ExitCode::Refused,
            format!("{refused} store(s) refused dlock"),
        )
    } else if unreachable > 0 {
        (
            ExitCode::Unavailable,
            format!("{unreachable} store(s) unreachable"),
        )
    } else if misconfigured > 0 {
        (
            ExitCode::Config,
            format!("{misconfigured} store(s) set up so that a command can never work there"),
        )
    } else if void > 0 {
        (
            ExitCode::Failure,
            format!("{void} finding(s) void a guarantee"),
        )
    } else {
        (ExitCode::Success, "healthy".to_string())
    }
}

/// What doctor found, as both outputs show it.
struct Seen<'a> {
    reports: &'a [Report],
    /// Each report's shard (index into `Shards::all`).
    shard_of: &'a [usize],
    host: &'a [Finding],
    quorums: &'a [Quorum],
    healthy: bool,
    verdict: &'a str,
}

fn print_json(ctx: &Ctx, seen: &Seen) {
    let (usable, total, need) = seen.quorums[0];
    let mut v = json!({
        "healthy": seen.healthy,
        "verdict": seen.verdict,
        "stores": seen.reports,
        "host": seen.host,
        "quorum": { "stores": total, "need": need, "usable": usable },
    });
    if ctx.shards.is_sharded() {
        // Each store's shard by index (from 1), and each shard's own quorum.
        v["quorum"] = json!(null);
        v["fingerprint"] = json!(ctx.shards.fingerprint());
        for (k, i) in seen.shard_of.iter().enumerate() {
            v["stores"][k]["shard"] = json!(i + 1);
        }
        v["shards"] = json!(
            ctx.shards
                .all()
                .iter()
                .zip(seen.quorums)
                .enumerate()
                .map(|(i, (s, (usable, total, need)))| json!({
                    "shard": i + 1,
                    "label": s.label,
                    "quorum": { "stores": total, "need": need, "usable": usable },
                }))
                .collect::<Vec<_>>()
        );
    }
    ctx.out.json_value(&v);
}

fn print_text(ctx: &Ctx, seen: &Seen) {
    let shards = ctx.shards.all();
    for (i, r) in seen.shard_of.iter().zip(seen.reports) {
        if ctx.shards.is_sharded() {
            ctx.out.line(&format!(
                "{}  (shard {} of {})",
                r.store,
                i + 1,
                shards.len()
            ));
        } else {
            ctx.out.line(&r.store);
        }
        for f in &r.findings {
            ctx.out.line(&format!(
                "  {:<5} {:<12} {}",
                f.severity.as_str(),
                f.check,
                f.text
            ));
        }
    }
    for f in seen.host {
        ctx.out.line(&format!(
            "{:<7} {:<12} {}",
            f.severity.as_str(),
            f.check,
            f.text
        ));
    }
    let majority = |(usable, total, need): Quorum| {
        let can = if usable >= need {
            "locks can"
        } else {
            "no lock can"
        };
        format!("{usable} of {total} store(s) usable, {need} needed: {can} be taken")
    };
    if ctx.shards.is_sharded() {
        for (i, (s, q)) in shards.iter().zip(seen.quorums).enumerate() {
            ctx.out
                .line(&format!("shard {} ({}): {}", i + 1, s.label, majority(*q)));
        }
    } else {
        ctx.out
            .line(&format!("quorum: {}", majority(seen.quorums[0])));
    }
    ctx.out.line(&format!("verdict: {}", seen.verdict));
}

/// Everything doctor learns of one store; each request bounded by `limit`.
async fn examine(store: &dyn Store, scratch: &str, query: HealthQuery, limit: Duration) -> Report {
    let mut r = Report {
        store: store.describe().to_string(),
        reachable: false,
        refused: false,
        rtt_ms: None,
        version: None,
        clock_offset_ms: None,
        findings: Vec::new(),
        takes_run_leases: false,
        memory: None,
        connections: None,
        misconfigured: false,
    };
    // The first request is a `run` lease: a store whose session follows the first lease's
    // ttl (ZooKeeper) then opens it as `run` would, and the round trip below is timed on a
    // connection that is already up.
    let mut first = None;
    let run_lease = grant_and_release(store, scratch, query.ttl, false, limit, &mut first).await;
    r.takes_run_leases = run_lease.is_ok();
    if let Err(e) = &run_lease
        && matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Refused)
    {
        r.cut_off(e);
        return r;
    }
    let t0 = Instant::now();
    if let Err(e) = bounded(limit, store.inspect(scratch)).await {
        r.cut_off(&e);
        return r;
    }
    let rtt = t0.elapsed();
    r.reachable = true;
    r.rtt_ms = Some(rtt.as_secs_f64() * 1000.0);
    r.findings.push(Finding::new(
        "reachable",
        Severity::Ok,
        format!("answered a read in {:.1}ms", rtt.as_secs_f64() * 1000.0),
    ));
    let health = bounded(limit, store.health(query)).await;
    r.take_health(health);
    // A real grant and release of each kind, on a name no one else uses.
    let lock_lease = grant_and_release(store, scratch, query.ttl, true, limit, &mut None).await;
    r.memory = memory::examine(store, scratch, first, &r.findings, limit).await;
    for (kind, outcome) in [("a `run` lease", run_lease), ("a `lock` lease", lock_lease)] {
        let finding = r.permission(kind, scratch, outcome);
        r.findings.push(finding);
    }
    r
}

impl Report {
    /// The store could not be reached, or refused us: the one finding that says so.
    fn cut_off(&mut self, e: &StoreError) {
        self.refused = e.kind() == ErrorKind::Refused;
        self.reachable = self.refused;
        let what = if self.refused { "refused" } else { "reachable" };
        self.findings
            .push(Finding::new(what, Severity::Void, plain(e, &self.store)));
    }

    /// What the store told of its setup (version, clock, limits), or why it could not.
    fn take_health(&mut self, health: crate::store::StoreResult<crate::store::Health>) {
        match health {
            Ok(h) => {
                if let Some(v) = &h.version {
                    self.findings
                        .push(Finding::new("version", Severity::Ok, v.clone()));
                }
                self.version = h.version;
                self.clock_offset_ms = h.clock_offset_ms;
                self.connections = h.connections;
                self.findings.extend(h.findings);
            }
            Err(e) => {
                self.refused |= e.kind() == ErrorKind::Refused;
                self.findings.push(Finding::new(
                    "setup",
                    Severity::Warn,
                    plain(&e, &self.store),
                ));
            }
        }
    }

    /// The finding for one grant and release of `kind` on `scratch`.
    fn permission(
        &mut self,
        kind: &str,
        scratch: &str,
        outcome: crate::store::StoreResult<Option<bool>>,
    ) -> Finding {
        match outcome {
            Ok(Some(true)) => Finding::new(
                "permissions",
                Severity::Ok,
                format!("took and released {kind} on {scratch}"),
            ),
            Ok(Some(false)) => Finding::new(
                "permissions",
                Severity::Warn,
                format!("took {kind} on {scratch}, but its release found it gone"),
            ),
            Ok(None) => Finding::new(
                "permissions",
                Severity::Note,
                format!("{scratch} was busy (another dlock doctor on this host?); try again"),
            ),
            Err(e) => {
                self.refused |= e.kind() == ErrorKind::Refused;
                self.misconfigured |= e.kind() == ErrorKind::Config;
                let severity = if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Config) {
                    Severity::Void
                } else {
                    Severity::Warn
                };
                self.reachable &= e.kind() != ErrorKind::Unavailable;
                Finding::new(
                    "permissions",
                    severity,
                    format!("{kind}: {}", plain(&e, &self.store)),
                )
            }
        }
    }
}

/// The name doctor takes its leases on: one per host, since each name keeps a small record
/// (its fence) on the store after its last lease ends, and doctor should not leave a new one
/// behind on every run.
fn scratch_name() -> String {
    let host: String = crate::sys::hostname()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(64)
        .collect();
    let host = host.trim_start_matches(['.', '-']);
    if host.is_empty() {
        "dlock-doctor".to_string()
    } else {
        format!("dlock-doctor@{host}")
    }
}

/// Take a lease on `scratch` and give it back. `Ok(None)`: busy; `Ok(Some(released))`.
async fn grant_and_release(
    store: &dyn Store,
    scratch: &str,
    ttl: Duration,
    detached: bool,
    limit: Duration,
    first: &mut Option<memory::FirstLease>,
) -> crate::store::StoreResult<Option<bool>> {
    let req = Acquire {
        names: vec![scratch.to_string()],
        modes: vec![Mode::Exclusive],
        token: crate::names::new_token(),
        ttl,
        meta: crate::meta::holder(&["dlock doctor".into()]),
        detached,
    };
    let granted = bounded(limit, store.attempt(&req, false)).await;
    // Released whatever the answer: a grant whose answer was lost must not stay behind.
    let released = bounded(
        limit,
        store.release(&req.names, &req.token, Outcome::Released),
    )
    .await;
    let (granted, recall) = granted?;
    let marked = recall.first().map(|r| r.marked);
    match granted {
        Attempt::Granted(g) => {
            // No lease on the name had ended before: doctor never ran here (or the store
            // lost its data since it did).
            let never = g.first().is_some_and(|g| g.previous == Previous::None);
            *first = marked.map(|marked| memory::FirstLease { marked, never });
            released.map(Some)
        }
        Attempt::Busy { .. } => Ok(None),
    }
}

async fn bounded<T>(
    limit: Duration,
    f: impl Future<Output = crate::store::StoreResult<T>>,
) -> crate::store::StoreResult<T> {
    timeout(limit, f).await.unwrap_or_else(|_| {
        Err(StoreError::unavailable(format!(
            "no answer within {}",
            humantime::format_duration(limit)
        )))
    })
}

/// An error's text without the store's name in front (the report is already under it).
fn plain(e: &StoreError, store: &str) -> String {
    let m = e.message();
    m.strip_prefix(&format!("{store}: "))
        .unwrap_or(m)
        .to_string()
}
