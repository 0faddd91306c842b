//! A real PostgreSQL 15 server on a free loopback port, in a temp dir; stopped when dropped.
//!
//! PostgreSQL refuses to run as root, so every server command runs as the `postgres` user
//! (`runuser`), in a dir it owns. `initdb` takes seconds, so it runs once per test binary
//! and each server starts from a copy of that cluster.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::{free_port, temp_dir, wait_for};

const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct PgServer {
    pub port: u16,
    dir: tempfile::TempDir,
    settings: Vec<String>,
}

fn bin(name: &str) -> String {
    let p = format!("{BIN}/{name}");
    assert!(
        Path::new(&p).is_file(),
        "`{p}` is not installed: run `apt-get install -y postgresql-15` (the tests need a real server)"
    );
    p
}

fn as_postgres(args: &[&str]) -> Output {
    let o = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .args(args)
        .output()
        .expect("runuser");
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A dir the postgres user owns.
fn owned_dir() -> tempfile::TempDir {
    let d = temp_dir();
    let ok = Command::new("chown")
        .args(["postgres:postgres"])
        .arg(d.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown postgres {}", d.path().display());
    d
}

/// One initdb per test binary; kept for the process's life.
fn template() -> &'static PathBuf {
    static T: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &T.get_or_init(|| {
        let d = owned_dir();
        let data = d.path().join("data");
        let pwfile = d.path().join("pw");
        std::fs::write(&pwfile, "secret\n").unwrap();
        Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&pwfile)
            .status()
            .unwrap();
        // The superuser's password is `secret`, checked on TCP (a wrong one must be
        // refused). The user `app` that most tests lock as is trusted, so that many dlock
        // processes at once do not spend their time on SCRAM's key stretching.
        as_postgres(&[
            &bin("initdb"),
            "-D",
            data.to_str().unwrap(),
            "-A",
            "scram-sha-256",
            "--auth-local=trust",
            "-U",
            "postgres",
            &format!("--pwfile={}", pwfile.display()),
        ]);
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             host all app 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
        (d, data)
    })
    .1
}

impl PgServer {
    pub fn start() -> PgServer {
        Self::start_with(&[])
    }

    /// Start with extra server settings (`-c name=value` pairs).
    pub fn start_with(settings: &[&str]) -> PgServer {
        let dir = owned_dir();
        let data = dir.path().join("data");
        as_postgres(&[
            "cp",
            "-a",
            template().to_str().unwrap(),
            data.to_str().unwrap(),
        ]);
        let s = PgServer {
            port: free_port(),
            dir,
            settings: settings.iter().map(|s| s.to_string()).collect(),
        };
        s.boot();
        s.psql("CREATE USER app");
        s.psql("GRANT CREATE ON DATABASE postgres TO app");
        s
    }

    /// Start the server again on its port and data (after `stop` or `shutdown`).
    pub fn boot(&self) {
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        for s in &self.settings {
            opts.push_str(" -c ");
            opts.push_str(s);
        }
        as_postgres(&[
            &bin("pg_ctl"),
            "-D",
            self.data().to_str().unwrap(),
            "-o",
            &opts,
            "-l",
            self.dir.path().join("log").to_str().unwrap(),
            "-w",
            "start",
        ]);
        let port = self.port;
        assert!(
            wait_for(Duration::from_secs(20), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "postgres on port {port} did not come up"
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The URL of `app`, a user that may create a schema in the database `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://app@127.0.0.1:{}/postgres", self.port)
    }

    /// The superuser's URL, with its password.
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres:secret@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// Run SQL as the superuser through psql.
    pub fn psql(&self, sql: &str) -> String {
        let o = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .args(["-c", sql])
            .env("PGPASSWORD", "secret")
            .output()
            .expect("psql (apt-get install -y postgresql-client-15)");
        assert!(
            o.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// A psql session of the superuser, kept open: what it is sent runs as it arrives, so
    /// a transaction can stay open across steps of a test. It ends when dropped.
    pub fn session(&self) -> PsqlSession {
        let child = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-Aqt"])
            .env("PGPASSWORD", "secret")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("psql (apt-get install -y postgresql-client-15)");
        PsqlSession(child)
    }

    /// The postmaster's pid (first line of postmaster.pid).
    pub fn pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// The postmaster and every backend, for a freeze: the backends are its children.
    fn processes(&self) -> Vec<u32> {
        let pid = self.pid();
        let mut all = vec![pid];
        all.extend(super::children_of(pid));
        all
    }

    /// Freeze the server: it keeps its port and its connections but answers nothing.
    pub fn pause(&self) {
        for p in self.processes() {
            super::signal(p, libc::SIGSTOP);
        }
    }

    pub fn resume(&self) {
        for p in self.processes() {
            super::signal(p, libc::SIGCONT);
        }
    }

    /// Crash the server (immediate shutdown, as a kill) and start it again on its data.
    pub fn restart(&self) {
        self.stop();
        self.boot();
    }

    pub fn stop(&self) {
        self.shutdown("immediate");
    }

    /// Stop the server the way an operator does: `fast` (clients are told, then cut off) or
    /// `immediate` (a crash; recovery replays the log at the next start).
    pub fn shutdown(&self, mode: &str) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", &bin("pg_ctl")])
            .args([
                "-D",
                self.data().to_str().unwrap(),
                "-m",
                mode,
                "-w",
                "stop",
            ])
            .output();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An open psql session (`PgServer::session`).
pub struct PsqlSession(Child);

impl PsqlSession {
    /// Send statements; they run once psql reads them (check their effect, not this call).
    pub fn send(&mut self, sql: &str) {
        let stdin = self.0.stdin.as_mut().expect("psql's stdin");
        writeln!(stdin, "{sql}").expect("psql is running");
        stdin.flush().unwrap();
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
