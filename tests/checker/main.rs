//! The fault-injection checker: K clients loop `dlock run` (the real binary) against one store
//! setup while faults are injected on a schedule, and every critical section is checked
//! afterwards for overlaps, fence order, stuck locks and leftovers.
//!
//! It is an integration test with its own `main` (harness = false) rather than an example so
//! that `cargo test` builds and runs it with no extra step, it gets `CARGO_BIN_EXE_dlock` and
//! the shared server fixtures, and its own executable doubles as the critical-section child
//! (`checker section ...`), which reads the kernel's monotonic clock directly.
//!
//! `cargo test --test checker` runs every setup at CI scale; on demand, full scale:
//! `cargo test --release --test checker -- --full [SETUP...]`. See RELIABILITY.md.

mod clock;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod contention;
mod forget;
mod frozen;
mod holder_tree;
mod lost_grant;
mod partition;
mod server_life;
mod sharded;
mod slack;
mod waiters;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::dynamodb::DynamoServer;
use common::etcd::EtcdServer;
use common::mysql::MariaDb;
use common::nats::NatsServer;
use common::postgres::PgServer;
use common::redis::{RedisCluster, RedisServer};
use common::s3::S3Server;
use common::zk::ZkServer;
use common::{Env, signal, temp_dir, wait_child_saying};

const NAME: &str = "checked";

/// CLOCK_MONOTONIC straight from the kernel (dlock's own raw-syscall reading), so that neither
/// libfaketime (which the clock-jump victim runs under) nor anything else preloaded can bend
/// the record.
fn mono_ns() -> u64 {
    dlock::sys::monotonic().as_nanos() as u64
}

// ---------------------------------------------------------------------------------------------
// The critical section: the child of `dlock run`.

/// `checker section LOG HOLD_US`: log entry, hold, log exit. Each line is one O_APPEND write,
/// so lines from concurrent sections never tear. SIGTERM (dlock stopping us because the lease
/// is going) still gets an exit line, with the time it came.
fn section(log: &Path, hold: Duration) -> i32 {
    static LOG_FD: AtomicU64 = AtomicU64::new(u64::MAX);
    static LINE: Mutex<String> = Mutex::new(String::new());
    let f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(log)
        .expect("open the log");
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "-".into());
    let rest = format!(
        "{} {} {} {} {}",
        var("DLOCK_NAME"),
        var("DLOCK_FENCE"),
        var("DLOCK_TOKEN"),
        std::process::id(),
        var("CHECKER_CLIENT")
    );
    *LINE.lock().unwrap() = rest.clone();
    use std::os::fd::IntoRawFd;
    let fd = f.into_raw_fd();
    LOG_FD.store(fd as u64, Ordering::SeqCst);
    extern "C" fn on_term(_: libc::c_int) {
        // Not strictly async-signal-safe (formatting allocates), but the main thread is
        // asleep in nanosleep and holds no lock when this runs.
        let fd = LOG_FD.load(Ordering::SeqCst) as i32;
        if let Ok(rest) = LINE.try_lock() {
            let line = format!("X {rest} {}\n", mono_ns());
            // SAFETY: fd is the open log; the buffer is valid for its length.
            unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
        }
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(143) };
    }
    // SAFETY: installing a handler; it only touches statics and async-signal-safe calls.
    unsafe { libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t) };
    let write = |kind: &str| {
        let line = format!("{kind} {rest} {}\n", mono_ns());
        // SAFETY: fd is the open log; the buffer is valid for its length.
        let n = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
        assert_eq!(n as usize, line.len(), "short write to the log");
    };
    write("E");
    // A plain nanosleep syscall: a preloaded libfaketime must not stretch the hold either.
    let ts = libc::timespec {
        tv_sec: hold.as_secs() as i64,
        tv_nsec: hold.subsec_nanos() as i64,
    };
    let mut left = ts;
    // SAFETY: both timespecs are valid; EINTR just ends the hold early.
    unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &ts as *const libc::timespec,
            &mut left as *mut libc::timespec,
        )
    };
    write("X");
    0
}

// ---------------------------------------------------------------------------------------------
// The record of every section, filled in as the log grows.

#[derive(Clone, Debug)]
struct Section {
    fence: u64,
    token: String,
    pid: u32,
    client: String,
    enter: u64,
    /// From its own exit line.
    exit: Option<u64>,
    /// When the checker saw the process gone without an exit line (killed).
    died: Option<u64>,
}

impl Section {
    fn end(&self) -> u64 {
        self.exit.or(self.died).unwrap_or(u64::MAX)
    }
}

#[derive(Default)]
struct Record {
    sections: Vec<Section>,
    offset: usize,
    partial: String,
}

impl Record {
    /// Read what the log gained since last time; return true if anything new came.
    fn pull(&mut self, log: &Path) -> bool {
        let Ok(mut f) = std::fs::File::open(log) else {
            return false;
        };
        use std::io::Seek;
        if f.seek(std::io::SeekFrom::Start(self.offset as u64))
            .is_err()
        {
            return false;
        }
        let mut buf = String::new();
        let Ok(n) = f.read_to_string(&mut buf) else {
            return false;
        };
        self.offset += n;
        self.partial.push_str(&buf);
        let mut new = false;
        while let Some(nl) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=nl).collect();
            let p: Vec<&str> = line.split_whitespace().collect();
            if p.len() != 7 {
                panic!("malformed log line {line:?}");
            }
            let (pid, t): (u32, u64) = (p[4].parse().unwrap(), p[6].parse().unwrap());
            match p[0] {
                "E" => self.sections.push(Section {
                    fence: p[2].parse().unwrap_or(0),
                    token: p[3].to_string(),
                    pid,
                    client: p[5].to_string(),
                    enter: t,
                    exit: None,
                    died: None,
                }),
                _ => {
                    if let Some(s) = self.sections.iter_mut().rev().find(|s| s.pid == pid) {
                        s.exit.get_or_insert(t);
                    }
                }
            }
            new = true;
        }
        new
    }

    /// Mark sections whose process is gone without an exit line.
    fn reap(&mut self) {
        for s in self
            .sections
            .iter_mut()
            .filter(|s| s.exit.is_none() && s.died.is_none())
        {
            if !process_running(s.pid) {
                s.died = Some(mono_ns());
            }
        }
    }
}

use common::running as process_running;

