//! What `dlock doctor` says of the file store: what its locks cover (this host only) and
//! whether its fence counters survive a reboot (not on tmpfs, where the default lives; fences
//! are floored at the wall clock all the same, which a reboot does not restart).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use super::FileStore;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult};

/// `statfs`' f_type of a tmpfs (linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;

impl FileStore {
    pub(super) fn doctor(&self, _q: HealthQuery) -> StoreResult<Health> {
        let mut h = Health::default();
        h.findings.push(Finding::new(
            "scope",
            Severity::Note,
            "a file store's locks exclude the processes of this host only",
        ));
        // Which directory, and why: a user's sessions meet only in the same one.
        let root = self.0.desc.as_str();
        h.findings.push(match super::dir::explain(root) {
            Some(why) => Finding::new("directory", Severity::Ok, format!("{root}: {why}")),
            None => Finding::new(
                "directory",
                Severity::Note,
                format!("{root}: given by --store or DLOCK_STORE, not the default"),
            ),
        });
        let in_use = std::path::Path::new(root.strip_prefix("file://").unwrap_or(root));
        for old in super::dir::old_defaults(in_use) {
            h.findings.push(Finding::new(
                "directory",
                Severity::Note,
                format!(
                    "{} was the default store of earlier versions of dlock, which this one does not \
                     read: let locks held there by older dlock processes end, then remove it",
                    old.display()
                ),
            ));
        }
        let on_tmpfs = tmpfs(&self.0.dir);
        h.findings.push(match on_tmpfs {
            Some(true) => Finding::new(
                "persistence",
                Severity::Note,
                "on tmpfs: holders and fence counters are gone after a reboot (no holder \
                 survives one either); fences go on from the wall clock, so they rise across \
                 reboots as long as the clock does not step back",
            ),
            Some(false) => Finding::new(
                "persistence",
                Severity::Ok,
                "on a persistent file system: fence counters survive a reboot",
            ),
            None => Finding::new(
                "persistence",
                Severity::Note,
                "cannot tell which file system the store is on",
            ),
        });
        Ok(h)
    }
}

fn tmpfs(dir: &std::path::Path) -> Option<bool> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs fills the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_type as i64 == TMPFS_MAGIC)
}
