//! Every clap definition, and nothing else. Completions and man pages are generated from here.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::names;
use crate::store::registry;

/// Longest ttl or wait a user may ask for: long enough for any real lease, short enough that
/// deadline arithmetic can never overflow on any store.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);
/// Shortest ttl: below this the renewal period (ttl/3) and the drift margin stop making sense.
pub const MIN_TTL: Duration = Duration::from_millis(100);

#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    about = format!("Distributed locks for shell commands, on {}", registry::named()),
    long_about = "Distributed locks for shell commands.\n\n\
        Wrap a command with `dlock run NAME -- CMD` so two copies never run at once, take and \
        release locks from scripts with `lock`/`unlock`, and see who holds one with `inspect`. \
        With no --store the embedded file store is used, one directory per user and host \
        (/run/lock/dlock-$UID, else /tmp/dlock-$UID: `dlock doctor` says which); give several \
        --store URLs for a lock held by a majority of them. \
        Durations are 500ms, 30s, 5m, 1h, or a bare number of seconds (5, 0.5).",
    after_help = "Exit codes: 0 ok, 1 not the holder / failure, 64 usage, 69 stores unavailable, \
        70 lock lost (run), 74 lock's token not written (released), 75 not acquired, 77 refused by the store, 78 store misconfigured, \
        124 --max-runtime ran out (run). `check`: 0 while the token holds, 1 when it does not.",
    propagate_version = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug)]
pub struct GlobalArgs {
    #[arg(long = "store", value_name = "URL", global = true, help = format!(
        "Store URL; repeat for a majority quorum [env: DLOCK_STORE, comma-separated] [schemes: {}]",
        registry::schemes()
    ))]
    pub stores: Vec<String>,

    /// One shard: a store URL or a comma-separated quorum; repeat to spread lock names over
    /// several shards (every client must give the same shards) [env: DLOCK_SHARDS, shards
    /// separated by ;]
    #[arg(long = "shard", value_name = "STORES", global = true)]
    pub shards: Vec<String>,

    /// Namespace that keeps unrelated users' lock names apart
    #[arg(long, value_name = "NS", env = "DLOCK_NAMESPACE", default_value = "default",
          value_parser = names::parse_namespace, global = true)]
    pub namespace: String,

    /// Print results as JSON on stdout
    #[arg(long, global = true)]
    pub json: bool,

    /// When to colour output (never when NO_COLOR is set)
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto, global = true)]
    pub color: ColorWhen,

    /// Say more on stderr (repeat for more)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Say nothing on stderr but errors
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Time one store may take to answer before it counts as unreachable [default: ttl/10, at most 1s]
    #[arg(long, value_name = "DUR", env = "DLOCK_STORE_TIMEOUT", value_parser = parse_store_timeout,
          global = true)]
    pub store_timeout: Option<Duration>,
}

/// The rest of `run --help` and of dlock-run(1): what the command sees, how dlock ends, and
/// the three uses people come for.
const RUN_AFTER_HELP: &str = "\
Environment of the command:
  DLOCK_NAME      the lock name (with --any, the one taken)
  DLOCK_TOKEN     the lease's owner token (for `dlock extend` or `dlock unlock`)
  DLOCK_FENCE     the fencing token: an integer that rises with every grant of the name; pass
                  it to the storage you write to and refuse writes with an older one
  DLOCK_FENCES    name=fence for every name held, comma-separated (multilock)
  DLOCK_PREVIOUS  how the lease before this one ended: none; released (its command exited 0);
                  failed (a non-zero exit, a signal, a stop by dlock); or expired (its holder
                  vanished mid-work): clean up after anything but released or none
  DLOCK_PREVIOUS_EXIT  after failed, the code that run ended with (3, 137 for SIGKILL, 124
                  for --max-runtime, 70 for a lost lock), when known; unset otherwise
  DLOCK_STORE_ID  the stores and namespace of the lease, as a digest: a `dlock run` of the
                  same name inside the command runs at once and takes nothing
  DLOCK_LEASE_FILE  a file of KEY=VALUE lines, rewritten whole as the lease changes:
                  state=held|renewing-late|lost, deadline_unix_ms, fence, updated_unix_ms;
                  removed when the run ends (--warn-signal, --on-lost: told at `lost`)

