//! Where the file store lives, and the checks that keep another user out of it.
//!
//! **The default directory** is one per user per host, whatever the session (issue 26): a
//! login shell, cron, sudo, a systemd unit and a CI runner of one user must meet in it, so it
//! is decided from the effective uid and the host alone, never from the session's
//! environment (the old default, `$XDG_RUNTIME_DIR/dlock` else `/tmp/dlock-UID`, split a
//! user's shell from the same user's cron job):
//!
//! - `/run/lock/dlock-UID` where `/run/lock` (FHS's place for lock files) lets this user
//!   create in it: always for root, and for everyone where it is sticky and world-writable
//!   (mode 1777, as on Debian and Ubuntu). It is not under `/tmp`, so a systemd unit's
//!   `PrivateTmp=` does not move it either.
//! - `/tmp/dlock-UID` otherwise (where `/run/lock` is root's alone, as on Arch or Fedora).
//!
//! Both are decided by the mode of `/run/lock` and the uid, which are the same for every
//! session of the user. Group membership is not consulted: `newgrp` or a service's groups
//! could make it differ between sessions.
//!
//! **Ownership and mode.** The default sits in a directory every user may create in, so
//! another user could create it first, or plant files in it, and hand out or block our locks.
//! So it must be a real directory (not a symlink), owned by us, and writable by no one else;
//! anything else is refused (exit 77) with the fix, never silently replaced by another place.
//!
//! **Any directory** (item 8 of the issue): dlock creates at most its last component, and says
//! so once on stderr; a missing parent is a usage error, so `file:///typo/path` never grows a
//! tree (as root, anywhere).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::store::{StoreError, StoreResult};

/// FHS's directory for lock files.
const RUN_LOCK: &str = "/run/lock";

/// The default store directory and why it is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultDir {
    pub path: PathBuf,
    pub why: String,
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The default store directory of this user on this host (see the module's comment).
pub fn default_dir() -> DefaultDir {
    let uid = euid();
    let run_lock = fs::metadata(RUN_LOCK).ok().filter(|m| m.is_dir());
    choose(uid, run_lock.map(|m| m.mode()))
}

/// The rule, apart from the file system: `run_lock_mode` is `/run/lock`'s mode if it is a
/// directory.
fn choose(uid: u32, run_lock_mode: Option<u32>) -> DefaultDir {
    let open_to_all = |m: u32| m & 0o1003 == 0o1003;
    match run_lock_mode {
        Some(_) if uid == 0 => DefaultDir {
            path: PathBuf::from(format!("{RUN_LOCK}/dlock-{uid}")),
            why: format!(
                "the default: {RUN_LOCK} is the place for lock files, one directory per user \
                 per host whatever the session (root)"
            ),
        },
        Some(m) if open_to_all(m) => DefaultDir {
            path: PathBuf::from(format!("{RUN_LOCK}/dlock-{uid}")),
            why: format!(
                "the default: {RUN_LOCK} is the place for lock files and every user may create \
                 in it (mode {:o}); one directory per user per host whatever the session",
                m & 0o7777
            ),
        },
        other => DefaultDir {
            path: PathBuf::from(format!("/tmp/dlock-{uid}")),
            why: match other {
                Some(m) => format!(
                    "the default: {RUN_LOCK} is not open to every user (mode {:o}), so /tmp; \
                     one directory per user per host whatever the session",
                    m & 0o7777
                ),
                None => format!(
                    "the default: this host has no {RUN_LOCK}, so /tmp; one directory per user \
                     per host whatever the session"
                ),
            },
        },
    }
}

/// Why a file store described as `desc` (`file:///dir`) is where it is, if it is the default.
pub fn explain(desc: &str) -> Option<String> {
    let dir = desc.strip_prefix("file://")?;
    let d = default_dir();
    (Path::new(dir) == d.path).then_some(d.why)
}

/// The directories earlier versions used by default, which this one no longer reads (unless
/// it is `in_use`, named by the URL).
pub fn old_defaults(in_use: &Path) -> Vec<PathBuf> {
    let mut old = vec![PathBuf::from(format!("/tmp/dlock-{}", euid()))];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        old.push(PathBuf::from(x).join("dlock"));
    }
    let now = default_dir().path;
    old.retain(|p| *p != now && p != in_use && p.is_dir());
    old
}

