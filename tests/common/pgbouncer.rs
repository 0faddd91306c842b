//! PgBouncer in transaction mode in front of a real PostgreSQL server: the pooler setup many
//! teams run, where a session's state (LISTEN, advisory locks, prepared statements) does not
//! follow the client from one transaction to the next. Stopped when dropped.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::postgres::PgServer;
use super::{free_port, require, wait_for};

pub struct PgBouncer {
    /// The server behind it, there for direct checks.
    pub server: PgServer,
    pub port: u16,
    child: Child,
}

impl PgBouncer {
    pub fn start() -> PgBouncer {
        let bin = require("pgbouncer", "pgbouncer");
        let server = PgServer::start();
        let port = free_port();
        let dir = server.dir();
        let ini = dir.join("pgbouncer.ini");
        let users = dir.join("users.txt");
        std::fs::write(&users, "\"app\" \"\"\n").unwrap();
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 postgres = host=127.0.0.1 port={} dbname=postgres\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {}\n\
                 pool_mode = transaction\n\
                 default_pool_size = 4\n\
                 max_client_conn = 500\n\
                 logfile = {}\n",
                server.port,
                users.display(),
                dir.join("pgbouncer.log").display()
            ),
        )
        .unwrap();
        // PgBouncer will not run as root; the server's dir belongs to `postgres`.
        let child = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin)
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("runuser pgbouncer");
        assert!(
            wait_for(Duration::from_secs(10), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "pgbouncer on port {port} did not come up: {}",
            std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default()
        );
        PgBouncer {
            server,
            port,
            child,
        }
    }

    /// The URL of `app` through the pooler.
    pub fn url(&self) -> String {
        format!("postgres://app@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // runuser passes SIGTERM on to pgbouncer, which then closes its connections.
        super::signal(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }
}