When the job ends (the job: the command and every process it started):
  the command is killed, or dlock stops it (Ctrl-C, a signal dlock forwards, a lost lease,
    --max-runtime): the rest of the job gets SIGTERM, SIGKILL one --kill-grace later; then
    the lock is released
  the command exits on its own and processes it started still run: the lock is held, and
    renewed, until they exit (stderr names them); --leave-running releases at once instead
  dlock itself is killed: its watchdog (`dlock-watchdog` in ps) stops the job the same way,
    then releases the lock

Exit codes:
  the command's own code when it ran; 128+N when it was killed by signal N
  64   usage: a bad flag, URL, duration or name
  69   stores unavailable: no majority reachable in time
  70   the lock was lost while the command ran; the command was stopped
  75   not acquired: busy with -n, or -w ran out (-E CODE replaces it)
  77   refused by the store: authentication or permission
  78   configuration: the store can never do this as it is set up
  124  --max-runtime ran out; the command was stopped
  126, 127  the command could not be run, or was not found

Examples:
  # A cron job that skips a run while the last one is still going:
  dlock run nightly-backup -n -- /usr/local/bin/backup.sh

  # One deploy at a time across hosts, on a majority of three Redis servers:
  dlock --store redis://r1:6379 --store redis://r2:6379 --store redis://r3:6379 \\
      run deploy -w 10m --reason \"release 1.4\" -- make deploy

  # Writes the storage refuses from an older holder (see DLOCK_FENCE):
  dlock run db-migrate -- sh -c './migrate --fence \"$DLOCK_FENCE\"'";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Take a lock that outlives this process and print its token
    Lock(LockArgs),
    /// Release a lock by its token, or any holder with --force
    Unlock(UnlockArgs),
    /// Renew a lease held by a token
    Extend(ExtendArgs),
    /// Exit 0 while a token holds a lock, 1 when it does not (69: the stores cannot tell)
    Check(CheckArgs),
    /// Run a command while holding a lock, renewing it until the command exits
    #[command(alias = "run-with-lock", after_long_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Take several locks at once, all or none, then run a command or print the token
    Multilock(MultilockArgs),
    /// Show who holds a lock, its fence and its waiters
    Inspect(InspectArgs),
    /// Check each store for what dlock's guarantees need: reachable, permitted, persistent
    Doctor(DoctorArgs),
    /// List the locks that are held
    List(ListArgs),
    /// Wait until a lock is free, without taking it
    Wait(WaitArgs),
    /// Manage the shard list that --shard gives
    Shards(ShardsArgs),
    /// Print a shell completion script
    Completions(CompletionsArgs),
}

#[derive(Args, Debug)]
pub struct ShardsArgs {
    #[command(subcommand)]
    pub action: ShardsAction,
}

#[derive(Subcommand, Debug)]
pub enum ShardsAction {
    /// Make the --shard list the one its stores serve (stop every client of the old list
    /// first); refused while any lock is held on them
    Adopt,
}

/// How to wait and what to do when the lock is busy.
#[derive(Args, Debug, Clone)]
pub struct AcquireArgs {
    /// Lease time; renewed by `run`, kept until then by `lock`
    #[arg(long, value_name = "DUR", env = "DLOCK_TTL", default_value = "30s", value_parser = parse_ttl)]
    pub ttl: Duration,

    /// Wait at most this long for the lock (default: forever)
    #[arg(short = 'w', long = "wait", visible_alias = "timeout", value_name = "DUR",
          value_parser = parse_wait, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once if the lock is busy
    #[arg(short = 'n', long = "no-wait", visible_alias = "nonblock")]
    pub no_wait: bool,

    /// Exit code when the lock is not acquired (default 75)
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "CODE")]
    pub conflict_exit_code: Option<u8>,
}

/// Exclusive unless told otherwise.
#[derive(Args, Debug, Clone)]
pub struct ModeArgs {
    /// Share the lock with other --shared holders (readers); exclusive holders wait
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,

    /// Let up to K holders in at once (a semaphore)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: Option<u32>,
}

