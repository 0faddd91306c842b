//! The embedded file store: locks shared by the processes of one host, with no server.
//!
//! One directory per namespace, one JSON state file per lock name (holders with deadlines, the
//! fence counter, how the last lease ended). It is a backend of the record engine
//! (`store::record`, see `ops`): the rules are the engine's, and each operation is one
//! transaction, a read-modify-write under an exclusive `flock` on the namespace's `.lock`
//! file (which also makes a multi-name grant atomic) that replaces the state file by rename,
//! so a process killed mid-write leaves the old state whole (a change to several names goes
//! through a journal: see `journal`).
//! Deadlines are on CLOCK_BOOTTIME, which every process of the host shares and the wall clock
//! cannot move; a state file from an earlier boot has no live holders, and one from another
//! host is refused, as is a network file system (see `host`).
//! Waiters queue in the state file and are woken one run at a time (see `waiters`); the
//! state of a name nobody holds or waits for is removed (see `forget`). In a directory other
//! than the default, files take the directory's mode, so a group may share it (see `perms`).

pub(crate) mod dir;
mod doctor;
mod forget;
mod host;
mod journal;
mod names;
mod ops;
mod perms;
mod replace;
mod shards;
mod waiters;
mod watch;

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::record::rules::{Line, Rows, Rules, WaiterRow};
use super::record::{Backend, Decide, RecordStore};
use super::{
    Acquire, ErrorKind, Health, HealthQuery, Listener, Mode, Previous, StoreError, StoreResult,
    TagWrite,
};
use crate::sys;
use names::file_name;
use perms::Perms;

/// The store: the record engine over the namespace's directory.
pub type FileStore = RecordStore<Files>;

/// The backend: a cheap handle, so a wait for the flock can move to a thread with its own
/// copy.
pub struct Files(std::sync::Arc<Dir>);

/// One namespace directory of the store.
struct Dir {
    dir: PathBuf,
    desc: String,
    boot: String,
    /// Replacements go by exchange (see `replace`).
    swap: std::sync::atomic::AtomicBool,
    /// The modes new files and directories get.
    perms: Perms,
    /// The bells of this process's waiters (see `waiters`).
    bells: waiters::Bells,
}

/// What the URL of a file store may add to its directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `?network=1`: the directory may be on a network or FUSE file system (see `host`).
    pub network: bool,
}

#[derive(Serialize, Deserialize, Default, Clone)]
struct State {
    fence: u64,
    #[serde(default)]
    previous: String,
    #[serde(default)]
    boot: String,
    #[serde(default)]
    holders: Vec<Record>,
    /// Waiters in arrival order (see `waiters`), as one string (see `waiters::line`).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "waiters::line")]
    queue: Vec<waiters::Entry>,
    /// The engine's marker (`Store::mark`): gone with the file when the directory is emptied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    mark: bool,
    /// The lock name, in a file named by its hash (see `names`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    name: String,
    /// The fence the next grant must pass when the state was recalled (see `forget`).
    #[serde(skip)]
    floor: u64,
}

#[derive(Serialize, Deserialize, Clone)]
struct Record {
    token: String,
    mode: String,
    fence: u64,
    /// CLOCK_BOOTTIME nanoseconds.
    deadline: u64,
    meta: String,
}

impl State {
    /// Drop holders whose time is up (or whose boot is over), remembering that one expired.
    fn purge(&mut self, now: u64, boot: &str) {
        let before = self.holders.len();
        if self.boot != boot {
            self.holders.clear();
            self.queue.clear();
            self.boot = boot.to_string();
        }
        self.holders.retain(|h| h.deadline > now);
        if self.holders.len() < before {
            self.previous = Previous::Expired.text();
        }
    }

    fn modes(&self) -> impl Iterator<Item = Mode> + '_ {
        self.holders
            .iter()
            .map(|h| Mode::from_code(&h.mode).unwrap_or(Mode::Exclusive))
    }
}

fn now_ns() -> u64 {
    sys::boottime().as_nanos() as u64
}

