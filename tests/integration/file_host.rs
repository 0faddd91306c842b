//! The file store as a host's lock service (issue 37): it never fills its directory, refuses
//! a directory another host uses or a network file system, serves a group through a shared
//! directory, queues its waiters in arrival order, and takes the longest names.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A file system mounted for one test, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn new(dir: &Path, cmd: &[&str]) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let mut c = Command::new(cmd[0]);
        c.args(&cmd[1..]).arg(dir);
        let o = output_within(c, LIMIT);
        assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
        Mount(dir.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `dlock --store URL ARGS...` run to completion.
fn dlock(url: &str, args: &[&str]) -> Output {
    let mut c = Env::with_stores(vec![url.to_string()]).cmd();
    c.args(args);
    output_within(c, LIMIT)
}

/// On a 1 MiB tmpfs (the default directory's 5 MiB, smaller), 2,000 distinct names run once
/// each all succeed, and the namespace's directory keeps a handful of small files: a name
/// nobody holds goes (it kept a 4 KiB page each, and the 257th name failed with ENOSPC).
#[test]
fn two_thousand_names_on_a_small_tmpfs_all_succeed_and_leave_the_directory_small() {
    let env = Env::file();
    let mnt = env.path("tmpfs");
    let _m = Mount::new(
        &mnt,
        &["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs"],
    );
    let url = format!("file://{}/locks", mnt.display());
    // Two loops at once, a thousand names each, in one shell each (a process per name).
    let script = r#"for i in $(seq 1 1000); do
        "$DLOCK" --store "$URL" run "queue/$1/item-$i" -- true || { echo "item $1/$i: exit $?"; exit 1; }
    done"#;
    let loops: Vec<_> = ["a", "b"]
        .iter()
        .map(|half| {
            let mut c = Command::new("sh");
            c.args(["-c", script, "sh", half])
                .env("DLOCK", env!("CARGO_BIN_EXE_dlock"))
                .env("URL", &url)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for l in loops {
        let o = finish(l, Duration::from_secs(600));
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    }
    let ns = mnt.join("locks/default");
    let files: Vec<(String, u64)> = std::fs::read_dir(&ns)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    assert!(files.len() <= 8, "{} files left: {files:?}", files.len());
    let bytes: u64 = files.iter().map(|(_, n)| n).sum();
    assert!(bytes <= 8 * 1024, "{bytes} bytes left: {files:?}");
    // A name used a moment ago is still remembered as released cleanly, its fence rising.
    let show = [
        "run",
        "again",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_FENCE $DLOCK_PREVIOUS",
    ];
    let first = stdout(&dlock(&url, &show));
    let second = stdout(&dlock(&url, &show));
    let fence = |s: &str| s.split(' ').next().unwrap().parse::<u64>().unwrap();
    assert!(fence(&second) > fence(&first), "{first} then {second}");
    assert!(second.ends_with(" released"), "{second}");
}

/// `unshare -m` with other machine and boot ids bind-mounted over the real ones: what
/// another host sharing the directory (NFS, a shared volume) looks like to dlock.
fn as_other_host(env: &Env, url: &str, machine: Option<&str>, args: &[&str]) -> Output {
    let ids = env.path("ids");
    std::fs::create_dir_all(&ids).unwrap();
    let mut script = String::from("set -e\n");
    if let Some(m) = machine {
        std::fs::write(ids.join("machine-id"), format!("{m}\n")).unwrap();
        script += &format!(
            "mount --bind {}/machine-id /etc/machine-id\n",
            ids.display()
        );
    }
    std::fs::write(
        ids.join("boot_id"),
        "0badb007-0000-4000-8000-000000000001\n",
    )
    .unwrap();
    script += &format!(
        "mount --bind {}/boot_id /proc/sys/kernel/random/boot_id\nexec \"$@\"\n",
        ids.display()
    );
    let mut c = Command::new("unshare");
    c.args([
        "-m",
        "sh",
        "-c",
        &script,
        "sh",
        env!("CARGO_BIN_EXE_dlock"),
        "--store",
        url,
    ]);
    c.args(args);
    output_within(c, LIMIT)
}

/// A second host (another machine id and boot id) is refused with 78 and one line that says
/// the file store serves one host, while this host holds the lock; a kernel with this
/// machine id but another boot id is refused too while the record is newer than this boot
/// (a clone), and taken for a reboot once it is older.
#[test]
fn another_host_is_refused_and_a_reboot_is_still_a_reboot() {
    let env = Env::file();
    let dir = env.path("shared");
    let url = format!("file://{}", dir.display());
    assert_code(&dlock(&url, &["lock", "job", "--ttl", "2m"]), 0);
    let o = as_other_host(
        &env,
        &url,
        Some("0123456789abcdef0123456789abcdef"),
        &["run", "-n", "job", "--", "true"],
    );
    assert_code(&o, 78);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("one host only") && err.contains("redis://"),
        "{err}"
    );
    // Same machine id, another boot id, the record written while this kernel runs.
    let o = as_other_host(&env, &url, None, &["run", "-n", "job", "--", "true"]);
    assert_code(&o, 78);
    // The same, with the record from before this boot: a reboot, whose holders are gone.
    let record = std::fs::File::options()
        .write(true)
        .open(dir.join(".host"))
        .unwrap();
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(100 * 24 * 3600);
    record.set_modified(long_ago).unwrap();
    for f in std::fs::read_dir(dir.join("default")).unwrap() {
        let f = f.unwrap();
        if f.file_name().to_string_lossy().ends_with(".json") {
            let file = std::fs::File::options().write(true).open(f.path()).unwrap();
            file.set_modified(long_ago).unwrap();
        }
    }
    let o = as_other_host(&env, &url, None, &["run", "-n", "job", "--", "true"]);
    assert_code(&o, 0);
}

/// A directory on a network or FUSE file system (a bindfs mount here) is refused with 78
/// unless the URL says `?network=1`.
#[test]
fn a_fuse_directory_is_refused_unless_the_url_allows_it() {
    require("bindfs", "bindfs");
    let env = Env::file();
    let under = env.path("under");
    std::fs::create_dir_all(&under).unwrap();
    let mnt = env.path("fuse");
    let _m = Mount::new(&mnt, &["bindfs", under.to_str().unwrap()]);
    let url = format!("file://{}", mnt.display());
    let o = dlock(&url, &["run", "job", "--", "true"]);
    assert_code(&o, 78);
    let err = stderr(&o);
    assert!(err.contains("FUSE") && err.contains("?network=1"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_code(
        &dlock(&format!("{url}?network=1"), &["run", "job", "--", "true"]),
        0,
    );
}

/// The dlock binary for a command run as another user: the build's own when every directory
/// above it lets others in, else a copy in `dir`.
fn binary_for_others(dir: &Path) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_dlock"));
    let open = bin
        .ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    if open {
        return bin;
    }
    let copy = dir.join("dlock");
    std::fs::copy(&bin, &copy).unwrap();
    copy
}

/// Two users of group 54000 (uids 54001 and 54002, with no other group) share a setgid
/// group directory: a name user A holds is refused to user B (75) and `inspect` shows A;
/// once A releases it, B takes it.
#[test]
fn two_users_of_a_group_share_a_setgid_directory() {
    let env = Env::file();
    let top = env.path("top");
    std::fs::create_dir_all(&top).unwrap();
    for d in [env.dir.path(), &top] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let locks = top.join("locks");
    std::fs::create_dir(&locks).unwrap();
    std::os::unix::fs::chown(&locks, Some(0), Some(54000)).unwrap();
    std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let bin = binary_for_others(&top);
    let url = format!("file://{}", locks.display());
    let as_user = |uid: u32, args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .args(["--groups=54000", "--"])
            .arg(&bin)
            .args(["--store", &url])
            .args(args)
            .env("HOME", &top)
            .current_dir(&top);
        output_within(c, LIMIT)
    };
    let o = as_user(54001, &["lock", "deploy", "--ttl", "2m"]);
    assert_code(&o, 0);
    let token = stdout(&o);
    let o = as_user(54002, &["run", "-n", "deploy", "--", "true"]);
    assert_code(&o, 75);
    let o = as_user(54002, &["--json", "inspect", "deploy"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let holders = v["holders"].as_array().cloned().unwrap_or_default();
    assert_eq!(holders.len(), 1, "{v}");
    assert_eq!(holders[0]["meta"]["user"], "54001", "{v}");
    assert_code(&as_user(54001, &["unlock", "deploy", "--token", &token]), 0);
    assert_code(&as_user(54002, &["run", "-n", "deploy", "--", "true"]), 0);
}

/// 30 waiters, each started once the one before it is queued, are served in that order.
#[test]
fn thirty_waiters_are_served_in_arrival_order() {
    crate::common::line::assert_served_in_arrival_order(&Env::file(), 30);
}

/// The longest valid name, with a hundred `/`, works on the file store (it failed with
/// "File name too long") and on Redis: run, lock, list and inspect.
#[test]
fn the_longest_names_work() {
    let long = "a/".repeat(99) + "b";
    assert_eq!(long.len(), 199);
    let redis = RedisServer::start();
    for env in [Env::file(), Env::with_stores(vec![redis.url()])] {
        assert_code(&env.run(&["run", &long, "--", "true"]), 0);
        assert_code(&env.run(&["lock", &long, "--ttl", "1m"]), 0);
        let listed = stdout(&env.run(&["--json", "list"]));
        assert!(listed.contains(&long), "{listed}");
        assert_eq!(
            env.inspect(&long)["holders"].as_array().map(Vec::len),
            Some(1)
        );
        assert_code(&env.run(&["run", "-n", &long, "--", "true"]), 75);
    }
}

/// `doctor` warns before the store's file system is full, saying what a full one does.
#[test]
fn doctor_warns_when_the_store_is_nearly_full() {
    let env = Env::file();
    let mnt = env.path("tmpfs");
    let _m = Mount::new(&mnt, &["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs"]);
    let url = format!("file://{}/locks", mnt.display());
    let o = dlock(&url, &["doctor"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    let space = |out: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some("space"))
            .unwrap_or_else(|| panic!("no space line in {out}"))
            .to_string()
    };
    assert!(space(&out).trim_start().starts_with("ok"), "{out}");
    std::fs::write(mnt.join("filler"), vec![0u8; 400 * 1024]).unwrap();
    let out = stdout(&dlock(&url, &["doctor"]));
    let line = space(&out);
    assert!(line.trim_start().starts_with("warn"), "{out}");
    assert!(
        line.contains("nearly full") && line.contains("every lock"),
        "{out}"
    );
}

/// A local file error is this host's answer, said as one line with its cause: a full file
/// system and a read-only one each fail with 69, never with the network's "no answer since
/// dlock started, so not waited for".
#[test]
fn a_full_or_read_only_file_system_is_said_plainly() {
    let env = Env::file();
    let full = env.path("full");
    let _full = Mount::new(&full, &["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs"]);
    let url = format!("file://{}/s", full.display());
    assert_code(&dlock(&url, &["lock", "warm"]), 0);
    // Fill what is left, so that the next state file cannot be written.
    let mut filler = std::fs::File::create(full.join("fill")).unwrap();
    while std::io::Write::write_all(&mut filler, &[0u8; 4096]).is_ok() {}
    drop(filler);
    let ro = env.path("ro");
    let _ro = Mount::new(&ro, &["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"]);
    let ro_url = format!("file://{}/s", ro.display());
    for (url, cause) in [
        (&url, "No space left on device"),
        (&ro_url, "Read-only file system"),
    ] {
        let o = dlock(url, &["lock", "x"]);
        let err = stderr(&o);
        assert_code(&o, 69);
        assert!(err.contains(cause), "{err}");
        assert!(!err.contains("no answer since"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
