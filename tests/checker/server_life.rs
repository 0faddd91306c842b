//! A store's own life as faults: a member or server restarted on its data, PostgreSQL's fast
//! shutdown, a SQL store down 7 s with waiters queued (the leader kill of a 3-member etcd
//! cluster or ZooKeeper ensemble is `Fault::NodeKill`, and a database crashed and started at
//! once is `Fault::ServerRestart`). Every client waits with `-w 60s`, so what these faults
//! count, beside the usual overlaps, fence regressions and stuck locks:
//!
//! - runs that exited 69 while they still had budget: a waiter that had reached its store must
//!   ride the outage out (`early-69`, must be 0). A run that started while the store was down
//!   (or going down) and never reached it fails fast, as the contract says, and is not counted;
//! - the longest stall of each store fault: the longest time nobody entered while it was under
//!   way (`stall-ms=FAULT:MS,...`).

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::{Fault, Injected, Run, Section, Setup, Stores, mono_ns};

/// How long the SQL store stays down with waiters queued.
const SQL_DOWN: Duration = Duration::from_secs(7);

/// The wait budget every client's `dlock run` has (`Run::dlock_run_ttl`).
const BUDGET: Duration = Duration::from_secs(60);

/// Every run of a looping client: when it started and ended (kernel monotonic ns), its code;
/// and the waiters the sql-down fault saw queued before the outage, which had reached the
/// store whenever they started.
/// Runs whose stores never answered them (exit 69 saying `dlock::engine::NOT_WAITED`) fail
/// fast by contract, whatever their budget: only counted (`unheard-69`).
#[derive(Default)]
pub(crate) struct Runs(
    Mutex<Vec<(u64, u64, i32)>>,
    Mutex<Vec<(u64, u64, i32)>>,
    AtomicUsize,
);

impl Runs {
    /// A client's run, from its exit code and what it said on stderr.
    pub(crate) fn add(&self, start: u64, end: u64, code: i32, said: &str) {
        if code == 69 && said.contains(dlock::engine::NOT_WAITED) {
            self.2.fetch_add(1, Ordering::SeqCst);
            return;
        }
        self.0.lock().unwrap().push((start, end, code));
    }

    pub(crate) fn unheard(&self) -> usize {
        self.2.load(Ordering::SeqCst)
    }

    fn add_queued(&self, start: u64, end: u64, code: i32) {
        self.1.lock().unwrap().push((start, end, code));
    }
}

/// How many waiters the sql-down fault queues behind a blocker before the outage.
const QUEUED: usize = 3;

impl Run {
    /// A blocker holds (for longer than the ttl: its lease is lost in the outage, exit 70)
    /// while the other clients hold off; `QUEUED` waiters queue behind it (until `inspect`
    /// lists them all, or a ttl); the server goes down for `SQL_DOWN` and comes back. Each
    /// waiter must be served (exit 0) within its budget.
    pub(crate) fn sql_down_fault(&self, setup: &mut Setup, n: usize) -> Injected {
        let ttl = self.cfg.ttl;
        self.hold_off.store(true, Ordering::SeqCst);
        let blocker = format!("b{n}");
        let mut block = self.dlock_run(&blocker, ttl * 4).spawn().expect("spawn");
        let blocking = self
            .wait_entered(&blocker, &mut block, Duration::from_secs(60))
            .is_some();
        let mut queued: Vec<(Child, u64)> = (0..QUEUED)
            .map(|i| {
                let began = mono_ns();
                (
                    self.dlock_run(&format!("q{n}-{i}"), self.cfg.hold)
                        .spawn()
                        .expect("spawn"),
                    began,
                )
            })
            .collect();
        let pids: Vec<u32> = queued.iter().map(|(c, _)| c.id()).collect();
        let start = Instant::now();
        let mut listed = 0;
        while blocking && start.elapsed() < ttl && listed < QUEUED {
            listed = self.waiting(&pids);
        }
        let mut injected = store_life(Fault::SqlDown, setup, n);
        self.hold_off.store(false, Ordering::SeqCst);
        let mut codes = Vec::new();
        for (c, began) in &mut queued {
            let code = self.finish(c, BUDGET + Duration::from_secs(10));
            self.tally.runs.add_queued(*began, mono_ns(), code);
            codes.push(code);
        }
        self.finish(&mut block, ttl * 4 + Duration::from_secs(10));
        injected.outcome = format!(
            "{}, {listed} of {QUEUED} waiters listed before it, their exits {codes:?}",
            injected.outcome
        );
        injected
    }

