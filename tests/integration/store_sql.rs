//! The SQL stores' own promises, each test run on PostgreSQL and on MariaDB (the contract
//! itself is in conformance.rs, exclusion across processes in exclusion.rs): refusals and bad
//! URLs answered in one line, TLS, waiters that leave nothing behind,
//! inspect and list, and a quorum that mixes them with Redis.

use std::time::{Duration, Instant};

use crate::common::line::Waiters;
use crate::common::mysql::MariaDb;
use crate::common::pgbouncer::PgBouncer;
use crate::common::postgres::PgServer;
use crate::common::redis::RedisServer;
use crate::common::*;

/// One running SQL server, whichever it is: what a test needs to tell them apart (both
/// also have `url()`, a user with every right on the database dlock uses).
trait Sql {
    /// The same server as `user:password` (no database part changes).
    fn url_as(&self, user: &str, password: &str) -> String;
    /// A user whose password is checked.
    fn user(&self) -> &'static str;
    /// A URL of the server's superuser, who may see every database.
    fn admin_url(&self) -> String;
    /// Make a user that may use but not create dlock's tables.
    fn user_without_create(&self) -> (String, String);
    /// Give that user the documented rights on tables that now exist.
    fn grant_use(&self, user: &str);
    /// Rows in dlock's waiters table.
    fn waiter_rows(&self) -> usize;
}

impl Sql for PgServer {
    fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres",
            self.port
        )
    }
    fn user(&self) -> &'static str {
        "postgres"
    }
    fn admin_url(&self) -> String {
        PgServer::admin_url(self)
    }
    fn grant_use(&self, user: &str) {
        self.psql(&format!(
            "GRANT USAGE ON SCHEMA dlock TO {user}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA dlock TO {user};"
        ));
    }
    fn user_without_create(&self) -> (String, String) {
        self.psql("CREATE USER plain PASSWORD 'pw'");
        ("plain".into(), "pw".into())
    }
    fn waiter_rows(&self) -> usize {
        self.psql("SELECT count(*) FROM dlock.waiters")
            .parse()
            .unwrap()
    }
}

impl Sql for MariaDb {
    fn url_as(&self, user: &str, password: &str) -> String {
        format!("mysql://{user}:{password}@127.0.0.1:{}/app", self.port)
    }
    fn user(&self) -> &'static str {
        "app"
    }
    fn admin_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/app", self.port)
    }
    fn grant_use(&self, _user: &str) {
        // SELECT, INSERT, UPDATE, DELETE on app.* were granted with the user.
    }
    fn user_without_create(&self) -> (String, String) {
        self.sql(
            "CREATE USER 'plain'@'%' IDENTIFIED BY 'pw'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON app.* TO 'plain'@'%';",
        );
        ("plain".into(), "pw".into())
    }
    fn waiter_rows(&self) -> usize {
        self.sql("SELECT count(*) FROM app.dlock_waiters")
            .parse()
            .unwrap()
    }
}