fn io_err(what: &str, path: &Path, e: io::Error) -> StoreError {
    let msg = format!("{what} {}: {e}", path.display());
    if e.kind() == io::ErrorKind::PermissionDenied {
        StoreError::refused(msg)
    } else {
        StoreError::unavailable(msg)
    }
}

impl FileStore {
    pub fn open(root: &Path, namespace: &str, options: Options) -> StoreResult<FileStore> {
        let dir = Dir::open(root, namespace, options)?;
        Ok(RecordStore::new(Files(std::sync::Arc::new(dir))))
    }
}

impl Files {
    /// Run `f` under the namespace's exclusive flock. When the flock is free, at once on this
    /// thread: the work under it is a few reads and a rename in a local directory (tens of
    /// microseconds), and handing it to a blocking-pool thread cost more than the work (a new
    /// thread with its own malloc arena for each of a run's first operations, and the
    /// wake-ups between threads: about 0.4 ms of CPU per `run`). When another process holds
    /// the flock, this thread tries again after 20, 40, 80 and 160 µs: the flock is held for
    /// a grant or a release, tens of microseconds, and the waiters a release wakes all come
    /// for it at once (in 320 K=8 handoffs that started about 180 threads, one per run,
    /// each costing more CPU than the pauses). After those 0.3 ms the wait goes to a
    /// blocking thread, which the engine's per-store timeout bounds (a holder of the flock
    /// frozen by SIGSTOP cannot stall the runtime); the work runs here once it has the flock.
    async fn locked<T>(&self, f: impl FnOnce(&Dir) -> StoreResult<T>) -> StoreResult<T> {
        let lock_path = self.0.dir.join(".lock");
        let file = self
            .0
            .lock_file(&lock_path)
            .map_err(|e| io_err("cannot open", &lock_path, e))?;
        for pause in [0, 20, 40, 80, 160] {
            if pause > 0 {
                std::thread::sleep(Duration::from_micros(pause));
            }
            match flock(&file, false) {
                Ok(true) => return self.0.recover().and_then(|()| f(&self.0)),
                Ok(false) => {}
                Err(e) => return Err(io_err("cannot lock", &lock_path, e)),
            }
        }
        let path = lock_path.clone();
        // The flock goes with `file` when it is dropped: at the end of this call, or on the
        // blocking thread if this call was dropped (timed out) before it got there.
        let file = tokio::task::spawn_blocking(move || flock(&file, true).map(|_| file))
            .await
            .map_err(|e| StoreError::protocol(format!("file store task failed: {e}")))?
            .map_err(|e| io_err("cannot lock", &path, e))?;
        let answer = self.0.recover().and_then(|()| f(&self.0));
        drop(file);
        answer
    }

    /// After a change: wake whom it may admit, once the namespace's flock is let go. Woken
    /// under it, the first of them would find the flock still held and wait for it on a
    /// blocking thread, started for the purpose.
    fn woken(&self, wake: ops::Wake) {
        self.0.ring(&wake.bells);
        self.0.wake(wake.names.iter().map(String::as_str));
    }
}

impl Dir {
    fn open(root: &Path, namespace: &str, options: Options) -> StoreResult<Dir> {
        // The root: at most its last component is created, and the default is checked to be
        // ours alone (see `dir`). It must be on a local file system and this host's (see
        // `host`). Inside it, the namespace's directory is dlock's own.
        let desc = format!("file://{}", root.display());
        let default = dir::prepare(root)?;
        host::check_fs(root, &desc, options.network)?;
        let perms = Perms::of(root, default);
        host::claim(root, &desc, perms)?;
        let dir = root.join(namespace);
        match fs::DirBuilder::new().mode(perms.dir).create(&dir) {
            Ok(()) => perms.dir(&dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("cannot create", &dir, e)),
        }
        Ok(Dir {
            desc,
            swap: replace::swaps(&dir),
            dir,
            boot: sys::boot_id(),
            perms,
            bells: waiters::Bells::default(),
        })
    }

