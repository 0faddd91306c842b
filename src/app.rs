//! From the parsed command line to a running command and an exit code.

use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::cli::{Cli, ColorWhen, Command, GlobalArgs};
use crate::commands::Ctx;
use crate::engine::{Engine, timing};
use crate::exit::{Error, ExitCode, Result};
use crate::output::Output;
use crate::shard::Shards;
use crate::store::url::{self, StoreUrl};

pub fn main() -> i32 {
    crate::sys::started();
    crate::sys::standard_fds();
    if let Some(code) = version_only() {
        return code;
    }
    let cli = match crate::parse::parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    let out = Output::new(
        cli.global.json,
        forced_color(cli.global.color),
        cli.global.verbose,
        cli.global.quiet,
    );
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = Error::failure(format!("cannot start the async runtime: {e}"));
            out.finish(e.code.into(), Some(&e));
            return e.code.into();
        }
    };
    let (out, result) = runtime.block_on(dispatch(cli, out));
    let code = match &result {
        Ok(code) => *code,
        Err(e) => e.code.into(),
    };
    out.finish(code, result.as_ref().err());
    // The work is done and the process exits next: skip the runtime's orderly shutdown (joining
    // the blocking pool, closing idle connections), which only adds latency to every command.
    std::mem::forget(runtime);
    code
}

/// `dlock --version` (or `-V`) alone: clap's answer without building clap's whole command
/// tree first, which is most of what a start-up touches (the heap it fills, the pages of code
/// and tables it runs through). What scripts and package checks run; anything else parses.
fn version_only() -> Option<i32> {
    use std::io::Write;
    let mut args = std::env::args_os().skip(1);
    let (Some(arg), None) = (args.next(), args.next()) else {
        return None;
    };
    if arg != "--version" && arg != "-V" {
        return None;
    }
    let _ = std::io::stdout().write_all(version_line().as_bytes());
    Some(0)
}

/// What clap prints for `--version` (a test holds the two equal).
fn version_line() -> String {
    format!("dlock {}\n", env!("CARGO_PKG_VERSION"))
}

/// `--color`: always or never forced, or left to whether the stream is a terminal (None).
fn forced_color(when: ColorWhen) -> Option<bool> {
    match when {
        ColorWhen::Always => Some(true),
        ColorWhen::Never => Some(false),
        ColorWhen::Auto => None,
    }
}

/// clap's own errors as one line on stderr with exit 64 (and the failure object on stdout
/// under `--json`); help and version as clap prints them.
fn clap_error(e: clap::Error) -> i32 {
    let usage = |msg: String| {
        let out = Output::new(json_requested(), None, 0, false);
        let e = Error::usage(msg);
        out.finish(e.code.into(), Some(&e));
        i32::from(ExitCode::Usage)
    };
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand if json_requested() => {
            usage("a command is needed; see 'dlock --help'".to_string())
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::Usage.into()
        }
        _ => {
            if let Some(msg) = escaped(&e) {
                return usage(format!("{msg}; see 'dlock --help'"));
            }
            let argv: Vec<String> = std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            usage(crate::usage::message(&e, &argv))
        }
    }
}

/// Whether `--json` is among dlock's own arguments (before any `--`), for an error found
/// before the command line could be parsed.
fn json_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// clap's message again when the user's word in it has a control character or a newline:
/// clap would print it raw (or strip part of it, or cut the line), so show it escaped.
fn escaped(e: &clap::Error) -> Option<String> {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(v)) => Some(v.clone()),
        _ => None,
    };
    let (arg, value) = (
        context(ContextKind::InvalidArg),
        context(ContextKind::InvalidValue),
    );
    let raw = |s: &Option<String>| {
        s.as_deref()
            .is_some_and(|s| s.chars().any(char::is_control))
    };
    if !raw(&arg) && !raw(&value) {
        return None;
    }
    Some(match (e.kind(), arg, value) {
        (ErrorKind::ValueValidation | ErrorKind::InvalidValue, Some(arg), Some(value)) => {
            let why = std::error::Error::source(e)
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            format!("invalid value {value:?} for '{arg}'{why}")
        }
        (ErrorKind::UnknownArgument, Some(arg), _) => format!("unexpected argument {arg:?}"),
        (kind, arg, value) => format!(
            "{}: {:?}",
            kind.as_str().unwrap_or("bad usage"),
            arg.or(value).unwrap_or_default()
        ),
    })
}

async fn dispatch(cli: Cli, out: Output) -> (Output, Result<i32>) {
    let ttl = match &cli.command {
        Command::Lock(a) => Some(a.acquire.ttl),
        Command::Run(a) => Some(a.acquire.ttl),
        Command::Multilock(a) => Some(a.acquire.ttl),
        Command::Extend(a) => Some(a.ttl),
        Command::Doctor(a) => Some(a.ttl),
        Command::Completions(a) => {
            // The script is the result, under --json too (docs/json.md).
            crate::commands::completions::run(a, &out);
            out.hand_stdout_over();
            return (out, Ok(0));
        }
        _ => None,
    };
    if let Some(status) = crate::supervisor::orphan::requested() {
        // A watchdog's release after dlock's death, not the command line's own work.
        return match open_shards(&cli.global, ttl).await {
            Ok(shards) => (
                out,
                Ok(crate::supervisor::orphan::release(&shards, status).await),
            ),
            Err(e) => (out, Err(e)),
        };
    }
    // `doctor` reports a bent clock as a finding instead of refusing to look.
    if ttl.is_some()
        && !matches!(cli.command, Command::Doctor(_))
        && let Err(e) = crate::commands::trust_clock()
    {
        return (out, Err(e));
    }
    let shards = match open_shards(&cli.global, ttl).await {
        Ok(s) => s,
        Err(e) => return (out, Err(e)),
    };
    if out.verbose() {
        for shard in shards.all() {
            let out = out.clone();
            shard.engine.on_slow(move |store| {
                out.debug(&format!(
                    "{}: slow: a majority answered without it, so it is not waited for",
                    crate::output::printable(store)
                ));
            });
        }
    }
    let ctx = Ctx {
        shards: std::sync::Arc::new(shards),
        namespace: cli.global.namespace.clone(),
        out,
    };
    let result = crate::commands::run(cli.command, &ctx).await;
    (ctx.out, result)
}