/// What a holder tells others about itself, and where it reports what happens to its lease.
#[derive(Args, Debug, Clone)]
pub struct HolderArgs {
    /// Why the lock is taken; shown to whoever waits for it, by `inspect` and `list`
    /// (at most 200 bytes are kept)
    #[arg(long, value_name = "TEXT", env = "DLOCK_REASON")]
    pub reason: Option<String>,

    /// Append one JSON object per line for each event of the lease (waiting, acquired,
    /// renewed, renew-failed, renew-late, lost, released) to FILE; `-` is stdout (`run` and
    /// `multilock -- CMD` only, where dlock prints no result of its own)
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,

    /// After the run, record it in this node_exporter textfile-collector file (Prometheus
    /// text format, replaced atomically): last start, success and failure times, exit code,
    /// duration, wait, busy skips and lost leases, labelled by lock name; several names and
    /// runs may share one file
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,
}

/// How a supervised job is stopped, and when it has ended.
#[derive(Args, Debug, Clone)]
pub struct SuperviseArgs {
    /// Always the time between SIGTERM and SIGKILL when a job is stopped (its command killed,
    /// --max-runtime, dlock gone, the lease lost); a lease that cannot be renewed gets its
    /// SIGTERM this long before it would run out [default: ttl/4, at most 10s]
    #[arg(long, value_name = "DUR", value_parser = parse_grace)]
    pub kill_grace: Option<Duration>,
    /// Release when the command exits, even if processes it started still run (they go on
    /// outside the lock: a deploy that starts a daemon). Without it the lock is held until
    /// they have exited too, as flock's would be
    #[arg(long)]
    pub leave_running: bool,
    /// The moment the lease is known lost (the store refused a renewal: `unlock --force`, an
    /// expiry; or no renewal by the point of no return), run this shell command (`sh -c`)
    /// with the lease's DLOCK_* variables and DLOCK_LOST_REASON. It runs beside the job and
    /// is not waited for: the job is stopped at the usual time
    #[arg(long, value_name = "CMD")]
    pub on_lost: Option<String>,
    /// The moment the lease is known lost, send this signal (USR1, SIGUSR2, 10...) to the
    /// command's process group, just before the SIGTERM that stops it. A process of the
    /// group that does not catch it gets its default action (USR1, USR2: terminate)
    #[arg(long, value_name = "SIG", value_parser = parse_signal)]
    pub warn_signal: Option<i32>,
}

#[derive(Args, Debug)]
pub struct LockArgs {
    /// Lock name
    #[arg(value_parser = names::parse_name)]
    pub name: String,
    #[command(flatten)]
    pub acquire: AcquireArgs,
    #[command(flatten)]
    pub mode: ModeArgs,
    #[command(flatten)]
    pub holder: HolderArgs,
    /// Leave a renewer process behind that renews the lease every ttl/3 until `dlock unlock
    /// --token` (which stops it and releases), the lease is lost, or the --follow process ends
    #[arg(long)]
    pub keepalive: bool,
    /// With --keepalive: the process whose end releases the lock: `parent` (the default: the
    /// shell or program that ran `dlock lock`), a PID, or `none` (only unlock or a lost lease
    /// end the hold: a CI job's later steps)
    #[arg(long, value_name = "PID|parent|none", requires = "keepalive", value_parser = parse_follow)]
    pub follow: Option<Follow>,
}

/// Which process a `lock --keepalive` hold ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// The process that ran `dlock lock`.
    Parent,
    Pid(u32),
    /// None: the hold ends only by unlock or loss.
    Nothing,
}

