//! The adapter trait every backend implements, and the types that cross it.
//!
//! An adapter knows one store and nothing of the command line or of quorums: it makes one
//! atomic grant attempt, renews and releases by owner token, raises a fence, tells its waiters
//! when to look again, and reports what it holds. The engine (`crate::engine`) builds the
//! majority-quorum lease, waiting and fencing on top of any mix of adapters.
//!
//! The shape follows the two recipes it must host. Stores without a queue (the file store,
//! Redis) answer an attempt with granted or busy. Stores with one (etcd revisions, ZooKeeper
//! sequence nodes) enqueue on an attempt with `queue = true` and report busy until the entry
//! reaches the head; `release` by token removes a queued entry as well as a held one, so a
//! waiter that gives up leaves nothing behind whatever the store.

// The contract's own parts: what a kind of store is, what a server URL names, and how a
// server's connection limit is told apart from an outage.
pub mod conns;
pub mod hostbell;
pub mod kind;
pub mod server;

// The adapters, each knowing the contract and nothing above it (`aws`: what the AWS-protocol
// ones share).
pub mod aws;
pub(crate) mod dynamodb;
pub(crate) mod etcd;
pub(crate) mod file;
pub(crate) mod mysql;
pub(crate) mod nats;
pub(crate) mod postgres;
pub(crate) mod queue;
pub(crate) mod record;
pub mod redis;
pub(crate) mod s3;
pub(crate) mod sql;
pub(crate) mod tls;
pub(crate) mod zk;

// Above the adapters: the table of every kind, and store URLs parsed by it.
pub mod registry;
pub mod url;

// Test-only parts: the contract as a suite, and the stores the engine's unit tests run on.
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(any(test, feature = "conformance"))]
pub mod fault;
#[cfg(any(test, feature = "conformance"))]
pub mod memory;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

/// Longest a waiter sleeps without looking again, in case a notification was lost. It is part
/// of the store contract, not only of the engine's loop: a `Listener` may miss a notification,
/// and a store sizes what its waiters leave behind by it (the life of a Redis wake-up entry).
pub const MAX_POLL: Duration = Duration::from_millis(500);

/// How a lease shares its lock with others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No one else.
    Exclusive,
    /// Other shared holders, never an exclusive one.
    Shared,
    /// Up to this many `Limit` holders at once.
    Limit(u32),
}

impl Mode {
    /// The compact spelling stores keep next to each holder.
    pub fn code(self) -> String {
        match self {
            Mode::Exclusive => "x".into(),
            Mode::Shared => "s".into(),
            Mode::Limit(k) => format!("l{k}"),
        }
    }

    pub fn from_code(s: &str) -> Option<Mode> {
        match s {
            "x" => Some(Mode::Exclusive),
            "s" => Some(Mode::Shared),
            _ => s.strip_prefix('l')?.parse().ok().map(Mode::Limit),
        }
    }

    /// Whether a lease of this mode may be held beside one of `other`: shared with shared,
    /// and `limit K` only with the same K. A `limit 3` beside two `limit 2` holders would make
    /// three where those holders were promised two (issue 26), so a different K is as
    /// incompatible as an exclusive holder: it waits (or is busy with `-n`) until they are gone.
    pub fn shares_with(self, other: Mode) -> bool {
        match (self, other) {
            (Mode::Shared, Mode::Shared) => true,
            (Mode::Limit(a), Mode::Limit(b)) => a == b,
            _ => false,
        }
    }

    /// Whether a new lease of this mode may join the given live holders. Every store applies
    /// this same rule inside its atomic grant (the Lua scripts spell it out again); the stores
    /// with a queue apply it to the entries ahead (`queue::turn`).
    pub fn admits(self, holders: impl IntoIterator<Item = Mode>) -> bool {
        let mut count = 0u32;
        for h in holders {
            count += 1;
            if !self.shares_with(h) {
                return false;
            }
        }
        match self {
            Mode::Exclusive => count == 0,
            Mode::Shared => true,
            Mode::Limit(k) => count < k,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Exclusive => f.write_str("exclusive"),
            Mode::Shared => f.write_str("shared"),
            Mode::Limit(k) => write!(f, "limit {k}"),
        }
    }
}

