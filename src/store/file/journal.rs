//! Changes to several names at once (a `multilock`'s grant, renewal or release), atomic even
//! when the process dies between two state files.
//!
//! Each name has a state file of its own, replaced by rename: one name changes whole or not at
//! all. A change to several names is first written whole to `.journal` (also by rename, so it
//! is there entire or not at all), then applied file by file, then the journal is removed.
//! Whoever takes the flock next finds a journal left by a process killed midway and applies it
//! again: its states are whole snapshots taken under the flock, so applying them twice is
//! harmless. A read without the flock (`inspect`, `list`) prefers the journal's state of a
//! name, so it never sees a multilock partly granted.

use std::fs;
use std::io;

use super::{Dir, State, io_err};
use crate::store::{StoreError, StoreResult};

const JOURNAL: &str = ".journal";

type Changes = Vec<(String, State)>;

impl Dir {
    /// Write every changed state: a single name directly, several through the journal.
    pub(super) fn commit(&self, changed: &Changes) -> StoreResult<()> {
        if let [(name, st)] = changed.as_slice() {
            return self.write(name, st);
        }
        if changed.is_empty() {
            return Ok(());
        }
        let bytes = serde_json::to_vec(changed).expect("states serialize");
        self.put(JOURNAL, &bytes)?;
        self.apply(changed)
    }

    /// Finish the change of a process that died midway (called under the flock).
    pub(super) fn recover(&self) -> StoreResult<()> {
        match self.journal()? {
            Some(changed) => {
                self.apply(&changed)?;
                // It may have been a release: whoever waits on these names looks again.
                self.wake(changed.iter().map(|(n, _)| n.as_str()));
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A name's state as a reader without the flock should see it.
    pub(super) fn read_settled(&self, name: &str) -> StoreResult<State> {
        let pending = self.journal()?.and_then(|changed| {
            changed
                .into_iter()
                .find_map(|(n, st)| (n == name).then_some(st))
        });
        match pending {
            Some(st) => Ok(st),
            None => self.read(name),
        }
    }

    fn apply(&self, changed: &Changes) -> StoreResult<()> {
        for (name, st) in changed {
            self.write(name, st)?;
        }
        let path = self.dir.join(JOURNAL);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("cannot remove", &path, e)),
            _ => Ok(()),
        }
    }

    fn journal(&self) -> StoreResult<Option<Changes>> {
        let path = self.dir.join(JOURNAL);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                StoreError::protocol(format!(
                    "{} is damaged ({e}); remove it to let the store go on",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot read", &path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(fence: u64) -> State {
        State {
            fence,
            ..State::default()
        }
    }

    /// A journal left by a process killed after it was written: readers already see its
    /// states, and the next holder of the flock applies and removes it.
    #[test]
    fn a_journal_left_behind_is_seen_and_then_applied() {
        let root = tempfile::tempdir().unwrap();
        let dir = Dir::open(root.path(), "ns", Default::default()).unwrap();
        dir.write("a", &held(1)).unwrap();
        let changed: Changes = vec![("a".into(), held(7)), ("b".into(), held(8))];
        dir.put(JOURNAL, &serde_json::to_vec(&changed).unwrap())
            .unwrap();
        // Killed before any state file was written.
        assert_eq!(dir.read("a").unwrap().fence, 1);
        assert_eq!(dir.read_settled("a").unwrap().fence, 7);
        assert_eq!(dir.read_settled("b").unwrap().fence, 8);
        dir.recover().unwrap();
        assert_eq!(dir.read("a").unwrap().fence, 7);
        assert_eq!(dir.read("b").unwrap().fence, 8);
        assert!(!dir.dir.join(JOURNAL).exists());
        // A whole commit leaves no journal either.
        dir.commit(&vec![("a".into(), held(9)), ("b".into(), held(10))])
            .unwrap();
        assert!(!dir.dir.join(JOURNAL).exists());
        assert_eq!(dir.read("b").unwrap().fence, 10);
    }
}