// ---------------------------------------------------------------------------------------------
// Setups and faults.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// SIGKILL the `dlock run` of a holder in its section: its command's whole tree (a
    /// grandchild that keeps writing included) must go before the next holder enters.
    HolderKill,
    /// SIGKILL the command of a holder in its section, not dlock (as `kill -9` of a job's
    /// shell, or the OOM killer's choice): the rest of its tree (the grandchild writer) must
    /// go before the next holder enters.
    CommandKill,
    /// SIGSTOP a holder's `dlock run` for twice the ttl while its child keeps running.
    HolderStop,
    /// A holder's process clock jumps back an hour mid-section (libfaketime).
    ClockJump,
    /// SIGSTOP a minority of store servers (the only one, on a single store) for twice the ttl.
    StoreStop,
    /// Kill a minority of servers and start them again at once from their append-only files.
    RestartAof,
    /// Kill a minority of servers, keep them down longer than the ttl, start them empty.
    RestartEmpty,
    /// SIGKILL the leader of an etcd cluster or ZooKeeper ensemble (one of three), keep it down
    /// for twice the ttl, start it again with its data.
    NodeKill,
    /// SIGKILL the Redis Cluster master that owns the name; its replica takes over; the old
    /// master comes back (as a replica of the new one).
    MasterKill,
    /// Crash a database server (SIGKILL, or PostgreSQL's immediate shutdown) and start it
    /// again at once on its data: committed rows survive, every session is cut.
    ServerRestart,
    /// Partition a holder from its store, or from a majority of a quorum (its own fault
    /// proxies turn into blackholes).
    PartitionBlackhole,
    /// Lose every reply to a holder from its store, or from a majority of a quorum: its
    /// renewals reach the servers and act, unheard.
    PartitionDropReplies,
    /// Partition a holder from a minority of a quorum: it must keep its lock.
    PartitionMinority,
    /// Partition a holder from one member of an etcd cluster or ZooKeeper ensemble (of
    /// three): it keeps its lock, or is stopped as by a cut from a majority.
    PartitionMember,
    /// Lose the reply of a grant the store applied: the client must not enter, and the
    /// orphaned grant must be freed within the ttl.
    LostGrant,
    /// Delay one server (one store of a quorum, one member) by a large fraction of the store
    /// timeout for a while, under contention.
    Delay,
    /// SIGKILL a `dlock run` while it waits for the lock (queued): nothing of it may be left,
    /// and the queue moves on.
    WaiterKill,
    /// SIGSTOP the Redis Cluster master that owns the name past the node timeout (its replica
    /// takes over), then SIGCONT it.
    MasterPause,
    /// A holder whose process clock runs at another rate (libfaketime), cut from its stores
    /// where it has a proxy to be cut by.
    ClockRate,
    /// Restart one member of an etcd cluster or ZooKeeper ensemble (not the leader) on its
    /// data, at once (server_life.rs).
    MemberRestart,
    /// Stop a database server cleanly (PostgreSQL's fast shutdown, MariaDB's SIGTERM) and
    /// start it again at once.
    FastRestart,
    /// Keep a database server down for 7 s while the clients wait for the lock.
    SqlDown,
    /// Restart one server empty at once (the master of the name in a cluster; the file
    /// store's state files wiped): see `forget`.
    ForgetOne,
    /// Restart two servers of a quorum empty, back to back.
    ForgetTwo,
    /// Restart two servers of a quorum empty, half a ttl apart.
    ForgetTwoSpaced,
    /// SIGSTOP a Redis Cluster seed that masters other slots, briefly (cluster.rs).
    SeedFreeze,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::HolderKill => "holder-kill",
            Fault::CommandKill => "command-kill",
            Fault::HolderStop => "holder-stop",
            Fault::ClockJump => "clock-jump",
            Fault::StoreStop => "store-stop",
            Fault::RestartAof => "restart-aof",
            Fault::RestartEmpty => "restart-empty",
            Fault::NodeKill => "node-kill",
            Fault::MasterKill => "master-kill",
            Fault::ServerRestart => "server-restart",
            Fault::PartitionBlackhole => "partition-blackhole",
            Fault::PartitionDropReplies => "partition-drop-replies",
            Fault::PartitionMinority => "partition-minority",
            Fault::PartitionMember => "partition-member",
            Fault::LostGrant => "lost-grant",
            Fault::Delay => "delay",
            Fault::WaiterKill => "waiter-kill",
            Fault::MasterPause => "master-pause",
            Fault::ClockRate => "clock-rate",
            Fault::MemberRestart => "member-restart",
            Fault::FastRestart => "fast-restart",
            Fault::SqlDown => "sql-down",
            Fault::ForgetOne => "forget-one",
            Fault::ForgetTwo => "forget-two",
            Fault::ForgetTwoSpaced => "forget-two-spaced",
            Fault::SeedFreeze => "seed-freeze",
        }
    }

    fn is_partition(self) -> bool {
        self.cuts_majority() || self == Fault::PartitionMinority
    }

    /// A partition that may leave the holder without a majority: if it is stopped, it must be
    /// within the ttl of the cut, with dlock exit 70.
    fn cuts_majority(self) -> bool {
        matches!(
            self,
            Fault::PartitionBlackhole
                | Fault::PartitionDropReplies
                | Fault::PartitionMember
                | Fault::ClockRate
        )
    }
}

const SETUPS: [&str; 14] = [
    "file",
    "redis",
    "quorum3",
    "quorum5",
    "quorum3-frozen",
    "quorum5-frozen",
    "cluster",
    "etcd",
    "zk",
    "postgres",
    "mysql",
    "s3",
    "nats",
    "dynamodb",
];

enum Stores {
    File(tempfile::TempDir),
    Redis(Vec<RedisServer>),
    Cluster(RedisCluster),
    Etcd(EtcdServer),
    Zk(ZkServer),
    Postgres(PgServer),
    Mysql(MariaDb),
    S3(S3Server),
    Nats(NatsServer),
    Dynamo(DynamoServer),
}

struct Setup {
    stores: Stores,
    faults: Vec<Fault>,
    /// The shortest ttl the store can keep: etcd rounds a lease up to whole seconds with a
    /// minimum of 2 s, and ZooKeeper expires sessions on tickTime (500 ms) boundaries, so a
    /// 1 s ttl would be judged against a lease that legitimately lasts longer.
    min_ttl: Duration,
}

impl Setup {
    /// How late past its ttl the store itself may end a dead holder's lease: etcd's lessor
    /// looks for expired leases every 500 ms, and ZooKeeper expires sessions on tickTime
    /// (500 ms here) boundaries, a closeSession written through the ensemble. The others
    /// judge expiry on each request by the server's clock.
    fn expiry_grain(&self) -> Duration {
        match self.stores {
            Stores::Etcd(_) | Stores::Zk(_) => Duration::from_millis(500),
            // A lease on S3 or DynamoDB ends by the server's Date (whole seconds) plus a second's
            // padding, and a waiter sees it at its next look (up to 1.5 s later).
            Stores::S3(_) | Stores::Dynamo(_) => Duration::from_millis(3500),
            // Nats-TTL is whole seconds (dlock rounds a lease up), and the server's expiry
            // timer fires on its own schedule.
            Stores::Nats(_) => Duration::from_millis(1500),
            _ => Duration::ZERO,
        }
    }

