//! The default file store (issue 26): one directory per user per host whatever the session,
//! and refused when another user could have made it or could write to it.
//!
//! Each test runs dlock as a fresh uid of its own (the tests run as root), so its default
//! directory is its own and the real user's is never touched.

use std::os::unix::fs::{MetadataExt, PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;

/// A uid no one else uses, its default store directory, and a tidy end.
struct Stranger {
    uid: u32,
    dir: PathBuf,
}

impl Stranger {
    fn new() -> Stranger {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "these tests run dlock as other users: run them as root"
        );
        let uid = 200_000 + rand::random::<u32>() % 100_000;
        // The rule of src/store/file/dir.rs for a user other than root.
        let run_lock = std::fs::metadata("/run/lock").ok().filter(|m| m.is_dir());
        let base = match run_lock {
            Some(m) if m.mode() & 0o1003 == 0o1003 => "/run/lock",
            _ => "/tmp",
        };
        let dir = PathBuf::from(format!("{base}/dlock-{uid}"));
        let _ = std::fs::remove_dir_all(&dir);
        Stranger { uid, dir }
    }

    /// dlock as this user, with no DLOCK_* and the given XDG_RUNTIME_DIR (or none).
    fn dlock(&self, xdg: Option<&Path>, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dlock"));
        for (k, _) in std::env::vars() {
            if k.starts_with("DLOCK_") || k == "XDG_RUNTIME_DIR" {
                c.env_remove(k);
            }
        }
        if let Some(x) = xdg {
            c.env("XDG_RUNTIME_DIR", x);
        }
        c.uid(self.uid)
            .gid(self.uid)
            .current_dir("/")
            .args(args)
            .stdin(Stdio::null());
        output_within(c, Duration::from_secs(60))
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A login shell (XDG_RUNTIME_DIR set) and cron (not set) of one user take one lock: each
/// keeps the other out. Before, they used two stores and both got in.
#[test]
fn a_users_sessions_meet_in_one_default_store() {
    let user = Stranger::new();
    let runtime = temp_dir();
    let xdg = runtime.path().join("run-user");
    std::fs::create_dir(&xdg).unwrap();
    chown(&xdg, Some(user.uid), Some(user.uid)).unwrap();
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    assert_code(
        &user.dlock(Some(&xdg), &["lock", "backup", "--ttl", "2m"]),
        0,
    );
    let cron = user.dlock(None, &["run", "backup", "-n", "--", "true"]);
    assert_code(&cron, 75);
    assert_code(&user.dlock(None, &["lock", "report", "--ttl", "2m"]), 0);
    assert_code(
        &user.dlock(Some(&xdg), &["run", "report", "-n", "--", "true"]),
        75,
    );
    assert!(user.dir.is_dir(), "{} was not used", user.dir.display());
    // `doctor` and `inspect -v` say which directory, and why.
    let o = user.dlock(None, &["doctor"]);
    let dir = user.dir.display().to_string();
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.contains("directory") && l.contains(&dir) && l.contains("default")),
        "{}",
        stdout(&o)
    );
    let o = user.dlock(None, &["-v", "inspect", "backup"]);
    assert_code(&o, 0);
    assert!(
        stderr(&o).contains(&dir) && stderr(&o).contains("whatever the session"),
        "{}",
        stderr(&o)
    );
}

/// The default directory made by another user (root, or `nobody`), or open to other users'
/// writes, is refused with one line and 77; nothing else is used instead.
#[test]
fn a_default_directory_another_user_could_control_is_refused() {
    let user = Stranger::new();
    std::fs::create_dir(&user.dir).unwrap();
    let nobody = 65534;
    for (owner, mode, why) in [
        (0, 0o700, "belongs to uid 0"),
        (nobody, 0o700, "belongs to uid 65534"),
        (nobody, 0o777, "belongs to uid 65534"),
        (user.uid, 0o777, "writable by other users"),
        (user.uid, 0o720, "writable by other users"),
    ] {
        chown(&user.dir, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(&user.dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = user.dlock(None, &["lock", "job", "-n"]);
        assert_code(&o, 77);
        let err = stderr(&o);
        assert!(
            err.lines().count() == 1 && err.contains(why),
            "{owner} {mode:o}: {err}"
        );
        assert!(stdout(&o).is_empty(), "{owner} {mode:o}: {}", stdout(&o));
    }
    // A symlink planted where the directory goes.
    std::fs::remove_dir(&user.dir).unwrap();
    let target = temp_dir();
    chown(target.path(), Some(user.uid), Some(user.uid)).unwrap();
    std::os::unix::fs::symlink(target.path(), &user.dir).unwrap();
    let o = user.dlock(None, &["lock", "job", "-n"]);
    assert_code(&o, 77);
    assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
    std::fs::remove_file(&user.dir).unwrap();
    // Its own, and closed to others: fine.
    std::fs::create_dir(&user.dir).unwrap();
    chown(&user.dir, Some(user.uid), Some(user.uid)).unwrap();
    std::fs::set_permissions(&user.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_code(&user.dlock(None, &["lock", "job", "-n"]), 0);
}

/// A store directory that does not exist yet is created (only the last component; a missing
/// parent is in bad_input.rs), and dlock says so once, not on every later command.
#[test]
fn a_new_store_directory_is_created_and_said_once() {
    let env = Env::file();
    let url = format!("file://{}", env.path("locks").display());
    let o = env.run(&["--store", &url, "lock", "a"]);
    assert_code(&o, 0);
    let err = stderr(&o);
    assert_eq!(
        err.matches("created the store directory").count(),
        1,
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = env.run(&["--store", &url, "lock", "b"]);
    assert_code(&o, 0);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}
