//! Nothing grows without bound (issue 37, item 1): the state file of a name nobody holds or
//! waits for is removed, so a directory used for 100,000 names once each holds a few files.
//! (Each state file took a page of the default directory's 5 MiB tmpfs, which filled after
//! about 1,280 names, and then every lock of the host failed with ENOSPC.)
//!
//! What a removed state file knew is kept where it matters:
//! - a name whose last lease ran out or was forced (`expired`) keeps its file, so its next
//!   holder still learns that its predecessor may have died mid-work; that grows with
//!   failures, not with use;
//! - a name released cleanly goes to `.recent`, one small file per namespace that remembers
//!   the last `RECENT` such names (fence, marker), so the next holder of a name used a moment
//!   ago still reads `released`; a name that has left it reads `none` (no earlier holder
//!   known), as on any store that forgot;
//! - fences never go back: a name's next fence is above its fence in `.recent`, and above
//!   `high`, the highest fence of every name that left it. The clock floor alone does not do:
//!   two grants within one millisecond would get the same floor.

use std::fs;
use std::io;

use serde::{Deserialize, Serialize};

use super::{Dir, Previous, State, io_err};
use crate::store::{StoreError, StoreResult};

const FILE: &str = ".recent";

/// How many cleanly released names `.recent` remembers: a few KiB at most.
const RECENT: usize = 32;

#[derive(Serialize, Deserialize, Default)]
struct Recent {
    /// The highest fence of the names that left the record.
    high: u64,
    /// Oldest first.
    names: Vec<Remembered>,
}

#[derive(Serialize, Deserialize)]
struct Remembered {
    name: String,
    fence: u64,
    #[serde(default)]
    mark: bool,
    /// How its last lease ended ("released", "failed:3"), for its next holder.
    /// None in records written before it was kept, when only clean ends were forgotten.
    #[serde(default)]
    previous: Option<String>,
}

impl State {
    /// Whether the state may go: no holder, no waiter, and the last lease did not end unknown.
    pub(super) fn forgettable(&self) -> bool {
        self.holders.is_empty()
            && self.queue.is_empty()
            && Previous::parse(&self.previous) != Previous::Expired
    }
}

impl Dir {
    /// Remove a forgettable state (under the flock): into `.recent` first, so no crash
    /// between the two steps can take a fence back.
    pub(super) fn forget(&self, name: &str, st: &State) -> StoreResult<()> {
        let mut recent = self.recent()?;
        recent.names.retain(|r| r.name != name);
        recent.names.push(Remembered {
            name: name.to_string(),
            fence: st.fence.max(st.floor),
            mark: st.mark,
            previous: Some(st.previous.clone()),
        });
        while recent.names.len() > RECENT {
            let gone = recent.names.remove(0);
            recent.high = recent.high.max(gone.fence);
        }
        self.put(FILE, &serde_json::to_vec(&recent).expect("serializes"))?;
        let path = self.path(name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_err("cannot remove", &path, e));
            }
            _ => {}
        }
        self.sweep_bells();
        Ok(())
    }

    /// The state of a name without a state file: what `.recent` remembers of it, with the
    /// floor its next fence must pass.
    pub(super) fn recalled(&self, name: &str) -> StoreResult<State> {
        let recent = self.recent()?;
        let mut st = State {
            floor: recent.high,
            ..State::default()
        };
        if let Some(r) = recent.names.iter().find(|r| r.name == name) {
            st.fence = r.fence;
            st.mark = r.mark;
            st.previous = r
                .previous
                .clone()
                .unwrap_or_else(|| Previous::Released.text());
        }
        Ok(st)
    }

    fn recent(&self) -> StoreResult<Recent> {
        let path = self.dir.join(FILE);
        match fs::read(&path) {
            // Replaced whole by rename, so damaged only by hand: refused as a state file is,
            // since starting it again could take fences back.
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                StoreError::protocol(format!(
                    "{} is damaged ({e}); remove it to reset the record",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Recent::default()),
            Err(e) => Err(io_err("cannot read", &path, e)),
        }
    }
}