    /// How many of these `dlock` pids `inspect` lists among the waiters (a failed `inspect`
    /// lists none).
    fn waiting(&self, pids: &[u32]) -> usize {
        let o = self.env.run(&["--json", "inspect", crate::NAME]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["waiters"].as_array().map_or(0, |w| {
            w.iter()
                .filter(|w| pids.iter().any(|p| w["meta"]["pid"] == *p))
                .count()
        })
    }
}

/// Restart one member of an etcd cluster or ZooKeeper ensemble on its data (not the leader:
/// that is `NodeKill`), or stop a SQL server cleanly and start it again at once
/// (PostgreSQL's fast shutdown, MariaDB's SIGTERM), or keep a SQL server down for `SQL_DOWN`
/// while the clients wait. Returns what it did.
pub(crate) fn store_life(fault: Fault, setup: &mut Setup, n: usize) -> Injected {
    let outcome = match (&mut setup.stores, fault) {
        (Stores::Etcd(e), Fault::MemberRestart) => {
            let leader = e.leader();
            let i = (leader + 1 + n % 2) % 3;
            e.restart(i);
            e.wait_healthy();
            format!("member e{} of 3 (not the leader)", i + 1)
        }
        (Stores::Zk(z), Fault::MemberRestart) => {
            let leader = z.leader().unwrap_or(0);
            let i = (leader + 1 + n % 2) % 3;
            z.restart(i);
            format!("member {} of 3 (not the leader)", i + 1)
        }
        (Stores::Postgres(p), Fault::FastRestart) => {
            p.shutdown("fast");
            p.boot();
            "fast shutdown, started again".to_string()
        }
        (Stores::Mysql(m), Fault::FastRestart) => {
            m.shutdown();
            m.boot();
            "clean shutdown, started again".to_string()
        }
        (Stores::Postgres(p), Fault::SqlDown) => {
            p.shutdown("fast");
            thread::sleep(SQL_DOWN);
            p.boot();
            format!("down {SQL_DOWN:?}")
        }
        (Stores::Mysql(m), Fault::SqlDown) => {
            m.shutdown();
            thread::sleep(SQL_DOWN);
            m.boot();
            format!("down {SQL_DOWN:?}")
        }
        (_, f) => unreachable!("{} on this setup", f.name()),
    };
    Injected::store(fault, outcome)
}

/// Whether a store fault takes the store (or the member a client may be on) out of service.
fn outage(f: &Injected) -> bool {
    f.victim.is_none()
        && matches!(
            f.fault,
            Fault::StoreStop
                | Fault::NodeKill
                | Fault::ServerRestart
                | Fault::RestartAof
                | Fault::RestartEmpty
                | Fault::MasterKill
                | Fault::MasterPause
                | Fault::MemberRestart
                | Fault::FastRestart
                | Fault::SqlDown
        )
}

/// Whether an outage fault takes the whole store away: a single server's, where a process
/// that starts meanwhile reaches nothing (on a quorum, a cluster of three or an ensemble it
/// takes a minority, and the store answers on).
fn whole(setup: &Setup) -> bool {
    match &setup.stores {
        Stores::Redis(s) => s.len() == 1,
        Stores::Postgres(_)
        | Stores::Mysql(_)
        | Stores::Cluster(_)
        | Stores::S3(_)
        | Stores::Nats(_)
        | Stores::Dynamo(_) => true,
        Stores::Etcd(_) | Stores::Zk(_) | Stores::File(_) => false,
    }
}

/// Runs that exited 69 before their budget ran out, though they did not start while a fault
/// took the whole store away (or within a second before it: a run that never reached the
/// store fails fast, by contract). A run that started during an etcd or ZooKeeper leader
/// kill reached a member, and must wait through the election.
pub(crate) fn early_unavailable(
    runs: &Runs,
    faults: &[Injected],
    spans: &[(u64, u64)],
    setup: &Setup,
) -> Vec<String> {
    let second = 1_000_000_000;
    let down: Vec<(u64, u64)> = faults
        .iter()
        .zip(spans)
        .filter(|(f, _)| whole(setup) && outage(f))
        .map(|(_, &(b, e))| (b.saturating_sub(second), e))
        .collect();
    // Said of each: the last fault that began before it, and when.
    let last_fault = |t: u64| {
        faults
            .iter()
            .zip(spans)
            .rfind(|(_, (b, _))| *b <= t)
            .map_or("no fault yet".to_string(), |(f, (b, e))| {
                format!(
                    "{} ms after {} began (it lasted {} ms)",
                    (t - b) / 1_000_000,
                    f.fault.name(),
                    (e - b) / 1_000_000
                )
            })
    };
    let early = |&&(start, end, code): &&(u64, u64, i32)| {
        code == 69 && end - start < BUDGET.as_nanos() as u64
    };
    let say = |what: &str, &(start, end, _): &(u64, u64, i32)| {
        format!(
            "exit 69 with budget left: {what} started {}, gave up after {} ms",
            last_fault(start),
            (end - start) / 1_000_000
        )
    };
    let mut out: Vec<String> = runs
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(early)
        .filter(|&&(start, _, _)| !down.iter().any(|&(b, e)| start >= b && start <= e))
        .map(|r| say("a run", r))
        .collect();
    out.extend(
        runs.1
            .lock()
            .unwrap()
            .iter()
            .filter(early)
            .map(|r| say("a waiter queued before sql-down", r)),
    );
    out
}

/// The longest stall of each kind of store fault: the longest time nobody entered, among the
/// gaps between two entries that overlap the fault (from its start to its end).
pub(crate) fn stalls(
    secs: &[Section],
    faults: &[Injected],
    spans: &[(u64, u64)],
) -> BTreeMap<&'static str, u64> {
    let mut out = BTreeMap::new();
    // A frozen cluster seed takes nothing out of service, but what it costs is a stall too.
    let counted = |f: &Injected| outage(f) || f.fault == Fault::SeedFreeze;
    for (f, &(began, ended)) in faults.iter().zip(spans).filter(|(f, _)| counted(f)) {
        let longest = secs
            .windows(2)
            .map(|w| (w[0].enter, w[1].enter))
            .filter(|&(a, b)| b > began && a < ended)
            .map(|(a, b)| (b - a) / 1_000_000)
            .max();
        if let Some(ms) = longest {
            let top = out.entry(f.fault.name()).or_insert(0);
            *top = (*top).max(ms);
        }
    }
    out
}

/// The summary's words for these counts.
pub(crate) fn summary(
    early: usize,
    unheard: usize,
    stalls: &BTreeMap<&'static str, u64>,
) -> String {
    let stalls = if stalls.is_empty() {
        "-".to_string()
    } else {
        stalls
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(" early-69={early} unheard-69={unheard} stall-ms={stalls}")
}

/// A client whose run failed fast (69: the store is down) waits a little before the next, so
/// an outage does not turn the loop into a stream of processes.
pub(crate) fn pause_after(code: i32) {
    if code == 69 {
        thread::sleep(Duration::from_millis(100));
    }
}
