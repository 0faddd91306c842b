//! The test suite a newcomer runs passes on a busy machine: `scripts/test` reports every
//! failure, `scripts/check-deb` builds where cargo builds, and no test depends on the state of
//! the machine outside its own temporary directories.

use std::path::Path;

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn scripts_test_reports_every_failure() {
    let script = repo("scripts/test");
    let run = script
        .lines()
        .find(|l| l.trim_start().starts_with("cargo test"))
        .expect("scripts/test runs cargo test");
    assert!(run.contains("--no-fail-fast"), "{run}");
}

/// A CI page that shows only the log's tail still shows what failed: the checker runs first,
/// and its details are long gone from the tail by the end. A stand-in `cargo` on PATH fails
/// the way the real one does (the checker's report, then hundreds of lines of passing tests).
#[test]
fn scripts_test_repeats_what_failed_at_the_end() {
    let dir = crate::common::temp_dir();
    let cargo = dir.path().join("cargo");
    // In cargo's order: the checker's report, the integration tests (one failing among
    // hundreds), libtest's account of the failure, cargo's summary.
    let mut body = String::from(
        "#!/bin/sh\n\
         echo 'checker: setup=file sections=9 overlaps=1 FAILED'\n\
         echo '  file: overlap: c1 and c2' >&2\n",
    );
    for i in 0..500 {
        body.push_str(&format!("echo 'test t{i} ... ok'\n"));
    }
    body.push_str(
        "echo 'test a::b ... FAILED'\n\
         echo 'failures:'\n\
         echo '---- a::b stdout ----'\n\
         echo \"thread 'a::b' panicked at tests/a.rs:1:1:\"\n\
         echo 'the holder was never told'\n\
         echo 'error: 2 targets failed:' >&2\n",
    );
    body.push_str("exit 101\n");
    std::fs::write(&cargo, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    // With an argument, scripts/test runs cargo test alone (no package check).
    let out =
        std::process::Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test"))
            .arg("--test=checker")
            .env("PATH", path)
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(101), "cargo's status comes back");
    let all = String::from_utf8_lossy(&out.stdout);
    let tail: Vec<&str> = all.lines().rev().take(12).collect();
    for want in [
        "checker: setup=file sections=9 overlaps=1 FAILED",
        "  file: overlap: c1 and c2",
        "---- a::b stdout ----",
        "the holder was never told",
    ] {
        assert!(tail.contains(&want), "{want:?} not in the tail: {tail:#?}");
    }
    assert!(!tail.iter().any(|l| l.contains("... ok")), "{tail:#?}");
}

#[test]
fn scripts_check_deb_packages_the_release_build_where_cargo_puts_it() {
    let script = repo("scripts/check-deb");
    let code: Vec<&str> = script
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    // A fixed ./target misses the package when CARGO_TARGET_DIR is set.
    for l in &code {
        assert!(!l.contains(" target/"), "check-deb assumes ./target: {l}");
    }
    assert!(code.iter().any(|l| l.contains("target_directory")));
    let deb = code
        .iter()
        .find(|l| l.trim_start().starts_with("cargo deb"))
        .expect("check-deb runs cargo deb");
    assert!(deb.contains("${DEB_PROFILE:-release}"), "{deb}");
}

/// Paths outside the test's temp dir may exist on someone's machine (or be created by another
/// test): a test that needs a missing path makes one under its own dir.
#[test]
fn no_test_depends_on_a_global_path_being_absent() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut found = Vec::new();
    for p in crate::common::files_under(&dir) {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            for global in [
                "\"/nonexistent",
                "=/nonexistent",
                ":///nonexistent",
                "\"/no/such",
                "\"/does/not",
            ] {
                // This file names them to look for them.
                if line.contains(global) && !p.ends_with("hygiene.rs") {
                    found.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