/// In JSON a mode is its display form: "exclusive", "shared" or "limit K".
impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// How the lease before this one on the same name ended, as the store remembers it.
///
/// The order is "how much the next holder should worry": over a quorum the engine keeps the
/// worst of the members' answers (`max`), and of two `Failed` the one with a status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Previous {
    /// No lease on this name has ended yet.
    #[default]
    None,
    /// The last lease to end was released after its job ended cleanly (exit 0).
    Released,
    /// The last lease to end was released after its job ended any other way (a non-zero
    /// exit, a signal, a stop by dlock); its exit status when known.
    Failed(Option<i32>),
    /// The last lease to end ran out (or was forced): its holder may have died mid-work.
    Expired,
}

impl Previous {
    /// The word the child (`DLOCK_PREVIOUS`), `inspect` and the events show.
    pub fn kind(self) -> &'static str {
        match self {
            Previous::None => "none",
            Previous::Released => "released",
            Previous::Failed(_) => "failed",
            Previous::Expired => "expired",
        }
    }

    /// The exit status of a failed job, when known (`DLOCK_PREVIOUS_EXIT`).
    pub fn exit(self) -> Option<i32> {
        match self {
            Previous::Failed(code) => code,
            _ => None,
        }
    }

    /// The text a store keeps in its per-name record: the word, and for a failed job with a
    /// known status ":CODE" ("failed:137"). Only a status an exit code can be (0 to 255) is
    /// kept: the SQL stores' column is 16 bytes wide.
    pub fn text(self) -> String {
        match self {
            Previous::Failed(Some(code)) if (0..=255).contains(&code) => format!("failed:{code}"),
            other => other.kind().to_string(),
        }
    }

    /// The record's text read back. Records written before "failed" existed say "released"
    /// or "expired"; text this version cannot read says nothing it could trust: none.
    pub fn parse(s: &str) -> Previous {
        match s.split_once(':') {
            Some(("failed", code)) => Previous::Failed(code.parse().ok()),
            _ => match s {
                "released" => Previous::Released,
                "failed" => Previous::Failed(None),
                "expired" => Previous::Expired,
                _ => Previous::None,
            },
        }
    }
}

/// For people: the word, and a failed job's status ("failed (exit 3)").
impl std::fmt::Display for Previous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.exit() {
            Some(code) => write!(f, "{} (exit {code})", self.kind()),
            None => f.write_str(self.kind()),
        }
    }
}

/// In JSON the word alone; the status goes beside it as "previous_exit" where it is shown.
impl Serialize for Previous {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.kind())
    }
}

/// How a lease is given back (`Store::release`): what its successor will be told. The store
/// records it in the same atomic operation as the release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The job ended cleanly (exit 0), or a script released its own `lock`.
    Released,
    /// The job ended any other way; the code dlock ended with, when known.
    Failed(Option<i32>),
    /// A waiter's attempt given back (not granted by a majority, granted too late, or given
    /// up): no job ended, so the name's record keeps the previous holder's outcome as it was.
    Withdrawn,
}

impl Outcome {
    /// What the record says once this release is done; None: leave it as it is.
    pub fn previous(self) -> Option<Previous> {
        match self {
            Outcome::Released => Some(Previous::Released),
            Outcome::Failed(code) => Some(Previous::Failed(code)),
            Outcome::Withdrawn => None,
        }
    }

    /// What the record says once a lease given back with this outcome is released, where
    /// `live` tells whether the lease was still within its time: one that ran out before its
    /// release ended by expiry, whatever its job did after. None: leave the record as it is
    /// (a withdrawn attempt, live or not, was no job's lease).
    pub fn ends(self, live: bool) -> Option<Previous> {
        match self.previous() {
            Some(p) if live => Some(p),
            Some(_) => Some(Previous::Expired),
            None => None,
        }
    }
}

/// One grant attempt: every name in `names` is granted together or none is.
#[derive(Clone, Debug)]
pub struct Acquire {
    /// Sorted and without duplicates (the canonical order `multilock` promises).
    pub names: Vec<String>,
    /// The mode of each name, in the order of `names` (a mixed `multilock` takes some
    /// names shared and others exclusive, all in one grant).
    pub modes: Vec<Mode>,
    pub token: String,
    pub ttl: Duration,
    /// Holder metadata, a small JSON object.
    pub meta: String,
    /// The lease must outlive this process (`lock`), so it may not hang on a client session.
    pub detached: bool,
}

impl Acquire {
    /// The names with their modes, in canonical order.
    pub fn each(&self) -> impl Iterator<Item = (&String, Mode)> {
        self.names.iter().zip(self.modes.iter().copied())
    }

