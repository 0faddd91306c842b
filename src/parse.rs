//! The command line, parsed: the named subcommand alone when that is enough, else clap's whole
//! command tree (see `cli::one_subcommand`).

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command};

/// The command line, with what the derived structs cannot tell: whether `run`'s NAME slot
/// came before `--any` (then it was meant as a name, and giving both is a usage error) or
/// after its names (then it is the command's first word).
pub(crate) fn parse() -> std::result::Result<Cli, clap::Error> {
    let argv = help_as_flag(std::env::args_os().collect());
    // The named subcommand alone first (see `cli::one_subcommand`); whatever it does not
    // accept as it is (help, version, an alias, any error) goes to the whole tree, which
    // answers as it always has.
    let (mut cli, matches) = match parse_one(&argv) {
        Some(parsed) => parsed,
        None => {
            let matches = Cli::command().try_get_matches_from(&argv)?;
            let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut Cli::command()))?;
            (cli, matches)
        }
    };
    if let (Command::Run(args), Some(("run", m))) = (&mut cli.command, matches.subcommand()) {
        args.name_before_any = match (m.index_of("name"), m.index_of("any")) {
            (Some(name), Some(any)) => name < any,
            _ => false,
        };
    }
    Ok(cli)
}

/// `dlock help [CMD]...` as `dlock [CMD]... --help`, as git and cargo take it: clap's own
/// `help` subcommand is off (it would give `shards` one too), so the word is read here.
fn help_as_flag(mut argv: Vec<OsString>) -> Vec<OsString> {
    if argv.get(1).is_some_and(|a| a == "help") {
        argv.remove(1);
        argv.push("--help".into());
    }
    argv
}

/// The command line parsed with only its subcommand built, or None to ask the whole tree.
fn parse_one(argv: &[OsString]) -> Option<(Cli, clap::ArgMatches)> {
    let globals = crate::cli::globals();
    let name = subcommand_name(&globals, argv.get(1..)?)?;
    let matches = crate::cli::one_subcommand(globals, name)?
        .try_get_matches_from(argv)
        .ok()?;
    let cli = Cli::from_arg_matches(&matches).ok()?;
    Some((cli, matches))
}

