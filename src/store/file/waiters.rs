//! The file store's queue (issue 37, item 4): waiters served in arrival order, one wake per
//! release.
//!
//! A state file lists its waiters (`Entry`) in ticket order, behind its holders, and the
//! record engine's fair line (`record::rules::Line::Fair`) decides who may hold: a request is
//! granted when its mode admits every holder and every waiter ahead of it, so nobody passes
//! an earlier waiter, and a `--shared` request that comes after a queued exclusive one waits
//! behind it. This module keeps the line's waiters alive and rings them.
//!
//! Each waiting process has a bell: a named pipe in `.q/` that it keeps open for reading (and
//! writing, so no writer's going reads as an end) for as long as it waits, and watches. A
//! change that may admit waiters (a release, a waiter giving up) rings only the bells of the
//! run it admits, from the head (one exclusive waiter, or the next compatible run of
//! `--shared`/`--limit` ones), by writing a byte into each; no other waiter is woken. (Not an
//! inotify watch per waiter: a user may have 128 inotify instances, and the 129th waiter of a
//! herd heard nothing.) The open pipe is the waiter's life: opening a pipe nobody reads fails
//! (ENXIO), so a waiter that died (its process killed, its descriptors closed with it) is
//! dropped from the queue by the first operation that needs to know, and never blocks the
//! queue. A grant needs no such check (a dead waiter ahead can only have kept it out); a
//! refusal is checked against the waiter that decides it.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::{Dir, names};
use crate::store::hostbell::open_to_ring;

/// The bells' directory in the namespace's.
pub(super) const BELLS: &str = ".q";

/// How many bells one sweep looks at (see `sweep_bells`).
const SWEEP: usize = 16;

/// One queued waiter of a name: written as a short line (see `line`), without metadata,
/// since every operation on the name reads and writes the whole queue. The waiter's metadata, which only `inspect` reads,
/// is in a file beside its bell (`<bell>.meta`), written once by the waiter: in the state
/// file, escaped, it made the queue three times as long (200 bytes a waiter, 22 KB at 100),
/// and parsing it was 15% of a contended herd's CPU.
#[derive(Deserialize, Clone, Debug)]
pub(super) struct Entry {
    /// Arrival order, the same for every name of one request.
    #[serde(rename = "t")]
    pub ticket: u64,
    #[serde(rename = "k")]
    pub token: String,
    #[serde(rename = "m")]
    pub mode: String,
    /// Holder metadata, in an entry an earlier version wrote (never written now: a queue
    /// is written as `line`s).
    #[serde(rename = "d", default)]
    pub meta: String,
}

/// A waiter's metadata, for `inspect`: `stored` where an earlier version kept it in the
/// entry, else from beside its bell ("" if it has none).
pub(super) fn meta(dir: &Path, token: &str, stored: &str) -> String {
    if !stored.is_empty() {
        return stored.to_string();
    }
    let bell = dir.join(BELLS).join(bell_name(token));
    fs::read_to_string(meta_path(&bell)).unwrap_or_default()
}

/// A bell's file name: from the token, so every process finds it, without showing it.
pub(super) fn bell_name(token: &str) -> String {
    names::hex(format!("bell:{token}").as_bytes())[..24].to_string()
}

/// The bells this process holds, by token: made by its listener or by its first queued
/// attempt, whichever comes first, and dropped once the request is granted or withdrawn.
#[derive(Default)]
pub(super) struct Bells(Mutex<HashMap<String, Bell>>);

struct Bell {
    path: PathBuf,
    /// The pipe, open for reading and writing: it says the waiter lives.
    pipe: File,
    /// Its waiter is queued: only its grant or release drops it, not its listener (the
    /// engine opens a new listener before it drops the old one when a store came back).
    queued: bool,
    /// It rang since the waiter's last attempt: the change let the waiter in.
    rung: bool,
}

impl Drop for Bell {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_file(meta_path(&self.path));
    }
}

/// Where a bell's waiter keeps its metadata: `<bell>.meta` (a bell's name has no dot).
fn meta_path(bell: &Path) -> PathBuf {
    bell.with_extension("meta")
}

impl Dir {
    /// Make this process's bell for `token` (with `meta` beside it) and take it for queued:
    /// only its grant or release drops it from now on. False if it could not be made: the
    /// waiter then waits as before the queue, looking again after each release or poll.
    pub(super) fn queue_ready(&self, token: &str, meta: &str) -> bool {
        let mut bells = self.bells.0.lock().expect("bells lock");
        if let Some(b) = bells.get_mut(token) {
            b.queued = true;
            return true;
        }
        drop(bells);
        if self.ring_for(token, meta).is_err() {
            return false;
        }
        if let Some(b) = self.bells.0.lock().expect("bells lock").get_mut(token) {
            b.queued = true;
        }
        true
    }

    /// Whether this process holds a bell for `token`.
    pub(super) fn has_bell(&self, token: &str) -> bool {
        self.bells.0.lock().expect("bells lock").contains_key(token)
    }

