//! Real ZooKeeper 3.8 servers on free loopback ports, each in a temp dir; stopped when dropped.
//! One standalone server, or an ensemble whose members can be killed, paused and restarted.
//!
//! tickTime is 500 ms so that sessions may be as short as 1 s (tests use short ttls), with
//! maxSessionTimeout raised to 60 s so the default ttl of `run` (30 s) still fits.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, require, temp_dir, wait_for};

const JAR: &str = "/usr/share/java/zookeeper.jar";

struct Member {
    id: usize,
    client: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

pub struct ZkServer {
    members: Vec<Member>,
    /// `server.N=` lines shared by an ensemble's members (empty: standalone).
    peers: Vec<String>,
    extra: Vec<String>,
    jvm: Vec<String>,
}

impl ZkServer {
    /// One standalone server.
    pub fn start() -> ZkServer {
        Self::start_with(&[])
    }

    /// One standalone server with extra zoo.cfg lines (they override the defaults).
    pub fn start_with(extra: &[&str]) -> ZkServer {
        Self::launch(1, extra, &[])
    }

    /// One standalone server that deletes expired TTL nodes only every 10 minutes, to show
    /// that a lease's expiry does not wait for its node to go.
    pub fn start_lazy_ttl() -> ZkServer {
        Self::launch(1, &[], &["-Dznode.container.checkIntervalMs=600000"])
    }

    /// An ensemble of `n` members, started in parallel; returns once a leader is elected.
    pub fn ensemble(n: usize) -> ZkServer {
        Self::launch(n, &[], &[])
    }

    fn launch(n: usize, extra: &[&str], jvm: &[&str]) -> ZkServer {
        require("java", "zookeeper");
        assert!(
            Path::new(JAR).is_file(),
            "{JAR} is missing: run `apt-get install -y zookeeper` (the tests need a real server)"
        );
        let members: Vec<Member> = (1..=n)
            .map(|id| Member {
                id,
                client: free_port(),
                dir: temp_dir(),
                child: None,
            })
            .collect();
        let peers = if n == 1 {
            Vec::new()
        } else {
            (1..=n)
                .map(|id| format!("server.{id}=127.0.0.1:{}:{}", free_port(), free_port()))
                .collect()
        };
        let mut s = ZkServer {
            members,
            peers,
            extra: extra.iter().map(|l| l.to_string()).collect(),
            jvm: jvm.iter().map(|l| l.to_string()).collect(),
        };
        for i in 0..n {
            s.boot(i);
        }
        for i in 0..n {
            s.wait_serving(i);
        }
        for i in 0..n {
            s.warm(i);
        }
        s
    }

    /// A fresh JVM answers its first requests slowly (seconds under load, before its JIT warms
    /// up), which would eat a short-ttl lease's store timeout: exercise the write path first.
    fn warm(&self, i: usize) {
        let hosts = format!("127.0.0.1:{}", self.members[i].client);
        block_on(async move {
            let c = zookeeper_client::Client::connect(&hosts).await.unwrap();
            let opts = zookeeper_client::CreateMode::Ephemeral
                .with_acls(zookeeper_client::Acls::anyone_all());
            for n in 0..50 {
                let path = format!("/warm-{n}");
                c.create(&path, b"x", &opts).await.unwrap();
                c.get_data(&path).await.unwrap();
                c.delete(&path, None).await.unwrap();
            }
            close(c).await;
        });
    }

