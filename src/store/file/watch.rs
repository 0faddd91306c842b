//! The file store's waiters: its bell (a pipe) wakes a queued waiter when a change lets it in
//! (see `waiters`); inotify on the namespace directory wakes a watcher without a queue entry
//! (`dlock wait`) when a change that may admit it touches a state file it waits on (see
//! `Dir::wake`), and only when what it now says may admit it.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::unix::AsyncFd;

use super::{Dir, now_ns};
use crate::store::{Acquire, Listener};

/// How long a run's command runs before a thread is started to close its watch (see `Drop`).
const CLOSE_AFTER: Duration = Duration::from_millis(50);

/// A waiter's bell, and inotify on the namespace directory.
pub(super) struct DirWatch {
    /// inotify on the directory: None when the kernel gave none (a user has 128 instances:
    /// the bell still wakes a queued waiter) and once dropped (see `Drop`).
    fd: Option<AsyncFd<OwnedFd>>,
    files: HashSet<String>,
    /// This waiter's bell, if one could be made (else it hears the directory, and polls).
    bell: Option<AsyncFd<File>>,
    /// The request waiting: a change that cannot admit it (the next holder's grant, which
    /// renames the state file too) does not wake it (see `may_admit`).
    ask: (Arc<Dir>, Acquire),
}

impl DirWatch {
    pub(super) fn new(
        dir: &Path,
        files: HashSet<String>,
        store: Arc<Dir>,
        req: Acquire,
    ) -> io::Result<DirWatch> {
        // Made before the directory is watched: making `.q` changes the directory.
        let bell = store.ring_for(&req.token, &req.meta).and_then(|pipe| {
            // SAFETY: the File moves into the AsyncFd, which alone keeps it open until dropped.
            unsafe { AsyncFd::register_with_interest(pipe, tokio::io::Interest::READABLE) }
                .map_err(|e| io::Error::other(e.to_string()))
        });
        let fd = inotify(dir);
        let (bell, fd) = match (bell, fd) {
            (Err(e), Err(_)) => return Err(e),
            (bell, fd) => (bell.ok(), fd.ok()),
        };
        Ok(DirWatch {
            fd,
            files,
            bell,
            ask: (store, req),
        })
    }

    pub(super) fn fd(&self) -> &AsyncFd<OwnedFd> {
        self.fd.as_ref().expect("an inotify descriptor")
    }

    #[cfg(test)]
    pub(super) fn bell(&self) -> &AsyncFd<File> {
        self.bell.as_ref().expect("a bell")
    }

    /// Whether the state the directory holds now may admit the request: false only when a
    /// live holder certainly keeps it out. Read without the flock, as `inspect` reads (whole
    /// renames, a change in flight read from its journal); any doubt wakes the waiter, whose
    /// attempt decides. Without this, every rename woke every waiter: the release, and then
    /// the winner's grant, whose losers raced for the flock while the winner started its
    /// command.
    fn may_admit(&self) -> bool {
        let (dir, req) = &self.ask;
        let now = now_ns();
        req.each().all(|(name, mode)| match dir.read_settled(name) {
            Ok(mut st) => {
                st.purge(now, &dir.boot);
                st.holders.iter().any(|h| h.token == req.token) || mode.admits(st.modes())
            }
            Err(_) => true,
        })
    }

    /// Read pending events; true if one names a watched file.
    pub(super) fn drain(&self) -> io::Result<bool> {
        let mut buf = [0u8; 4096];
        let mut hit = false;
        loop {
            // SAFETY: buf is writable for its length.
            let n = unsafe {
                libc::read(
                    self.fd().get_ref().as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::WouldBlock {
                    Ok(hit)
                } else {
                    Err(e)
                };
            }
            let n = n as usize;
            let mut off = 0;
            let header = std::mem::size_of::<libc::inotify_event>();
            while off + header <= n {
                let len = u32::from_ne_bytes(buf[off + 12..off + 16].try_into().unwrap()) as usize;
                let raw = &buf[off + header..(off + header + len).min(n)];
                let name = raw.split(|&b| b == 0).next().unwrap_or(&[]);
                if self.files.contains(std::str::from_utf8(name).unwrap_or("")) {
                    hit = true;
                }
                off += header + len;
            }
        }
    }
}

impl Drop for DirWatch {
    /// Closing an inotify descriptor takes about 0.1 ms, and now and then waits for the
    /// kernel's SRCU grace period (about 20 ms here). A waiter drops its watch just after its
    /// grant, before it starts its command, so the close must not happen here: the handoff
    /// would wait on it. Nor on the runtime's thread while the command runs: a close that
    /// waits out the grace period there held up the release of a command that ended within
    /// it (K=8 handoff p99 2.8 to 8.5 and 13 ms). A blocking-pool thread closes it, started
    /// only once the command has run for `CLOSE_AFTER`: starting a thread cost more CPU than
    /// the close, in every run that waited, while the other waiters of a handoff need the
    /// CPU. In a run that ends before then, the process's exit closes it, after the
    /// release (a thread still closing it would have held up that exit as long).
    fn drop(&mut self) {
        self.ask.0.listener_gone(&self.ask.1.token);
        let Some(fd) = self.fd.take() else { return };
        let fd = fd.into_inner();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tokio::time::sleep(CLOSE_AFTER).await;
                drop(tokio::task::spawn_blocking(move || drop(fd)));
            });
        }
    }
}

