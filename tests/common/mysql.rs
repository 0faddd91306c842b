//! A real MariaDB server on a free loopback port, in a temp dir; stopped when dropped.
//!
//! `mariadb-install-db` runs once per test binary and each server starts from a copy of
//! that data dir. Each server gets a database `app` and a user `app` (password `secret`)
//! with every right on it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::{free_port, require, temp_dir, wait_for};

pub struct MariaDb {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
}

fn template() -> &'static PathBuf {
    static T: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &T.get_or_init(|| {
        let install = require("mariadb-install-db", "mariadb-server");
        let d = temp_dir();
        let data = d.path().join("data");
        let o = Command::new(install)
            .args(["--user=root", "--auth-root-authentication-method=normal"])
            .args(["--skip-test-db", "--no-defaults"])
            .arg(format!("--datadir={}", data.display()))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (d, data)
    })
    .1
}

impl MariaDb {
    pub fn start() -> MariaDb {
        Self::start_with(&[])
    }

    /// Start with extra `mariadbd` options.
    pub fn start_with(extra: &[&str]) -> MariaDb {
        let dir = temp_dir();
        let ok = Command::new("cp")
            .arg("-a")
            .arg(template())
            .arg(dir.path().join("data"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "copy the MariaDB data dir");
        let mut s = MariaDb {
            port: free_port(),
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.boot();
        s.sql(
            "CREATE DATABASE IF NOT EXISTS app; \
             CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'secret'; \
             GRANT ALL ON app.* TO 'app'@'%';",
        );
        s
    }

    /// Start the server again on its port and data (after `stop` or `shutdown`).
    pub fn boot(&mut self) {
        let bin = require("mariadbd", "mariadb-server");
        let d = self.dir.path();
        let child = Command::new(bin)
            .args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1"])
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", d.join("sock").display()))
            .arg(format!("--pid-file={}", d.join("pid").display()))
            .args(["--innodb-flush-log-at-trx-commit=2", "--skip-log-bin"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("log")).unwrap())
            .spawn()
            .expect("start mariadbd");
        self.child = Some(child);
        let port = self.port;
        let up = wait_for(Duration::from_secs(30), || {
            Command::new("mariadb-admin")
                .args([
                    "--protocol=tcp",
                    "-h127.0.0.1",
                    &format!("-P{port}"),
                    "-uroot",
                ])
                .arg("ping")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        assert!(up, "mariadbd on port {port} did not come up");
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `app` user's URL on the `app` database.
    pub fn url(&self) -> String {
        format!("mysql://app:secret@127.0.0.1:{}/app", self.port)
    }

    /// Run SQL as root through the mariadb client.
    pub fn sql(&self, sql: &str) -> String {
        let o = Command::new("mariadb")
            .args(["--protocol=tcp", "-h127.0.0.1", &format!("-P{}", self.port)])
            .args(["-uroot", "-N", "-B", "-e", sql])
            .output()
            .expect("mariadb client (apt-get install -y mariadb-client)");
        assert!(
            o.status.success(),
            "mariadb {sql:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Freeze the server: it keeps its port and its connections but answers nothing.
    pub fn pause(&self) {
        super::signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        super::signal(self.pid(), libc::SIGCONT);
    }

    /// Kill the server and start it again on its data (InnoDB recovers its commits).
    pub fn restart(&mut self) {
        self.stop();
        self.boot();
    }

    /// Stop the server cleanly (SIGTERM, as `systemctl stop` does): it tells its clients and
    /// flushes before it exits.
    pub fn shutdown(&mut self) {
        if let Some(mut c) = self.child.take() {
            super::signal(c.id(), libc::SIGTERM);
            let _ = c.wait();
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}
