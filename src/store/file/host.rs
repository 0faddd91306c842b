//! One host per store directory (issue 37, item 2).
//!
//! A file store's leases are timed by CLOCK_BOOTTIME and its exclusion is a flock, neither of
//! which means anything to another host sharing the directory (NFS, a shared volume): a
//! second host took a state file of the first for one from an earlier boot and dropped its
//! holders. So:
//!
//! - **The file system.** `statfs` tells a network or FUSE file system; the store refuses it
//!   (78) unless the URL says `?network=1`: FUSE may well be local (bindfs), and the operator
//!   who knows it is can say so. Refusing is the safe default, as a warning would be read
//!   after the double grant.
//! - **The host record.** The store's root keeps `.host`: the machine id (which survives a
//!   reboot and differs between hosts) and the boot id of the kernel that last claimed it.
//!   The same boot id is the same kernel (containers of one host share it, whatever their
//!   machine ids); the same machine id with another boot id is a reboot, unless the record
//!   was written after this kernel started, which only a kernel still running elsewhere can
//!   have done; anything else is another host, refused (78).
//! - **State files.** A state file written under another boot id after this kernel started
//!   is refused the same way (a clone with the same machine id), where before it was taken
//!   for a leftover of an earlier boot.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::perms::Perms;
use crate::store::{StoreError, StoreResult};
use crate::sys;

/// The host record's file in the store's root (no namespace starts with `.`).
pub(super) const RECORD: &str = ".host";

/// statfs f_type of the network and FUSE file systems (linux/magic.h and the file systems'
/// own headers), with the name a message gives them.
const NETWORK: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x0102_1997, "9p"),
    (0x6573_5546, "FUSE"),
    (0x00C3_6400, "Ceph"),
    (0x0BD0_0BD0, "Lustre"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS"),
    (0x7461_636F, "OCFS2"),
    (0x0116_1970, "GFS2"),
    (0x7375_7245, "Coda"),
];

/// This host as the record names it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(super) struct Host {
    pub machine: String,
    pub boot: String,
}

impl Host {
    pub fn this() -> Host {
        Host {
            machine: machine_id(),
            boot: sys::boot_id(),
        }
    }
}

/// The machine id: systemd's, else D-Bus's older copy of it ("" where there is neither).
fn machine_id() -> String {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| {
            let s = fs::read_to_string(p).ok()?;
            let s = s.trim();
            (!s.is_empty()).then(|| s.to_string())
        })
        .unwrap_or_default()
}

/// The wall-clock time this kernel started (now less CLOCK_BOOTTIME).
pub(super) fn booted_at() -> SystemTime {
    SystemTime::now() - sys::boottime()
}

/// Whether something written at `written` under another boot id was written by a kernel
/// running after this one started. A second of slack for clocks set a little differently.
pub(super) fn after_our_boot(written: SystemTime) -> bool {
    written > booted_at() + Duration::from_secs(1)
}

/// The one line for a directory another host uses.
pub(super) fn other_host(desc: &str, what: &str) -> StoreError {
    StoreError::config(format!(
        "{desc}: {what}; a file store serves the processes of one host only: for locks \
         shared between hosts use a networked store (redis://, etcd://, zk://, postgres://, \
         mysql://)"
    ))
}

/// The file system under `dir`, if it is a network or FUSE one.
pub(super) fn network_fs(dir: &Path) -> Option<&'static str> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statfs fills the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let t = st.f_type as i64 & 0xFFFF_FFFF;
    NETWORK.iter().find(|(m, _)| *m == t).map(|(_, n)| *n)
}

/// Refuse a network file system unless the URL allowed it.
pub(super) fn check_fs(root: &Path, desc: &str, allowed: bool) -> StoreResult<()> {
    match network_fs(root) {
        Some(fs) if !allowed => Err(StoreError::config(format!(
            "{desc} is on {fs}, a network or FUSE file system: flock and the boot clock there \
             may not exclude the processes of other hosts, so dlock refuses it; for locks \
             shared between hosts use a networked store (redis://, etcd://, zk://), or add \
             ?network=1 to the URL if only this host uses the directory"
        ))),
        _ => Ok(()),
    }
}