    fn new(name: &'static str) -> Setup {
        use Fault::*;
        let redis = |n: usize| -> Vec<RedisServer> {
            (0..n)
                .map(|_| {
                    RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
                })
                .collect()
        };
        let short = Duration::ZERO;
        // A store of one process whose waiters poll (S3, DynamoDB): stopped (SIGSTOP),
        // restarted on its data or without it (forget-one: fences keep rising, floored at the
        // clock), a holder cut from its HTTP port by a proxy; 2 s leases. `clock` adds a
        // holder's clock jumped back or bent (expiry is judged by the server's `Date`).
        let polled = |stores, clock: &[Fault]| Setup {
            stores,
            faults: [
                &[
                    HolderKill,
                    HolderStop,
                    StoreStop,
                    ServerRestart,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    WaiterKill,
                    ForgetOne,
                ],
                clock,
            ]
            .concat(),
            min_ttl: Duration::from_secs(2),
        };
        match name {
            "file" => Setup {
                stores: Stores::File(temp_dir()),
                faults: vec![
                    HolderKill,
                    CommandKill,
                    HolderStop,
                    ClockJump,
                    WaiterKill,
                    ClockRate,
                    ForgetOne,
                ],
                min_ttl: short,
            },
            // A single server restarted empty (forget-one) keeps its fences rising (floored
            // at its clock), but cannot be told from a first use: see `forget`.
            "redis" => Setup {
                stores: Stores::Redis(redis(1)),
                faults: vec![
                    HolderKill,
                    CommandKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    RestartAof,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                    ForgetOne,
                ],
                min_ttl: short,
            },
            "quorum3" | "quorum5" => Setup {
                stores: Stores::Redis(redis(if name == "quorum3" { 3 } else { 5 })),
                faults: vec![
                    HolderKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    RestartAof,
                    RestartEmpty,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    PartitionMinority,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                    ForgetOne,
                    ForgetTwo,
                    ForgetTwoSpaced,
                ],
                min_ttl: short,
            },
            // One member frozen for the whole run (see `frozen`): the holder faults only, as a
            // store fault on another member would leave no majority.
            "quorum3-frozen" | "quorum5-frozen" => Setup {
                stores: Stores::Redis(redis(if name.starts_with("quorum3") { 3 } else { 5 })),
                faults: vec![HolderKill, HolderStop, WaiterKill],
                min_ttl: short,
            },
            // Three masters with one replica each; a master kill fails over to its replica.
            // `wait_replicas=1`: without it a failover may lose a grant (README).
            "cluster" => Setup {
                stores: Stores::Cluster(RedisCluster::start(3, 1)),
                faults: vec![
                    HolderKill,
                    HolderStop,
                    ClockJump,
                    MasterKill,
                    MasterPause,
                    SeedFreeze,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                    ForgetOne,
                ],
                min_ttl: short,
            },
            // Three members; a fault stops or kills the leader (one of three).
            "etcd" => Setup {
                stores: Stores::Etcd(EtcdServer::cluster(3)),
                faults: vec![
                    HolderKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    NodeKill,
                    MemberRestart,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    PartitionMember,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                ],
                min_ttl: Duration::from_secs(2),
            },
            "zk" => Setup {
                stores: Stores::Zk(ZkServer::ensemble(3)),
                faults: vec![
                    HolderKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    NodeKill,
                    MemberRestart,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    PartitionMember,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                ],
                min_ttl: Duration::from_secs(2),
            },
            "postgres" => Setup {
                stores: Stores::Postgres(PgServer::start()),
                faults: vec![
                    HolderKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    ServerRestart,
                    FastRestart,
                    SqlDown,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                ],
                min_ttl: short,
            },
            "mysql" => Setup {
                stores: Stores::Mysql(MariaDb::start()),
                faults: vec![
                    HolderKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    ServerRestart,
                    FastRestart,
                    SqlDown,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                ],
                min_ttl: short,
            },
            // One SeaweedFS gateway, or one DynamoDB Local. No clock faults on S3: libfaketime
            // bends the monotonic clock only with the wall clock, which the faults set back to
            // the monotonic clock's reading (decades off, `common::honest_offset`), and S3
            // refuses a signature made on it (RequestTimeTooSkewed, 78) before the victim
            // enters. DynamoDB Local checks no signature.
            "s3" => polled(Stores::S3(S3Server::start()), &[]),
            "dynamodb" => polled(
                Stores::Dynamo(DynamoServer::start()),
                &[ClockJump, ClockRate],
            ),
            // One server; restarted with its data (server-restart) and with its store dir
            // emptied (forget-one: fences keep rising, floored at the server's clock).
            "nats" => Setup {
                stores: Stores::Nats(NatsServer::start()),
                faults: vec![
                    HolderKill,
                    CommandKill,
                    HolderStop,
                    ClockJump,
                    StoreStop,
                    ServerRestart,
                    PartitionBlackhole,
                    PartitionDropReplies,
                    LostGrant,
                    Delay,
                    WaiterKill,
                    ClockRate,
                    ForgetOne,
                ],
                // Nats-TTL's least is 1 s.
                min_ttl: Duration::from_secs(1),
            },
            other => panic!("unknown setup {other}; the setups are {SETUPS:?}"),
        }
    }

    fn urls(&self) -> Vec<String> {
        match &self.stores {
            Stores::File(d) => vec![format!("file://{}", d.path().display())],
            Stores::Redis(s) => s.iter().map(|s| s.url()).collect(),
            Stores::Cluster(c) => vec![format!("{}?wait_replicas=1", c.url())],
            Stores::Etcd(e) => vec![e.url()],
            Stores::Zk(z) => vec![z.url()],
            Stores::Postgres(p) => vec![p.url()],
            Stores::Mysql(m) => vec![m.url()],
            Stores::S3(s) => vec![s.url()],
            Stores::Nats(n) => vec![n.url()],
            Stores::Dynamo(d) => vec![d.url()],
        }
    }

    /// Round trips to one server in a grant, about, a new connection's included (each `dlock
    /// run` is a new process): a SQL store's transaction takes several (begin, read, write,
    /// commit), and a MariaDB session several more to start; a ZooKeeper grant two (create,
    /// then list the queue), a Redis Cluster grant four (its client asks for the slots and
    /// checks each new node connection before the script, then `WAIT` for the replica);
    /// Redis and etcd one. The delay and lost-grant faults size their
    /// delays by it.
    fn round_trips(&self) -> u32 {
        match &self.stores {
            Stores::Mysql(_) => 8,
            // Read the record, write it (a new connection: one more).
            Stores::S3(_) | Stores::Dynamo(_) => 3,
            Stores::Postgres(_) | Stores::Cluster(_) => 4,
            // Read the record, then write the holder key and the record back to back (their
            // answers come together).
            Stores::Nats(_) => 2,
            Stores::Zk(_) => 2,
            _ => 1,
        }
    }

    /// The server the delay fault slows down, of `servers`: in a Redis Cluster the master of
    /// the name's slot now (the client talks to no other about it), elsewhere each in turn.
    fn delayed_server(&self, n: usize, servers: usize) -> usize {
        match &self.stores {
            Stores::Cluster(c) => c.master_of(&cluster::cluster_key()),
            _ => n % servers,
        }
    }

    /// The servers a fault may take down: a minority (the one server of a single store).
    fn minority(&self) -> usize {
        match &self.stores {
            Stores::Redis(s) if s.len() > 1 => (s.len() - 1) / 2,
            _ => 1,
        }
    }

