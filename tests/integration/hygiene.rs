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
    let mut files = vec![dir.clone()];
    let mut found = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
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