    /// The one mode every name is taken in, if they share one.
    pub fn uniform(&self) -> Option<Mode> {
        let first = *self.modes.first()?;
        self.modes.iter().all(|m| *m == first).then_some(first)
    }

    /// The same request for some of its names (a shard's or a slot's part), each keeping
    /// its mode.
    pub fn part(&self, names: &[String]) -> Acquire {
        let mode = |n: &String| {
            let i = self.names.iter().position(|m| m == n);
            self.modes[i.expect("a name of the request")]
        };
        Acquire {
            names: names.to_vec(),
            modes: names.iter().map(mode).collect(),
            ..self.clone()
        }
    }
}

/// What a store granted, per name in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub fence: u64,
    pub previous: Previous,
    /// When the store's lease may have started running, if that was before the attempt was
    /// sent (a lease renewed ahead and handed over without a round trip); the engine then
    /// reckons the lease from here.
    pub started: Option<tokio::time::Instant>,
}

/// What a store that can lose its data (Redis without persistence, a wiped file store)
/// remembers of one name at a grant attempt: the engine's amnesia rule (`engine::amnesia`)
/// decides by it whether the store may vote. Stores that never forget keep the default
/// `Store::attempt`, which answers `Recall::DURABLE` for every name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recall {
    /// The name's marker was there: the engine set it (`Store::mark`) after a lease this store
    /// voted for, and the store has not lost it since.
    pub marked: bool,
    /// How long the leases the store still holds on the name run on, by its own clock, not
    /// counting the one this attempt may grant (its horizon).
    pub horizon: Duration,
}

impl Recall {
    /// A store whose data survives a restart: always marked.
    pub const DURABLE: Recall = Recall {
        marked: true,
        horizon: Duration::ZERO,
    };
}

/// The floor of every fence a store that can forget hands out: its own wall clock since
/// 2020-01-01 UTC in microseconds, counted in whole milliseconds. A new fence is
/// max(counter + 1, floor): fences still rise within one millisecond, and a store that lost
/// its counters (or went back to an older copy of them: a replica promoted, a restore) starts
/// again above every fence it handed out before, as long as its clock did not step back; no
/// restart takes less than a millisecond. Whole milliseconds keep the members of a quorum on
/// one host mostly in step (each grant's floor agrees, so the bakery rule need not raise
/// one). Values stay below 2^53 (exact as JSON numbers) until the year 2305.
pub fn fence_floor(unix_micros: u64) -> u64 {
    (unix_micros / 1000 * 1000).saturating_sub(FENCE_EPOCH_SECS * 1_000_000)
}

/// 2020-01-01T00:00:00Z in seconds since the Unix epoch (the Lua scripts use it too).
pub const FENCE_EPOCH_SECS: u64 = 1_577_836_800;

/// `fence_floor` by this host's wall clock (the file and in-memory stores).
pub fn fence_floor_now() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    fence_floor(micros)
}

#[derive(Clone, Debug)]
pub enum Attempt {
    Granted(Vec<Granted>),
    /// Not granted. `retry_after`: when the blocking holder's lease runs out, if the store
    /// knows; a waiter looks again by then even if no notification arrives. `patience`: how
    /// long the waiter may go without looking again when nothing tells it of a change
    /// (`None`: `MAX_POLL`); a store that keeps the place of a waiter far back in its line
    /// longer lets it look less often (see `record::rules::Far`).
    Busy {
        retry_after: Option<Duration>,
        patience: Option<Duration>,
    },
}

impl Attempt {
    /// Busy, with the usual patience (`MAX_POLL`).
    pub fn busy(retry_after: Option<Duration>) -> Attempt {
        Attempt::Busy {
            retry_after,
            patience: None,
        }
    }
}

/// One holder as a store reports it.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    /// The first digits of the token: tells holders apart without handing out the token.
    pub owner: String,
    pub mode: Mode,
    pub fence: u64,
    /// Lease time left by the store's own clock.
    pub ttl_left_ms: u64,
    pub meta: serde_json::Value,
}

/// One queued waiter, in queue order, where the store keeps a queue.
#[derive(Clone, Debug, Serialize)]
pub struct Waiter {
    pub owner: String,
    pub mode: Mode,
    pub meta: serde_json::Value,
}

