//! Bells on this host for the stores that notify nobody (S3, DynamoDB).
//!
//! A waiter there looks again at its polling pace (about once a second), so a release was
//! seen up to a second and a half late, and a handoff went to whichever process asked first.
//! Most waiters of a name wait on the host that releases it (cron jobs, a CI runner, a deploy
//! host): a release made here rings one waiter here at once, which then looks at the store as
//! at any look. A bell only wakes a waiter; the store alone grants, so a bell lost, rung for
//! nothing or rung twice costs at most a look. Waiters on other hosts keep polling.
//!
//! Each waiter has a named pipe in a directory of this user's (`$XDG_RUNTIME_DIR/dlock-bells`,
//! else `/dev/shm/dlock-bells-UID`), named by a hash of the store and the lock name, then its
//! arrival time: a release rings the oldest live one, so waiters on one host are woken in
//! arrival order, one per release. The open pipe is its waiter's life: a pipe nobody reads
//! cannot be opened for writing (ENXIO), so the bell of a waiter that died is removed by the
//! release that finds it, and never takes the ring. A waiter for several names has one pipe
//! with a link for each.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::unix::AsyncFd;

/// One store's bells on this host: `scope` names the store (its URL, redacted, and the
/// namespace), so two stores' names never ring each other's waiters.
pub struct HostBells {
    scope: String,
    /// This user's bells' directory (see `own_dir`).
    dir: PathBuf,
}

/// A waiter's bell: rung by the next release of one of its names on this host.
pub struct Bell {
    pipe: AsyncFd<File>,
    paths: Vec<PathBuf>,
}

