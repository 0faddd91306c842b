//! Replacing a file of the namespace whole: what every grant, release and journal entry does.
//!
//! The new content is written aside, in `.new/` (a directory no waiter watches, so writing it
//! wakes nobody), and swapped in by one rename: a process killed at any point leaves the old
//! state or the new, never half of either.
//!
//! On a disk file system the rename is an exchange (`renameat2(RENAME_EXCHANGE)`), and the old
//! file, now in `.new/`, is unlinked after. A rename *over* an existing file makes ext4 (its
//! default `auto_da_alloc`) allocate the new file's blocks and start writing them out before
//! the rename returns, and a truncate-and-rewrite does the same at close; an exchange and an
//! unlink do neither. Measured here on ext4 (300 replacements of a 300-byte file): rename over
//! 245-274 µs median, exchange and unlink 50 µs. In a tmpfs, where nothing is written out, the
//! plain rename is quicker (15 µs against 22) and is kept.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Dir, io_err};
use crate::store::StoreResult;
use crate::sys;

/// Where new content is written before it is swapped in.
const STAGING: &str = ".new";

/// Whether replacements in `dir` go by exchange: anywhere but a tmpfs.
pub(super) fn swaps(dir: &Path) -> AtomicBool {
    AtomicBool::new(sys::tmpfs(dir) != Some(true))
}

impl Dir {
    /// Replace the file `file` of the directory with `bytes`, whole. Called under the
    /// namespace's flock, so one writer at a time uses the staging file.
    pub(super) fn put(&self, file: &str, bytes: &[u8]) -> StoreResult<()> {
        let staging = self.dir.join(STAGING);
        let new = staging.join("state");
        let path = self.dir.join(file);
        self.write_new(&staging, &new, bytes)
            .map_err(|e| io_err("cannot write", &new, e))?;
        if self.swap.load(Ordering::Relaxed) {
            match exchange(&new, &path) {
                Ok(()) => {
                    // The old content, swapped out: a leftover of a crash just here is
                    // removed by the next write.
                    let _ = fs::remove_file(&new);
                    return Ok(());
                }
                // Nothing to exchange with: the plain rename below replaces nothing.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // A file system (or kernel, or sandbox) without exchange: rename from now on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(
                            libc::EINVAL
                                | libc::ENOSYS
                                | libc::EOPNOTSUPP
                                | libc::EXDEV
                                | libc::EPERM
                        )
                    ) =>
                {
                    self.swap.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(io_err("cannot replace", &path, e)),
            }
        }
        fs::rename(&new, &path).map_err(|e| io_err("cannot replace", &path, e))
    }

    /// A new file `new` in `staging` (made if missing) holding `bytes`. Never an existing
    /// file rewritten: that would bring back ext4's write-out at close.
    fn write_new(&self, staging: &Path, new: &Path, bytes: &[u8]) -> io::Result<()> {
        let create = || {
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(self.perms.file)
                .open(new)?;
            self.perms.file(&f);
            Ok::<_, io::Error>(f)
        };
        let mut f = match create() {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(new)?;
                create()?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match fs::DirBuilder::new().mode(self.perms.dir).create(staging) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                    r => {
                        if r.is_ok() {
                            self.perms.dir(staging);
                        }
                        create()?
                    }
                }
            }
            Err(e) => return Err(e),
        };
        f.write_all(bytes)
    }
}

/// Swap the files at `a` and `b` atomically.
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let a = std::ffi::CString::new(a.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let b = std::ffi::CString::new(b.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: renameat2 on two NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::Dir;

    /// A staging file left by a writer killed between its swap and its unlink is no
    /// obstacle; every replacement leaves the new content whole and nothing else behind.
    #[test]
    fn a_leftover_staging_file_is_replaced_and_nothing_stays_behind() {
        let root = tempfile::tempdir().unwrap();
        let dir = Dir::open(root.path(), "t", Default::default()).unwrap();
        for swap in [true, false] {
            dir.swap.store(swap, std::sync::atomic::Ordering::Relaxed);
            fs::create_dir_all(dir.dir.join(".new")).unwrap();
            fs::write(dir.dir.join(".new/state"), b"old content of a crash").unwrap();
            dir.put("a.json", b"first").unwrap();
            dir.put("a.json", b"second").unwrap();
            assert_eq!(fs::read(dir.dir.join("a.json")).unwrap(), b"second");
            let left: Vec<_> = fs::read_dir(dir.dir.join(".new")).unwrap().collect();
            assert!(left.is_empty(), "swap {swap}: {left:?} left in .new");
        }
    }
}
