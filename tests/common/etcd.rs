//! Real etcd servers on free loopback ports, in a temp dir; stopped when dropped.
//! One node (`EtcdServer::start`) or a cluster (`EtcdServer::cluster(3)`), whose nodes can be
//! killed, paused and restarted one by one.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::{free_port, require, temp_dir, wait_for};

struct Node {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

pub struct EtcdServer {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    /// TLS files (ca, cert, key) when the servers speak TLS to clients.
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// `user:password` for etcdctl once auth is on.
    auth: Option<String>,
}

impl EtcdServer {
    pub fn start() -> EtcdServer {
        Self::cluster(1)
    }

    pub fn cluster(n: usize) -> EtcdServer {
        Self::boot(n, None)
    }

    /// One node that serves clients over TLS with a certificate from a fresh self-signed CA.
    pub fn start_tls() -> EtcdServer {
        let dir = temp_dir();
        let tls = super::tls_certs(dir.path());
        let s = Self::boot_in(dir, 1, Some(tls));
        s.wait_healthy();
        s
    }

    fn boot(n: usize, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> EtcdServer {
        let s = Self::boot_in(temp_dir(), n, tls);
        s.wait_healthy();
        s
    }

    fn boot_in(
        dir: tempfile::TempDir,
        n: usize,
        tls: Option<(PathBuf, PathBuf, PathBuf)>,
    ) -> EtcdServer {
        let nodes = (1..=n)
            .map(|i| Node {
                name: format!("e{i}"),
                client: free_port(),
                peer: free_port(),
                child: None,
            })
            .collect();
        let mut s = EtcdServer {
            dir,
            nodes,
            tls,
            auth: None,
        };
        for i in 0..n {
            s.spawn(i);
        }
        s
    }

    fn scheme(&self) -> &str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    fn spawn(&mut self, i: usize) {
        let bin = require("etcd", "etcd-server");
        let cluster: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}=http://127.0.0.1:{}", n.name, n.peer))
            .collect();
        let scheme = self.scheme().to_string();
        let node = &self.nodes[i];
        let client_url = format!("{scheme}://127.0.0.1:{}", node.client);
        let peer_url = format!("http://127.0.0.1:{}", node.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", node.name)))
            .unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("--name")
            .arg(&node.name)
            .arg("--data-dir")
            .arg(self.dir.path().join(&node.name))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-token", "dlock-test"])
            .args(["--initial-cluster-state", "new"]);
        if let Some((_, cert, key)) = &self.tls {
            cmd.arg("--cert-file").arg(cert).arg("--key-file").arg(key);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.nodes[i].child = Some(child);
    }

    /// Wait until every running node answers a health check (a committed proposal).
    pub fn wait_healthy(&self) {
        let endpoints: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| self.endpoint(n))
            .collect();
        // Generous: a three-member cluster elects its leader slowly on a loaded machine.
        let ok = wait_for(Duration::from_secs(60), || {
            self.etcdctl_at(&endpoints.join(","), &["endpoint", "health"])
                .status
                .success()
        });
        assert!(
            ok,
            "etcd did not become healthy; logs in {:?}",
            self.dir.path()
        );
    }

    fn endpoint(&self, n: &Node) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), n.client)
    }

    fn endpoints(&self) -> String {
        let all: Vec<String> = self.nodes.iter().map(|n| self.endpoint(n)).collect();
        all.join(",")
    }

    /// The client port of node `i`.
    pub fn client_port(&self, i: usize) -> u16 {
        self.nodes[i].client
    }

    /// The store URL naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client))
            .collect();
        match &self.tls {
            Some((ca, _, _)) => format!("etcds://{}?ca_file={}", hosts.join(","), ca.display()),
            None => format!("etcd://{}", hosts.join(",")),
        }
    }

    fn etcdctl_at(&self, endpoints: &str, args: &[&str]) -> Output {
        let mut c = Command::new(require("etcdctl", "etcd-client"));
        c.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .arg("--command-timeout=3s");
        if let Some((ca, _, _)) = &self.tls {
            c.arg(format!("--cacert={}", ca.display()));
        }
        if let Some(a) = &self.auth {
            c.arg(format!("--user={a}"));
        }
        c.args(args);
        super::output_within(c, Duration::from_secs(10))
    }

    /// Run etcdctl against the running nodes; panics with its output if it fails.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let live: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| self.endpoint(n))
            .collect();
        let o = self.etcdctl_at(&live.join(","), args);
        assert!(
            o.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    /// Every key under a prefix.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.etcdctl(&["get", "--prefix", "--keys-only", prefix])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Turn on authentication with a root user.
    pub fn enable_auth(&mut self, password: &str) {
        self.etcdctl(&[
            "user",
            "add",
            &format!("root:{password}"),
            "--interactive=false",
        ]);
        self.etcdctl(&["auth", "enable"]);
        self.auth = Some(format!("root:{password}"));
    }

    /// The index of the node that leads the cluster now.
    pub fn leader(&self) -> usize {
        let mut found = None;
        let ok = wait_for(Duration::from_secs(10), || {
            let o = self.etcdctl_at(&self.endpoints(), &["endpoint", "status", "-w", "json"]);
            let v: serde_json::Value =
                serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
            found = v.as_array().and_then(|all| {
                all.iter().position(|s| {
                    let st = &s["Status"];
                    st["leader"].as_u64().is_some() && st["leader"] == st["header"]["member_id"]
                })
            });
            found.is_some()
        });
        assert!(ok, "no etcd leader");
        let endpoint = {
            let o = self.etcdctl_at(&self.endpoints(), &["endpoint", "status", "-w", "json"]);
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            v[found.unwrap()]["Endpoint"].as_str().unwrap().to_string()
        };
        self.nodes
            .iter()
            .position(|n| self.endpoint(n) == endpoint)
            .unwrap()
    }

    pub fn pid(&self, i: usize) -> u32 {
        self.nodes[i].child.as_ref().expect("running").id()
    }

    /// Freeze a node (it keeps its port but answers nothing).
    pub fn pause(&self, i: usize) {
        super::signal(self.pid(i), libc::SIGSTOP);
    }

    pub fn resume(&self, i: usize) {
        super::signal(self.pid(i), libc::SIGCONT);
    }

    /// Kill a node with SIGKILL (its data stays for a restart).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            super::signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kill a node and start it again on its ports with its data gone (a single node comes
    /// back as a new, empty cluster).
    pub fn restart_empty(&mut self, i: usize) {
        self.kill(i);
        let data = self.dir.path().join(&self.nodes[i].name);
        let _ = std::fs::remove_dir_all(data);
        self.spawn(i);
    }

    /// Start a killed node again on its ports and data.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