    /// Keys or state files still there after every client finished. Redis keeps the per-name
    /// fence record `dlock:{ns:name}:f` by design; the file store may keep a state file (a
    /// name whose last lease ran out), which must hold no holder and no waiter, and no
    /// waiter's bell.
    fn leftovers(&self) -> Vec<String> {
        match &self.stores {
            Stores::File(d) => {
                let mut out = Vec::new();
                let ns = d.path().join("default");
                for e in std::fs::read_dir(&ns).unwrap().flatten() {
                    let f = e.file_name().to_string_lossy().to_string();
                    // The flock file, where new state is written before it is swapped in, and
                    // the record of the names released last.
                    if f == ".lock" || f == ".new" || f == ".recent" {
                        continue;
                    }
                    if f == ".q" {
                        let bells = std::fs::read_dir(e.path()).unwrap().flatten();
                        out.extend(bells.map(|b| format!("bell {:?}", b.file_name())));
                        continue;
                    }
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                    let empty = |k: &str| v[k].as_array().is_none_or(|a| a.is_empty());
                    if !f.ends_with(".json") || !empty("holders") || !empty("queue") {
                        out.push(format!("{f}: {text}"));
                    }
                }
                out
            }
            Stores::Redis(servers) => servers.iter().flat_map(redis_leftovers).collect(),
            // Masters only: a replica follows its master.
            Stores::Cluster(c) => (0..c.nodes.len())
                .filter(|&i| c.is_master(i))
                .flat_map(|i| redis_leftovers(&c.nodes[i]))
                .collect(),
            // etcd keeps the per-name record `#r` (no lease) by design; every queue entry
            // `#q/<token>` hangs on its owner's lease and must be gone.
            Stores::Etcd(e) => e
                .keys("dlock/")
                .into_iter()
                .filter(|k| k != &format!("dlock/default/{NAME}/#r"))
                .collect(),
            // ZooKeeper keeps `/dlock`, the namespace node and the name's node (its data is the
            // record); the name's node must have no children (queue entries, leases) left.
            Stores::Zk(z) => {
                let mut out: Vec<String> = z
                    .children(&format!("/dlock/default/{NAME}"))
                    .into_iter()
                    .map(|c| format!("/dlock/default/{NAME}/{c}"))
                    .collect();
                for (parent, keep) in [("/dlock", "default"), ("/dlock/default", NAME)] {
                    out.extend(
                        z.children(parent)
                            .into_iter()
                            .filter(|c| c != keep)
                            .map(|c| format!("{parent}/{c}")),
                    );
                }
                out
            }
            // The per-name record (fence, previous) stays by design; no live holder or waiter
            // row may be left. A row past its expiry (on the server's clock) is dead: every
            // decision ignores it and the next operation on its name deletes it.
            Stores::Postgres(p) => sql_rows(&p.psql(
                "WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms) \
                 SELECT name || ' ' || token FROM dlock.holders, now WHERE expires > ms \
                 UNION ALL SELECT name || ' waiting ' || token FROM dlock.waiters, now \
                 WHERE expires > ms",
            )),
            // The records stay by design; none may list a live holder.
            Stores::S3(_) | Stores::Dynamo(_) => {
                let o = Env::with_stores(self.urls()).run(&["list"]);
                sql_rows(&String::from_utf8_lossy(&o.stdout))
            }
            Stores::Mysql(m) => sql_rows(&m.sql(
                "SELECT CONCAT(name, ' ', token) FROM app.dlock_holders WHERE expires > \
                 TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000 UNION ALL \
                 SELECT CONCAT(name, ' waiting ', token) FROM app.dlock_waiters WHERE expires > \
                 TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000",
            )),
            // The record (`default.r.NAME`) stays by design; no holder or waiter key may be
            // live (the server expires the keys of those that died).
            Stores::Nats(n) => n.live_keys(&["default.h.>", "default.w.>"]),
        }
    }
}

