//! Telling the job that its lease is in trouble before it is stopped (issue 40): the lease
//! file (`DLOCK_LEASE_FILE`), the `renew-late` event, `--warn-signal` and `--on-lost`.
//!
//! Without these a job learns of a lost lease only from the SIGTERM that stops it. A program
//! that wants to give up cleanly (abandon a transaction, stop writing) needs to know sooner,
//! or at least why. None of this moves the stop itself: the warning goes out the moment dlock
//! knows the lease cannot be kept, and the SIGTERM and SIGKILL follow at their times as
//! before; `--on-lost` runs beside the job, never waited for.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio::time::Instant;

use crate::engine::Lease;
use crate::events::{self, Events};
use crate::output::Output;
use crate::sys;

/// What the user asked to happen when the lease is lost (`--on-lost`, `--warn-signal`).
#[derive(Clone, Debug, Default)]
pub struct Warnings {
    /// A shell command (`sh -c`) started the moment the loss is known.
    pub on_lost: Option<String>,
    /// A signal for the command's group at that moment.
    pub warn_signal: Option<i32>,
}

/// The lease's state, as the lease file and the events tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Renewed in time.
    Held,
    /// A renewal failed, or half the ttl went by without one; the lease may still be saved.
    Late,
    /// The lease cannot be kept: the job is being stopped.
    Lost,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Held => "held",
            State::Late => "renewing-late",
            State::Lost => "lost",
        }
    }
}