/// What one store knows of one lock name.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockState {
    pub name: String,
    pub holders: Vec<Holder>,
    pub waiters: Vec<Waiter>,
    /// The last fence handed out on this name (0: never granted).
    pub fence: u64,
    /// How the last lease to end, ended.
    pub previous: Previous,
}

/// What kind of failure a store reported: the engine and the exit codes decide by this,
/// never by an error's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not reach the store or it did not answer in time (exit 69).
    Unavailable,
    /// The store refused us: authentication or permission (exit 77).
    Refused,
    /// The store answered with something this version cannot use.
    Protocol,
    /// The URL asks for something this store cannot do (a usage error, exit 64).
    Invalid,
    /// The store as it is configured can never do what was asked (exit 78): a retry cannot
    /// help, a change to the server's setup can (ZooKeeper without TTL nodes for `lock`).
    Config,
    /// The lease a request named no longer exists on the store (it ran out or was revoked).
    LeaseGone,
}

/// One store failure: its kind, the line a user reads, and the client error behind it.
/// The message is the whole user-facing text; `source` is kept for `-v` and debugging, so a
/// message never has to carry a client library's wording for the code to decide on it.
#[derive(Clone, Debug)]
pub struct StoreError {
    kind: ErrorKind,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    /// The server setting whose limit it is at, when it turned us away for having too many
    /// connections (`at_limit`).
    limit: Option<&'static str>,
}

impl StoreError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
            source: None,
            limit: None,
        }
    }
    /// The server turned the connection away because it has as many as `setting` allows
    /// (PostgreSQL's max_connections, MySQL's 1040, Redis's maxclients, ZooKeeper's
    /// maxClientCnxns). An outage like any other (exit 69 when a wait cannot ride it out),
    /// but the server did answer: a wait rides it out from the start, and says why.
    pub fn at_limit(setting: &'static str, message: impl Into<String>) -> StoreError {
        StoreError {
            limit: Some(setting),
            ..StoreError::unavailable(message)
        }
    }
    /// The setting whose limit the server is at, for an `at_limit` error.
    pub fn limit(&self) -> Option<&'static str> {
        self.limit
    }
    pub fn unavailable(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Unavailable, message)
    }
    pub fn refused(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Refused, message)
    }
    pub fn protocol(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Protocol, message)
    }
    pub fn invalid(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Invalid, message)
    }
    pub fn config(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Config, message)
    }
    pub fn lease_gone(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::LeaseGone, message)
    }
    /// Keep the client library's error behind this one.
    pub fn with_source(mut self, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        self.source = Some(Arc::new(e));
        self
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The same error (its kind and source) said as `say` rewords its message.
    pub fn reworded(mut self, say: impl FnOnce(&str) -> String) -> StoreError {
        self.message = say(&self.message);
        self
    }
    /// The same error with `what` (a store's name, a URL) in front of its message.
    pub fn context(mut self, what: impl std::fmt::Display) -> StoreError {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What a failed connection comes down to, said once: "connection refused", or the system's
/// words for another I/O error, from the innermost I/O error among `e`'s causes (client
/// libraries wrap it in layers that each repeat it, or bury it under a guess).
pub fn io_cause(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(e);
    let mut io = None;
    while let Some(c) = cause {
        if let Some(i) = c.downcast_ref::<std::io::Error>() {
            io = Some(i);
        }
        cause = c.source();
    }
    io.map(|i| match i.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        _ => i.to_string(),
    })
}

/// How much a `doctor` finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// As it should be.
    Ok,
    /// Worth knowing; no guarantee depends on it.
    Note,
    /// Something a user of some feature will trip on.
    Warn,
    /// A guarantee of the design contract does not hold as the store is set up.
    Void,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Note => "note",
            Severity::Warn => "warn",
            Severity::Void => "VOID",
        }
    }
}

/// One thing `doctor` learned about a store.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// What was checked: "version", "clock", "persistence", "sessions", ...
    pub check: &'static str,
    pub severity: Severity,
    pub text: String,
}

impl Finding {
    pub fn new(check: &'static str, severity: Severity, text: impl Into<String>) -> Finding {
        Finding {
            check,
            severity,
            text: text.into(),
        }
    }
}

/// What `doctor` asks a store about.
#[derive(Clone, Copy, Debug)]
pub struct HealthQuery {
    /// The ttl locks will use (ZooKeeper's session bounds are judged against it).
    pub ttl: Duration,
    /// Whether the store is one of several in a quorum (persistence matters more there).
    pub in_quorum: bool,
}