fn parse_follow(s: &str) -> Result<Follow, String> {
    match s.trim() {
        "parent" => Ok(Follow::Parent),
        "none" => Ok(Follow::Nothing),
        n => match n.parse::<u32>() {
            Ok(pid) if pid > 0 && pid <= i32::MAX as u32 => Ok(Follow::Pid(pid)),
            _ => Err(format!(
                "{s:?} is not a process id; give a PID, parent or none"
            )),
        },
    }
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("who").required(true).args(["token", "force"])))]
pub struct UnlockArgs {
    /// Lock name
    #[arg(value_parser = names::parse_name)]
    pub name: String,
    /// Token printed by `lock`
    #[arg(long, value_name = "TOKEN", value_parser = names::parse_token)]
    pub token: Option<String>,
    /// Release every holder, whoever it is
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct ExtendArgs {
    /// Lock name
    #[arg(value_parser = names::parse_name)]
    pub name: String,
    /// Token printed by `lock`
    #[arg(long, value_name = "TOKEN", value_parser = names::parse_token)]
    pub token: String,
    /// New lease time, counted from now
    #[arg(long, value_name = "DUR", env = "DLOCK_TTL", default_value = "30s", value_parser = parse_ttl)]
    pub ttl: Duration,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Lock name
    #[arg(value_parser = names::parse_name)]
    pub name: String,
    /// Token printed by `lock`
    #[arg(long, value_name = "TOKEN", value_parser = names::parse_token)]
    pub token: String,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Lock name (with --any, none: every name goes to --any)
    // Checked by `run` (names::parse_name): with --any this slot holds the command's first
    // word, since clap fills positionals in order, `--` or not.
    #[arg(value_name = "NAME")]
    pub name: Option<OsString>,
    /// Whether NAME came before --any on the command line (set from the parse, not a flag):
    /// then it is a name given alongside --any, a usage error, not the command.
    #[arg(skip)]
    pub name_before_any: bool,
    /// Take whichever of these names is free first (tried in a random rotation; waits on all
    /// of them); the command learns which from DLOCK_NAME. End the names with `--`.
    #[arg(long, value_name = "NAME", num_args = 1.., value_parser = names::parse_name)]
    pub any: Vec<String>,
    #[command(flatten)]
    pub acquire: AcquireArgs,
    #[command(flatten)]
    pub mode: ModeArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub holder: HolderArgs,
    #[command(flatten)]
    pub cron: CronArgs,
    /// Command to run, after `--`
    // No allow_hyphen_values: a word that looks like a flag before the command (a typo, a flag
    // of another version) is a usage error naming it, never a command to execute; after `--`
    // or after the command's first word, everything is the command's.
    // Required, but checked by `run` itself: clap allows no optional positional (the name,
    // with --any) before a required one.
    #[arg(value_name = "CMD", num_args = 1.., trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// Helpers for jobs a scheduler starts on many hosts at once.
#[derive(Args, Debug, Clone)]
pub struct CronArgs {
    /// Keep the lock at least this long after the command started, even if it ends sooner
    /// (the lease is left to expire on the store; dlock exits with the command)
    #[arg(long, value_name = "DUR", value_parser = parse_hold_min)]
    pub hold_min: Option<Duration>,

    /// Stop the command after this long: SIGTERM to its group, SIGKILL after --kill-grace,
    /// then release; dlock exits 124
    #[arg(long, value_name = "DUR", value_parser = parse_positive)]
    pub max_runtime: Option<Duration>,

    /// Sleep a random time up to this long before trying for the lock
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub jitter: Option<Duration>,
}

#[derive(Args, Debug)]
pub struct MultilockArgs {
    /// Lock names to take exclusively, all taken or none
    #[arg(value_name = "NAME", required_unless_present = "shared", num_args = 1..,
          value_parser = names::parse_name)]
    pub names: Vec<String>,
    /// Also take this name shared (with other sharers, never with an exclusive holder); may
    /// repeat
    #[arg(long = "shared", value_name = "NAME", value_parser = names::parse_name)]
    pub shared: Vec<String>,
    #[command(flatten)]
    pub acquire: AcquireArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub holder: HolderArgs,
    /// Command to run while all locks are held; without it the token is printed
    #[arg(value_name = "CMD", last = true)]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct WaitArgs {
    /// Lock name
    #[arg(value_parser = names::parse_name)]
    pub name: String,