/// One supervised lease's warnings: its state, its lease file, what to do on a loss.
pub struct Alarm {
    warnings: Warnings,
    state: State,
    /// The deadline last written: a later one is a renewal.
    deadline: Instant,
    file: Option<LeaseFile>,
    /// The lease's variables, for `--on-lost` (see `on_lost_env`).
    env: Vec<(&'static str, String)>,
    names: Vec<String>,
    fences: Vec<u64>,
}

impl Alarm {
    /// The alarm of `lease`, with its lease file written (state `held`) when one can be made;
    /// `env`: the lease's variables as the command gets them.
    pub fn new(
        lease: &Lease,
        warnings: Warnings,
        mut env: Vec<(&'static str, String)>,
        out: &Output,
    ) -> Alarm {
        let fences: Vec<u64> = lease.grants.iter().map(|g| g.fence).collect();
        let file = match LeaseFile::create(&lease_text(State::Held, lease.deadline, &fences)) {
            Ok(f) => Some(f),
            Err(e) => {
                // The job runs without it (DLOCK_LEASE_FILE unset): never a reason to refuse.
                out.warn(&format!(
                    "cannot create the lease file for DLOCK_LEASE_FILE: {e}"
                ));
                None
            }
        };
        if let Some(path) = file.as_ref().and_then(|f| f.path.to_str()) {
            env.push(("DLOCK_LEASE_FILE", path.to_string()));
        }
        Alarm {
            warnings,
            state: State::Held,
            deadline: lease.deadline,
            file,
            env,
            names: lease.req.names.clone(),
            fences,
        }
    }

    /// The lease's variables, `DLOCK_LEASE_FILE` among them when there is a file.
    pub fn env(&self) -> &[(&'static str, String)] {
        &self.env
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// What the renewal task last said: a failure (`trouble`) makes the renewal late; a new
    /// deadline without one is a renewal, and the lease is held again.
    pub fn follow(&mut self, deadline: Instant, trouble: Option<&str>, events: &Events) {
        if let Some(error) = trouble {
            self.late(deadline, Some(error), events);
        } else if deadline != self.deadline && self.state != State::Lost {
            self.deadline = deadline;
            self.state = State::Held;
            self.write(deadline);
        }
    }

    /// The renewal is late (`error`: the last failure, if one failed): said once per stretch
    /// of lateness, in the lease file and as a `renew-late` event.
    pub fn late(&mut self, deadline: Instant, error: Option<&str>, events: &Events) {
        if self.state != State::Held {
            return;
        }
        self.state = State::Late;
        self.write(deadline);
        let left = deadline.saturating_duration_since(Instant::now());
        events.emit(
            "renew-late",
            &self.names,
            events::with(
                events::fences(&self.fences),
                json!({ "lease_left_ms": left.as_millis() as u64, "error": error }),
            ),
        );
    }

    /// The lease cannot be kept. `pgid`: the command's group, still running, to warn (None:
    /// the command has ended or is being stopped already, and only the file is told).
    pub fn lost(&mut self, deadline: Instant, why: &str, pgid: Option<u32>, out: &Output) {
        if self.state == State::Lost {
            return;
        }
        self.state = State::Lost;
        self.write(deadline);
        let Some(pgid) = pgid else { return };
        if let Some(sig) = self.warnings.warn_signal {
            out.debug(&format!(
                "--warn-signal: sending {} to the command",
                sys::signal_name(sig)
            ));
            let _ = sys::kill_group(pgid, sig);
        }
        if let Some(cmd) = &self.warnings.on_lost {
            self.on_lost(cmd, why, out);
        }
    }

    /// Start `--on-lost`'s command and leave it to run: a thread reaps it, so that the stop
    /// of the job never waits for it.
    fn on_lost(&self, cmd: &str, why: &str, out: &Output) {
        let mut c = std::process::Command::new("/bin/sh");
        c.arg("-c").arg(cmd).stdin(Stdio::null());
        // stdout is the job's result; what the hook prints goes with dlock's diagnostics.
        if let Ok(err) = std::io::stderr().as_fd().try_clone_to_owned() {
            c.stdout(Stdio::from(err));
        }
        // dlock's own lease variables (a dlock inside another's job) are not the hook's; the
        // rest of the environment (DLOCK_STORE, DLOCK_NAMESPACE) is, so it can call dlock.
        for k in super::watchdog::exec::LEASE_VARS {
            c.env_remove(k);
        }
        c.envs(self.on_lost_env(why));
        match c.spawn() {
            Ok(mut child) => {
                let _ = std::thread::Builder::new()
                    .name("on-lost".into())
                    .spawn(move || child.wait());
            }
            Err(e) => out.warn(&format!("cannot run --on-lost: {e}")),
        }
    }

    /// The lease's variables and `DLOCK_LOST_REASON`, without `DLOCK_STORE_ID`: a `dlock run`
    /// of the same name in the hook must wait for the lock, not pass through as if held.
    fn on_lost_env(&self, why: &str) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| *k != "DLOCK_STORE_ID")
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        env.push(("DLOCK_LOST_REASON".into(), why.to_string()));
        env
    }

    fn write(&self, deadline: Instant) {
        let Some(file) = &self.file else { return };
        // A failed write leaves the last state in place; the job is not stopped for it.
        let _ = file.replace(&lease_text(self.state, deadline, &self.fences));
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When the renewal counts as late without a failure: half the ttl gone since the deadline
/// was last set (a renewal in time comes after a third, plus jitter and one round trip).
pub fn late_at(deadline: Instant, ttl: Duration) -> Instant {
    deadline - ttl / 2
}

/// The lease file: `lease` in a private directory of its own in the runtime dir (see
/// `runtime_dir`), replaced whole (a temporary file renamed over it), so a reader sees one
/// state or the next, never half a file. The directory goes when the run ends.
struct LeaseFile {
    dir: PathBuf,
    path: PathBuf,
}

impl LeaseFile {
    /// The directory and its first content, written in place: nobody knows the path yet.
    fn create(text: &str) -> std::io::Result<LeaseFile> {
        use std::os::unix::fs::DirBuilderExt;
        // Named by pid and a random part, made with 0700 and never reused: nobody else can
        // have put a file or a link in it.
        let dir = runtime_dir().join(format!(
            "dlock-lease-{}-{:08x}",
            sys::pid(),
            sys::random_u64() as u32
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let file = LeaseFile {
            path: dir.join("lease"),
            dir,
        };
        std::fs::write(&file.path, text)?;
        Ok(file)
    }

    fn replace(&self, text: &str) -> std::io::Result<()> {
        let tmp = self.dir.join("lease.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, &self.path)
    }
}

/// The lease file's content: `KEY=VALUE` lines (see the README's `DLOCK_LEASE_FILE`).
fn lease_text(state: State, deadline: Instant, fences: &[u64]) -> String {
    let left = deadline.saturating_duration_since(Instant::now());
    let fences: Vec<String> = fences.iter().map(u64::to_string).collect();
    format!(
        "state={}\ndeadline_unix_ms={}\nfence={}\nupdated_unix_ms={}\n",
        state.word(),
        unix_ms(SystemTime::now() + left),
        fences.join(","),
        unix_ms(SystemTime::now()),
    )
}

/// Where lease files go: `$XDG_RUNTIME_DIR`, else `/dev/shm` if it is a tmpfs, else the
/// temporary directory. A session-less run (cron, CI, a service, root over ssh) has no
/// runtime dir, and `/tmp` is often a disk file system: there the directory, the file and
/// their removal are journalled metadata writes, 0.3 ms of every run's 3.5 ms measured here.
/// The file is small and lives as long as its run: memory is where it belongs.
fn runtime_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        && x.is_dir()
    {
        return x;
    }
    let shm = PathBuf::from("/dev/shm");
    if sys::tmpfs(&shm) == Some(true) {
        return shm;
    }
    std::env::temp_dir()
}

impl Drop for LeaseFile {
    fn drop(&mut self) {
        // The file and its directory, in two calls; a temporary file left by a failed write
        // takes the slower walk of the directory.
        let _ = std::fs::remove_file(&self.path);
        if std::fs::remove_dir(&self.dir).is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