/// Make sure the store's root directory exists: create at most its last component (saying so
/// on stderr), never a missing parent. The default directory is also checked to be ours
/// alone. True if it is the default.
pub fn prepare(root: &Path) -> StoreResult<bool> {
    let default = default_dir();
    let is_default = root == default.path;
    match fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {
            if !is_default {
                eprintln!("dlock: created the store directory {}", root.display());
            }
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = root.parent().unwrap_or(Path::new("/"));
            return Err(StoreError::invalid(format!(
                "{} does not exist; dlock creates only the store directory itself, not its \
                 parents: create {} first, or fix the path",
                parent.display(),
                parent.display()
            )));
        }
        Err(e) => {
            let msg = format!("cannot create {}: {e}", root.display());
            return Err(if e.kind() == io::ErrorKind::PermissionDenied {
                StoreError::refused(msg)
            } else {
                StoreError::unavailable(msg)
            });
        }
    }
    let meta = fs::symlink_metadata(root)
        .map_err(|e| StoreError::unavailable(format!("cannot read {}: {e}", root.display())))?;
    if is_default {
        return owned_by_us(root, &meta).map(|()| true);
    }
    if !meta.is_dir() {
        return Err(StoreError::refused(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    Ok(false)
}

/// The default directory must be a directory of ours that no one else may write to.
fn owned_by_us(root: &Path, meta: &fs::Metadata) -> StoreResult<()> {
    let shown = root.display();
    let refuse = |what: String| {
        Err(StoreError::refused(format!(
            "refused: the default store directory {shown} {what}"
        )))
    };
    if meta.file_type().is_symlink() {
        return refuse(
            "is a symlink (another user may have planted it): remove it, or give \
             --store file:///a/dir/of/yours"
                .to_string(),
        );
    }
    if !meta.is_dir() {
        return refuse("is not a directory: remove it".to_string());
    }
    let me = euid();
    if meta.uid() != me {
        return refuse(format!(
            "belongs to uid {}, not to you (uid {me}): another user may have created it to \
             see or block your locks; remove it (as root), or give --store file:///a/dir/of/yours",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return refuse(format!(
            "is writable by other users (mode {mode:o}), who could plant lock files in it: run \
             chmod 700 {shown}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_place_depends_on_the_uid_and_run_lock_only() {
        assert_eq!(
            choose(1000, Some(0o41777)).path,
            Path::new("/run/lock/dlock-1000")
        );
        assert_eq!(
            choose(0, Some(0o40755)).path,
            Path::new("/run/lock/dlock-0")
        );
        assert_eq!(
            choose(1000, Some(0o40755)).path,
            Path::new("/tmp/dlock-1000")
        );
        assert_eq!(
            choose(1000, Some(0o40775)).path,
            Path::new("/tmp/dlock-1000")
        );
        assert_eq!(choose(1000, None).path, Path::new("/tmp/dlock-1000"));
        assert!(choose(1000, Some(0o40755)).why.contains("mode 755"));
    }

    #[test]
    fn only_the_last_component_is_created() {
        let t = tempfile::tempdir().unwrap();
        let deep = t.path().join("typo/path");
        let e = prepare(&deep).unwrap_err();
        assert_eq!(e.kind(), crate::store::ErrorKind::Invalid, "{e}");
        assert!(!t.path().join("typo").exists());
        prepare(&t.path().join("store")).unwrap();
        assert!(t.path().join("store").is_dir());
    }
}