    /// The namespace's `.lock`, made (with the store's modes) at its first use.
    fn lock_file(&self, path: &Path) -> io::Result<File> {
        match OpenOptions::new().read(true).write(true).open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(self.perms.file)
                    .open(path)?;
                self.perms.file(&f);
                Ok(f)
            }
            other => other,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(file_name(name))
    }

    /// Whether the namespace's directory is no longer there (not merely unreadable).
    fn deleted(&self) -> bool {
        fs::symlink_metadata(&self.dir).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
    }

    /// The lock name a file of the directory holds the state of, if it is a state file.
    fn name_in(&self, file: &str) -> Option<String> {
        if !names::hashed(file) {
            return names::name_of(file);
        }
        let bytes = fs::read(self.dir.join(file)).ok()?;
        let st: State = serde_json::from_slice(&bytes).ok()?;
        (!st.name.is_empty()).then_some(st.name)
    }

    fn read(&self, name: &str) -> StoreResult<State> {
        let path = self.path(name);
        let st: State = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                StoreError::protocol(format!(
                    "state file {} is damaged ({e}); remove it to reset this lock",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.recalled(name),
            Err(e) => return Err(io_err("cannot read", &path, e)),
        };
        // Another boot's state written while this kernel runs is another host's (see `host`).
        if !st.boot.is_empty() && st.boot != self.boot {
            let written = fs::metadata(&path).and_then(|m| m.modified());
            if written.is_ok_and(host::after_our_boot) {
                return Err(host::other_host(
                    &self.desc,
                    &format!(
                        "{} was written by another host (boot id {}) while this one runs",
                        path.display(),
                        st.boot
                    ),
                ));
            }
        }
        Ok(st)
    }

    /// Write a name's state, or remove it when there is nothing left to keep (see `forget`).
    fn write(&self, name: &str, state: &State) -> StoreResult<()> {
        if state.forgettable() {
            return self.forget(name, state);
        }
        let file = file_name(name);
        let bytes = if names::hashed(&file) {
            let named = State {
                name: name.to_string(),
                ..state.clone()
            };
            serde_json::to_vec(&named)
        } else {
            serde_json::to_vec(state)
        };
        self.put(&file, &bytes.expect("state serializes"))
    }

    /// Wake whoever watches these names without a queue entry (`dlock wait`, and a waiter
    /// between its first attempt and its queued one), after a change that may admit them:
    /// each state file's times are set to now, the IN_ATTRIB their watch asks for (see
    /// `watch`). Queued waiters hear their bells instead (see `waiters`).
    fn wake<'a>(&self, names: impl Iterator<Item = &'a str>) {
        for name in names {
            touch(&self.path(name));
        }
    }
}

/// Set a file's times to now: the IN_ATTRIB a waiter's watch asks for. A failure is left
/// alone: a waiter looks again within `MAX_POLL` whatever it hears.
fn touch(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: c is a valid C string; a null times pointer means "now".
    unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), 0) };
}