fn sql_rows(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

/// Keys on one Redis server but the per-name fence record `dlock:{ns:name}:f` (kept by design).
fn redis_leftovers(s: &RedisServer) -> Vec<String> {
    s.keys()
        .into_iter()
        .filter(|k| !(k.starts_with("dlock:{") && k.ends_with("}:f")))
        .map(|k| format!("{}: {k}", s.url()))
        .collect()
}

struct Config {
    clients: usize,
    sections: usize,
    ttl: Duration,
    hold: Duration,
    /// Pause between two faults.
    fault_gap: Duration,
    /// Stop a setup that has not finished by then (reported as stalled).
    limit: Duration,
    /// The clock rate of every clock-rate victim, instead of the rates in turn.
    clock_rate: Option<f64>,
    /// Setups run at once (`--jobs N`): 2 at CI scale, 1 at full scale.
    jobs: usize,
}

/// What one fault did: when, to whom, and how it ended.
#[derive(Debug)]
struct Injected {
    fault: Fault,
    /// The victim client's id in the log, for holder faults.
    victim: Option<String>,
    /// When the holder died or froze, or was cut off (for the stuck-lock check).
    at: Option<u64>,
    /// The victim's `dlock run` exit code, for the partition faults and the clock jump.
    exit: Option<i32>,
    outcome: String,
}

impl Injected {
    /// A fault on the store itself: no victim client.
    fn store(fault: Fault, outcome: String) -> Injected {
        Injected {
            fault,
            victim: None,
            at: None,
            exit: None,
            outcome,
        }
    }
}

#[derive(Default)]
struct Tally {
    exits: Mutex<BTreeMap<i32, usize>>,
    /// Every run of the looping clients, for the runs that exited 69 early.
    runs: server_life::Runs,
    /// A sample of what dlock said when it ended with something other than 0.
    said: Mutex<BTreeMap<i32, String>>,
}

impl Tally {
    fn add(&self, code: i32, stderr: &str) {
        *self.exits.lock().unwrap().entry(code).or_default() += 1;
        if code != 0 {
            self.said
                .lock()
                .unwrap()
                .entry(code)
                .or_insert_with(|| stderr.trim().to_string());
        }
    }
}

struct Run {
    env: Env,
    log: PathBuf,
    cfg: Config,
    record: Mutex<Record>,
    tally: Tally,
    done: AtomicBool,
    /// While set, the clients start no new `dlock run` (those running finish): a fault that
    /// needs the lock free or held by its own blocker sets it.
    hold_off: AtomicBool,
}

impl Run {
    fn dlock_run(&self, client: &str, hold: Duration) -> Command {
        self.dlock_run_on(&self.env, client, hold)
    }

    /// `dlock run` as `dlock_run`, on the stores of `env`.
    fn dlock_run_on(&self, env: &Env, client: &str, hold: Duration) -> Command {
        self.dlock_run_ttl(env, client, hold, self.cfg.ttl)
    }

    /// `dlock_run_on` with a ttl of its own.
    fn dlock_run_ttl(&self, env: &Env, client: &str, hold: Duration, ttl: Duration) -> Command {
        let mut c = env.cmd();
        c.args(["run", NAME, "--ttl"])
            .arg(humantime::format_duration(ttl).to_string())
            .args(["-w", "60s", "--"])
            .arg(std::env::current_exe().unwrap())
            .arg("section")
            .arg(&self.log)
            .arg(hold.as_micros().to_string())
            .env("CHECKER_CLIENT", client)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    fn entered(&self) -> usize {
        self.record.lock().unwrap().sections.len()
    }

    /// The section `client` entered, if it has.
    fn section_of(&self, client: &str) -> Option<Section> {
        let record = self.record.lock().unwrap();
        record.sections.iter().find(|s| s.client == client).cloned()
    }

    /// Whether `inspect` lists the `dlock` with this pid in `field` ("holders": on a
    /// majority; "waiters"). A failed `inspect` (a store held up by a fault) lists nobody.
    fn listed(&self, field: &str, pid: u32) -> bool {
        let o = self.env.run(&["--json", "inspect", NAME]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v[field]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["meta"]["pid"] == pid))
    }

    /// Wait until the client's section has begun; returns its child's pid. None if its dlock
    /// ended first (refused) or it did not get in within `limit`.
    fn wait_entered(&self, client: &str, dlock: &mut Child, limit: Duration) -> Option<u32> {
        let start = Instant::now();
        while start.elapsed() < limit {
            let exited = matches!(dlock.try_wait(), Ok(Some(_)));
            if let Some(s) = self.section_of(client) {
                return Some(s.pid);
            }
            if exited {
                return None;
            }
            thread::sleep(Duration::from_millis(1));
        }
        None
    }

    fn wait_gone(&self, pid: u32, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if !process_running(pid) {
                return true;
            }
            thread::sleep(Duration::from_millis(1));
        }
        false
    }

    fn finish(&self, child: &mut Child, limit: Duration) -> i32 {
        self.finish_saying(child, limit).0
    }

    /// `finish`, also returning what dlock said on stderr.
    fn finish_saying(&self, child: &mut Child, limit: Duration) -> (i32, String) {
        self.finish_as(child, limit, true)
    }

    /// `finish_saying`; with `report` false, a dlock still running at `limit` is killed
    /// without the report of its process tree (exit -1 in the tally all the same).
    pub(crate) fn finish_as(
        &self,
        child: &mut Child,
        limit: Duration,
        report: bool,
    ) -> (i32, String) {
        let status = wait_child_saying(child, limit, report);
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let code = match status {
            Some(s) => s.code().unwrap_or_else(|| {
                128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)
            }),
            None => -1,
        };
        self.tally.add(code, &err);
        (code, err)
    }

    fn client(&self, id: usize) {
        let name = format!("c{id}");
        while !self.done.load(Ordering::SeqCst) {
            if self.hold_off.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut c = self.dlock_run(&name, self.cfg.hold);
            let start = mono_ns();
            let mut child = c.spawn().expect("spawn dlock");
            let (code, said) = self.finish_saying(&mut child, Duration::from_secs(120));
            self.tally.runs.add(start, mono_ns(), code, &said);
            server_life::pause_after(code);
        }
    }

    /// One holder fault: a victim with a section long enough to be caught in it.
    fn holder_fault(&self, fault: Fault, n: usize) -> Injected {
        let ttl = self.cfg.ttl;
        let victim = format!("v{n}-{}", fault.name());
        let jump_file = self.env.path(&format!("faketime-{n}"));
        let mut cmd = self.dlock_run(&victim, ttl * 4);
        if fault == Fault::ClockJump {
            // The clock starts honest and is moved once the victim holds the lock.
            // Set back to where the kernel's monotonic clock is (common::honest_offset), so
            // that dlock's check at start-up passes and the jump comes mid-section.
            std::fs::write(&jump_file, format!("{:.3}\n", common::honest_offset())).unwrap();
            cmd.env("LD_PRELOAD", common::libfaketime())
                .env("FAKETIME_TIMESTAMP_FILE", &jump_file)
                .env("FAKETIME_NO_CACHE", "1");
        }
        let mut child = cmd.spawn().expect("spawn the victim");
        let dlock_pid = child.id();
        let Some(_) = self.wait_entered(&victim, &mut child, Duration::from_secs(60)) else {
            let code = self.finish(&mut child, Duration::from_secs(5));
            let said = self.tally.said.lock().unwrap().get(&code).cloned();
            return Injected {
                fault,
                victim: Some(victim),
                at: None,
                exit: None,
                outcome: match code {
                    // dlock refused to time a lease on the bent clock.
                    1 => format!("refused, exit {code}: {}", said.unwrap_or_default()),
                    // Still waiting when its -w ran out: no FIFO on this store.
                    _ => format!("never entered, exit {code}: {}", said.unwrap_or_default()),
                },
            };
        };
        let mut exit = None;
        let at;
        let outcome = match fault {
            Fault::HolderStop => {
                signal(dlock_pid, libc::SIGSTOP);
                at = Some(mono_ns());
                thread::sleep(ttl * 2);
                signal(dlock_pid, libc::SIGCONT);
                let code = self.finish(&mut child, ttl * 4 + Duration::from_secs(10));
                format!("dlock exit {code}")
            }
            Fault::ClockJump => {
                let back = common::honest_offset() - 3600.0;
                std::fs::write(&jump_file, format!("{back:.3}\n")).unwrap();
                at = Some(mono_ns());
                let jumped = Instant::now();
                let code = self.finish(&mut child, ttl * 4 + Duration::from_secs(10));
                exit = Some(code);
                format!(
                    "dlock exit {code} {} ms after the jump",
                    jumped.elapsed().as_millis()
                )
            }
            _ => unreachable!(),
        };
        Injected {
            fault,
            victim: Some(victim),
            at,
            exit,
            outcome,
        }
    }

    fn store_fault(&self, fault: Fault, setup: &mut Setup) -> Injected {
        let ttl = self.cfg.ttl;
        let k = setup.minority();
        let outcome = match &mut setup.stores {
            Stores::Redis(servers) => {
                redis_fault(fault, &mut servers[..k], ttl);
                format!("{k} of {} servers", servers.len())
            }
            Stores::Cluster(c) if fault == Fault::SeedFreeze => cluster::seed_freeze(c),
            Stores::Cluster(c) => cluster::master_fault(c, fault),
            Stores::Etcd(e) => {
                let leader = e.leader();
                match fault {
                    Fault::StoreStop => {
                        e.pause(leader);
                        thread::sleep(ttl * 2);
                        e.resume(leader);
                    }
                    Fault::NodeKill => {
                        e.kill(leader);
                        thread::sleep(ttl * 2);
                        e.restart(leader);
                    }
                    _ => unreachable!(),
                }
                e.wait_healthy();
                format!("leader e{} of 3", leader + 1)
            }
            Stores::Zk(z) => {
                let leader = z.leader().unwrap_or(0);
                match fault {
                    Fault::StoreStop => {
                        z.pause(leader);
                        thread::sleep(ttl * 2);
                        z.resume(leader);
                    }
                    Fault::NodeKill => {
                        z.kill(leader);
                        thread::sleep(ttl * 2);
                        z.restart(leader);
                    }
                    _ => unreachable!(),
                }
                format!("leader {} of 3", leader + 1)
            }
            Stores::Postgres(p) => {
                one_server(fault, ttl, p, PgServer::pause, PgServer::resume, |s| {
                    s.restart()
                })
            }
            Stores::Mysql(m) => one_server(fault, ttl, m, MariaDb::pause, MariaDb::resume, |s| {
                s.restart()
            }),
            Stores::Nats(n) => {
                one_server(fault, ttl, n, NatsServer::pause, NatsServer::resume, |s| {
                    s.restart()
                })
            }
            Stores::S3(s) => {
                stop_or_restart(fault, ttl, s.pid(), || s.restart());
                "the gateway".to_string()
            }
            Stores::Dynamo(d) => {
                stop_or_restart(fault, ttl, d.pid(), || d.restart());
                "the server".to_string()
            }
            Stores::File(_) => unreachable!("no store faults on the file store"),
        };
        Injected::store(fault, outcome)
    }
}

/// A store fault on a store of one server: frozen for twice the ttl, or crashed and started
/// again at once on its data.
fn one_server<S>(
    fault: Fault,
    ttl: Duration,
    s: &mut S,
    pause: fn(&S),
    resume: fn(&S),
    restart: fn(&mut S),
) -> String {
    match fault {
        Fault::StoreStop => {
            pause(s);
            thread::sleep(ttl * 2);
            resume(s);
        }
        Fault::ServerRestart => restart(s),
        _ => unreachable!(),
    }
    "the server".to_string()
}

