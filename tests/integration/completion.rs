//! Bash completion as a person meets it, in a real bash under tmux with bash-completion
//! loaded: after `--` the wrapped command completes as itself, and a held lock's name
//! completes after `dlock inspect`.

use std::time::Duration;

use crate::common::terminal::Terminal;
use crate::common::*;

const BASH_COMPLETION: &str = "/usr/share/bash-completion/bash_completion";

/// A terminal whose bash has bash-completion and dlock's generated script loaded.
fn completing(env: &Env) -> Terminal {
    assert!(
        std::path::Path::new(BASH_COMPLETION).exists(),
        "bash-completion is not installed (scripts/test installs it)"
    );
    let t = Terminal::start(env);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/completions/dlock.bash");
    t.line(&format!(
        "source {BASH_COMPLETION}; source {script}; echo LOADED"
    ));
    assert!(
        wait_for(Duration::from_secs(10), || t
            .screen()
            .lines()
            .any(|l| l.trim() == "LOADED")),
        "{}",
        t.screen()
    );
    t
}

/// Type `text`, press Tab, and wait until the line being typed ends in `want` (tmux drops the
/// space a completed word gets, so `want` has none).
fn tab_completes(t: &Terminal, text: &str, want: &str) {
    t.keys(&["-l", text]);
    t.keys(&["Tab"]);
    let shows = || {
        t.screen()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.trim_end().ends_with(want))
    };
    let ok = wait_for(Duration::from_secs(10), shows);
    println!("{}", t.screen());
    assert!(ok, "`{text}<Tab>` did not become `{want}`:\n{}", t.screen());
    t.keys(&["C-u"]);
}

#[test]
fn after_double_dash_the_wrapped_command_completes_as_itself() {
    let env = Env::file();
    let t = completing(&env);
    tab_completes(&t, "dlock run x -- ls --hel", "dlock run x -- ls --help");
    // An option of ls's own, which dlock does not have.
    tab_completes(
        &t,
        "dlock run-with-lock x -w 5s -- ls --ignore-bac",
        "-- ls --ignore-backups",
    );
    // Command names first, as after sudo.
    tab_completes(&t, "dlock multilock a b -- tmu", "-- tmux");
}

#[test]
fn a_held_lock_name_completes_after_inspect() {
    let env = Env::file();
    let o = env.run(&["lock", "nightly-backup-7", "--ttl", "5m"]);
    assert_code(&o, 0);
    let t = completing(&env);
    tab_completes(
        &t,
        "dlock inspect nightly-b",
        "dlock inspect nightly-backup-7",
    );
    tab_completes(&t, "dlock --json unlock nigh", "unlock nightly-backup-7");
}