#[async_trait]
impl Listener for DirWatch {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, async {
            loop {
                tokio::select! {
                    Ok(mut guard) = readable(self.bell.as_ref()) => {
                        // The bell rings only for a waiter the change lets in.
                        let rung = drain_pipe(guard.get_inner());
                        guard.clear_ready();
                        if rung {
                            self.ask.0.rang(&self.ask.1.token);
                            return;
                        }
                    }
                    Ok(mut guard) = readable(self.fd.as_ref()) => match self.drain() {
                        Ok(true) if self.may_admit() => return,
                        // Drained to the end: wait for the next event.
                        Ok(_) => guard.clear_ready(),
                        Err(_) => return,
                    },
                    else => return,
                }
            }
        })
        .await;
    }
}

/// Until `fd` is readable; never without one.
async fn readable<T: std::os::fd::AsRawFd>(
    fd: Option<&AsyncFd<T>>,
) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, T>> {
    match fd {
        Some(fd) => fd.readable().await,
        None => std::future::pending().await,
    }
}

/// Read a bell's pipe empty; true if it held anything.
fn drain_pipe(mut pipe: &File) -> bool {
    let mut buf = [0u8; 64];
    let mut any = false;
    while let Ok(n) = pipe.read(&mut buf) {
        if n == 0 {
            break;
        }
        any = true;
    }
    any
}

/// inotify on the namespace directory, for changes that may admit a watcher without a queue
/// entry.
fn inotify(dir: &Path) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: plain syscalls; the path is NUL-terminated by CString.
    let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor we own from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::other("directory path has a NUL byte"))?;
    // A change that may admit a watcher sets the state file's times after its rename (an
    // IN_ATTRIB, see `Dir::wake`), or the file goes. The renames themselves are not watched:
    // every grant and renewal, of any name in the namespace, woke every waiter of the
    // namespace to find nothing for it.
    let mask = libc::IN_ATTRIB | libc::IN_DELETE;
    // SAFETY: fd is open, c is a valid C string.
    if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the OwnedFd moves into the AsyncFd, which alone keeps it open until dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::{Duration, Instant};

    use crate::store::file::FileStore;
    use crate::store::{Acquire, Attempt, Mode, Outcome, Store};

    /// An exclusive request for `name`, with a fresh token.
    pub(in crate::store::file) fn exclusive(name: &str) -> Acquire {
        Acquire {
            names: vec![name.into()],
            modes: vec![Mode::Exclusive],
            token: crate::names::new_token(),
            ttl: Duration::from_secs(30),
            meta: "{}".into(),
            detached: false,
        }
    }

    /// A file store in a fresh directory (namespace "t"), with `holder` granted in it.
    async fn held(holder: &Acquire) -> (tempfile::TempDir, FileStore) {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::open(root.path(), "t", Default::default()).unwrap();
        grant(&store, holder).await;
        (root, store)
    }

    async fn grant(store: &FileStore, req: &Acquire) {
        let got = store.try_acquire(req, false).await.unwrap();
        assert!(
            matches!(got, Attempt::Granted(_)),
            "{:?} not granted",
            req.names
        );
    }

    /// A release that another waiter's grant follows at once wakes nobody the grant keeps
    /// out; a release that leaves the lock free wakes the waiter.
    #[tokio::test]
    async fn a_grant_that_keeps_a_waiter_out_does_not_wake_it() {
        let (holder, winner, waiter) = (exclusive("h"), exclusive("h"), exclusive("h"));
        let (_root, store) = held(&holder).await;
        let mut listener = store.listen(&waiter).await.unwrap();
        assert!(
            store
                .release(&holder.names, &holder.token, Outcome::Released)
                .await
                .unwrap()
        );
        grant(&store, &winner).await;
        let (t, wait) = (Instant::now(), Duration::from_millis(300));
        listener.changed(wait).await;
        assert!(
            t.elapsed() >= wait,
            "woken while the lock is held ({:?})",
            t.elapsed()
        );
        assert!(
            store
                .release(&winner.names, &winner.token, Outcome::Released)
                .await
                .unwrap()
        );
        let t = Instant::now();
        listener.changed(Duration::from_secs(20)).await;
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the release that freed the lock did not wake the waiter"
        );
    }

    /// Grants and renewals, of the name waited on or of any other in the namespace, reach no
    /// waiter at all (its descriptor stays quiet: the process is not even woken to look);
    /// the release does.
    #[tokio::test]
    async fn only_a_release_reaches_the_waiters_descriptor() {
        use std::os::fd::AsRawFd;
        let (holder, other, waiter) = (exclusive("h"), exclusive("o"), exclusive("h"));
        let (root, store) = held(&holder).await;
        let watch = super::DirWatch::new(
            &root.path().join("t"),
            [crate::store::file::file_name("h")].into_iter().collect(),
            store.backend.0.clone(),
            waiter,
        )
        .unwrap();
        let pending = || {
            let mut p = libc::pollfd {
                fd: watch.fd().get_ref().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        grant(&store, &other).await;
        let ttl = Duration::from_secs(30);
        assert!(
            store
                .renew(&holder.names, &holder.token, ttl)
                .await
                .unwrap()
        );
        assert!(!pending(), "a grant or a renewal woke the waiter");
        assert!(
            store
                .release(&holder.names, &holder.token, Outcome::Released)
                .await
                .unwrap()
        );
        assert!(pending(), "the release did not reach the waiter");
    }
}
