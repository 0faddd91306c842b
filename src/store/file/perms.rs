//! The modes of what the file store creates (issue 37, item 3).
//!
//! The default directory is the user's own (see `dir`): everything in it is 0600/0700. Any
//! other directory is shared as its own mode says: a lock directory made for a group
//! (`chgrp deploy /srv/locks; chmod 2770 /srv/locks`) lets every member of the group take and
//! release the same locks, so dlock gives what it creates there the directory's read and
//! write bits (files without execute; subdirectories keep its setgid bit, never its sticky
//! bit, which would keep one member from replacing another's state file) and its group. The
//! mode is set with fchmod after creation: the umask (022 in most sessions) would otherwise
//! take the group's write bit away.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Perms {
    pub file: u32,
    pub dir: u32,
    /// The group new files are given: the directory's, when they are shared with it.
    group: Option<u32>,
}

impl Perms {
    /// Only its owner may use what dlock creates (the default directory).
    pub const PRIVATE: Perms = Perms {
        file: 0o600,
        dir: 0o700,
        group: None,
    };

    /// What the store creates inside `root`: private in the default directory, else as the
    /// root's mode shares it.
    pub fn of(root: &Path, default: bool) -> Perms {
        let Ok(meta) = fs::metadata(root) else {
            return Perms::PRIVATE;
        };
        if default {
            return Perms::PRIVATE;
        }
        let mode = meta.mode();
        let file = (mode & 0o666) | 0o600;
        let dir = (mode & 0o777) | 0o700 | (mode & 0o2000);
        Perms {
            file,
            dir,
            group: (mode & 0o060 != 0).then_some(meta.gid()),
        }
    }

    fn shared(&self) -> bool {
        *self != Perms::PRIVATE
    }

    /// Give a file this store just created its mode and group (nothing to do when private:
    /// a umask only takes bits away).
    pub fn file(&self, f: &File) {
        if !self.shared() {
            return;
        }
        // SAFETY: plain syscalls on a descriptor open for the call. A failure (a file system
        // without modes) leaves the creation mode, which the umask may have narrowed.
        unsafe {
            libc::fchmod(f.as_raw_fd(), self.file);
            if let Some(gid) = self.group {
                libc::fchown(f.as_raw_fd(), u32::MAX, gid);
            }
        }
    }

    /// The same for a directory this store just created.
    pub fn dir(&self, path: &Path) {
        if !self.shared() {
            return;
        }
        if let Ok(f) = File::open(path) {
            // SAFETY: as in `file`.
            unsafe {
                if let Some(gid) = self.group {
                    libc::fchown(f.as_raw_fd(), u32::MAX, gid);
                }
                libc::fchmod(f.as_raw_fd(), self.dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_group_directory_shares_its_mode_and_the_default_stays_private() {
        let t = tempfile::tempdir().unwrap();
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o2770)).unwrap();
        let p = Perms::of(t.path(), false);
        assert_eq!((p.file, p.dir), (0o660, 0o2770));
        assert_eq!(Perms::of(t.path(), true), Perms::PRIVATE);
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(Perms::of(t.path(), false).dir, 0o777, "no sticky bit");
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(Perms::of(t.path(), false), Perms::PRIVATE);
    }
}
