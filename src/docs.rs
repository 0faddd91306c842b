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
    let script = String::from_utf8(buf).expect("clap_complete writes UTF-8");
    job_aware(shell, script).into_bytes()
}

/// Clap's script with the hand-written part that knows the job: the wrapped command's own
/// completion after `--`, lock names from `dlock list --names` (see src/docs/wrap.*). Kept
/// here so that `completions/` stays generated in one step and checked by one test.
fn job_aware(shell: Shell, mut script: String) -> String {
    let wrap = match shell {
        Shell::Bash => include_str!("docs/wrap.bash"),
        Shell::Fish => include_str!("docs/wrap.fish"),
        Shell::Zsh => {
            // Ours replaces clap's dispatch, which would hand `dlock` to clap's _dlock alone.
            if let Some(at) = script.rfind("if [ \"$funcstack[1]\" = \"_dlock\" ]") {
                script.truncate(at);
            }
            include_str!("docs/wrap.zsh")
        }
        _ => return script,
    };
    script + &wrap.replace("@TAKES_VALUE@", &value_options().join(" "))
}

/// Every option of every command that takes a value (`--store`, `-w`, ...): the word after
/// one is its value, not a lock name or a subcommand.
fn value_options() -> Vec<String> {
    fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if arg.is_positional() || !arg.get_action().takes_values() {
                continue;
            }
            let longs = arg.get_long_and_visible_aliases().unwrap_or_default();
            out.extend(longs.into_iter().map(|l| format!("--{l}")));
            let shorts = arg.get_short_and_visible_aliases().unwrap_or_default();
            out.extend(shorts.into_iter().map(|s| format!("-{s}")));
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    let mut cmd = crate::cli::command();
    cmd.build();
    walk(&cmd, &mut out);
    out.sort();
    out.dedup();
    out
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
    clap_mangen::Man::new(cmd.clone())
        .render(&mut buf)
        .expect("rendering to memory cannot fail");
    placeholders(&cmd, &String::from_utf8_lossy(&buf)).into_bytes()
}

/// The SYNOPSIS with each option's value placeholder (`[--store URL]`, `[-w|--wait DUR]`):
/// clap_mangen prints the option alone, which reads as a flag that takes nothing.
fn placeholders(cmd: &clap::Command, page: &str) -> String {
    let mut lines: Vec<String> = page.lines().map(str::to_string).collect();
    let Some(at) = lines.iter().position(|l| l == ".SH SYNOPSIS") else {
        return page.to_string();
    };
    let Some(line) = lines.get_mut(at + 1) else {
        return page.to_string();
    };
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long().filter(|_| arg.get_action().takes_values()) else {
            continue;
        };
        let value = arg
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| arg.get_id().as_str().to_uppercase(), |v| v.to_string());
        let flag = format!("\\fB\\-\\-{}\\fR]", long.replace('-', "\\-"));
        let with = format!(
            "\\fB\\-\\-{}\\fR \\fI{value}\\fR]",
            long.replace('-', "\\-")
        );
        *line = line.replace(&flag, &with);
    }
    let mut out = lines.join("\n");
    if page.ends_with('\n') {
        out.push('\n');
    }
    out
}