    /// Wait at most this long for the lock to be free (default: forever)
    #[arg(short = 'w', long = "wait", visible_alias = "timeout", value_name = "DUR",
          value_parser = parse_wait)]
    pub wait: Option<Duration>,

    /// Exit code when the lock is still held at the end of the wait (default 75)
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "CODE")]
    pub conflict_exit_code: Option<u8>,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Lock name
    #[arg(value_parser = names::parse_name)]
    pub name: String,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The ttl the locks will use: ZooKeeper's session bounds are checked against it
    #[arg(long, value_name = "DUR", env = "DLOCK_TTL", default_value = "30s", value_parser = parse_ttl)]
    pub ttl: Duration,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only names that start with this
    #[arg(value_name = "PREFIX", default_value = "", value_parser = names::parse_prefix)]
    pub prefix: String,
    /// The held names alone, one a line: what shell completion offers
    #[arg(long, hide = true)]
    pub names: bool,
    /// table: for people; prometheus: the Prometheus text format (holders, how long the
    /// oldest has held, waiters; one series per name), for a scrape script
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFormat {
    Table,
    Prometheus,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// Shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The clap command, for completions and man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// The global options alone, as the top of `command()` has them (see `one_subcommand`).
pub fn globals() -> clap::Command {
    GlobalArgs::augment_args(clap::Command::new("dlock"))
}

/// The command line with one subcommand, `name`, under `globals()`: what a parse of that
/// subcommand needs, without building the others. The whole tree was most of a start-up's
/// heap (each subcommand's arguments, and clap copies every global option into each
/// subcommand: 145 KB of 220) and about a tenth of an uncontended `run`. Only what parses
/// is here: each subcommand's arguments and their groups come from its derived `Args`, and
/// a variant of `Command` carries help text and aliases only, which the whole tree answers
/// (`parse` goes to it for help, version and every error). A test holds each subcommand
/// here equal to its place in `command()`, help text aside.
pub fn one_subcommand(globals: clap::Command, name: &str) -> Option<clap::Command> {
    let own: fn(clap::Command) -> clap::Command = match name {
        "lock" => LockArgs::augment_args,
        "unlock" => UnlockArgs::augment_args,
        "extend" => ExtendArgs::augment_args,
        "check" => CheckArgs::augment_args,
        "run" => RunArgs::augment_args,
        "multilock" => MultilockArgs::augment_args,
        "inspect" => InspectArgs::augment_args,
        "doctor" => DoctorArgs::augment_args,
        "list" => ListArgs::augment_args,
        "wait" => WaitArgs::augment_args,
        "shards" => ShardsArgs::augment_args,
        "completions" => CompletionsArgs::augment_args,
        _ => return None,
    };
    Some(
        globals
            .subcommand_required(true)
            // As `Cli` says: clap would otherwise give `shards` a `help` subcommand here.
            .disable_help_subcommand(true)
            .subcommand(own(clap::Command::new(name.to_string()))),
    )
}

/// A humantime duration within the bounds every store can represent. A bare number is
/// seconds, as `flock -w 5` and `timeout 0.5` take it, so habits from those tools carry over.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = match bare_seconds(t) {
        Some(secs) => Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is too long; the most is 366 days"))?,
        None => humantime::parse_duration(t).map_err(|e| {
            format!("{s:?} is not a duration ({e}); write e.g. 5 (seconds), 500ms, 30s, 5m or 1h")
        })?,
    };
    if d > MAX_DURATION {
        return Err(format!("{s:?} is too long; the most is 366 days"));
    }
    Ok(d)
}

/// `5`, `0.5`, `.5`: plain decimal seconds (no sign, exponent, `inf` or `nan`).
fn bare_seconds(t: &str) -> Option<f64> {
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    t.parse().ok()
}

fn parse_positive(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} is no time at all; give e.g. 10m"));
    }
    Ok(d)
}

fn parse_hold_min(s: &str) -> Result<Duration, String> {
    let d = parse_positive(s)?;
    if d < MIN_TTL {
        return Err(format!(
            "a --hold-min of {s:?} is too short; the least is 100ms"
        ));
    }
    Ok(d)
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_TTL {
        return Err(format!("a ttl of {s:?} is too short; the least is 100ms"));
    }
    Ok(d)
}

fn parse_wait(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

fn parse_grace(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("a kill grace of 0 leaves the command no time to stop; give e.g. 2s".into());
    }
    Ok(d)
}

/// Signals by name, as kill(1) spells them (without `SIG`).
const SIGNALS: [(&str, i32); 28] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
];