/// A store fault on independent Redis servers: `hit` is the minority it takes down.
fn redis_fault(fault: Fault, hit: &mut [RedisServer], ttl: Duration) {
    match fault {
        Fault::StoreStop => {
            hit.iter().for_each(|s| s.pause());
            thread::sleep(ttl * 2);
            hit.iter().for_each(|s| s.resume());
        }
        Fault::RestartAof => {
            for s in hit.iter_mut() {
                s.kill();
            }
            for s in hit.iter_mut() {
                s.restart();
            }
        }
        Fault::RestartEmpty => {
            for s in hit.iter_mut() {
                s.kill();
            }
            // README: a server that lost its data stays out longer than the longest ttl.
            thread::sleep(ttl + ttl / 2);
            for s in hit.iter_mut() {
                s.start_again_empty();
            }
        }
        _ => unreachable!(),
    }
}

// ---------------------------------------------------------------------------------------------
// Checking the record.

#[derive(Debug, Default)]
struct Summary {
    sections: usize,
    overlaps: usize,
    /// Overlaps involving a victim of a fault beyond what the setup claims to survive.
    excused: BTreeMap<&'static str, usize>,
    fence_regressions: usize,
    stuck: usize,
    /// Longest wait from a holder's death or freeze to the next entry.
    max_gap_ms: u64,
    /// Median time from one section's clean exit to the next section's entry: a whole
    /// handoff between processes (release, wake-up, grant, fork and exec of the next child).
    median_handoff_us: u64,
    left_behind: usize,
    /// Partitions: the longest time from the cut to the victim's child being stopped, and
    /// to the next section of someone else; and the victims not stopped within the ttl or
    /// whose dlock did not exit 70.
    max_cut_stop_ms: Option<u64>,
    max_cut_next_ms: Option<u64>,
    late_stops: usize,
    /// Holders cut from a minority of a quorum that did not keep their lock (dlock exit 0).
    minority_losses: Option<usize>,
    /// Holders cut from one member of three that were stopped (exit 70) rather than kept it.
    member_cut_stops: Option<usize>,
    /// Lost grant replies: the longest time from the loss to another client's entry, and the
    /// victims that entered all the same (the reply crossed before it could be dropped).
    max_lost_grant_free_ms: Option<u64>,
    lost_grant_heard: usize,
    /// Holder kills: writes of the victim's grandchild after the next holder entered.
    late_writes: Option<usize>,
    details: Vec<String>,
}

