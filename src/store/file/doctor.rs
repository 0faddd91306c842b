//! What `dlock doctor` says of the file store: what its locks cover (this host only, and
//! which host it is bound to), whether its fence counters survive a reboot (not on tmpfs,
//! where the default lives; fences are floored at the wall clock all the same, which a
//! reboot does not restart), and its room: free space and inodes, and the files it holds,
//! with a warning before it is full (a full directory fails every lock in it).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::Files;
use crate::store::{Finding, Health, HealthQuery, Severity, StoreResult};
use crate::sys;

impl Files {
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
        h.findings.push(self.host_finding(in_use));
        h.findings.extend(room(&self.0.dir));
        let on_tmpfs = sys::tmpfs(&self.0.dir);
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

impl Files {
    fn host_finding(&self, root: &Path) -> Finding {
        let record = root.join(super::host::RECORD);
        let this = super::host::Host::this();
        let net = super::host::network_fs(root).map_or(String::new(), |fs| {
            format!("; on {fs}, allowed by ?network=1: no other host may use it")
        });
        Finding::new(
            "host",
            Severity::Ok,
            format!(
                "bound to this host (machine id {}) by {}{net}",
                if this.machine.is_empty() {
                    "unknown"
                } else {
                    &this.machine
                },
                record.display()
            ),
        )
    }
}

/// Free space, free inodes and the files of the namespace, warning when either is short.
fn room(dir: &Path) -> Vec<Finding> {
    let files = std::fs::read_dir(dir).map_or(0, |d| d.count());
    let mut out = vec![Finding::new(
        "files",
        Severity::Ok,
        format!(
            "{files} file(s) in {} (a name's state goes once nobody holds or waits for it)",
            dir.display()
        ),
    )];
    let Some(st) = statvfs(dir) else {
        return out;
    };
    let unit = st.f_frsize;
    let (free, total) = (st.f_bavail * unit, st.f_blocks * unit);
    let (ifree, itotal) = (st.f_favail, st.f_files);
    // Short: under a tenth left, or room for fewer than 64 more state files (a page each on
    // tmpfs, whatever their size).
    let short = |left: u64, all: u64, one: u64| all > 0 && (left * 10 < all || left < 64 * one);
    let (space_short, inodes_short) = (short(free, total, 4096), short(ifree, itotal, 1));
    let severity = if space_short || inodes_short {
        Severity::Warn
    } else {
        Severity::Ok
    };
    let mut text = format!(
        "{} KiB free of {} KiB, {ifree} of {itotal} inodes free",
        free / 1024,
        total / 1024
    );
    if severity == Severity::Warn {
        text.push_str(
            ": nearly full; when it is full every lock in this store fails (exit 69): free \
             space, or give --store file:///a/larger/dir",
        );
    }
    out.push(Finding::new("space", severity, text));
    out
}

fn statvfs(dir: &Path) -> Option<libc::statvfs> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(path.as_ptr(), &mut st) } == 0).then_some(st)
}