/// Each test body, once per database.
macro_rules! on_both {
    ($($name:ident($server:ident) $body:block)*) => {
        mod postgres {
            use super::*;
            $(#[test] fn $name() { let $server = PgServer::start(); $body })*
        }
        mod mariadb {
            use super::*;
            $(#[test] fn $name() { let $server = MariaDb::start(); $body })*
        }
    };
}

#[track_caller]
fn one_line(o: &std::process::Output) -> String {
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.chars().any(|c| c.is_control()), "{err:?}");
    err
}

on_both! {
    a_wrong_password_is_77_in_one_line_without_the_password(db) {
        let env = Env::with_stores(vec![db.url_as(db.user(), "wrong-secret")]);
        let o = env.run(&["lock", "x", "-n"]);
        assert_code(&o, 77);
        let err = one_line(&o);
        assert!(err.contains("password"), "{err}");
        assert!(!err.contains("wrong-secret"), "{err}");
    }

    no_create_right_is_77_naming_the_statement_to_run(db) {
        let (user, pw) = db.user_without_create();
        let env = Env::with_stores(vec![db.url_as(&user, &pw)]);
        let o = env.run(&["lock", "x", "-n"]);
        assert_code(&o, 77);
        let err = one_line(&o);
        assert!(err.contains("have an administrator run"), "{err}");
        assert!(err.contains(&user), "{err}");
        // Once a user who may has made the tables, the documented rights are enough.
        assert_code(&Env::with_stores(vec![db.url()]).run(&["run", "y", "--", "true"]), 0);
        db.grant_use(&user);
        assert_code(&env.run(&["run", "x", "--", "true"]), 0);
    }

    a_database_that_does_not_exist_is_named_in_one_line(db) {
        // As the superuser: MySQL tells a user without rights on a database only that it
        // may not use it (77), whether it exists or not.
        let url = db.admin_url();
        let (base, _) = url.rsplit_once('/').unwrap();
        let env = Env::with_stores(vec![format!("{base}/nosuchdb")]);
        let o = env.run(&["lock", "x", "-n"]);
        assert_code(&o, 64);
        let err = one_line(&o);
        assert!(err.contains("nosuchdb"), "{err}");
    }

    an_interrupted_waiter_leaves_no_row(db) {
        let env = Env::with_stores(vec![db.url()]);
        let holder = env.spawn(&["run", "busy", "--", "sleep", "30"]);
        assert!(wait_for(Duration::from_secs(10), || env.held("busy")));
        let mut waiter = env.spawn(&["run", "busy", "--", "true"]);
        assert!(
            wait_for(Duration::from_secs(10), || db.waiter_rows() == 1),
            "the waiter never queued"
        );
        let o = env.inspect("busy");
        assert_eq!(o["waiters"].as_array().map(Vec::len), Some(1), "{o}");
        signal(waiter.id(), libc::SIGINT);
        assert!(wait_child(&mut waiter, Duration::from_secs(10)).is_some());
        assert_eq!(db.waiter_rows(), 0);
        let mut holder = holder;
        signal(holder.id(), libc::SIGTERM);
        wait_child(&mut holder, Duration::from_secs(10));
    }

    inspect_and_list_show_the_holder_with_its_metadata(db) {
        let env = Env::with_stores(vec![db.url()]);
        let token = stdout(&env.run(&["lock", "team/a", "--ttl", "60s"]));
        assert_eq!(token.len(), 32);
        let o = env.inspect("team/a");
        assert_eq!(o["held"], true, "{o}");
        assert_eq!(o["holders"][0]["owner"], &token[..8], "{o}");
        assert!(o["holders"][0]["meta"]["pid"].is_number(), "{o}");
        assert_eq!(listed(&env, "team/"), vec!["team/a".to_string()]);
        assert!(listed(&env, "other").is_empty());
        assert_code(&env.run(&["extend", "team/a", "--token", &token, "--ttl", "90s"]), 0);
        let stale = "0".repeat(32);
        assert_code(&env.run(&["unlock", "team/a", "--token", &stale]), 1);
        assert_code(&env.run(&["unlock", "team/a", "--token", &token]), 0);
        assert!(listed(&env, "team/").is_empty());
    }

    a_released_waiter_is_woken_not_polled(db) {
        let env = Env::with_stores(vec![db.url()]);
        // The holder works 1.5 s; a waiter that polls every 500 ms would start up to half a
        // second late, one woken by the release starts at once. Measured against a loose
        // bound only, as a whole.
        let out = env.path("order");
        let holder = env.spawn(&["run", "w", "--", "sh", "-c", &format!("sleep 1.5; date +%s%N >> {}", out.display())]);
        assert!(wait_for(Duration::from_secs(10), || env.held("w")));
        let o = env.run(&["run", "w", "--", "sh", "-c", &format!("date +%s%N >> {}", out.display())]);
        assert_code(&o, 0);
        let mut holder = holder;
        wait_child(&mut holder, Duration::from_secs(10));
        let stamps: Vec<u64> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(stamps.len(), 2);
        assert!(stamps[1] > stamps[0]);
    }
}

#[test]
fn tls_with_a_self_signed_ca_on_postgres() {
    let certs = temp_dir();
    let (ca, cert, key) = crate::common::tls_certs(certs.path());
    let db = PgServer::start();
    // The server's key must belong to postgres and be private.
    let d = db.dir().join("tls");
    std::fs::create_dir(&d).unwrap();
    std::fs::copy(&cert, d.join("server.pem")).unwrap();
    std::fs::copy(&key, d.join("server.key")).unwrap();
    std::process::Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&d)
        .status()
        .unwrap();
    std::fs::set_permissions(
        d.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    db.psql(&format!(
        "ALTER SYSTEM SET ssl_cert_file = '{}'",
        d.join("server.pem").display()
    ));
    db.psql(&format!(
        "ALTER SYSTEM SET ssl_key_file = '{}'",
        d.join("server.key").display()
    ));
    db.psql("ALTER SYSTEM SET ssl = on");
    db.psql("SELECT pg_reload_conf()");
    // A new session sees the server's settings once it has reloaded them (and its TLS
    // context with them).
    assert!(
        wait_for(Duration::from_secs(10), || db.psql("SHOW ssl") == "on"),
        "the server did not reload its settings"
    );
    let url = format!("{}?sslmode=verify-full&ca_file={}", db.url(), ca.display());
    let env = Env::with_stores(vec![url]);
    assert_code(&env.run(&["run", "x", "--", "true"]), 0);
    let ssl = db.psql("SELECT count(*) FROM pg_stat_ssl WHERE ssl");
    assert!(!ssl.is_empty());
    // Without the CA the server cannot be verified: refused to connect, one line.
    let env = Env::with_stores(vec![format!("{}?sslmode=verify-full", db.url())]);
    let o = env.run(&["lock", "x", "-n"]);
    assert_code(&o, 64);
    one_line(&o);
}

#[test]
fn a_url_of_the_other_database_is_69_in_one_line_without_hanging() {
    let pg = PgServer::start();
    let my = MariaDb::start();
    for url in [
        format!("mysql://app:secret@127.0.0.1:{}/app", pg.port),
        format!("postgres://postgres:secret@127.0.0.1:{}/postgres", my.port),
    ] {
        let env = Env::with_stores(vec![url.clone()]);
        let t0 = Instant::now();
        let o = env.run(&["--store-timeout", "2s", "lock", "x", "-n"]);
        assert_code(&o, 69);
        one_line(&o);
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{url}: {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn a_quorum_of_postgres_mariadb_and_redis_survives_one_stopped() {
    let pg = PgServer::start();
    let mut my = MariaDb::start();
    let redis = RedisServer::start();
    let env = Env::with_stores(vec![pg.url(), my.url(), redis.url()]);
    let fences = check_exclusion(&env, "q", 4, &[]);
    assert_eq!(fences.len(), 4);
    my.stop();
    let o = env.run(&["run", "q", "--", "sh", "-c", "echo $DLOCK_FENCE"]);
    assert_code(&o, 0);
    let fence: u64 = stdout(&o).parse().unwrap();
    assert!(
        fence > *fences.last().unwrap(),
        "fence {fence} after {fences:?}"
    );
}

#[test]
fn tls_with_a_self_signed_ca_on_mariadb() {
    let certs = temp_dir();
    let (ca, cert, key) = crate::common::tls_certs(certs.path());
    let db = MariaDb::start_with(&[
        &format!("--ssl-ca={}", ca.display()),
        &format!("--ssl-cert={}", cert.display()),
        &format!("--ssl-key={}", key.display()),
    ]);
    let url = format!("{}?sslmode=verify-full&ca_file={}", db.url(), ca.display());
    let env = Env::with_stores(vec![url]);
    assert_code(&env.run(&["run", "x", "--", "true"]), 0);
    let accepts = db.sql("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'");
    let n: u64 = accepts.split_whitespace().last().unwrap().parse().unwrap();
    assert!(n > 0, "{accepts}");
    // Without the CA the server cannot be verified: a usage error, one line.
    let env = Env::with_stores(vec![format!("{}?sslmode=verify-full", db.url())]);
    let o = env.run(&["lock", "x", "-n"]);
    assert_code(&o, 64);
    one_line(&o);
}

/// A crowd of PostgreSQL waiters: those near the head of the line (fewer than four ahead)
/// keep their rows 2 s past their last look, as before; those far back keep them 20 s and,
/// since they hear wake-ups, look every 5 s (at 300 waiters, the looks were most of the
/// server's work). The line still serves them all.
#[test]
fn postgres_waiters_far_back_in_line_look_less_often() {
    let db = PgServer::start();
    let least = far_back_crowd(&db, db.url());
    assert!(
        least < 16_000,
        "the far waiter looked more often than every 5 s: {least} ms"
    );
}

/// Behind PgBouncer in transaction mode a waiter hears no wake-up (its LISTEN stays on a
/// server connection it leaves), so one far back keeps looking every 500 ms: otherwise,
/// once the waiters near the head were served, the lock would wait up to 5 s for each look.
#[test]
fn postgres_waiters_far_back_behind_pgbouncer_look_as_often_as_any() {
    let bouncer = PgBouncer::start();
    let least = far_back_crowd(&bouncer.server, bouncer.url());
    assert!(
        least > 18_000,
        "the far waiter looked less often: {least} ms"
    );
}

/// A crowd's first attempts on PostgreSQL queue apart from the name's record: while another
/// transaction holds the record, ten arrivals wait with one of them on its row lock and nine
/// at the name's door, so the holder's release, queued after them, waits behind one attempt,
/// not ten (in a herd of 300 the first handoffs waited up to 670 ms behind the crowd). Then
/// the record is let go and all ten are served, one at a time.
#[test]
fn postgres_arrivals_wait_apart_from_the_record() {
    let db = PgServer::start();
    let env = Env::with_stores(vec![db.url()]);
    let (go, log) = (env.path("go"), env.path("log"));
    // Stopped if the test fails before they finish (they would wait on for the server).
    let mut holder = Waiters(vec![env.hold_until("crowd", &go)]);
    let mut slow = db.session();
    slow.send("BEGIN; SELECT 1 FROM dlock.records WHERE name = 'crowd' FOR UPDATE;");
    let in_transaction = "SELECT count(*) FROM pg_stat_activity
        WHERE application_name = 'psql' AND state = 'idle in transaction'";
    assert!(wait_for(Duration::from_secs(30), || db
        .psql(in_transaction)
        == "1"));
    let waits = |kind: &str| -> usize {
        db.psql(&format!(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
             WHERE NOT l.granted AND a.application_name = 'dlock' AND l.locktype {kind}"
        ))
        .parse()
        .unwrap()
    };
    let script = format!("echo in >> {0}; sleep 0.05; echo out >> {0}", log.display());
    let mut crowd = Waiters(Vec::new());
    crowd.0.extend((0..10).map(|_| {
        // Answers held up for as long as the test takes are not failures here.
        let args = ["--store-timeout", "25s", "run", "crowd", "--ttl", "90s"];
        let args = [&args[..], &["--", "sh", "-c"]].concat();
        env.spawn(&[&args[..], &[script.as_str()]].concat())
    }));
    let arrived = wait_for(Duration::from_secs(30), || waits("IS NOT NULL") == 10);
    assert!(arrived, "{} of 10 attempts waiting", waits("IS NOT NULL"));
    assert_eq!(waits("= 'advisory'"), 9, "arrivals waiting at the door");
    std::fs::write(&go, "").unwrap();
    // The holder's release queues on the record too, behind the one arrival.
    assert!(wait_for(Duration::from_secs(30), || waits("<> 'advisory'") == 2));
    slow.send("COMMIT;");
    let holder = holder.0.pop().unwrap();
    assert_code(&finish(holder, Duration::from_secs(30)), 0);
    while let Some(w) = crowd.0.pop() {
        assert_code(&finish(w, Duration::from_secs(60)), 0);
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log, "in\nout\n".repeat(10), "the runs overlapped");
}

/// Six waiters behind a holder, through `url` on `db`: checks the rows' lives near and far
/// back, then watches the last waiter's row for 6 s and returns the least it had left to
/// live (about 19.5 s if it looks every 500 ms; about 15 s once in 5 s if every 5 s).
/// Then all are served.
fn far_back_crowd(db: &PgServer, url: String) -> i64 {
    let env = Env::with_stores(vec![url]);
    let go = env.path("go");
    let holder = env.hold_until("crowd", &go);
    let waiting = env.queue_runs("crowd", 6, |_| "true".to_string());
    let left = |order: &str| {
        db.psql(&format!(
            "SELECT string_agg((expires - floor(extract(epoch FROM clock_timestamp()) * 1000)
               ::int8)::text, ' ' ORDER BY seq {order}) FROM dlock.waiters WHERE name = 'crowd'"
        ))
        .split(' ')
        .map(|l| l.parse().unwrap())
        .collect::<Vec<i64>>()
    };
    let rows = left("");
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(rows[..4].iter().all(|&l| l <= 2_000), "{rows:?}");
    assert!(rows[4..].iter().all(|&l| l > 10_000), "{rows:?}");
    let mut least = i64::MAX;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        least = least.min(left("DESC")[0]);
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&go, "").unwrap();
    assert_code(&finish(holder, Duration::from_secs(20)), 0);
    for w in waiting {
        assert_code(&finish(w, Duration::from_secs(30)), 0);
    }
    least
}