/// `spans`: when each fault began and ended (kernel monotonic ns), in the order of `faults`.
fn check(
    record: &Record,
    faults: &[Injected],
    spans: &[(u64, u64)],
    ttl: Duration,
    grain: Duration,
    beyond: &[Fault],
    alone: bool,
) -> Summary {
    let mut s = Summary {
        sections: record.sections.len(),
        ..Summary::default()
    };
    let mut secs = record.sections.clone();
    secs.sort_by_key(|s| s.enter);
    let fault_of = |client: &str| {
        faults
            .iter()
            .find(|f| f.victim.as_deref() == Some(client))
            .map(|f| f.fault)
    };
    // Overlaps: every pair of sections whose intervals intersect.
    let mut active: Vec<&Section> = Vec::new();
    for cur in &secs {
        active.retain(|a| a.end() > cur.enter);
        for a in &active {
            let excuse = [fault_of(&a.client), fault_of(&cur.client)]
                .into_iter()
                .flatten()
                .find(|f| beyond.contains(f))
                .or_else(|| {
                    forget::allowed_overlap(a, cur, faults, spans, ttl, alone)
                        .then_some(Fault::ForgetOne)
                });
            match excuse {
                Some(f) => *s.excused.entry(f.name()).or_default() += 1,
                None => {
                    s.overlaps += 1;
                    if s.details.len() < 10 {
                        s.details.push(format!(
                            "overlap: {} (fence {}, token {}, {}..{}) and {} (fence {}, {}..{})",
                            a.client,
                            a.fence,
                            a.token,
                            a.enter,
                            a.end(),
                            cur.client,
                            cur.fence,
                            cur.enter,
                            cur.end()
                        ));
                    }
                }
            }
        }
        active.push(cur);
    }
    if s.overlaps > 0 {
        // When each fault ran, in the sections' clock, to read the overlaps against.
        for (f, (began, ended)) in faults.iter().zip(spans) {
            s.details
                .push(format!("fault {} ran {began}..{ended}", f.fault.name()));
        }
    }
    let mut handoffs: Vec<u64> = secs
        .windows(2)
        .filter_map(|w| w[0].exit.map(|x| w[1].enter.saturating_sub(x) / 1000))
        .collect();
    handoffs.sort_unstable();
    s.median_handoff_us = handoffs.get(handoffs.len() / 2).copied().unwrap_or(0);
    // Fences: strictly rising in entry order. A grant a single store forgot may enter after
    // the grant made since (see `forget::allowed_overlap`): counted apart, within its bounds.
    let mut top = 0;
    for (i, cur) in secs.iter().enumerate() {
        let forgotten = || {
            secs[..i].iter().any(|p| {
                p.fence > cur.fence && forget::allowed_overlap(p, cur, faults, spans, ttl, alone)
            })
        };
        if cur.fence <= top && forgotten() {
            *s.excused.entry(Fault::ForgetOne.name()).or_default() += 1;
        } else if cur.fence <= top {
            s.fence_regressions += 1;
            if s.details.len() < 20 {
                s.details.push(format!(
                    "fence regression: {} entered with fence {} after fence {top}",
                    cur.client, cur.fence
                ));
            }
        }
        top = top.max(cur.fence);
    }
    partition::check_cuts(&mut s, &secs, faults, ttl);
    // A holder whose clock jumped back cannot time its lease: it must end with exit 70 (its
    // watchdog, on the kernel's clock, stops the command), not with the command's own status.
    for f in faults
        .iter()
        .filter(|f| f.fault == Fault::ClockJump && f.at.is_some() && f.exit != Some(70))
    {
        s.late_stops += 1;
        s.details.push(format!(
            "clock jump: {:?} ended with dlock exit {:?}, not 70",
            f.victim, f.exit
        ));
    }
    // Stuck: after a holder died or froze, someone else must enter within the ttl (plus the
    // time a waiter takes to notice and ask again, measured on this run's hand-offs).
    let slack = slack::slack(ttl, &handoffs);
    lost_grant::check(&mut s, &secs, faults, ttl, slack);
    holder_tree::check(&mut s, faults);
    // A holder cut from a minority (or a member) that kept its lock: nobody is due to enter
    // after it. A lost grant is judged on its own (lost_grant::check).
    for f in faults.iter().filter(|f| {
        !(matches!(f.fault, Fault::PartitionMinority | Fault::PartitionMember) && f.exit == Some(0))
            && f.fault != Fault::LostGrant
    }) {
        let (Some(cut), Some(victim)) = (f.at, &f.victim) else {
            continue;
        };
        // A holder cut from one member renews through the others until it gives up: nobody
        // is due to enter before its child is stopped, so its gap counts from then.
        let at = match f.fault {
            Fault::PartitionMember => secs
                .iter()
                .filter(|x| &x.client == victim)
                .map(Section::end)
                .max()
                .map_or(cut, |end| end.max(cut)),
            _ => cut,
        };
        let next = secs
            .iter()
            .filter(|x| x.enter > at && &x.client != victim)
            .map(|x| x.enter)
            .min();
        let Some(next) = next else { continue };
        // A store fault injected after this one, before anybody entered (a stopped or killed
        // leader, say), holds everyone up on its own account: its time is not this fault's,
        // and the lease may be re-timed once it ends (a new etcd leader renews every lease).
        let (held_up, after_store) = faults
            .iter()
            .zip(spans)
            .filter(|(g, (began, _))| {
                g.victim.is_none() && g.fault != Fault::Delay && *began > at && *began < next
            })
            .fold((0, false), |(t, _), (_, &(began, ended))| {
                (t + (ended - began) / 1_000_000, true)
            });
        let gap = ((next - at) / 1_000_000).saturating_sub(held_up);
        // After a cut the next holder is due within 3 x ttl (max-cut-to-next-ms says how long
        // it took; slack::due says why). max-free-ms counts the other faults.
        if !f.fault.cuts_majority() {
            s.max_gap_ms = s.max_gap_ms.max(gap);
        }
        let due = slack::due(ttl, grain, slack, f.fault.cuts_majority(), after_store);
        if Duration::from_millis(gap) > due {
            s.stuck += 1;
            s.details.push(format!(
                "stuck: {gap} ms after {} of {victim} (due within {} ms)",
                f.fault.name(),
                due.as_millis()
            ));
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------

fn run_setup(name: &'static str, mut cfg: Config, beyond: &[Fault]) -> (String, bool) {
    let mut setup = Setup::new(name);
    cfg.ttl = cfg.ttl.max(setup.min_ttl);
    if matches!(setup.stores, Stores::Dynamo(_)) {
        // DynamoDB Local is a JVM: each of its restarts (server-restart, forget-one) takes
        // 10 to 50 s on a loaded machine before it answers again, all of it stall.
        cfg.limit = cfg.limit.max(Duration::from_secs(300));
    }
    let env = Env::with_stores(setup.urls());
    if frozen::is_frozen(name) {
        frozen::freeze(&setup, &env, cfg.ttl);
    }
    let log = env.path("sections.log");
    let run = Arc::new(Run {
        env,
        log,
        cfg,
        record: Mutex::new(Record::default()),
        tally: Tally::default(),
        done: AtomicBool::new(false),
        hold_off: AtomicBool::new(false),
    });
    let started = Instant::now();
    // The watcher keeps the record current and notices sections that died without an exit.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (run, watching) = (run.clone(), watching.clone());
        thread::spawn(move || {
            let look = || {
                let mut r = run.record.lock().unwrap();
                r.pull(&run.log);
                r.reap();
            };
            while watching.load(Ordering::SeqCst) {
                look();
                thread::sleep(Duration::from_millis(1));
            }
            // Once more when told to stop: the last lines the clients wrote are in.
            look();
        })
    };
    // A panic below (a fault's fixture) must not leave the clients and the watcher looping
    // against servers that are gone while the other setups run.
    struct Stop(Arc<Run>, Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.done.store(true, Ordering::SeqCst);
            self.1.store(false, Ordering::SeqCst);
        }
    }
    let _stop = Stop(run.clone(), watching.clone());
    let clients: Vec<_> = (0..run.cfg.clients)
        .map(|i| {
            let run = run.clone();
            thread::spawn(move || run.client(i))
        })
        .collect();
    // Faults in turn, until every kind was injected at least once and the sections are done.
    let mut injected = Vec::new();
    let mut spans = Vec::new();
    let mut n = 0;
    let mut stalled = false;
    loop {
        if started.elapsed() > run.cfg.limit {
            stalled = true;
            break;
        }
        if n >= setup.faults.len() && run.entered() >= run.cfg.sections {
            break;
        }
        thread::sleep(run.cfg.fault_gap);
        let fault = setup.faults[n % setup.faults.len()];
        let began = mono_ns();
        let inj = match fault {
            Fault::HolderKill | Fault::CommandKill => run.holder_kill_fault(n, fault),
            Fault::HolderStop | Fault::ClockJump => run.holder_fault(fault, n),
            Fault::ClockRate => run.clock_rate_fault(n, &setup),
            Fault::LostGrant => run.lost_grant_fault(n, &setup),
            Fault::Delay => run.delay_fault(n, &setup),
            Fault::WaiterKill => run.waiter_kill_fault(n),
            Fault::SqlDown => run.sql_down_fault(&mut setup, n),
            Fault::MemberRestart | Fault::FastRestart => {
                server_life::store_life(fault, &mut setup, n)
            }
            Fault::ForgetOne | Fault::ForgetTwo | Fault::ForgetTwoSpaced => {
                Injected::store(fault, forget::inject(fault, &mut setup, run.cfg.ttl))
            }
            f if f.is_partition() => run.partition_fault(fault, n, &setup),
            _ => run.store_fault(fault, &mut setup),
        };
        injected.push(inj);
        spans.push((began, mono_ns()));
        n += 1;
    }
    run.done.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    // Let the last deaths be noticed (every section ended or seen dead), then stop watching.
    common::wait_for(Duration::from_secs(2), || {
        run.record
            .lock()
            .unwrap()
            .sections
            .iter()
            .all(|s| s.exit.is_some() || s.died.is_some())
    });
    watching.store(false, Ordering::SeqCst);
    watcher.join().unwrap();
    let elapsed = started.elapsed();
    let (frozen_txt, frozen_ok) = if frozen::is_frozen(name) {
        frozen::thaw(&setup, &run.env, run.cfg.ttl)
    } else {
        (String::new(), true)
    };

    let (mut summary, stalls) = {
        let mut r = run.record.lock().unwrap();
        r.pull(&run.log);
        r.reap();
        let mut secs = r.sections.clone();
        secs.sort_by_key(|s| s.enter);
        let stalls = server_life::stalls(&secs, &injected, &spans);
        // One store that forgot has nobody to remember for it (see `forget`).
        let alone = match &setup.stores {
            Stores::File(_) | Stores::Cluster(_) | Stores::Nats(_) => true,
            Stores::Redis(s) => s.len() == 1,
            _ => false,
        };
        let grain = setup.expiry_grain();
        let summary = check(&r, &injected, &spans, run.cfg.ttl, grain, beyond, alone);
        (summary, stalls)
    };
    let early = server_life::early_unavailable(&run.tally.runs, &injected, &spans, &setup);
    let life_txt = server_life::summary(early.len(), run.tally.runs.unheard(), &stalls);
    summary.details.extend(early.iter().take(10).cloned());
    // A queue entry of a waiter that is gone expires after the waiter ttl (2 s on Redis, 5 s
    // on etcd); only what is still there after that is left behind for good.
    let mut left = setup.leftovers();
    let since = Instant::now();
    while !left.is_empty() && since.elapsed() < Duration::from_secs(6) {
        thread::sleep(Duration::from_millis(100));
        left = setup.leftovers();
    }
    summary.left_behind = left.len();
    summary
        .details
        .extend(left.iter().take(10).map(|l| format!("left behind: {l}")));
    // Nobody may hold the lock now that every client is gone.
    let o = run.env.run(&["--json", "inspect", NAME]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    if v["held"] != false {
        summary.stuck += 1;
        summary.details.push(format!(
            "still held after the run: {}",
            String::from_utf8_lossy(&o.stdout)
        ));
    }

    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for i in &injected {
        *kinds.entry(i.fault.name().to_string()).or_default() += 1;
        for what in ["refused", "never entered", "entered first", "no grant seen"] {
            if i.outcome.starts_with(what) {
                *kinds
                    .entry(format!("{} {what}", i.fault.name()))
                    .or_default() += 1;
            }
        }
    }
    let exits = run.tally.exits.lock().unwrap().clone();
    let beyond_txt = if summary.excused.is_empty() {
        String::new()
    } else {
        format!(
            " beyond-claims-overlaps={}",
            summary
                .excused
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    // Only setups with partitions report them.
    let mut cuts_txt = match (summary.max_cut_stop_ms, summary.max_cut_next_ms) {
        (None, _) => String::new(),
        (Some(stop), next) => format!(
            " late-stops={} max-cut-to-stop-ms={stop} max-cut-to-next-ms={}",
            summary.late_stops,
            next.map_or("-".to_string(), |n| n.to_string())
        ),
    };
    if let Some(n) = summary.minority_losses {
        cuts_txt.push_str(&format!(" minority-cut-losses={n}"));
    }
    if let Some(n) = summary.member_cut_stops {
        cuts_txt.push_str(&format!(" member-cut-stops={n}"));
    }
    if let Some(n) = summary.late_writes {
        cuts_txt.push_str(&format!(" late-writes={n}"));
    }
    if let Some(ms) = summary.max_lost_grant_free_ms {
        cuts_txt.push_str(&format!(
            " max-lost-grant-free-ms={ms} lost-grants-heard={}",
            summary.lost_grant_heard
        ));
    }
    let line = format!(
        "setup={name} sections={} clients={} ttl={} faults={} ({}) overlaps={} \
         fence-regressions={} stuck={} left-behind={}{beyond_txt}{cuts_txt}{life_txt} max-free-ms={} \
         median-handoff-ms={:.2}{frozen_txt} exits={} time={:.0}s{}",
        summary.sections,
        run.cfg.clients,
        humantime::format_duration(run.cfg.ttl),
        injected.len(),
        kinds
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        summary.overlaps,
        summary.fence_regressions,
        summary.stuck,
        summary.left_behind,
        summary.max_gap_ms,
        summary.median_handoff_us as f64 / 1000.0,
        exits
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(","),
        elapsed.as_secs_f64(),
        if stalled { " STALLED" } else { "" }
    );
    let ok = summary.overlaps == 0
        && summary.fence_regressions == 0
        && summary.stuck == 0
        && summary.left_behind == 0
        && summary.late_stops == 0
        && summary.minority_losses.unwrap_or(0) == 0
        && early.is_empty()
        && frozen_ok
        && !stalled;
    if !ok || std::env::var_os("CHECKER_VERBOSE").is_some() {
        for d in &summary.details {
            eprintln!("  {name}: {d}");
        }
        for i in &injected {
            eprintln!(
                "  {name}: fault {} {:?}: {}",
                i.fault.name(),
                i.victim,
                i.outcome
            );
        }
        for (code, said) in run.tally.said.lock().unwrap().iter() {
            eprintln!("  {name}: exit {code}: {said}");
        }
    }
    (line, ok)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("section") {
        let log = PathBuf::from(&args[1]);
        let hold = Duration::from_micros(args[2].parse().unwrap());
        std::process::exit(section(&log, hold));
    }
    if args.first().map(String::as_str) == Some("writer") {
        std::process::exit(holder_tree::writer(Path::new(&args[1])));
    }
    let mut cfg = Config {
        clients: 4,
        sections: 120,
        ttl: Duration::from_secs(1),
        hold: Duration::from_millis(2),
        fault_gap: Duration::from_millis(300),
        limit: Duration::from_secs(120),
        clock_rate: None,
        jobs: 2,
    };
    let mut filters: Vec<String> = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val =
            |what: &str| -> String { it.next().unwrap_or_else(|| panic!("{what} needs a value")) };
        match a.as_str() {
            "--full" => {
                cfg.clients = 16;
                cfg.sections = 10_000;
                cfg.fault_gap = Duration::from_secs(3);
                cfg.limit = Duration::from_secs(3600);
                cfg.jobs = 1;
            }
            "--clients" => cfg.clients = val("--clients").parse().unwrap(),
            "--sections" => cfg.sections = val("--sections").parse().unwrap(),
            "--ttl" => cfg.ttl = humantime::parse_duration(&val("--ttl")).unwrap(),
            // One rate for every clock-rate victim (x0.5 shows what the fault can find).
            "--clock-rate" => cfg.clock_rate = Some(val("--clock-rate").parse().unwrap()),
            "--jobs" => cfg.jobs = val("--jobs").parse().unwrap(),
            "--hold" => cfg.hold = humantime::parse_duration(&val("--hold")).unwrap(),
            "--fault-gap" => {
                cfg.fault_gap = humantime::parse_duration(&val("--fault-gap")).unwrap()
            }
            "--list" => {
                for s in SETUPS.iter().chain(&["sharded"]) {
                    println!("{s}: test");
                }
                return;
            }
            // What libtest would take; meaningless here.
            "--nocapture" | "--quiet" | "-q" | "--exact" | "--include-ignored" | "--ignored"
            | "--show-output" => {}
            "--skip" | "--test-threads" | "--format" | "--color" => {
                it.next();
            }
            f if f.starts_with("--") => {}
            f => filters.push(f.to_string()),
        }
    }
    let chosen: Vec<&'static str> = SETUPS
        .into_iter()
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.contains(f.as_str())))
        .collect();
    common::require("redis-server", "redis-server");
    common::libfaketime();
    // Setups are independent (servers on ports of their own, dirs of their own) and mostly
    // wait on timers: at CI scale two run at once, which keeps the whole checker near three
    // minutes on two cores. Each line is printed as its setup ends.
    let queue = Mutex::new(chosen.into_iter());
    let oks = Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..cfg.jobs.max(1) {
            s.spawn(|| {
                while let Some(name) = { queue.lock().unwrap().next() } {
                    let (line, ok) = guarded(name, || run_setup(name, cfg_clone(&cfg), &[]));
                    println!("checker: {line}{}", if ok { "" } else { " FAILED" });
                    oks.lock().unwrap().push(ok);
                }
            });
        }
    });
    let mut oks = oks.into_inner().unwrap();
    if filters.is_empty() || filters.iter().any(|f| "sharded".contains(f.as_str())) {
        let (line, ok) = guarded("sharded", || sharded::run(cfg.clients, cfg.sections));
        println!("checker: {line}{}", if ok { "" } else { " FAILED" });
        oks.push(ok);
    }
    let passed = oks.iter().filter(|&&ok| ok).count();
    let failed = oks.len() - passed;
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

/// One setup run so that its panic (a server that did not come up, a client's assertion) is
/// its own failed line, with the message, and the other setups still run: a panic out of
/// the scope ended the whole checker with "a scoped thread panicked" and no line at all.
fn guarded(name: &str, f: impl FnOnce() -> (String, bool)) -> (String, bool) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(done) => done,
        Err(e) => {
            let said = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            // One line: the message may span several.
            (format!("setup={name} panicked: {:?}", said), false)
        }
    }
}

fn cfg_clone(c: &Config) -> Config {
    Config {
        clients: c.clients,
        sections: c.sections,
        ttl: c.ttl,
        hold: c.hold,
        fault_gap: c.fault_gap,
        limit: c.limit,
        clock_rate: c.clock_rate,
        jobs: c.jobs,
    }
}

/// A one-process server's store fault: SIGSTOP for twice the ttl, or `restart` on its data.
fn stop_or_restart(fault: Fault, ttl: Duration, pid: u32, restart: impl FnOnce()) {
    match fault {
        Fault::StoreStop => {
            signal(pid, libc::SIGSTOP);
            thread::sleep(ttl * 2);
            signal(pid, libc::SIGCONT);
        }
        Fault::ServerRestart => restart(),
        _ => unreachable!(),
    }
}
