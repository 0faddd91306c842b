//! The embedded file store: locks shared by the processes of one host, with no server.
//!
//! One directory per namespace, one JSON state file per lock name (holders with deadlines, the
//! fence counter, how the last lease ended). Every read-modify-write runs under an exclusive
//! `flock` on the namespace's `.lock` file, which also makes a multi-name grant atomic, and
//! replaces the state file by rename, so a process killed mid-write leaves the old state whole
//! (a change to several names goes through a journal: see `journal`).
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

use super::{
    Acquire, Attempt, ErrorKind, Health, HealthQuery, Holder, Listener, LockState, Mode, Outcome,
    Previous, Recall, Store, StoreError, StoreResult, TagWrite, Waiter,
};
use crate::sys;
use names::file_name;
use perms::Perms;

/// The adapter: a cheap handle, so blocking work can move to a thread with its own copy.
pub struct FileStore(std::sync::Arc<Dir>);

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

    /// The marker, and how long the live holders run on (call after `purge`).
    fn recall(&self, now: u64) -> Recall {
        let left = self
            .holders
            .iter()
            .map(|h| h.deadline.saturating_sub(now))
            .max();
        Recall {
            marked: self.mark,
            horizon: Duration::from_nanos(left.unwrap_or(0)),
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

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
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
        Dir::open(root, namespace, options).map(|d| FileStore(std::sync::Arc::new(d)))
    }

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
    /// frozen by SIGSTOP cannot stall the runtime).
    async fn locked<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Dir) -> StoreResult<T> + Send + 'static,
    {
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
        let dir = self.0.clone();
        tokio::task::spawn_blocking(move || {
            flock(&file, true).map_err(|e| io_err("cannot lock", &lock_path, e))?;
            dir.recover()?;
            f(&dir)
            // The flock goes with `file` when it is dropped here.
        })
        .await
        .map_err(|e| StoreError::protocol(format!("file store task failed: {e}")))?
    }

    /// After a change: wake whom it may admit, once the namespace's flock is let go. Woken
    /// under it, the first of them would find the flock still held and wait for it on a
    /// blocking thread, started for the purpose.
    fn woken<T>(&self, (answer, wake): (T, ops::Wake)) -> T {
        self.0.ring(&wake.bells);
        self.0.wake(wake.names.iter().map(String::as_str));
        answer
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

    fn describe_holder(h: &Record, now: u64) -> Holder {
        Holder {
            owner: crate::names::owner_id(&h.token),
            mode: Mode::from_code(&h.mode).unwrap_or(Mode::Exclusive),
            fence: h.fence,
            ttl_left_ms: h.deadline.saturating_sub(now) / 1_000_000,
            meta: crate::meta::parse(&h.meta),
        }
    }

    fn state_view(&self, name: &str, mut st: State) -> LockState {
        let now = now_ns();
        st.purge(now, &self.boot);
        LockState {
            name: name.to_string(),
            holders: st
                .holders
                .iter()
                .map(|h| Self::describe_holder(h, now))
                .collect(),
            waiters: st
                .live_waiters(&self.dir)
                .into_iter()
                .map(|w| Waiter {
                    owner: crate::names::owner_id(&w.token),
                    mode: Mode::from_code(&w.mode).unwrap_or(Mode::Exclusive),
                    meta: crate::meta::parse(&w.meta(&self.dir)),
                })
                .collect(),
            fence: st.fence,
            previous: Previous::parse(&st.previous),
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
impl Store for FileStore {
    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query)
    }

    fn describe(&self) -> &str {
        &self.0.desc
    }

    fn local(&self) -> bool {
        true
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write).await
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        Ok(self.attempt(req, queue).await?.0)
    }

    async fn attempt(&self, req: &Acquire, queue: bool) -> StoreResult<(Attempt, Vec<Recall>)> {
        if let Some(busy) = self.0.busy_at_a_glance(req, queue) {
            return Ok(busy);
        }
        let req = req.clone();
        let answer = self.locked(move |fs| fs.attempt(&req, queue)).await?;
        Ok(self.woken(answer))
    }

    async fn mark(&self, names: &[String]) -> StoreResult<()> {
        let names = names.to_vec();
        self.locked(move |fs| {
            let mut changed = Vec::new();
            for name in &names {
                let mut st = fs.read(name)?;
                if !st.mark {
                    st.mark = true;
                    changed.push((name.clone(), st));
                }
            }
            fs.commit(&changed)
        })
        .await
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        let files = req.names.iter().map(|n| file_name(n)).collect();
        let watch = watch::DirWatch::new(&self.0.dir, files, self.0.clone(), req.clone())
            .map_err(|e| io_err("cannot watch", &self.0.dir, e))?;
        Ok(Box::new(watch))
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let (names, token) = (names.to_vec(), token.to_string());
        let renewed = self
            .locked(move |fs| {
                let now = now_ns();
                let mut states = Vec::new();
                for name in &names {
                    let mut st = fs.read(name)?;
                    match st
                        .holders
                        .iter_mut()
                        .find(|h| h.token == token && h.deadline > now && st.boot == fs.boot)
                    {
                        Some(h) => h.deadline = now + ns(ttl),
                        // Every end of a lease writes `previous`: none written, and no lease
                        // of ours, means the state file was deleted (or replaced) under us.
                        None if Previous::parse(&st.previous) == Previous::None => {
                            return Err(StoreError::lease_gone(super::FORGOTTEN));
                        }
                        None => return Ok(false),
                    }
                    states.push((name.clone(), st));
                }
                fs.commit(&states)?;
                Ok(true)
            })
            .await;
        // The namespace's directory deleted: its leases went with it. Nothing is created
        // again here (`locked` makes only the flock file, inside the directory).
        match renewed {
            Err(e) if e.kind() != ErrorKind::LeaseGone && self.0.deleted() => {
                Err(StoreError::lease_gone(format!(
                    "the lease is gone: the store's directory {} was deleted",
                    self.0.dir.display()
                )))
            }
            other => other,
        }
    }

    async fn release(&self, names: &[String], token: &str, outcome: Outcome) -> StoreResult<bool> {
        let (names, token) = (names.to_vec(), token.to_string());
        let answer = self
            .locked(move |fs| fs.release(&names, &token, outcome))
            .await?;
        Ok(self.woken(answer))
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        let names = names.to_vec();
        let answer = self.locked(move |fs| fs.force_release(&names)).await?;
        Ok(self.woken(answer))
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        let (names, fences) = (names.to_vec(), fences.to_vec());
        self.locked(move |fs| {
            let mut changed = Vec::new();
            for (name, &fence) in names.iter().zip(&fences) {
                let mut st = fs.read(name)?;
                if st.fence < fence {
                    st.fence = fence;
                    changed.push((name.clone(), st));
                }
            }
            fs.commit(&changed)
        })
        .await
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        // Whole-file renames make a read without the flock consistent; a multi-name change
        // in flight (or left by a killed process) is read from its journal.
        let st = self.0.read_settled(name)?;
        Ok(self.0.state_view(name, st))
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let fs = &self.0;
        let entries = fs::read_dir(&fs.dir).map_err(|e| io_err("cannot list", &fs.dir, e))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(name) = file.to_str().and_then(|f| fs.name_in(f)) else {
                continue;
            };
            if !name.starts_with(prefix) {
                continue;
            }
            let view = fs.state_view(&name, fs.read_settled(&name)?);
            if !view.holders.is_empty() {
                out.push(view);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
