//! `completions/` and `man/` are generated from the clap definitions; this fails when they are
//! stale. Regenerate with: DLOCK_REGENERATE=1 cargo test --test integration generated::

use std::path::Path;

fn check(dir: &str, files: Vec<(String, Vec<u8>)>) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let regenerate = std::env::var_os("DLOCK_REGENERATE").is_some();
    let mut stale = Vec::new();
    if regenerate {
        std::fs::create_dir_all(&dir).unwrap();
    }
    for (name, bytes) in files {
        let path = dir.join(&name);
        if regenerate {
            std::fs::write(&path, &bytes).unwrap();
        } else if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            stale.push(path.display().to_string());
        }
    }
    stale
}

#[test]
fn completions_and_man_pages_are_current() {
    let completions = dlock::docs::SHELLS
        .iter()
        .map(|(shell, file)| (file.to_string(), dlock::docs::completion(*shell)))
        .collect();
    let mut stale = check("completions", completions);
    stale.extend(check("man", dlock::docs::man_pages()));
    assert!(
        stale.is_empty(),
        "stale generated files (run `DLOCK_REGENERATE=1 cargo test --test integration generated::`): {stale:?}"
    );
}

#[test]
fn every_command_has_a_man_page() {
    let pages: Vec<String> = dlock::docs::man_pages()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for cmd in [
        "lock",
        "unlock",
        "extend",
        "run",
        "multilock",
        "inspect",
        "list",
        "wait",
        "doctor",
        "completions",
    ] {
        assert!(pages.contains(&format!("dlock-{cmd}.1")), "{pages:?}");
    }
}
