//! A real redis-server on a free loopback port, in a temp dir; stopped when dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, require, temp_dir, wait_for};

pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    pub(crate) child: Option<Child>,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Start with extra `redis-server` arguments (e.g. `--requirepass`, `--appendonly yes`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        // A cluster node also listens on its port + 10000 (the cluster bus), so it needs a
        // port of 55535 or less with that one free too.
        let cluster = extra.contains(&"--cluster-enabled");
        let mut tries = 0;
        loop {
            let port = loop {
                let p = free_port();
                if !cluster
                    || (p <= 55535 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok())
                {
                    break p;
                }
            };
            let mut s = RedisServer {
                port,
                dir: temp_dir(),
                child: None,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            // A port free when tested may be taken before the server binds it, by another
            // test process walking the same ports: the server then exits at once, and a
            // new port is the fix. A server that keeps running and never answers is a failure.
            tries += 1;
            if s.try_boot() {
                s.up();
                return s;
            }
            assert!(
                tries < 5,
                "redis-server exited at once on 5 ports in turn (last {port})"
            );
        }
    }

    fn boot(&mut self) {
        let port = self.port;
        assert!(
            self.try_boot(),
            "redis-server on port {port} exited at once"
        );
        self.up();
    }

    /// Start the server; false if it exited at once (its port taken).
    fn try_boot(&mut self) -> bool {
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
        let pid = self.pid();
        let mut exited = false;
        wait_for(Duration::from_secs(10), || {
            exited = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(Some(_))));
            // Another process's server on the port answers too: it must be ours.
            exited || (ping(port) && server_pid(port).is_none_or(|p| p == pid))
        });
        !exited
    }

    /// Assert the server answers.
    fn up(&self) {
        let port = self.port;
        assert!(ping(port), "redis-server on port {port} did not come up");
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

/// The pid the server on `port` gives in INFO; None where it does not say (a password).
fn server_pid(port: u16) -> Option<u32> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"INFO server\r\n").ok()?;
    BufReader::new(s)
        .lines()
        .map_while(Result::ok)
        .take(40)
        .find_map(|l| l.strip_prefix("process_id:")?.trim().parse().ok())
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

/// A Redis Cluster of real servers on loopback: `masters` masters, each with `replicas`
/// replicas, created with `redis-cli --cluster create`; stopped when dropped.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let total = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                let conf = format!("nodes-{}.conf", free_port());
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "1000",
                    "--repl-diskless-sync-delay",
                    "0",
                    "--cluster-replica-validity-factor",
                    "0",
                ])
            })
            .collect();
        let cli = require("redis-cli", "redis-tools");
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(cli)
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        assert!(
            wait_for(Duration::from_secs(30), || cluster.healthy()),
            "the cluster did not become healthy"
        );
        cluster
    }

    /// Every live node says the cluster is ok and knows all its replicas are in sync.
    pub fn healthy(&self) -> bool {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .all(|n| info(n, "CLUSTER INFO").contains("cluster_state:ok"))
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Index of the node that is master of the slot of `key` now.
    pub fn master_of(&self, key: &str) -> usize {
        self.try_master_of(key)
            .unwrap_or_else(|| panic!("no healthy master owns the slot of {key}"))
    }

    /// Whether node `i` is a replica whose link to its master is up (synced).
    pub fn replica_synced(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        if n.child.is_none() {
            return false;
        }
        let r = info(n, "INFO replication");
        r.contains("role:slave") && r.contains("master_link_status:up")
    }

    /// Whether node `i` is a live master.
    pub fn is_master(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        n.child.is_some() && info(n, "INFO replication").contains("role:master")
    }

    /// Like `master_of`, but None while no live master owns the slot (during a failover).
    pub fn try_master_of(&self, key: &str) -> Option<usize> {
        self.try_master_of_without(key, usize::MAX)
    }

    /// Like `try_master_of`, asking a live node other than `skip` (a paused node answers
    /// nothing).
    pub fn try_master_of_without(&self, key: &str, skip: usize) -> Option<usize> {
        let live = self
            .nodes
            .iter()
            .enumerate()
            .find(|(i, n)| n.child.is_some() && *i != skip)?
            .1;
        let slot: u16 = live
            .cmd(&format!("CLUSTER KEYSLOT {key}"))
            .trim_start_matches(':')
            .parse()
            .ok()?;
        let nodes = info(live, "CLUSTER NODES");
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let owns = f[8..].iter().any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) => a <= slot && slot <= b,
                    _ => false,
                }
            });
            if owns {
                let port: u16 = f[1]
                    .split('@')
                    .next()
                    .unwrap()
                    .rsplit_once(':')
                    .unwrap()
                    .1
                    .parse()
                    .unwrap();
                return self.nodes.iter().position(|n| n.port == port);
            }
        }
        None
    }
}

/// A command's whole bulk-string reply (CLUSTER INFO, CLUSTER NODES).
fn info(node: &RedisServer, command: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", node.port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("{command}\r\n").as_bytes()).is_err() {
        return String::new();
    }
    let mut r = BufReader::new(s);
    let mut head = String::new();
    if r.read_line(&mut head).is_err() || !head.starts_with('$') {
        return String::new();
    }
    let len: usize = head[1..].trim().parse().unwrap_or(0);
    let mut body = vec![0u8; len];
    if std::io::Read::read_exact(&mut r, &mut body).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&body).into_owned()
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

impl RedisServer {
    /// A server that keeps its data over a restart: every write is in its append-only file
    /// before it is answered (`appendonly yes`, `appendfsync always`).
    pub fn start_persistent() -> RedisServer {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// Whether this cluster node says the cluster is ok (serving every slot).
    pub fn cluster_ok(&self) -> bool {
        info(self, "CLUSTER INFO").contains("cluster_state:ok")
    }

    /// Start a killed (or never restarted) server again on the same port and data directory.
    pub fn start_again(&mut self) {
        self.kill();
        self.boot();
    }
}