/// The subcommand's name: the first word after the global options and their values, read
/// as clap reads them. None when anything else comes first (`--help`, `-V`, an option that
/// is not global, `--`, a word that is not UTF-8).
fn subcommand_name<'a>(globals: &clap::Command, args: &'a [OsString]) -> Option<&'a str> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_str()?;
        let takes_value = |a: &clap::Arg| a.get_action().takes_values();
        if let Some(long) = arg.strip_prefix("--") {
            let (long, inline) = match long.split_once('=') {
                Some((l, _)) => (l, true),
                None => (long, false),
            };
            let a = globals
                .get_arguments()
                .find(|a| a.get_long() == Some(long))?;
            if takes_value(a) && !inline {
                args.next()?;
            }
        } else if let Some(shorts) = arg.strip_prefix('-') {
            let mut chars = shorts.chars();
            if shorts.is_empty() {
                return None;
            }
            while let Some(c) = chars.next() {
                let a = globals.get_arguments().find(|a| a.get_short() == Some(c))?;
                if takes_value(a) {
                    if chars.as_str().is_empty() {
                        args.next()?;
                    }
                    break;
                }
            }
        } else {
            return Some(arg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        std::iter::once("dlock")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    /// What the whole tree makes of `words`, as text.
    fn whole(words: &[&str]) -> String {
        let matches = Cli::command()
            .try_get_matches_from(argv(words))
            .unwrap_or_else(|e| panic!("{words:?}: {e}"));
        format!("{:?}", Cli::from_arg_matches(&matches).unwrap())
    }

    /// Command lines that parse: with the named subcommand alone exactly as with the whole
    /// tree, global options before and after the subcommand, in every spelling.
    #[test]
    fn one_subcommand_parses_as_the_whole_tree_does() {
        let lines: &[&[&str]] = &[
            &["run", "x", "--", "true"],
            &["--store", "file:///tmp/a", "run", "x", "-n", "--", "true"],
            &[
                "--store=redis://h:1",
                "--json",
                "-vv",
                "run",
                "x",
                "-w",
                "5s",
                "--ttl",
                "10s",
                "--reason",
                "why",
                "--",
                "sh",
                "-c",
                "echo $DLOCK_FENCE",
            ],
            &["-q", "lock", "x", "--ttl", "1m"],
            &["run"],
            &["--namespace", "run", "lock", "y", "--shared"],
            &[
                "--color",
                "never",
                "--store-timeout",
                "200ms",
                "inspect",
                "x",
            ],
            &[
                "run",
                "--store",
                "file:///tmp/b",
                "x",
                "-E",
                "3",
                "--",
                "true",
                "-V",
                "--help",
            ],
            &["run", "x", "true", "--ttl", "9s"],
            &["run", "--any", "a", "b", "--", "true"],
            &["run", "x", "--any", "a", "--", "true"],
            &["unlock", "x", "--token", TOKEN],
            &["unlock", "x", "--force"],
            &["extend", "x", "--token", TOKEN, "--ttl", "5s"],
            &["multilock", "a", "b", "--shared", "c", "--", "true"],
            &[
                "--shard",
                "file:///tmp/a",
                "--shard",
                "file:///tmp/b",
                "list",
            ],
            &["doctor"],
            &["wait", "x", "-w", "1s"],
            &["shards", "adopt"],
            &["completions", "bash"],
        ];
        for words in lines {
            let (cli, _) = parse_one(&argv(words))
                .unwrap_or_else(|| panic!("{words:?}: not parsed with its subcommand alone"));
            assert_eq!(format!("{cli:?}"), whole(words), "{words:?}");
        }
    }

    /// Help, version, aliases and every error go to the whole tree, whose answers (and
    /// messages) are the ones users and tests know.
    #[test]
    fn anything_else_is_left_to_the_whole_tree() {
        let lines: &[&[&str]] = &[
            &[],
            &["--help"],
            &["-h"],
            &["-V"],
            &["help", "run"],
            &["run", "--help"],
            &["run", "-V"],
            &["run-with-lock", "x", "--", "true"],
            &["run", "x", "--ttl", "soon", "--", "true"],
            &["-qv", "run", "x", "--", "true"],
            &["multilock", "a", "--ttl", "0s", "--", "true"],
            &["--bogus", "run", "x", "--", "true"],
            &["--store"],
            &["--", "run", "x"],
            &["unlock", "x"],
            &["nosuch", "x"],
        ];
        for words in lines {
            assert!(parse_one(&argv(words)).is_none(), "{words:?}");
        }
    }

    /// The words random command lines are made of: the subcommands first (the first 12).
    const WORDS: &[&str] = &[
        "run",
        "lock",
        "unlock",
        "extend",
        "multilock",
        "inspect",
        "doctor",
        "list",
        "wait",
        "shards",
        "adopt",
        "completions",
        "bash",
        "help",
        "run-with-lock",
        "x",
        "y",
        "--",
        "true",
        "-n",
        "-w",
        "5s",
        "--ttl",
        "1m",
        "0s",
        "--reason",
        "--any",
        "--shared",
        "--limit",
        "2",
        "--force",
        "--token",
        TOKEN,
        "-E",
        "3",
        "--store",
        "file:///tmp/a",
        "--store=file:///tmp/b",
        "--shard",
        "--namespace",
        "ns",
        "--json",
        "--color",
        "never",
        "-v",
        "-vv",
        "-q",
        "-qv",
        "--store-timeout",
        "200ms",
        "-h",
        "-V",
        "--version",
        "--nope",
        "-",
        "-x",
        "=",
    ];

    /// Random command lines from the words of every subcommand and global option, in any
    /// order: whatever the one-subcommand parse accepts, the whole tree accepts and reads the
    /// same way. (The converse is not asked: the whole tree answers what it leaves.)
    #[test]
    fn whatever_one_subcommand_accepts_the_whole_tree_reads_the_same() {
        let words = WORDS;
        // Seeded: the same lines on every run.
        let mut rng = rand::rngs::StdRng::seed_from_u64(27);
        let (mut tried, mut taken) = (0, 0);
        while tried < 20_000 {
            let len = rng.random_range(0..9);
            let mut line: Vec<&str> = (0..len)
                .map(|_| words[rng.random_range(0..words.len())])
                .collect();
            // Every other line names a subcommand first (the first 12 words), so that many
            // get as far as its own arguments.
            if tried % 2 == 0 {
                line.insert(0, words[rng.random_range(0..12)]);
            }
            tried += 1;
            if let Some((cli, _)) = parse_one(&argv(&line)) {
                taken += 1;
                assert_eq!(format!("{cli:?}"), whole(&line), "{line:?}");
            }
        }
        // Enough of them parse to mean something.
        assert!(taken > 1000, "only {taken} of {tried} lines parsed");
    }
}
