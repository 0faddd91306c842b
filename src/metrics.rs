//! `--metrics-file PATH`: what the last runs of a lock did, as a node_exporter textfile
//! collector file (the Prometheus text format), for cron jobs that no scraper can reach
//! while they run (issue 40).
//!
//! The file is rewritten whole after each run: a temporary file in the same directory
//! (named so that the collector, which reads `*.prom`, skips it), renamed over the old one,
//! so a reader sees the last file or the new one, never half of one. Counters must go on
//! across runs, and one file may serve several lock names, so the old file is read first and
//! every series it has is carried over; writers of one directory take turns on a `flock` of
//! the directory, so two runs that end together do not lose each other's counts.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Every family the file has: name, type, help. Series are written in this order.
const FAMILIES: [(&str, &str, &str); 8] = [
    (
        "dlock_last_start_timestamp_seconds",
        "gauge",
        "When the last run that got the lock started its command (Unix time).",
    ),
    (
        "dlock_last_success_timestamp_seconds",
        "gauge",
        "When the last run that exited 0 ended (Unix time).",
    ),
    (
        "dlock_last_failure_timestamp_seconds",
        "gauge",
        "When the last run that failed (any other end but a busy skip) ended (Unix time).",
    ),
    (
        "dlock_last_exit_code",
        "gauge",
        "The exit code of the last run that was not skipped.",
    ),
    (
        "dlock_last_duration_seconds",
        "gauge",
        "How long the command of the last run that got the lock ran.",
    ),
    (
        "dlock_last_wait_seconds",
        "gauge",
        "How long the last run waited for the lock.",
    ),
    (
        "dlock_skipped_busy_total",
        "counter",
        "Runs that did not get the lock because it was held (-n, or -w ran out).",
    ),
    (
        "dlock_lease_lost_total",
        "counter",
        "Runs whose lease was lost while the command ran (exit 70).",
    ),
];

/// What one run did, as the file records it.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// How long it waited for the lock (granted or not); None: it never asked.
    pub waited: Option<Duration>,
    /// When the command started, and how long it ran, if it got the lock.
    pub ran: Option<(SystemTime, Duration)>,
    /// dlock's exit code; None for a busy skip.
    pub exit_code: Option<i32>,
    /// The lease was lost while the command ran.
    pub lost: bool,
}

/// Values by (family, lock name), as written.
type Series = BTreeMap<(String, String), String>;

/// Record `run` for each of `names` in the file at `path`.
pub fn record(path: &Path, names: &[String], run: &Run) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let guard = std::fs::File::open(dir)?;
    // SAFETY: flock on a descriptor we own; released when `guard` closes.
    if unsafe { libc::flock(guard.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut series = match std::fs::read_to_string(path) {
        Ok(text) => parse(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Series::new(),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now();
    for name in names {
        update(&mut series, name, run, now);
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", crate::sys::pid()));
    let written =
        std::fs::File::create(&tmp).and_then(|mut f| f.write_all(render(&series).as_bytes()));
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// One name's series after `run`.
fn update(series: &mut Series, name: &str, run: &Run, now: SystemTime) {
    let mut set = |family: &str, value: String| {
        series.insert((family.to_string(), name.to_string()), value);
    };
    if let Some(w) = run.waited {
        set("dlock_last_wait_seconds", seconds(w));
    }
    if let Some((start, took)) = run.ran {
        set("dlock_last_start_timestamp_seconds", unix(start));
        set("dlock_last_duration_seconds", seconds(took));
    }
    match run.exit_code {
        Some(0) => set("dlock_last_success_timestamp_seconds", unix(now)),
        Some(_) => set("dlock_last_failure_timestamp_seconds", unix(now)),
        None => {}
    }
    if let Some(code) = run.exit_code {
        set("dlock_last_exit_code", code.to_string());
    }
    // Counters start at 0, so that a rate over them is defined from the first run on.
    for (family, add) in [
        ("dlock_skipped_busy_total", run.exit_code.is_none()),
        ("dlock_lease_lost_total", run.lost),
    ] {
        let key = (family.to_string(), name.to_string());
        let old: u64 = series.get(&key).and_then(|v| v.parse().ok()).unwrap_or(0);
        series.insert(key, (old + u64::from(add)).to_string());
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

fn unix(t: SystemTime) -> String {
    seconds(t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default())
}

/// The file: each family's HELP and TYPE, then its series, one per lock name.
fn render(series: &Series) -> String {
    let mut out = String::new();
    for (family, kind, help) in FAMILIES {
        out.push_str(&format!("# HELP {family} {help}\n# TYPE {family} {kind}\n"));
        for ((f, name), value) in series {
            if f == family {
                out.push_str(&sample(family, &[("lock", name)], value));
            }
        }
    }
    out
}

/// One sample line: `family{label="value",...} value`.
pub fn sample(family: &str, labels: &[(&str, &str)], value: &str) -> String {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{family}{{{}}} {value}\n", labels.join(","))
}

/// A label value as the text format wants it: `\`, `"` and newline escaped.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The series of a file this module wrote: `family{lock="..."} value` lines of its families;
/// anything else (comments, other families, a line cut short) is left out.
fn parse(text: &str) -> Series {
    let mut series = Series::new();
    for line in text.lines() {
        let Some((family, rest)) = line.split_once("{lock=\"") else {
            continue;
        };
        if !FAMILIES.iter().any(|(f, _, _)| *f == family) {
            continue;
        }
        let Some((name, value)) = unescape_until_quote(rest) else {
            continue;
        };
        let Some(value) = value.strip_prefix("} ") else {
            continue;
        };
        if value.trim().parse::<f64>().is_ok() {
            series.insert((family.to_string(), name), value.trim().to_string());
        }
    }
    series
}

/// The escaped label value at the start of `s`, up to its closing quote, and what follows.
fn unescape_until_quote(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_read_back_keeps_every_series_whatever_the_name() {
        let mut s = Series::new();
        let odd = "a \"quoted\" \\ name\nwith a newline";
        let run = Run {
            waited: Some(Duration::from_millis(1500)),
            ran: Some((SystemTime::now(), Duration::from_secs(2))),
            exit_code: Some(3),
            lost: true,
        };
        update(&mut s, odd, &run, SystemTime::now());
        update(&mut s, "plain", &Run::default(), SystemTime::now());
        let back = parse(&render(&s));
        assert_eq!(back, s);
        assert_eq!(back[&("dlock_lease_lost_total".into(), odd.into())], "1");
        assert_eq!(
            back[&("dlock_skipped_busy_total".into(), "plain".into())],
            "1"
        );
        assert_eq!(
            back[&("dlock_last_wait_seconds".into(), odd.into())],
            "1.500"
        );
    }
}
