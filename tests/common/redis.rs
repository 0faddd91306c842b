//! A real redis-server on a free loopback port, in a temp dir; stopped when dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, require, temp_dir, wait_for};

pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Start with extra `redis-server` arguments (e.g. `--requirepass`, `--appendonly yes`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let mut s = RedisServer {
            port: free_port(),
            dir: temp_dir(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.boot();
        s
    }

    fn boot(&mut self) {
        let bin = require("redis-server", "redis-server");
        let child = Command::new(bin)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let port = self.port;
        assert!(
            wait_for(Duration::from_secs(10), || ping(port)),
            "redis-server on port {port} did not come up"
        );
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Freeze the server (it keeps its port but answers nothing).
    pub fn pause(&self) {
        super::signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        super::signal(self.pid(), libc::SIGCONT);
    }

    /// Kill the server (its data is gone: no persistence).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            super::signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.boot();
    }

    /// Run one command over RESP (inline), returning the first reply line.
    pub fn cmd(&self, line: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut out = String::new();
        r.read_line(&mut out).unwrap();
        out.trim().to_string()
    }

    /// Every key on the server (for "nothing left behind" checks).
    pub fn keys(&self) -> Vec<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"KEYS *\r\n").unwrap();
        let mut r = BufReader::new(s);
        let mut head = String::new();
        r.read_line(&mut head).unwrap();
        let n: usize = head.trim().trim_start_matches('*').parse().unwrap_or(0);
        let mut keys = Vec::new();
        for _ in 0..n {
            let mut len = String::new();
            r.read_line(&mut len).unwrap();
            let mut k = String::new();
            r.read_line(&mut k).unwrap();
            keys.push(k.trim().to_string());
        }
        keys.sort();
        keys
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).is_ok()
        && (line.starts_with("+PONG") || line.starts_with("-NOAUTH"))
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl RedisServer {
    /// Start a killed server again on the same port with its data directory emptied, as a
    /// machine that lost its disk would.
    pub fn start_again_empty(&mut self) {
        self.kill();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let p = entry.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
        self.boot();
    }
}
