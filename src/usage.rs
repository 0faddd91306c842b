//! clap's usage errors as one line that says what was wrong and how to fix it.
//!
//! clap renders several lines (the missing arguments listed below the sentence that announces
//! them, the possible values below the refused one) and gives tips written for programs whose
//! trailing words are values (`use '-- -x'`, which for `dlock run` makes `-x` the command).
//! Here those lines are folded into one, and the tips are replaced where they mislead.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The message for a clap error, ending with where to read more; `argv` is the command line
/// as given, to find the word clap took apart (`-nowait` is read as `-n -o -w …`).
pub fn message(e: &clap::Error, argv: &[String]) -> String {
    let help = match subcommand(argv) {
        Some(s) => format!("dlock {s} --help"),
        None => "dlock --help".to_string(),
    };
    format!("{}; see '{help}'", explain(e, argv))
}

fn explain(e: &clap::Error, argv: &[String]) -> String {
    let rendered = e.render().to_string();
    let mut lines = rendered.lines();
    let first = lines
        .next()
        .unwrap_or("bad usage")
        .trim_start_matches("error: ")
        .to_string();
    let rest: Vec<&str> = lines.collect();
    let tip = rest.iter().find_map(|l| l.trim().strip_prefix("tip: "));
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(v)) => Some(v.clone()),
        _ => None,
    };
    let sub = subcommand(argv);
    match e.kind() {
        ErrorKind::MissingRequiredArgument => {
            // The missing arguments are the indented lines under the first one.
            let missing: Vec<&str> = rest
                .iter()
                .take_while(|l| !l.trim().is_empty())
                .map(|l| l.trim())
                .collect();
            let usage = sub.as_deref().map_or(String::new(), |s| {
                format!(" (usage: {})", usage_of(s).unwrap_or_default())
            });
            format!("{first} {}{usage}", missing.join(", "))
        }
        ErrorKind::InvalidSubcommand => {
            let typed = context(ContextKind::InvalidSubcommand).unwrap_or_default();
            // Names and their aliases, each judged on its own: clap's own guess weighs a long
            // alias against a short word badly ('rn' became 'run-with-lock').
            let names: Vec<String> = crate::cli::command()
                .get_subcommands()
                .flat_map(|c| {
                    std::iter::once(c.get_name().to_string())
                        .chain(c.get_all_aliases().map(String::from))
                })
                .collect();
            match closest(&typed, names.iter().map(String::as_str)) {
                Some(s) => format!("{first} (did you mean '{s}'?)"),
                None => first,
            }
        }
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            unknown_argument(first, &arg, tip, sub.as_deref(), argv)
        }
        _ => {
            // "[possible values: a, b]" is on its own line: keep it on this one.
            let values = rest.iter().find_map(|l| {
                l.trim()
                    .strip_prefix("[possible values: ")
                    .and_then(|v| v.strip_suffix(']'))
            });
            match (values, tip) {
                (Some(v), _) => format!("{first} (possible values: {v})"),
                (None, Some(t)) => format!("{first} ({t})"),
                (None, None) => first,
            }
        }
    }
}

/// An argument no flag takes: a long flag given one dash, or a word that is not a flag here.
fn unknown_argument(
    first: String,
    arg: &str,
    tip: Option<&str>,
    sub: Option<&str>,
    argv: &[String],
) -> String {
    if let Some(word) = single_dash_word(arg, argv) {
        let long = word.trim_start_matches('-');
        let flags = long_flags(sub);
        let hint = match closest(long, flags.iter().map(String::as_str)) {
            Some(f) => format!(": did you mean '--{f}'?"),
            None => format!(
                ", but dlock{} has no flag like '--{long}' either",
                sub.map(|s| format!(" {s}")).unwrap_or_default()
            ),
        };
        return format!("unexpected argument '{word}' (a long flag takes two dashes{hint})");
    }
    let tip = match tip {
        // Meant for values that look like flags; in dlock the words after `--` are a
        // command, so following it would run the mistyped flag.
        Some(t) if t.starts_with("to pass") => None,
        t => t,
    };
    match (tip, sub) {
        (Some(t), _) => format!("{first} ({t})"),
        (None, Some(s @ ("run" | "run-with-lock" | "multilock"))) => format!(
            "{first}: not a flag of dlock {s} (the command to run goes after '--': \
             dlock {s} NAME [FLAGS] -- CMD)"
        ),
        (None, Some(s)) => format!("{first}: not a flag of dlock {s}"),
        (None, None) => first,
    }
}

/// The subcommand on the command line: the first word naming one (after global flags).
fn subcommand(argv: &[String]) -> Option<String> {
    let cmd = crate::cli::command();
    argv.iter().skip(1).find_map(|w| {
        cmd.get_subcommands()
            .find(|c| c.get_name() == w || c.get_all_aliases().any(|a| a == w))
            .map(|_| w.clone())
    })
}

/// A subcommand's usage line, as `dlock unlock <NAME> <--token <TOKEN>|--force>`.
fn usage_of(sub: &str) -> Option<String> {
    let mut cmd = crate::cli::command();
    cmd.build();
    let c = cmd.find_subcommand_mut(sub)?;
    let usage = c.render_usage().to_string();
    Some(usage.trim_start_matches("Usage: ").trim().to_string())
}

/// The word clap split into short flags: `-nowait` when clap complains of `-o` (a word of
/// three letters or more: `-nx` is more likely two short flags than a long one).
fn single_dash_word(arg: &str, argv: &[String]) -> Option<String> {
    let letter = arg.strip_prefix('-').filter(|l| l.chars().count() == 1)?;
    argv.iter()
        .skip(1)
        .take_while(|w| *w != "--")
        .find(|w| {
            w.len() > 3
                && w.starts_with('-')
                && !w.starts_with("--")
                && !w.contains('=')
                && w[1..].contains(letter)
        })
        .cloned()
}

/// The long flags `sub` takes (the global ones and its own; every subcommand's when it is not
/// known), without the dashes.
fn long_flags(sub: Option<&str>) -> Vec<String> {
    let cmd = crate::cli::command();
    let mut flags: Vec<String> = Vec::new();
    let subs = cmd
        .get_subcommands()
        .filter(|c| sub.is_none_or(|s| c.get_name() == s || c.get_all_aliases().any(|a| a == s)));
    for c in std::iter::once(&cmd).chain(subs) {
        for a in c.get_arguments() {
            flags.extend(
                a.get_long_and_visible_aliases()
                    .into_iter()
                    .flatten()
                    .map(String::from),
            );
        }
    }
    flags.sort();
    flags.dedup();
    flags
}

/// The candidate nearest to `typed` (dashes ignored), if it is near enough to be a typo.
fn closest<'a>(typed: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let bare = |s: &str| s.replace('-', "");
    let t = bare(typed);
    candidates
        .map(|c| (edits(&t, &bare(c)), c))
        .filter(|(d, c)| *d <= c.len() / 3 + 1)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(ca != *cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_the_nearest_name() {
        let subs = ["run", "lock", "unlock", "multilock"];
        assert_eq!(closest("rn", subs.into_iter()), Some("run"));
        assert_eq!(closest("lokc", subs.into_iter()), Some("lock"));
        assert_eq!(closest("deploy", subs.into_iter()), None);
        assert_eq!(edits("nowait", "nowait"), 0);
        assert_eq!(
            closest("nowait", ["no-wait", "wait"].into_iter()),
            Some("no-wait")
        );
    }
}