/// The namespace's flock. `wait` false: Ok(false) at once when another process holds it.
fn flock(file: &File, wait: bool) -> io::Result<bool> {
    let op = if wait {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    loop {
        // SAFETY: the descriptor is open for the whole call.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock if !wait => return Ok(false),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

#[async_trait]
impl Backend for Files {
    fn describe(&self) -> &str {
        &self.0.desc
    }

    /// The host's CLOCK_BOOTTIME in nanoseconds; a fair line whose waiters live as long as
    /// their bells (see `waiters`); a directory a reboot or a hand may empty.
    fn rules(&self) -> Rules {
        Rules {
            tick: Duration::from_nanos(1),
            line: Line::Fair,
            waiter_ttl: None,
            forgetful: true,
            far: None,
            hand_over: false,
        }
    }

    fn reached(&self) -> bool {
        false
    }

    fn local(&self) -> bool {
        true
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query)
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write).await
    }

    async fn transact(
        &self,
        names: &[String],
        _create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        let wake = self.locked(|dir| dir.transact(names, decide)).await?;
        self.woken(wake);
        Ok(())
    }

    fn waiter_alive(&self, row: &WaiterRow) -> bool {
        waiters::alive(&self.0.dir, &waiters::bell_name(&row.token))
    }

    /// Whole-file renames make a read without the flock consistent; a multi-name change in
    /// flight (or left by a killed process) is read from its journal. An attempt whose bell
    /// rang, or that is not queued yet, goes straight to the flock: a look would only say
    /// so, at the cost of a read of the whole queue, on the handoff's path.
    fn peek(&self, names: &[String], attempt: Option<(&str, bool)>) -> Option<(i64, Vec<Rows>)> {
        if let Some((token, true)) = attempt
            && self.0.straight_in(token)
        {
            return None;
        }
        let now = now_ns() as i64;
        let mut rows = Vec::with_capacity(names.len());
        for name in names {
            let mut r = self.0.rows(name, self.0.read_settled(name).ok()?);
            if attempt.is_none() {
                // For `inspect`: each waiter's metadata, from beside its bell.
                for x in &mut r.waiters {
                    x.meta = waiters::meta(&self.0.dir, &x.token, &x.meta);
                }
            }
            rows.push(r);
        }
        Some((now, rows))
    }

    fn ready_to_wait(&self, req: &Acquire) -> bool {
        self.0.queue_ready(&req.token, &req.meta)
    }

    fn done(&self, token: &str) {
        self.0.drop_bell(token);
    }

    /// The namespace's directory deleted: its leases went with it. Nothing is created again
    /// (`locked` makes only the flock file, inside the directory).
    fn renew_failed(&self, e: StoreError) -> StoreError {
        if e.kind() != ErrorKind::LeaseGone && self.0.deleted() {
            return StoreError::lease_gone(format!(
                "the lease is gone: the store's directory {} was deleted",
                self.0.dir.display()
            ));
        }
        e
    }

    /// Never called: the engine listens through `listen_for`, which knows the names.
    async fn listen(&self, _token: &str) -> StoreResult<Box<dyn Listener>> {
        Err(StoreError::protocol("the file store listens for a request"))
    }

    async fn listen_for(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        let files = req.names.iter().map(|n| file_name(n)).collect();
        let watch = watch::DirWatch::new(&self.0.dir, files, self.0.clone(), req.clone())
            .map_err(|e| io_err("cannot watch", &self.0.dir, e))?;
        Ok(Box::new(watch))
    }

    /// Every state file under the prefix (the engine keeps those with a live holder).
    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let fs = &self.0;
        let entries = fs::read_dir(&fs.dir).map_err(|e| io_err("cannot list", &fs.dir, e))?;
        Ok(entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str().and_then(|f| fs.name_in(f)))
            .filter(|name| name.starts_with(prefix))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Attempt, Store};

    /// Another process holding the namespace's flock (one frozen mid-write, say) holds up
    /// the operation, not the runtime: timers go on, and the operation is granted once the
    /// flock is free. (An operation takes the flock on the runtime's thread only when it is
    /// free at once.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_held_namespace_flock_is_waited_for_off_the_runtime_thread() {
        use std::time::Instant;
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::open(root.path(), "t", Options::default()).unwrap();
        let other = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.path().join("t/.lock"))
            .unwrap();
        flock(&other, true).unwrap();
        // Frees the flock after 3 s whatever happens, so a blocked runtime fails the test
        // below instead of hanging it.
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            drop(other);
        });
        let req = watch::tests::exclusive("x");
        let task = tokio::spawn(async move { store.try_acquire(&req, false).await });
        let t = Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the runtime stood still for {:?} behind another process's flock",
            t.elapsed()
        );
        assert!(
            !task.is_finished(),
            "granted while another process held the flock"
        );
        let got = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("not granted after the flock was freed")
            .unwrap()
            .unwrap();
        assert!(matches!(got, Attempt::Granted(_)), "{got:?}");
        freer.join().unwrap();
    }
}
