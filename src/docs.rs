//! Completion scripts and man pages, rendered from the clap definitions in `cli`. The files in
//! `completions/` and `man/` are these bytes; a test fails when they drift apart.

use clap_complete::Shell;

/// File name of each shell's completion script, as the shells look for them.
pub const SHELLS: [(Shell, &str); 5] = [
    (Shell::Bash, "dlock.bash"),
    (Shell::Zsh, "_dlock"),
    (Shell::Fish, "dlock.fish"),
    (Shell::Elvish, "dlock.elv"),
    (Shell::PowerShell, "_dlock.ps1"),
];

pub fn completion(shell: Shell) -> Vec<u8> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut crate::cli::command(), "dlock", &mut buf);
    buf
}

/// `dlock.1` and one `dlock-COMMAND.1` per subcommand.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let mut cmd = crate::cli::command();
    cmd.build();
    let mut pages = vec![("dlock.1".to_string(), render(cmd.clone()))];
    for sub in cmd.get_subcommands() {
        let name = format!("dlock-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .version(env!("CARGO_PKG_VERSION"));
        pages.push((format!("{name}.1"), render(page)));
    }
    pages
}

fn render(cmd: clap::Command) -> Vec<u8> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut buf)
        .expect("rendering to memory cannot fail");
    buf
}
