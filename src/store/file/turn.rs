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
//! The turn grants nothing: the lease record stays the only truth. An exclusive waiter that is
//! granted keeps its turn for the lease and gives it up at its release, just after the state
//! file says so: the kernel then wakes the next waiter straight away, and nobody is woken in
//! the moment between the grant and the command's start. Any other waiter gives its turn up
//! as soon as its wait ends (a shared or limited holder does not keep the others from being
//! admitted beside it). A waiter in the line still retries the record when its poll runs out
//! (a frozen holder's lease expiring, a holder that never took a turn), exactly as before,
//! and a dead holder's turn passes on at once.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::{Dir, DirWatch};
use crate::store::{Acquire, Listener, Mode};

/// The turns that exclusive holders of this process keep for their lease, by token.
pub(super) type Kept = Mutex<HashMap<String, OwnedFd>>;

/// `token`'s lease is released (its state written): its turn passes to the next in line.
pub(super) fn give_up(dir: &Dir, token: &str) {
    let turn = dir.turns.lock().map(|mut k| k.remove(token));
    drop(turn);
}

/// The turn file of the state file `file` (a dot-file: never listed as a lock).
pub(super) fn turn_file(file: &str) -> String {
    format!(".{file}.turn")
}

pub(super) struct TurnWatch {
    dir: Arc<Dir>,
    files: HashSet<String>,
    state: Turn,
    /// The request's token, and whether a turn held at the end is kept for its lease.
    token: String,
    keep: bool,
}

enum Turn {
    /// In the line: a thread blocked in `flock` sends the locked turn when it comes.
    Queued(oneshot::Receiver<io::Result<OwnedFd>>),
    /// At the head: the turn is ours (given up when this listener is dropped) and the
    /// directory is watched for the release.
    Head { turn: OwnedFd, watch: DirWatch },
    /// The line failed (cannot lock, cannot start the thread): every waiter watches, as
    /// before the line existed.
    Plain(DirWatch),
    /// No watch could be set: the engine's bounded poll alone finds the release.
    Poll,
}

impl TurnWatch {
    /// Join the line of `req`'s one name (its state file `file`) in `dir`; the head at once
    /// if nobody waits.
    pub(super) fn new(
        store: Arc<Dir>,
        file: &str,
        req: &Acquire,
        files: HashSet<String>,
    ) -> io::Result<TurnWatch> {
        let dir = &store.dir;
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
                turn,
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
            files,
            state,
            token: req.token.clone(),
            keep: req.modes == [Mode::Exclusive],
            dir: store,
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
                self.state = match (got, DirWatch::new(&self.dir.dir, self.files.clone())) {
                    (Ok(Ok(turn)), Ok(watch)) => Turn::Head { turn, watch },
                    (_, Ok(watch)) => Turn::Plain(watch),
                    (_, Err(_)) => Turn::Poll,
                };
            }
        }
    }
}

impl Drop for TurnWatch {
    /// The wait is over. An exclusive request keeps a turn it holds until `give_up` (its
    /// release; a request that was not granted is released too); any other passes it on now.
    fn drop(&mut self) {
        if let Turn::Head { turn, .. } = std::mem::replace(&mut self.state, Turn::Poll)
            && self.keep
            && let Ok(mut kept) = self.dir.turns.lock()
        {
            kept.insert(self.token.clone(), turn);
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

    /// A release wakes the head of the line, not every waiter; the head, granted, keeps its
    /// turn through its lease, and its release wakes the next in line at once.
    #[tokio::test]
    async fn a_release_wakes_the_head_of_the_line_alone() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::open(root.path(), "t").unwrap();
        let holder = exclusive("h");
        let got = store.try_acquire(&holder, false).await.unwrap();
        assert!(matches!(got, Attempt::Granted(_)));
        let waiters: Vec<Acquire> = (0..3).map(|_| exclusive("h")).collect();
        let mut line = Vec::new();
        for w in &waiters {
            line.push(store.listen(w).await.unwrap());
        }
        assert!(store.release(&holder.names, &holder.token).await.unwrap());
        let woken = |t: Instant| t.elapsed() < Duration::from_secs(10);
        let t = Instant::now();
        line[0].changed(Duration::from_secs(20)).await;
        assert!(woken(t), "the head of the line was not woken by the release");
        let wait = Duration::from_millis(300);
        let t = Instant::now();
        line[1].changed(wait).await;
        assert!(
            t.elapsed() >= wait,
            "the release woke a waiter behind the head ({:?})",
            t.elapsed()
        );
        let got = store.try_acquire(&waiters[0], true).await.unwrap();
        assert!(matches!(got, Attempt::Granted(_)), "the head is granted");
        drop(line.remove(0));
        let t = Instant::now();
        line[0].changed(wait).await;
        assert!(
            t.elapsed() >= wait,
            "the next waiter was woken while the lock is held ({:?})",
            t.elapsed()
        );
        let head = &waiters[0];
        assert!(store.release(&head.names, &head.token).await.unwrap());
        let t = Instant::now();
        line[0].changed(Duration::from_secs(20)).await;
        assert!(woken(t), "the release did not pass the turn on");
        let got = store.try_acquire(&waiters[1], true).await.unwrap();
        assert!(matches!(got, Attempt::Granted(_)), "the next in line is granted");
    }
}