/// The store-side facts `doctor` reports, beyond reachability and permissions (which it
/// learns by taking a lease).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Health {
    pub version: Option<String>,
    /// The store's clock minus this host's, where the store tells its time.
    pub clock_offset_ms: Option<i64>,
    pub findings: Vec<Finding>,
    /// The server's connection limit, where it tells it.
    pub connections: Option<conns::ConnLimit>,
}

/// This host's wall clock in ms since the epoch, for comparing with a store's.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The clock finding for a store time `server_ms` read between `before` and `after` (this
/// host's wall clock, ms): the offset from the middle of the round trip, within half of it.
pub fn clock_finding(health: &mut Health, server_ms: i64, before: i64, after: i64) {
    let offset = server_ms - (before + after) / 2;
    health.clock_offset_ms = Some(offset);
    let how = if offset >= 0 { "ahead of" } else { "behind" };
    let text = format!(
        "the store's clock is {}ms {how} this host's (within {}ms)",
        offset.abs(),
        (after - before + 1) / 2
    );
    // Leases are timed by the store, so an offset breaks no lock; it does shift a
    // `--hold-min` window as other hosts see it, and the times `inspect` shows.
    let severity = if offset.abs() > 1000 {
        Severity::Warn
    } else {
        Severity::Ok
    };
    health.findings.push(Finding::new("clock", severity, text));
}

/// Why a renewal failed when the store no longer has the lease and has no record of any
/// lease on the name ending either (a release, an expiry and `unlock --force` all leave one):
/// the store lost its data under the holder. With `StoreError::lease_gone`.
pub const FORGOTTEN: &str =
    "the lease is gone from the store, with no record of its end (was the store's data deleted?)";

/// How `Store::shard_list` treats a record that is already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagWrite {
    /// Write only where there is none yet (a shard's first use), atomically: of two
    /// clients writing different tags at once, one wins and both read back the winner.
    IfAbsent,
    /// Overwrite whatever is there (`dlock shards adopt`, once every client of the old list
    /// is stopped).
    Replace,
    /// Write nothing; answer the record, or "" where there is none (a plain `--store` client
    /// making sure the store serves no shard list, issue 26).
    Read,
}

/// Wakes a waiter when a lock it waits for may have changed hands.
#[async_trait]
pub trait Listener: Send {
    /// Returns when a release (or any change that may admit us) was seen, or after `max`.
    /// A notification may be missed or spurious: the caller always tries again after it.
    async fn changed(&mut self, max: Duration);
}

/// One store. Implementations must keep every rule of the design contract: one atomic
/// conditional operation per grant, expiry by the store's clock, owner-checked renew and
/// release, a per-name fence that rises with every grant.
#[async_trait]
pub trait Store: Send + Sync {
    /// The store's URL with secrets redacted, for messages.
    fn describe(&self) -> &str;

    /// One atomic grant attempt for all of `req.names`. With `queue`, a store that keeps a
    /// queue enqueues the waiter (once per token) and a store without one may register it
    /// for a wake-up.
    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt>;