    fn boot(&mut self, i: usize) {
        let m = &self.members[i];
        let dir = m.dir.path();
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let mut cfg = vec![
            "tickTime=500".to_string(),
            "initLimit=10".into(),
            "syncLimit=5".into(),
            format!("dataDir={}", data.display()),
            format!("clientPort={}", m.client),
            "clientPortAddress=127.0.0.1".into(),
            "maxClientCnxns=0".into(),
            "admin.enableServer=false".into(),
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,wchp,wchc,wchs,dump,cons".into(),
            "extendedTypesEnabled=true".into(),
            "minSessionTimeout=1000".into(),
            "maxSessionTimeout=60000".into(),
        ];
        cfg.extend(self.peers.iter().cloned());
        cfg.extend(self.extra.iter().cloned());
        if !self.peers.is_empty() {
            std::fs::write(data.join("myid"), format!("{}\n", m.id)).unwrap();
        }
        std::fs::write(dir.join("zoo.cfg"), cfg.join("\n") + "\n").unwrap();
        std::fs::write(
            dir.join("log4j.properties"),
            format!(
                "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n\
                 log4j.appender.F.File={}\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n\
                 log4j.appender.F.layout.ConversionPattern=%d %p %c{{1}}: %m%n\n",
                dir.join("zk.log").display()
            ),
        )
        .unwrap();
        let classpath = format!(
            "{}:{JAR}:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar",
            dir.display()
        );
        let child = Command::new("java")
            .args([
                "-Xms64m",
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
            ])
            .args([
                "-Dzookeeper.jmx.log4j.disable=true",
                "-Dznode.container.checkIntervalMs=1000",
            ])
            .args(&self.jvm)
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ZooKeeper");
        self.members[i].child = Some(child);
    }

    fn wait_serving(&self, i: usize) {
        let port = self.members[i].client;
        assert!(
            wait_for(Duration::from_secs(30), || four(port, "ruok") == "imok"
                && four(port, "srvr").contains("Mode:")),
            "ZooKeeper on port {port} did not come up: {}",
            std::fs::read_to_string(self.members[i].dir.path().join("zk.log")).unwrap_or_default()
        );
    }

    /// `zk://` with every member (as a user would give it).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect();
        format!("zk://{}", hosts.join(","))
    }

    pub fn port(&self, i: usize) -> u16 {
        self.members[i].client
    }

    /// A four-letter-word command to member `i` (`wchp`, `dump`, `srvr`, ...).
    pub fn four(&self, i: usize, cmd: &str) -> String {
        four(self.members[i].client, cmd)
    }

    /// The member that leads the ensemble now.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            self.members[i].child.is_some() && self.four(i, "srvr").contains("Mode: leader")
        })
    }

    pub fn pid(&self, i: usize) -> u32 {
        self.members[i].child.as_ref().expect("running").id()
    }

    /// Freeze member `i` (it keeps its port but answers nothing).
    pub fn pause(&self, i: usize) {
        super::signal(self.pid(i), libc::SIGSTOP);
    }

    pub fn resume(&self, i: usize) {
        super::signal(self.pid(i), libc::SIGCONT);
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            super::signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start member `i` again with its data (an ensemble member rejoins).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.boot(i);
        self.wait_serving(i);
        self.warm(i);
    }

    /// Children of a node, as ZooKeeper has them (empty if the node does not exist).
    pub fn children(&self, path: &str) -> Vec<String> {
        let url = self.url();
        let hosts = url.trim_start_matches("zk://").to_string();
        let path = path.to_string();
        block_on(async move {
            let c = zookeeper_client::Client::connect(&hosts).await.unwrap();
            let mut kids = match c.list_children(&path).await {
                Ok(k) => k,
                Err(zookeeper_client::Error::NoNode) => Vec::new(),
                Err(e) => panic!("list {path}: {e}"),
            };
            kids.sort();
            close(c).await;
            kids
        })
    }
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Close a session before its runtime goes, so it does not linger in the server's session
/// counts that tests look at.
async fn close(c: zookeeper_client::Client) {
    let mut state = c.state_watcher();
    drop(c);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while !state.peek_state().is_terminated() {
            state.changed().await;
        }
    })
    .await;
}

/// Send a four-letter word and read the whole answer ("" if the server does not answer).
pub fn four(port: u16, cmd: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(cmd.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.trim().to_string()
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