/// Check the store's host record, claiming the store for this host at its first use and
/// after a reboot.
pub(super) fn claim(root: &Path, desc: &str, perms: Perms) -> StoreResult<()> {
    let path = root.join(RECORD);
    let me = Host::this();
    let io = |e: io::Error| super::io_err("cannot use the host record", &path, e);
    let (theirs, written) = match fs::read(&path) {
        Ok(bytes) => {
            let written = fs::metadata(&path).and_then(|m| m.modified()).map_err(io)?;
            // A damaged record is claimed again: it guards, it holds no lock.
            match serde_json::from_slice::<Host>(&bytes) {
                Ok(h) => (Some(h), written),
                Err(_) => (None, written),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => (None, SystemTime::UNIX_EPOCH),
        Err(e) => return Err(io(e)),
    };
    match theirs {
        Some(h) if h.boot == me.boot => Ok(()),
        Some(h) if h.machine != me.machine || after_our_boot(written) => Err(other_host(
            desc,
            &format!(
                "it is in use by another host (machine id {}, boot id {}; this host is {}, \
                 boot {}); if this host really is the one that used it, remove {}",
                short(&h.machine),
                short(&h.boot),
                short(&me.machine),
                short(&me.boot),
                path.display()
            ),
        )),
        _ => write(root, &me, perms).map_err(io),
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Replace the record whole (written aside, then renamed over).
fn write(root: &Path, host: &Host, perms: Perms) -> io::Result<()> {
    // Named apart for each writer: clients in one process may claim at once.
    let tmp = root.join(format!("{RECORD}.{:016x}", sys::random_u64()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(perms.file)
        .open(&tmp)?;
    perms.file(&f);
    f.write_all(&serde_json::to_vec(host).expect("host serializes"))?;
    drop(f);
    fs::rename(&tmp, root.join(RECORD))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(root: &Path, host: &Host) {
        fs::write(root.join(RECORD), serde_json::to_vec(host).unwrap()).unwrap();
    }

    fn set_mtime(path: &Path, t: SystemTime) {
        let f = fs::File::options().write(true).open(path).unwrap();
        f.set_modified(t).unwrap();
    }

    #[test]
    fn the_first_use_claims_and_another_host_is_refused() {
        let t = tempfile::tempdir().unwrap();
        claim(t.path(), "d", Perms::PRIVATE).unwrap();
        assert_eq!(
            serde_json::from_slice::<Host>(&fs::read(t.path().join(RECORD)).unwrap()).unwrap(),
            Host::this()
        );
        claim(t.path(), "d", Perms::PRIVATE).unwrap();
        let other = Host {
            machine: "0123456789abcdef".into(),
            boot: "another-boot".into(),
        };
        record(t.path(), &other);
        let e = claim(t.path(), "d", Perms::PRIVATE).unwrap_err();
        assert_eq!(e.kind(), crate::store::ErrorKind::Config, "{e}");
        assert!(e.message().contains("one host only"), "{e}");
    }

    /// The same machine under another boot id: a reboot when the record is older than this
    /// kernel (claimed again), another kernel still running when it is newer (refused).
    #[test]
    fn a_reboot_is_told_from_a_clone_by_the_records_age() {
        let t = tempfile::tempdir().unwrap();
        let before = Host {
            machine: Host::this().machine,
            boot: "an-earlier-boot".into(),
        };
        record(t.path(), &before);
        let e = claim(t.path(), "d", Perms::PRIVATE).unwrap_err();
        assert_eq!(e.kind(), crate::store::ErrorKind::Config, "{e}");
        set_mtime(
            &t.path().join(RECORD),
            booted_at() - Duration::from_secs(60),
        );
        claim(t.path(), "d", Perms::PRIVATE).unwrap();
        claim(t.path(), "d", Perms::PRIVATE).unwrap();
    }
}