    /// `try_acquire`, telling also what the store remembers of each name, in the order of
    /// `req.names`, as it was before this attempt (see `Recall`). Stores that can lose their
    /// data answer this from the same atomic operation as the grant.
    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        let a = self.try_acquire(req, queue).await?;
        Ok((a, vec![Recall::DURABLE; req.names.len()]))
    }

    /// Set the marker of each name (`Recall::marked`): the engine calls it once the store
    /// voted for a lease while it lacked one, so that a later loss of its data shows.
    async fn mark(&self, _names: &[String]) -> StoreResult<()> {
        Ok(())
    }

    /// Start listening for changes to `req.names` (before the next queued attempt, so that a
    /// release between the attempt and the wait is not missed).
    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>>;

    /// Push the lease's expiry to `ttl` from now if `token` still holds every name.
    /// `Ok(false)`: it does not (expired, released, or never granted here). A store that can
    /// tell that it lost the lease with its data answers `ErrorKind::LeaseGone` instead,
    /// saying so (`FORGOTTEN`): the engine takes it as the same "no", with a reason.
    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool>;

    /// Release whatever `token` holds or has queued on `names`, and record how the lease
    /// ended (`Outcome`) in the same atomic operation. `Ok(true)` if it held any.
    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool>;

    /// Drop every holder of `names`. `Ok(true)` if there was any.
    async fn force_release(&self, names: &[String]) -> StoreResult<bool>;

    /// Make the fence counter of each name at least the given value, so the next grant on
    /// this store hands out more (the bakery rule of the quorum engine).
    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()>;

    async fn inspect(&self, name: &str) -> StoreResult<LockState>;

    /// Every name under the prefix that has a live holder.
    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>>;

    /// The namespace's shard-list record: the fingerprint of the shard list this store serves
    /// (see `crate::shard::record`). Write `tag` as `write` says, in one atomic operation,
    /// and answer the record as it stands afterwards ("" for none, after `TagWrite::Read`). It lives apart from every lock name's
    /// keys, never expires, and is never listed as a lock.
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String>;

    /// Whether this store's server already answered this process when it was opened (a
    /// connection accepted, a cluster's slot map read, a database session opened), or has
    /// let it connect since, though it may not have served a request yet (a ZooKeeper server
    /// that accepts connections during an election). The engine then takes a later failure
    /// for the store's own life (a restart, a failover, an election) and lets a wait ride it
    /// out, where a store that never answered is more likely a wrong URL and fails at once.
    /// A store that does not contact its server at open keeps `false` until it does: the
    /// engine also counts it as known from its first answer to an attempt or a read.
    fn reached(&self) -> bool {
        false
    }

    /// Whether the store is this host's own file system, with no network in between: its
    /// failures (a full disk, a read-only mount) are answers, never a silence to wait out.
    fn local(&self) -> bool {
        false
    }

    /// Hints for `inspect` about how this store is set up (e.g. missing persistence).
    async fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// What `doctor` reports of the store's setup: version, clock, persistence, limits.
    /// Stores that can tell nothing more than their locks do keep this default.
    async fn health(&self, _query: HealthQuery) -> StoreResult<Health> {
        Ok(Health::default())
    }
}

/// `list` for stores that find candidate names first: inspect each (sorted, once) and keep
/// those with a live holder.
pub(crate) async fn held_states(
    store: &dyn Store,
    mut names: Vec<String>,
) -> StoreResult<Vec<LockState>> {
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let st = store.inspect(&name).await?;
        if !st.holders.is_empty() {
            out.push(st);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compatibility_rules() {
        use Mode::*;
        assert!(Exclusive.admits([]));
        assert!(!Exclusive.admits([Shared]));
        assert!(Shared.admits([Shared, Shared]));
        assert!(!Shared.admits([Exclusive]));
        assert!(!Shared.admits([Limit(3)]));
        assert!(Limit(2).admits([Limit(2)]));
        assert!(!Limit(2).admits([Limit(2), Limit(2)]));
        assert!(!Limit(2).admits([Exclusive]));
        // A different K never joins: it would break the promise the holders were given.
        assert!(!Limit(3).admits([Limit(2), Limit(2)]));
        assert!(!Limit(1).admits([Limit(2)]));
        assert!(!Limit(2).admits([Shared]));
    }

    #[test]
    fn mode_codes_round_trip() {
        for m in [Mode::Exclusive, Mode::Shared, Mode::Limit(7)] {
            assert_eq!(Mode::from_code(&m.code()), Some(m));
        }
        assert_eq!(Mode::from_code("q"), None);
    }

    #[test]
    fn previous_round_trips_through_its_record_text() {
        for p in [
            Previous::None,
            Previous::Released,
            Previous::Failed(None),
            Previous::Failed(Some(0)),
            Previous::Failed(Some(137)),
            Previous::Expired,
        ] {
            assert_eq!(Previous::parse(&p.text()), p);
        }
        // Records of earlier versions, and text this version cannot read.
        assert_eq!(Previous::parse("released"), Previous::Released);
        assert_eq!(Previous::parse("expired"), Previous::Expired);
        assert_eq!(Previous::parse(""), Previous::None);
        assert_eq!(Previous::parse("vanished"), Previous::None);
        assert_eq!(Previous::parse("failed:x"), Previous::Failed(None));
        // Not an exit code: the word is kept, the status is not (the SQL column is narrow).
        assert_eq!(Previous::Failed(Some(-2147483648)).text(), "failed");
    }

    #[test]
    fn the_worst_previous_keeps_a_failed_status() {
        use Previous::*;
        assert!(None < Released && Released < Failed(Option::None));
        assert!(Failed(Option::None) < Failed(Some(3)) && Failed(Some(255)) < Expired);
    }
}
