//! Holder metadata: who took a lease, so `inspect` can answer "who holds it?".

use serde_json::{Value, json};

/// Cap on the whole metadata object: it is copied into every store for every grant.
pub const MAX_META: usize = 1024;
const MAX_COMMAND: usize = 256;

/// The metadata for a lease taken by this process to run `command` (empty for `lock`).
pub fn holder(command: &[std::ffi::OsString]) -> String {
    let mut cmd: String = command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    if cmd.len() > MAX_COMMAND {
        let mut end = MAX_COMMAND;
        while !cmd.is_char_boundary(end) {
            end -= 1;
        }
        cmd.truncate(end);
        cmd.push('…');
    }
    let value = json!({
        "host": crate::sys::hostname(),
        "pid": crate::sys::pid(),
        // For `lock`, dlock itself exits at once: the caller (a script) is the real holder.
        "ppid": std::os::unix::process::parent_id(),
        "user": crate::sys::username(),
        "command": cmd,
        "acquired_at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    let text = value.to_string();
    if text.len() <= MAX_META {
        text
    } else {
        // Only a pathological host or user name gets here; keep the pid and version at least.
        json!({ "pid": crate::sys::pid(), "version": env!("CARGO_PKG_VERSION") }).to_string()
    }
}

/// Parse stored metadata, tolerating what other versions may have written.
pub fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
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
}