impl HostBells {
    pub fn new(scope: impl Into<String>) -> HostBells {
        let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(x) if x.is_dir() => x.join("dlock-bells"),
            _ => PathBuf::from(format!("/dev/shm/dlock-bells-{}", crate::sys::uid())),
        };
        HostBells {
            scope: scope.into(),
            dir,
        }
    }

    /// The prefix of every bell of `name` in this store: a 64-bit FNV-1a hash of the store
    /// and the name. Two names that collide only ring each other's waiters, who look and
    /// wait on. (Not SHA-256: its first use in a process probes the CPU, which this release's
    /// path paid a millisecond for on a virtual machine that traps the probe.)
    fn key(&self, name: &str) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.scope.bytes().chain([0]).chain(name.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}-")
    }

    /// A bell for a waiter of `names`; None where none can be made (no directory of this
    /// user's, a full file system): the waiter polls as before.
    pub fn hang(&self, names: &[String]) -> Option<Bell> {
        self.sweep(names);
        let ticket = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_nanos();
        let own = format!("{ticket:020}-{}", crate::sys::pid());
        // Made aside and opened before it takes its names: a release never finds it unread.
        let aside = self.dir.join(format!(".{own}"));
        // Twice: the last waiter to go removes the directory, maybe between our two calls.
        let made = || own_dir(&self.dir).and_then(|_| crate::sys::mkfifo(&aside, 0o600).ok());
        made().or_else(made)?;
        let dir = &self.dir;
        let pipe = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&aside)
            .ok()
            // SAFETY: the File moves into the AsyncFd, which alone keeps it open until dropped.
            .and_then(|p| {
                unsafe { AsyncFd::register_with_interest(p, tokio::io::Interest::READABLE) }.ok()
            });
        let paths: Vec<PathBuf> = match pipe {
            Some(_) => names
                .iter()
                .map(|name| dir.join(format!("{}{own}", self.key(name))))
                .filter(|path| fs::hard_link(&aside, path).is_ok())
                .collect(),
            None => Vec::new(),
        };
        let _ = fs::remove_file(&aside);
        let bell = Bell { pipe: pipe?, paths };
        (!bell.paths.is_empty()).then_some(bell)
    }

    /// Ring the oldest live waiter of each of `names` on this host (after a release): a byte
    /// into its pipe, or what `what` makes (the record the release wrote, at most `PIPE_BUF`
    /// bytes, so one write puts it whole or not at all), made only once a live bell is found.
    /// Bells whose waiter died on the way are removed.
    pub fn ring(&self, names: &[String], what: impl FnOnce() -> Option<Vec<u8>>) {
        let (mut what, mut frame) = (Some(what), None);
        self.walk(names, |pipe| {
            let f = frame.get_or_insert_with(|| framed(what.take().and_then(|w| w())));
            let _ = pipe.write(f);
            true
        });
    }

    /// Remove the bells of `names` whose waiters died (killed while they waited: nothing else
    /// would, bar a release of the name here).
    fn sweep(&self, names: &[String]) {
        self.walk(names, |_| false);
    }

    /// The bells of each of `names`, oldest first, each opened to ring (a dead one removed),
    /// until `rung` says one was enough.
    fn walk(&self, names: &[String], mut rung: impl FnMut(&mut File) -> bool) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let all: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        for name in names {
            let key = self.key(name);
            let mut bells: Vec<&String> = all.iter().filter(|b| b.starts_with(&key)).collect();
            bells.sort();
            for bell in bells {
                let path = self.dir.join(bell);
                match open_to_ring(&path) {
                    Ok(mut pipe) => {
                        if rung(&mut pipe) {
                            break;
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                        let _ = fs::remove_file(&path);
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

impl Bell {
    /// Returns once the bell has rung, with what the last ring carried, if anything (what
    /// rang is read away).
    pub async fn rung(&mut self) -> Option<Vec<u8>> {
        loop {
            let Ok(mut ready) = self.pipe.readable_mut().await else {
                return std::future::pending().await;
            };
            let mut buf = [0u8; 8192];
            match ready.get_inner_mut().read(&mut buf) {
                Ok(n) => {
                    // Whatever more rang since is read with it.
                    let mut all = buf[..n].to_vec();
                    while let Ok(n) = ready.get_inner_mut().read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        all.extend(&buf[..n]);
                    }
                    return last_carried(&all);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(_) => return std::future::pending().await,
            }
        }
    }
}

/// One ring: `#`, a 32-bit length and `what`, or `!` where there is nothing to carry or it
/// would not fit one atomic write.
fn framed(what: Option<Vec<u8>>) -> Vec<u8> {
    match what {
        Some(w) if w.len() + 5 <= libc::PIPE_BUF => {
            let mut f = vec![b'#'];
            f.extend((w.len() as u32).to_le_bytes());
            f.extend(w);
            f
        }
        _ => b"!".to_vec(),
    }
}

/// What the last of the rings read at once carried: each is `!`, or `#`, a 32-bit length and
/// that many bytes. None if the last carried nothing (or the bytes are not rings).
fn last_carried(mut rings: &[u8]) -> Option<Vec<u8>> {
    let mut last = None;
    while let Some((&kind, rest)) = rings.split_first() {
        (last, rings) = match kind {
            b'!' => (None, rest),
            b'#' if rest.len() >= 4 => {
                let n = u32::from_le_bytes(rest[..4].try_into().ok()?) as usize;
                let body = rest[4..].get(..n)?;
                (Some(body.to_vec()), &rest[4 + n..])
            }
            _ => return None,
        };
    }
    last
}

impl Drop for Bell {
    /// Its links go, and the directory with the last of them (nothing is left in /dev/shm
    /// once nobody waits; a directory still in use is not empty and stays).
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
        if let Some(dir) = self.paths.first().and_then(|p| p.parent()) {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// A bell's pipe open for writing, without waiting for a reader (ENXIO when there is none).
pub fn open_to_ring(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// This user's bells' directory, made if need be; None if it is not this user's alone
/// (another user's directory at the path is never used: its owner could read who waits).
fn own_dir(dir: &Path) -> Option<&Path> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    let m = fs::symlink_metadata(dir).ok()?;
    (m.is_dir() && m.uid() == crate::sys::uid() && m.mode() & 0o077 == 0).then_some(dir)
}

#[cfg(test)]
mod tests;