/// `--warn-signal`: a signal by name (`USR1`, `SIGUSR1`, any case) or number. SIGKILL and
/// SIGSTOP cannot be caught, so they cannot warn: the stop that follows is dlock's.
pub fn parse_signal(s: &str) -> Result<i32, String> {
    let t = s.trim();
    let upper = t.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let sig = match t.parse::<i32>() {
        Ok(n) if (1..=libc::SIGRTMAX()).contains(&n) => n,
        Ok(_) => {
            return Err(format!(
                "{s:?} is not a signal number (1 to {})",
                libc::SIGRTMAX()
            ));
        }
        Err(_) => SIGNALS
            .iter()
            .find(|(name, _)| *name == bare)
            .map(|(_, n)| *n)
            .ok_or_else(|| {
                format!("{s:?} is not a signal; give a name such as USR1, USR2, HUP or a number")
            })?,
    };
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        return Err(format!(
            "{s:?} cannot be caught, so it cannot warn the job; give e.g. USR1"
        ));
    }
    Ok(sig)
}

fn parse_store_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err("a store timeout must be at least 1ms".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definitions_are_consistent() {
        command().debug_assert();
    }

    /// Every subcommand built alone (`one_subcommand`) is its place in the whole tree, but
    /// for help text and aliases: the same arguments, groups, subcommands and settings. A
    /// variant of `Command` that gains an attribute that changes what parses fails here.
    #[test]
    fn each_subcommand_alone_is_the_same_as_in_the_whole_tree() {
        let mut whole = command();
        whole.build();
        for full in whole.get_subcommands() {
            let name = full.get_name();
            let mut alone = one_subcommand(globals(), name)
                .unwrap_or_else(|| panic!("{name}: no entry in one_subcommand"));
            alone.build();
            let part = alone.find_subcommand(name).unwrap();
            // `help` is clap's own, `version` comes from propagate_version: both are answered
            // by the whole tree.
            let args = |c: &clap::Command| -> Vec<String> {
                let mut v: Vec<String> = c
                    .get_arguments()
                    .filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
                    .map(|a| format!("{a:?}"))
                    .collect();
                v.sort();
                v
            };
            assert_eq!(args(part), args(full), "{name}: arguments");
            let groups = |c: &clap::Command| format!("{:?}", c.get_groups().collect::<Vec<_>>());
            assert_eq!(groups(part), groups(full), "{name}: groups");
            let subs = |c: &clap::Command| -> Vec<String> {
                c.get_subcommands()
                    .map(|s| format!("{} {:?}", s.get_name(), args(s)))
                    .collect()
            };
            assert_eq!(subs(part), subs(full), "{name}: subcommands");
            let settings = |c: &clap::Command| {
                [
                    c.is_allow_external_subcommands_set(),
                    c.is_args_conflicts_with_subcommands_set(),
                    c.is_subcommand_required_set(),
                    c.is_arg_required_else_help_set(),
                    c.is_allow_missing_positional_set(),
                    c.is_dont_delimit_trailing_values_set(),
                    c.is_subcommand_precedence_over_arg_set(),
                    c.is_subcommand_negates_reqs_set(),
                    c.is_args_override_self(),
                    c.is_multicall_set(),
                    c.is_no_binary_name_set(),
                    c.is_dont_collapse_args_in_usage_set(),
                ]
            };
            assert_eq!(settings(part), settings(full), "{name}: settings");
        }
    }

    #[test]
    fn durations_are_humantime_and_bounded() {
        assert_eq!(parse_ttl("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_ttl("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("-1s").is_err());
        assert!(parse_ttl("soon").is_err());
        assert!(parse_ttl("1000y").is_err());
        assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("USR1"), Ok(libc::SIGUSR1));
        assert_eq!(parse_signal("sigusr2"), Ok(libc::SIGUSR2));
        assert_eq!(parse_signal("SIGHUP"), Ok(libc::SIGHUP));
        assert_eq!(parse_signal("10"), Ok(10));
        for bad in ["KILL", "SIGSTOP", "9", "0", "-1", "USR3", "", "999"] {
            assert!(parse_signal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bare_numbers_are_seconds() {
        assert_eq!(parse_wait("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_wait("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_wait(".25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert_eq!(parse_ttl("2"), Ok(Duration::from_secs(2)));
        for bad in ["-1", "1e3", "inf", "nan", ".", "1.2.3", "+5", "0x10"] {
            assert!(parse_wait(bad).is_err(), "{bad}");
        }
        assert!(parse_ttl("0").is_err());
        assert!(parse_wait("99999999999999999999").is_err());
    }
}