/// The store URLs: `--store` flags, else `DLOCK_STORE`, else the default file store.
pub(crate) fn store_urls(flags: &[String]) -> Result<Vec<StoreUrl>> {
    let raw: Vec<String> = if !flags.is_empty() {
        // The URL itself is not shown: it may carry a password.
        if flags.iter().any(|f| url::split_list(f).len() > 1) {
            return Err(Error::usage(
                "one --store names several stores (a comma, then another scheme://); give \
                 each store its own --store, or list them comma-separated in DLOCK_STORE",
            ));
        }
        flags.to_vec()
    } else {
        url::split_list(&std::env::var("DLOCK_STORE").unwrap_or_default())
    };
    if raw.is_empty() {
        return Ok(vec![StoreUrl::default_file()]);
    }
    parse_urls(&raw)
}

/// The shards: `--shard` flags, else `DLOCK_SHARDS` (shards separated by `;`); each one URL
/// or a comma-separated quorum. Empty: not sharded. A flag of one kind beats the other
/// kind's environment variable; `--shard` with `--store`, or both variables, is a usage error.
pub(crate) fn shard_lists(global: &GlobalArgs) -> Result<Vec<Vec<StoreUrl>>> {
    let from_env = global.shards.is_empty();
    if !from_env && !global.stores.is_empty() {
        return Err(Error::usage(
            "--shard and --store cannot be used together: give every store in --shard \
             (a quorum as one comma-separated --shard)",
        ));
    }
    let raw: Vec<String> = if !from_env {
        global.shards.clone()
    } else if !global.stores.is_empty() {
        return Ok(Vec::new());
    } else {
        let env = std::env::var("DLOCK_SHARDS").unwrap_or_default();
        if env.trim().is_empty() {
            return Ok(Vec::new());
        }
        if std::env::var("DLOCK_STORE").is_ok_and(|s| !s.trim().is_empty()) {
            return Err(Error::usage(
                "DLOCK_SHARDS and DLOCK_STORE are both set; unset one of them",
            ));
        }
        env.split(';').map(str::to_string).collect()
    };
    let (what, n) = (if from_env { "DLOCK_SHARDS" } else { "--shard" }, raw.len());
    let mut lists = Vec::with_capacity(n);
    for (i, shard) in raw.iter().enumerate() {
        let urls = url::split_list(shard);
        if urls.is_empty() {
            return Err(Error::usage(format!(
                "shard {} of {n} in {what} is empty; give a store URL or a comma-separated quorum",
                i + 1
            )));
        }
        lists.push(parse_urls(&urls).map_err(|e| {
            Error::usage(format!("shard {} of {n} in {what}: {}", i + 1, e.message))
        })?);
    }
    Ok(lists)
}

/// Parse store URLs, each once.
fn parse_urls(raw: &[String]) -> Result<Vec<StoreUrl>> {
    let mut urls: Vec<StoreUrl> = Vec::with_capacity(raw.len());
    for r in raw {
        let u = url::parse(r).map_err(Error::usage)?;
        if urls.iter().any(|seen| seen.to_string() == u.to_string()) {
            return Err(Error::usage(format!(
                "the store {u} is given twice; a quorum needs distinct stores"
            )));
        }
        urls.push(u);
    }
    Ok(urls)
}

async fn open_shards(global: &GlobalArgs, ttl: Option<Duration>) -> Result<Shards> {
    let lists = shard_lists(global)?;
    let ttl = ttl.unwrap_or(Duration::from_secs(30));
    let store_timeout = global
        .store_timeout
        .unwrap_or_else(|| timing::default_store_timeout(ttl));
    if store_timeout >= ttl {
        return Err(Error::usage(format!(
            "--store-timeout {} is not shorter than the ttl {}; a store must answer well within the lease",
            humantime::format_duration(store_timeout),
            humantime::format_duration(ttl)
        )));
    }
    if !lists.is_empty() {
        return Shards::open(&lists, &global.namespace, store_timeout)
            .await
            .map_err(|e| Error::usage(e.to_string()));
    }
    let urls = store_urls(&global.stores)?;
    let engine = Engine::open(&urls, &global.namespace, store_timeout)
        .await
        .map_err(|e| Error::usage(e.to_string()))?;
    Ok(Shards::single(engine, &global.namespace))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_short_version_answer_is_clap_s() {
        use clap::CommandFactory;
        assert_eq!(
            super::version_line(),
            crate::cli::Cli::command().render_version().to_string()
        );
    }
}
