//! Holder metadata: who took a lease, so `inspect` can answer "who holds it?".

use serde_json::{Value, json};

/// Cap on the whole metadata object: it is copied into every store for every grant.
pub const MAX_META: usize = 1024;
const MAX_COMMAND: usize = 256;
/// A reason is a sentence for the person waiting, not a document: long ones are cut here so
/// the command line and the CI job still fit under `MAX_META`.
pub const MAX_REASON: usize = 200;
/// A CI job URL (GitHub's is about 80 bytes); longer values are cut rather than dropped.
const MAX_CI: usize = 256;

/// The metadata for a lease taken by this process to run `command` (empty for `lock`).
pub fn holder(command: &[std::ffi::OsString]) -> String {
    holder_with(command, None)
}

/// The metadata with the holder's own `reason` (`--reason`, `DLOCK_REASON`) and, under CI,
/// the job that took the lease, so whoever waits can tell why and who.
pub fn holder_with(command: &[std::ffi::OsString], reason: Option<&str>) -> String {
    // Quoted as a shell would take it back: `sh -c 'sleep 3'`, not `sh -c sleep 3`.
    let cmd: String = command
        .iter()
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    // `lock` (and `multilock` without a command) exits at once: the process that holds the
    // lock is its caller, so that is the pid and command a holder is shown by.
    let held_by_caller = command.is_empty();
    let cmd = if held_by_caller {
        caller_command()
    } else {
        cmd
    };
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    let ci = ci_job();
    let build = |cmd_cap: usize, reason_cap: usize, ci_cap: usize| {
        let mut value = json!({
            "host": crate::sys::hostname(),
            "pid": crate::sys::pid(),
            // For `lock`, dlock itself exits at once: the caller (a script) is the real holder.
            "ppid": std::os::unix::process::parent_id(),
            "user": crate::sys::username(),
            "command": cut(&cmd, cmd_cap),
            "acquired_at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            "version": env!("CARGO_PKG_VERSION"),
        });
        if held_by_caller {
            value["holder_pid"] = json!(std::os::unix::process::parent_id());
        }
        if let Some(r) = reason {
            value["reason"] = json!(cut(r, reason_cap));
        }
        if let Some(c) = ci.as_deref().filter(|_| ci_cap > 0) {
            value["ci"] = json!(cut(c, ci_cap));
        }
        value.to_string()
    };
    // JSON escaping can make text several times longer than it is (control characters become
    // \u00XX): shorten the command first, then the job and the reason, until it fits.
    for (c, r, j) in [
        (MAX_COMMAND, MAX_REASON, MAX_CI),
        (64, MAX_REASON, MAX_CI),
        (64, 64, 128),
        (0, 32, 0),
    ] {
        let text = build(c, r, j);
        if text.len() <= MAX_META {
            return text;
        }
    }
    // Only a pathological host or user name gets here; keep the pid and version at least.
    json!({ "pid": crate::sys::pid(), "version": env!("CARGO_PKG_VERSION") }).to_string()
}

