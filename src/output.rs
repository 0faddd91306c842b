//! Where everything dlock prints goes: results on stdout, diagnostics on stderr.
//!
//! Colour only on a terminal (or `--color always`) and never with `NO_COLOR`. A closed stdout
//! (`dlock list | head`) ends the program quietly instead of panicking.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use colored::{ColoredString, Colorize};
use serde_json::{Value, json};

use crate::sys;

#[derive(Clone)]
pub struct Output {
    pub json: bool,
    color_out: bool,
    color_err: bool,
    /// -1 quiet, 0 normal, 1+ verbose.
    verbosity: i8,
    err_tty: bool,
    /// Under `--json`, the command's result object, printed with the exit code at the end.
    /// Shared by the clones (one process has one stdout), some of which a store's callback
    /// holds on another thread.
    result: Arc<Mutex<Option<serde_json::Value>>>,
    /// Stdout already has its one object, or belongs to the command `run` started.
    stdout_taken: Arc<AtomicBool>,
}

/// Colour on `fd`: `forced` says always (true) or never (false), as `--color` does; None
/// leaves it to whether `fd` is a terminal. `NO_COLOR` wins over both.
fn wants_color(forced: Option<bool>, fd: i32) -> bool {
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    forced.unwrap_or_else(|| sys::is_terminal(fd))
}

impl Output {
    pub fn new(json: bool, color: Option<bool>, verbose: u8, quiet: bool) -> Output {
        // We decide per stream below; the crate's own detection would look at stdout only.
        colored::control::set_override(true);
        Output {
            json,
            color_out: wants_color(color, 1),
            color_err: wants_color(color, 2),
            verbosity: if quiet { -1 } else { verbose.min(3) as i8 },
            err_tty: sys::is_terminal(2),
            result: Arc::new(Mutex::new(None)),
            stdout_taken: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn paint(&self, text: &str, style: fn(&str) -> ColoredString) -> String {
        if self.color_out {
            style(text).to_string()
        } else {
            text.to_string()
        }
    }

    /// One result line on stdout.
    pub fn line(&self, text: &str) {
        if let Err(e) = self.try_line(text) {
            closed_stdout(e);
        }
    }

    /// One result line on stdout, written through (flushed), or why it could not be: for a
    /// result that must not be lost unnoticed (`lock`'s token).
    pub fn try_line(&self, text: &str) -> io::Result<()> {
        if sys::stdout_closed() {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let mut out = io::stdout().lock();
        writeln!(out, "{text}").and_then(|_| out.flush())
    }

    /// The command's result under `--json`: printed once, at the end, inside the versioned
    /// envelope with the exit code (see `finish` and docs/json.md).
    pub fn json_value(&self, value: &serde_json::Value) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(value.clone());
    }

    /// A successful result printed at once and written through, as `try_line`: for one that
    /// must not be lost unnoticed (`lock`'s token).
    pub fn try_json_value(&self, value: &serde_json::Value) -> io::Result<()> {
        self.stdout_taken.store(true, Ordering::Relaxed);
        self.try_line(&envelope(value.clone(), 0, None).to_string())
    }

    /// The command `run` started owns stdout from now on: dlock prints no object of its own.
    pub fn hand_stdout_over(&self) {
        self.stdout_taken.store(true, Ordering::Relaxed);
    }

    /// The end of the command: under `--json`, its one object on stdout (unless already
    /// printed, or the command's), whatever the exit code; then the error line on stderr.
    pub fn finish(&self, code: i32, error: Option<&crate::exit::Error>) {
        if let Some(e) = error.filter(|e| !e.message.is_empty()) {
            self.error(&e.message);
        }
        if !self.json || self.stdout_taken.load(Ordering::Relaxed) {
            return;
        }
        let body = self
            .result
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| json!({}));
        let error = error.map(|e| (e.kind(), e.message.as_str()));
        // The process ends next: a stdout that cannot take it has nobody left to tell.
        let _ = self.try_line(&envelope(body, code, error).to_string());
    }

    fn err(&self, label: &str, style: fn(&str) -> ColoredString, msg: &str) {
        let label = if self.color_err {
            style(label).to_string()
        } else {
            label.to_string()
        };
        let msg = one_line(msg);
        let _ = writeln!(io::stderr().lock(), "dlock: {label}{msg}");
    }

    pub fn error(&self, msg: &str) {
        self.err("error: ", |s| s.red().bold(), msg);
    }

    pub fn warn(&self, msg: &str) {
        if self.verbosity >= 0 {
            self.err("warning: ", |s| s.yellow().bold(), msg);
        }
    }

    /// Something a person at a terminal wants to see, which a cron job must not mail.
    pub fn notice(&self, msg: &str) {
        if self.verbosity > 0 || (self.verbosity == 0 && self.err_tty) {
            self.err("", |s| s.normal(), msg);
        }
    }

    /// Whether a live line may be drawn in place on stderr: a terminal, not -q, not --json.
    pub fn live_line(&self) -> bool {
        self.err_tty && self.verbosity >= 0 && !self.json
    }

    pub fn verbose(&self) -> bool {
        self.verbosity > 0
    }

    pub fn color_stderr(&self) -> bool {
        self.color_err
    }

    /// Text as is on stderr, without a newline: the live waiting line redraws itself with it.
    pub fn raw_err(&self, text: &str) {
        let mut err = io::stderr().lock();
        let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
    }

    /// Detail for -v.
    pub fn debug(&self, msg: &str) {
        if self.verbosity > 0 {
            self.err("", |s| s.dimmed(), msg);
        }
    }
}

/// A message as one printable line. A store's message may carry newlines of its own (they
/// become spaces); any other control character is shown escaped, so a user-supplied string
/// that slipped into a message unquoted still cannot rewrite the terminal.
pub fn one_line(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for c in msg.chars() {
        match c {
            '\n' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_debug()),
            c => out.push(c),
        }
    }
    out
}

/// A string from elsewhere (another holder's metadata) for a result line: every control
/// character escaped, so it cannot move the cursor or end the line.
pub fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let esc = c.is_control().then(|| c.escape_debug());
            esc.into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect()
}

/// `body` in the versioned envelope every `--json` object has: `v`, `ok`, `code`, and on a
/// failure `error: {kind, message}` (docs/json.md; the schema is docs/dlock.schema.json).
pub fn envelope(mut body: Value, code: i32, error: Option<(&str, &str)>) -> Value {
    if !body.is_object() {
        body = json!({ "result": body });
    }
    body["v"] = json!(1);
    body["ok"] = json!(code == 0);
    body["code"] = json!(code);
    if code != 0 {
        let (kind, message) = error.unwrap_or(("failure", ""));
        let message = match message {
            // A signal's exit, or a code passed on, says nothing on stderr: say what it is.
            "" if kind == "interrupted" => format!("interrupted by signal {}", code - 128),
            "" => format!("exit {code}"),
            m => one_line(m),
        };
        body["error"] = json!({ "kind": kind, "message": message });
    }
    body
}

fn closed_stdout(e: io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(io::stderr(), "dlock: error: cannot write to stdout: {e}");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn messages_are_one_printable_line() {
        assert_eq!(one_line("a\nb"), "a b");
        assert_eq!(one_line("x\r\u{7}\u{1b}[2J"), "x\\r\\u{7}\\u{1b}[2J");
        assert_eq!(one_line("plain é"), "plain é");
        assert_eq!(super::printable("a\nb\u{1b}c é"), "a\\nb\\u{1b}c é");
    }
}