    /// This process's bell for `token`, made if need be (with `meta` beside it): a
    /// descriptor of its pipe, for the listener to wait on.
    pub(super) fn ring_for(&self, token: &str, meta: &str) -> io::Result<File> {
        let mut bells = self.bells.0.lock().expect("bells lock");
        if let Some(b) = bells.get(token) {
            return b.pipe.try_clone();
        }
        let dir = self.dir.join(BELLS);
        if let Err(e) = fs::DirBuilder::new().mode(self.perms.dir).create(&dir) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        } else {
            self.perms.dir(&dir);
        }
        // Made aside and opened before it takes its name, so a sweep never finds it unread.
        let name = bell_name(token);
        let aside = dir.join(format!(".{name}"));
        let _ = fs::remove_file(&aside);
        crate::sys::mkfifo(&aside, self.perms.file)?;
        let pipe = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&aside)?;
        self.perms.file(&pipe);
        let path = dir.join(name);
        fs::rename(&aside, &path)?;
        // After the bell, so a metadata file without its bell is always a leftover (see
        // `sweep_bells`). Only `inspect` reads it: without it (a full file system), the
        // waiter waits all the same.
        self.write_meta(&meta_path(&path), meta);
        let listener = pipe.try_clone()?;
        bells.insert(
            token.to_string(),
            Bell {
                path,
                pipe,
                queued: false,
                rung: false,
            },
        );
        Ok(listener)
    }

    fn write_meta(&self, path: &Path, meta: &str) {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(self.perms.file)
            .open(path);
        if let Ok(mut f) = file {
            self.perms.file(&f);
            let _ = f.write_all(meta.as_bytes());
        }
    }

    /// Whether an attempt for `token` should take the flock without a look first: its
    /// waiter is not queued yet (the attempt queues it), or its bell rang (a change let it
    /// in). A look would only say so, at the cost of a read of the whole queue, on the
    /// handoff's path for a rung bell. Takes the ring.
    pub(super) fn straight_in(&self, token: &str) -> bool {
        let mut bells = self.bells.0.lock().expect("bells lock");
        match bells.get_mut(token) {
            Some(b) => !b.queued || std::mem::take(&mut b.rung),
            None => true,
        }
    }

    /// The bell for `token` rang (see `straight_in`).
    pub(super) fn rang(&self, token: &str) {
        if let Some(b) = self.bells.0.lock().expect("bells lock").get_mut(token) {
            b.rung = true;
        }
    }

    /// The request is granted or withdrawn: its bell goes.
    pub(super) fn drop_bell(&self, token: &str) {
        self.bells.0.lock().expect("bells lock").remove(token);
    }

    /// Its listener is gone: the bell goes unless its waiter is queued (`dlock wait`'s
    /// watcher never is).
    pub(super) fn listener_gone(&self, token: &str) {
        let mut bells = self.bells.0.lock().expect("bells lock");
        if bells.get(token).is_some_and(|b| !b.queued) {
            bells.remove(token);
        }
    }

    /// Ring these bells (after the namespace's flock is let go): a byte into each pipe. A
    /// failure is left alone: a waiter looks again within `MAX_POLL` whatever it hears.
    pub(super) fn ring(&self, bells: &[String]) {
        for bell in bells {
            if let Ok(mut pipe) = open_to_ring(&self.dir.join(BELLS).join(bell)) {
                let _ = pipe.write(b"!");
            }
        }
    }

    /// Remove a few bells left by waiters that died before they queued or after they were
    /// dropped from it (nobody reads them), with their metadata, and metadata whose bell is
    /// gone: called when a name is forgotten, so the directory does not collect them. Never
    /// more than `SWEEP` per call, whatever waits.
    pub(super) fn sweep_bells(&self) {
        let dir = self.dir.join(BELLS);
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        let stale = SystemTime::now() - Duration::from_secs(60);
        for entry in entries.flatten().take(SWEEP) {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // One being made: only a minute-old one is a leftover.
            if name.starts_with('.')
                && entry
                    .metadata()
                    .map_or(true, |m| m.modified().map_or(true, |t| t > stale))
            {
                continue;
            }
            let path = dir.join(name);
            if let Some(bell) = name.strip_suffix(".meta") {
                // Written after its bell, and removed after it: a leftover once that is gone.
                let gone = fs::symlink_metadata(dir.join(bell))
                    .is_err_and(|e| e.kind() == io::ErrorKind::NotFound);
                if gone {
                    let _ = fs::remove_file(&path);
                }
            } else if !alive_at(&path) {
                let _ = fs::remove_file(&path);
                let _ = fs::remove_file(meta_path(&path));
            }
        }
    }
}

/// Whether the waiter behind a bell lives: someone reads its pipe. A bell that cannot be
/// opened for another reason is taken for alive (the safe side: it is waited for, never
/// skipped).
pub(super) fn alive(dir: &Path, bell: &str) -> bool {
    alive_at(&dir.join(BELLS).join(bell))
}

fn alive_at(path: &Path) -> bool {
    match open_to_ring(path) {
        Ok(_) => true,
        Err(e) => !matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENOENT)),
    }
}

/// A dead waiter's bell, and its metadata with it.
pub(super) fn remove_bell(dir: &Path, bell: &str) {
    let path = dir.join(BELLS).join(bell);
    let _ = fs::remove_file(&path);
    let _ = fs::remove_file(meta_path(&path));
}

pub(super) mod line;
#[cfg(test)]
mod tests;