/// The caller's command line (this process's parent), quoted as a shell would take it back;
/// empty when it cannot be read.
fn caller_command() -> String {
    let ppid = std::os::unix::process::parent_id();
    let raw = std::fs::read(format!("/proc/{ppid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| shell_quote(&String::from_utf8_lossy(w)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The pid of the process that holds the lease: a `lock`'s caller, else dlock itself.
pub fn holder_pid(meta: &Value) -> Option<u64> {
    meta.get("holder_pid")
        .or_else(|| meta.get("pid"))
        .and_then(Value::as_u64)
}

/// Whether the holding process still runs, when it ran on this host (None: another host's,
/// or not known). A pid the kernel would not let us signal still exists.
pub fn alive(meta: &Value) -> Option<bool> {
    pid_alive(meta, holder_pid(meta)?)
}

/// Whether process `pid` of the host `meta` names still runs (None: another host's).
pub fn pid_alive(meta: &Value, pid: u64) -> Option<bool> {
    let pid = i32::try_from(pid).ok().filter(|p| *p > 0)?;
    if field(meta, "host")? != crate::sys::hostname() {
        return None;
    }
    // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    Some(rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// The holder as people name machines: `alice@ci-7 pid 4242`, and `(exited)` after the pid
/// when it ran on this host and is gone (its lease may be stale).
pub fn who(meta: &Value) -> String {
    let s = |k: &str| printable(field(meta, k).unwrap_or("?"));
    let pid = holder_pid(meta).map_or("?".into(), |p| p.to_string());
    let gone = match alive(meta) {
        Some(false) => " (exited)",
        _ => "",
    };
    format!("{}@{} pid {pid}{gone}", s("user"), s("host"))
}

/// `meta` with its `acquired_at` set to now. The engine stamps each grant attempt so, so that
/// "held for" counts from the grant, not from dlock's start: a holder that waited a minute
/// for the lock has not held it for that minute. The stamp keeps its length, so the metadata
/// still fits `MAX_META`; metadata without one (or another version's) is left as it is.
pub fn restamped(meta: &str) -> String {
    const KEY: &str = "\"acquired_at\":\"";
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let Some(at) = meta.find(KEY).map(|i| i + KEY.len()) else {
        return meta.to_string();
    };
    match meta.get(at..at + now.len() + 1) {
        Some(old) if old.ends_with('"') => {
            format!("{}{now}{}", &meta[..at], &meta[at + now.len()..])
        }
        _ => meta.to_string(),
    }
}

/// One word as a POSIX shell reads it back: bare when it has only characters no shell treats
/// specially, otherwise in single quotes (a quote inside written as '\'').
pub fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `text` cut to at most `max` bytes on a character boundary, marked with '…' when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The CI job this process runs in, from the variables each CI system sets: a URL a person
/// can open to see who holds the lock and why.
pub fn ci_job() -> Option<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let (Some(server), Some(repo), Some(run)) = (
        var("GITHUB_SERVER_URL"),
        var("GITHUB_REPOSITORY"),
        var("GITHUB_RUN_ID"),
    ) {
        return Some(format!("{server}/{repo}/actions/runs/{run}"));
    }
    // Jenkins' BUILD_URL is the most generic name, so it is looked at last.
    var("CI_JOB_URL")
        .or_else(|| var("BUILDKITE_BUILD_URL"))
        .or_else(|| var("BUILD_URL"))
}

/// A string from a holder's metadata (or any user-supplied text) fit for a terminal: control
/// characters are shown as escapes, so a name or a reason cannot rewrite the user's screen.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A string field of the metadata, if present and not empty.
pub fn field<'a>(meta: &'a Value, key: &str) -> Option<&'a str> {
    meta.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// How long the holder has held the lease, by its `acquired_at` and this host's clock
/// (None when unknown, or when the two clocks disagree so much that it would be negative).
pub fn held_for(meta: &Value) -> Option<std::time::Duration> {
    let since = humantime::parse_rfc3339_weak(field(meta, "acquired_at")?).ok()?;
    std::time::SystemTime::now().duration_since(since).ok()
}

/// A duration as people read it on one line: 41s, 3m12s, 2h05m.
pub fn compact(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The owner as people name machines and jobs: `alice@ci-7 pid 4242 (make deploy) for 3m12s,
/// reason: release 1.4, ci: URL`, every stored string escaped.
pub fn summary(meta: &Value) -> String {
    let mut text = who(meta);
    if let Some(cmd) = field(meta, "command") {
        text.push_str(&format!(" ({})", printable(&cut(cmd, 60))));
    }
    if let Some(d) = held_for(meta) {
        text.push_str(&format!(" for {}", compact(d)));
    }
    if let Some(r) = field(meta, "reason") {
        text.push_str(&format!(", reason: {}", printable(r)));
    }
    if let Some(c) = field(meta, "ci") {
        text.push_str(&format!(", ci: {}", printable(c)));
    }
    text
}

/// Parse stored metadata, tolerating what other versions may have written.
/// A command that is not known (`lock` stored none) is `null`, as everywhere in `--json`.
pub fn parse(text: &str) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if v.get("command").and_then(Value::as_str) == Some("") {
        v["command"] = Value::Null;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_small_json_with_the_command() {
        let m = holder(&["./backup.sh".into(), "--full".into()]);
        let v = parse(&m);
        assert_eq!(v["command"], "./backup.sh --full");
        assert_eq!(v["pid"], std::process::id());
        assert!(m.len() <= MAX_META);
        let huge = holder(&["x".repeat(100_000).into()]);
        assert!(huge.len() <= MAX_META);
    }

    #[test]
    fn a_restamp_moves_only_the_time_of_the_grant() {
        let old = r#"{"acquired_at":"2020-01-01T00:00:00Z","command":"x \"acquired_at\"","pid":1}"#;
        let new = restamped(old);
        let v = parse(&new);
        assert_eq!(new.len(), old.len());
        assert_ne!(v["acquired_at"], "2020-01-01T00:00:00Z");
        assert!(held_for(&v).unwrap() < std::time::Duration::from_secs(5));
        assert_eq!(v["command"], "x \"acquired_at\"");
        assert_eq!(v["pid"], 1);
        assert_eq!(restamped("{}"), "{}");
        assert_eq!(
            restamped(r#"{"acquired_at":"x"}"#),
            r#"{"acquired_at":"x"}"#
        );
    }

    #[test]
    fn the_command_is_quoted_as_a_shell_would() {
        let m = holder(&[
            "sh".into(),
            "-c".into(),
            "sleep 3".into(),
            "it's".into(),
            "".into(),
        ]);
        assert_eq!(parse(&m)["command"], r#"sh -c 'sleep 3' 'it'\''s' ''"#);
        assert_eq!(shell_quote("a/b-c.d=e"), "a/b-c.d=e");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn shown_text_has_no_control_characters() {
        assert_eq!(printable("a\x1b[2Jb\r\x07"), "a\\u{1b}[2Jb\\r\\u{7}");
        assert_eq!(printable("déjà vu"), "déjà vu");
        let m = parse(&holder_with(&["make".into()], Some("fix\x1b]0;x")));
        let s = summary(&m);
        assert!(!s.chars().any(char::is_control), "{s}");
        assert!(s.contains("(make) for "), "{s}");
        assert!(s.contains(", reason: fix\\u{1b}]0;x"), "{s}");
        assert_eq!(compact(std::time::Duration::from_secs(192)), "3m12s");
        assert_eq!(compact(std::time::Duration::from_secs(7500)), "2h05m");
    }

    #[test]
    fn a_reason_is_kept_and_cut_to_fit() {
        let v = parse(&holder_with(&["make".into()], Some("deploy v1.2")));
        assert_eq!(v["reason"], "deploy v1.2");
        let long = "é".repeat(1000);
        let m = holder_with(&["make".into()], Some(&long));
        assert!(m.len() <= MAX_META);
        let r = parse(&m)["reason"].as_str().unwrap().to_string();
        assert!(r.len() <= MAX_REASON && r.ends_with('…'), "{r}");
        // Escaping makes control characters six times longer; it still fits.
        let nasty = "\x1b".repeat(1000);
        let m = holder_with(&[nasty.clone().into()], Some(&nasty));
        assert!(m.len() <= MAX_META, "{}", m.len());
        assert!(parse(&m)["reason"].is_string());
        assert!(parse(&holder_with(&[], Some("  "))).get("reason").is_none());
    }
}
