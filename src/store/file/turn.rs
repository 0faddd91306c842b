//! The file store's waiting line: the waiters of one name queue on an exclusive `flock` of the
//! name's turn file (`.NAME.json.turn`), so a release wakes one process, not every waiter.
//!
//! Without it each waiter watched the directory, and every rename of the state file (the
//! release, then the next grant) woke them all to race for the namespace's `.lock` and read
//! the state on a busy machine, between the release and the next holder's start. Now only the
//! head of the line (the waiter holding the turn) watches the directory; the others sleep in
//! the kernel's queue of the turn's `flock`, which wakes one of them when the head gives the
//! turn up, and frees a dead waiter's place at once.
//!
//! The turn grants nothing: the lease record stays the only truth. A head gives its turn up as
//! soon as its wait ends (granted or not: the listener is dropped); a waiter in the line still
//! retries the record when its poll runs out (a frozen holder's lease expiring, a holder that
//! never took a turn), exactly as before.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::DirWatch;
use crate::store::Listener;

/// The turn file of the state file `file` (a dot-file: never listed as a lock).
pub(super) fn turn_file(file: &str) -> String {
    format!(".{file}.turn")
}

pub(super) struct TurnWatch {
    dir: PathBuf,
    files: HashSet<String>,
    state: Turn,
}

enum Turn {
    /// In the line: a thread blocked in `flock` sends the locked turn when it comes.
    Queued(oneshot::Receiver<io::Result<OwnedFd>>),
    /// At the head: the turn is ours (given up when this listener is dropped) and the
    /// directory is watched for the release.
    Head { _turn: OwnedFd, watch: DirWatch },
    /// The line failed (cannot lock, cannot start the thread): every waiter watches, as
    /// before the line existed.
    Plain(DirWatch),
    /// No watch could be set: the engine's bounded poll alone finds the release.
    Poll,
}

impl TurnWatch {
    /// Join the line of `file` (one state file) in `dir`; the head at once if nobody waits.
    pub(super) fn new(dir: &Path, file: &str, files: HashSet<String>) -> io::Result<TurnWatch> {
        let path = dir.join(turn_file(file));
        let turn: OwnedFd = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?
            .into();
        let state = match flock(&turn, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => Turn::Head {
                _turn: turn,
                watch: DirWatch::new(dir, files.clone())?,
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let (tx, rx) = oneshot::channel();
                let spawned = std::thread::Builder::new()
                    .name("dlock-turn".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let got = flock(&turn, libc::LOCK_EX).map(|()| turn);
                        // A listener dropped meanwhile (its wait is over) gets nothing: the
                        // turn closes with the returned value here and passes on at once.
                        let _ = tx.send(got);
                    });
                match spawned {
                    Ok(_) => Turn::Queued(rx),
                    Err(_) => Turn::Plain(DirWatch::new(dir, files.clone())?),
                }
            }
            Err(_) => Turn::Plain(DirWatch::new(dir, files.clone())?),
        };
        Ok(TurnWatch {
            dir: dir.to_path_buf(),
            files,
            state,
        })
    }
}

fn flock(fd: &OwnedFd, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor is open for the whole call.
        if unsafe { libc::flock(fd.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[async_trait]
impl Listener for TurnWatch {
    async fn changed(&mut self, max: Duration) {
        match &mut self.state {
            Turn::Head { watch, .. } | Turn::Plain(watch) => watch.changed(max).await,
            Turn::Poll => tokio::time::sleep(max).await,
            Turn::Queued(rx) => {
                let Ok(got) = tokio::time::timeout(max, rx).await else {
                    return;
                };
                // Our turn (or the line broke): watch the directory from now on, and return so
                // that the engine tries again: a release before the watch began is seen then.
                self.state = match (got, DirWatch::new(&self.dir, self.files.clone())) {
                    (Ok(Ok(turn)), Ok(watch)) => Turn::Head { _turn: turn, watch },
                    (_, Ok(watch)) => Turn::Plain(watch),
                    (_, Err(_)) => Turn::Poll,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::store::file::FileStore;
    use crate::store::{Acquire, Attempt, Mode, Store};

    fn exclusive(name: &str) -> Acquire {
        Acquire {
            names: vec![name.into()],
            modes: vec![Mode::Exclusive],
            token: crate::names::new_token(),
            ttl: Duration::from_secs(30),
            meta: "{}".into(),
            detached: false,
        }
    }

    /// A release wakes the head of the line, not every waiter; the next waiter's turn comes
    /// when the head's wait ends, at once.
    #[tokio::test]
    async fn a_release_wakes_the_head_of_the_line_alone() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::open(root.path(), "t").unwrap();
        let holder = exclusive("h");
        let got = store.try_acquire(&holder, false).await.unwrap();
        assert!(matches!(got, Attempt::Granted(_)));
        let mut line = Vec::new();
        for _ in 0..3 {
            line.push(store.listen(&exclusive("h")).await.unwrap());
        }
        assert!(store.release(&holder.names, &holder.token).await.unwrap());
        let woken = |t: Instant| t.elapsed() < Duration::from_secs(10);
        let t = Instant::now();
        line[0].changed(Duration::from_secs(20)).await;
        assert!(woken(t), "the head of the line was not woken by the release");
        let (t, wait) = (Instant::now(), Duration::from_millis(300));
        line[1].changed(wait).await;
        assert!(
            t.elapsed() >= wait,
            "the release woke a waiter behind the head ({:?})",
            t.elapsed()
        );
        drop(line.remove(0));
        let t = Instant::now();
        line[0].changed(Duration::from_secs(20)).await;
        assert!(woken(t), "the turn did not pass on when the head's wait ended");
    }
}
