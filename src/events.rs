//! `--events FILE|-`: one JSON object per line for each thing that happens to a lease, so CI
//! systems and log shippers can follow a run without parsing messages meant for people.
//!
//! Every line has `event` (waiting, acquired, renewed, renew-failed, renew-late, lost,
//! released, and the others docs/json.md lists), `time`
//! (RFC 3339, UTC, milliseconds), `unix_ms`, and `name` (or `names` for several locks); the
//! lease events carry `fence` (or `fences`). A file is opened for appending and each line is
//! one write, so several runs may share one file.
//!
//! A log never costs the lock: lines are written by a thread of their own, so a reader that
//! stops reading (`--events -` into a stalled pipe, a hung network disk) cannot hold up the
//! renewals; if it falls `BACKLOG` lines behind, further lines are dropped, and write errors
//! are ignored. `finish` gives the thread a moment to write what is queued before exit.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::exit::{Error, Result};

/// Lines queued for the writer thread before new ones are dropped.
const BACKLOG: usize = 1024;
/// How long `finish` waits for the queued lines to be written.
const DRAIN: Duration = Duration::from_secs(2);

/// Where events go; a clone writes to the same place. The default writes nowhere.
#[derive(Clone, Default)]
pub struct Events {
    sink: Option<Arc<Sink>>,
}

struct Sink {
    /// Taken by `finish`: once it is dropped the writer ends after the queued lines.
    lines: Mutex<Option<SyncSender<String>>>,
    /// Signalled by the writer when it has written everything and ended.
    done: Mutex<Receiver<()>>,
}

impl Events {
    /// Open `path` for appending (`-`: stdout, when `stdout_free` says dlock prints no
    /// result of its own there).
    pub fn open(path: Option<&Path>, stdout_free: bool) -> Result<Events> {
        let Some(path) = path else {
            return Ok(Events::default());
        };
        let sink: Box<dyn Write + Send> = if path == Path::new("-") {
            if !stdout_free {
                return Err(Error::usage(
                    "--events - would mix events with the token on stdout; give --events a file",
                ));
            }
            Box::new(std::io::stdout())
        } else {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .map_err(|e| {
                    Error::usage(format!("cannot open --events {:?}: {e}", path.display()))
                })?;
            Box::new(file)
        };
        let (lines, queued) = sync_channel::<String>(BACKLOG);
        let (ended, done) = sync_channel(1);
        let mut sink = sink;
        std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                for line in queued {
                    let _ = sink.write_all(line.as_bytes()).and_then(|_| sink.flush());
                }
                let _ = ended.send(());
            })
            .map_err(|e| Error::failure(format!("cannot start the --events writer: {e}")))?;
        Ok(Events {
            sink: Some(Arc::new(Sink {
                lines: Mutex::new(Some(lines)),
                done: Mutex::new(done),
            })),
        })
    }

    /// Let the writer write what is queued (for at most `DRAIN`); later events are dropped.
    pub fn finish(&self) {
        let Some(sink) = &self.sink else { return };
        let Some(lines) = sink.lines.lock().ok().and_then(|mut l| l.take()) else {
            return;
        };
        drop(lines);
        if let Ok(done) = sink.done.lock() {
            let _ = done.recv_timeout(DRAIN);
        }
    }

    pub fn is_on(&self) -> bool {
        self.sink.is_some()
    }

    /// Write one event about `names`; `fields` (a JSON object) adds to the common ones.
    pub fn emit(&self, event: &str, names: &[String], fields: Value) {
        let Some(sink) = &self.sink else { return };
        let now = SystemTime::now();
        let mut line = json!({
            "event": event,
            "time": humantime::format_rfc3339_millis(now).to_string(),
            "unix_ms": now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        });
        if names.len() == 1 {
            line["name"] = json!(names[0]);
        } else {
            line["names"] = json!(names);
        }
        if let (Some(line), Value::Object(extra)) = (line.as_object_mut(), fields) {
            line.extend(extra);
        }
        let mut text = line.to_string();
        text.push('\n');
        if let Some(lines) = sink.lines.lock().ok().as_ref().and_then(|l| l.as_ref()) {
            // Full: the reader is far behind; losing a line beats stalling the lease.
            let _ = lines.try_send(text);
        }
    }
}

/// The fence field(s) for a lease on `fences` (one per name).
pub fn fences(fences: &[u64]) -> Value {
    if fences.len() == 1 {
        json!({ "fence": fences[0] })
    } else {
        json!({ "fences": fences })
    }
}

/// `a` with the fields of `b` added (both JSON objects).
pub fn with(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_json_object_per_line_with_time_and_fence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let ev = Events::open(Some(&path), false).unwrap();
        ev.emit("acquired", &["a".into()], fences(&[7]));
        ev.clone()
            .emit("released", &["a".into(), "b".into()], fences(&[7, 8]));
        ev.finish();
        ev.emit("after", &["a".into()], fences(&[7]));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["event"], "acquired");
        assert_eq!(lines[0]["name"], "a");
        assert_eq!(lines[0]["fence"], 7);
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
        assert!(lines[0]["unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(lines[1]["names"][1], "b");
        assert_eq!(lines[1]["fences"][1], 8);
        assert_eq!(lines.len(), 2, "an event after finish is dropped");
        assert!(Events::open(Some(Path::new("-")), false).is_err());
    }
}
