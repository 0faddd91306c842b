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

/// `run --help` and dlock-run(1) tell what the command sees, how dlock ends, and show how.
#[test]
fn run_help_lists_the_environment_exit_codes_and_examples() {
    let o = crate::common::Env::file().run(&["run", "--help"]);
    crate::common::assert_code(&o, 0);
    let help = crate::common::stdout(&o);
    let man = dlock::docs::man_pages()
        .into_iter()
        .find(|(n, _)| n == "dlock-run.1")
        .map(|(_, b)| String::from_utf8(b).unwrap())
        .unwrap();
    for text in [&help, &man] {
        for want in [
            "DLOCK_NAME",
            "DLOCK_TOKEN",
            "DLOCK_FENCE ",
            "DLOCK_FENCES",
            "DLOCK_PREVIOUS",
            "Exit codes:",
            "70 ",
            "75 ",
            "Examples:",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        assert!(text.matches("dlock run ").count() + text.matches("run deploy").count() >= 3);
    }
}

/// Every crontab line in the README names dlock by a full path: cron runs jobs with
/// PATH=/usr/bin:/bin, and `cargo install` puts dlock in ~/.cargo/bin. The install step the
/// README gives must put it at that path.
#[test]
fn the_readme_cron_recipes_work_under_crons_path() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut in_cron = false;
    let mut lines = 0;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_cron = line == "```cron";
            continue;
        }
        if !in_cron || line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        // Five time fields, then the command.
        let command = line.split_whitespace().nth(5).unwrap_or_default();
        assert!(
            command == "/usr/local/bin/dlock" || command == "/usr/bin/dlock",
            "a crontab line in the README runs {command:?}, which cron's PATH does not find: {line}"
        );
        lines += 1;
    }
    assert!(lines >= 2, "no crontab lines found in the README");
    assert!(readme.contains("cargo install --locked --path . --root /usr/local"));
}

/// The man pages name every store (NAME line) and keep each option's placeholder in the
/// SYNOPSIS (`[--store URL]`, not `[--store]`); `--help` lists every store URL scheme.
#[test]
fn man_pages_name_every_store_and_keep_their_placeholders() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/dlock.1")).unwrap();
    // Every kind of store the registry lists, as `dlock -h` and the man page name them.
    let named = dlock::store::registry::named();
    assert!(page.contains(&named), "{named} missing: {page}");
    let short = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .arg("-h")
        .output()
        .unwrap();
    let short = String::from_utf8_lossy(&short.stdout).replace('\n', " ");
    assert!(short.contains(&named), "{named} missing from -h: {short}");
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/dlock-lock.1")).unwrap();
    for placeholder in [
        r"[\fB\-\-store\fR \fIURL\fR]",
        r"[\fB\-\-ttl\fR \fIDUR\fR]",
        r"[\fB\-w\fR|\fB\-\-wait\fR \fIDUR\fR]",
    ] {
        assert!(lock.contains(placeholder), "{placeholder} missing: {lock}");
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).replace(char::is_whitespace, "");
    let schemes = dlock::store::registry::KINDS
        .iter()
        .flat_map(|k| k.schemes)
        .map(|s| format!("{}://", s.name));
    for scheme in schemes {
        assert!(help.contains(&scheme), "{scheme} missing from --help");
    }
}
