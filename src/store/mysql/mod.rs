//! The MySQL/MariaDB store: `mysql://[user[:pass]@]host[:port][/db][?sslmode=&ca_file=&table=]`
//! (also `mariadb://`).
//!
//! One connection per process. Every operation is one transaction (see `crate::store::sql`):
//! lock the names' records in name order, read the server's clock, read holders and waiters
//! with locking reads, write what the rules decided, commit. Expiry is judged by the
//! server's `UTC_TIMESTAMP(6)` read inside that transaction.
//!
//! MySQL has no notifications, so a waiter is woken through its own connection (`bell`): it
//! sleeps in `SELECT SLEEP(…)` on a second connection, whose id it writes in its waiter row,
//! and the release that picks it as the next waiter KILLs that connection after its commit.
//! A kill that lands while the waiter is not asleep is not lost: its next sleep finds the
//! connection gone and returns at once. One release wakes one waiter, not the herd; if the
//! KILL is not allowed (another database user), the waiter still looks again every
//! `MAX_POLL`.

mod bell;
mod doctor;
mod schema;
mod shards;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row, SslOpts, Value};

use super::record::rules::{HolderRow, Rows, WaiterRow, Write};
use super::record::{Backend, Decide, RecordStore as SqlStore};
use super::server::ServerUrl;
use super::sql::{UrlOptions, redial};
use super::{Health, HealthQuery, Listener, StoreError, StoreResult, TagWrite};
use bell::Bells;
use schema::{Sql, classify};

pub type MysqlStore = SqlStore<Mysql>;

/// How long a blind release (`Backend::release_unheard`) may take to go out: its write, on a
/// connection that is open, takes well under this.
const BLIND_SEND: Duration = Duration::from_millis(50);

pub struct Mysql {
    /// The one connection; a transaction holds it from START TRANSACTION to COMMIT.
    conn: tokio::sync::Mutex<Conn>,
    /// The connection is out of step: a release was sent on it blind, and its answers (or
    /// those of the attempt cut off before it) may still arrive, where the next statement
    /// would take them for its own. The next transaction opens a new connection.
    stale: AtomicBool,
    opts: OptsBuilder,
    sql: Sql,
    namespace: String,
    desc: String,
    user: String,
    db: String,
    bells: Arc<Bells>,
    /// How long a broken connection is dialled again within one call (`sql::redial`).
    timeout: Duration,
}

impl Mysql {
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<MysqlStore> {
        let mut url = url.clone();
        let options = UrlOptions::take(&mut url, "table")?;
        let (prefix, user) = (options.tables, options.user);
        let db = url.path.trim_start_matches('/').to_string();
        if db.is_empty() {
            return Err(StoreError::invalid(
                "a mysql:// URL names its database: mysql://user@host:3306/DB",
            ));
        }
        let host = &url.hosts[0];
        let mut opts = OptsBuilder::default()
            .ip_or_hostname(host.host.clone())
            .tcp_port(host.port)
            .user(Some(user.clone()))
            .pass(url.password.clone())
            .db_name(Some(db.clone()))
            .prefer_socket(false)
            .stmt_cache_size(32);
        if let Some((_, ca)) = options.tls {
            let ssl = SslOpts::default()
                .with_danger_skip_domain_validation(options.skip_host_check)
                .with_root_certs(vec![ca.into()]);
            opts = opts.ssl_opts(Some(ssl));
        }
        let conn = tokio::time::timeout(timeout, Conn::new(opts.clone()))
            .await
            .map_err(|_| {
                StoreError::unavailable(format!(
                    "no answer within {} (is this a MySQL or MariaDB server?)",
                    humantime::format_duration(timeout)
                ))
            })?
            .map_err(classify)?;
        Ok(SqlStore::new(Mysql {
            conn: tokio::sync::Mutex::new(conn),
            stale: AtomicBool::new(false),
            opts,
            sql: Sql::new(&prefix),
            namespace: namespace.to_string(),
            desc: url.to_string(),
            user,
            db,
            bells: Arc::new(Bells::default()),
            timeout,
        }))
    }

    /// One try of a transaction; the caller rolls back on error.
    async fn attempt(
        &self,
        c: &mut Conn,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> Result<Vec<i64>, mysql_async::Error> {
        let ns = Value::from(self.namespace.as_bytes());
        let mut in_args = vec![ns.clone()];
        in_args.extend(names.iter().map(|n| Value::from(n.as_bytes())));
        c.query_drop("START TRANSACTION").await?;
        if create {
            let mut args = Vec::new();
            for n in names {
                args.push(ns.clone());
                args.push(Value::from(n.as_bytes()));
            }
            c.exec_drop(self.sql.create_records(names.len()), args)
                .await?;
        }
        let records: Vec<Row> = c
            .exec(self.sql.lock_records(names.len()), in_args.clone())
            .await?;
        let now: i64 = c.query_first(schema::CLOCK).await?.unwrap_or(0);
        let holders: Vec<Row> = c
            .exec(self.sql.holders(names.len()), in_args.clone())
            .await?;
        let waiters: Vec<Row> = c.exec(self.sql.waiters(names.len()), in_args).await?;
        let mut rows = load(names, &records, &holders, &waiters);
        // Every commit is flushed here: MariaDB's flush setting is server-wide
        // (innodb_flush_log_at_trx_commit), so `Decision::flush` has nothing to choose.
        let writes = decide(now, &mut rows).writes;
        let mut bells = Vec::new();
        for w in &writes {
            match self.statement(&ns, w) {
                Some((sql, args)) => c.exec_drop(sql, args).await?,
                None => bells.extend(match w {
                    Write::Wake { bell, .. } => Some(*bell),
                    _ => None,
                }),
            }
        }
        c.query_drop("COMMIT").await?;
        Ok(bells)
    }

    /// The statement that makes one write of the rules, with its arguments; None for a
    /// wake-up, which is rung after the commit.
    fn statement(&self, ns: &Value, w: &Write) -> Option<(String, Vec<Value>)> {
        let text = |s: &str| Value::from(s.as_bytes());
        Some(match w {
            Write::Record {
                name,
                fence,
                previous,
                wseq,
            } => (
                self.sql.put_record(),
                vec![
                    (*fence).into(),
                    text(previous),
                    (*wseq).into(),
                    ns.clone(),
                    text(name),
                ],
            ),
            Write::PutHolder { name, row } => (
                self.sql.put_holder(),
                vec![
                    ns.clone(),
                    text(name),
                    text(&row.token),
                    text(&row.mode),
                    row.fence.into(),
                    row.expires.into(),
                    text(&row.meta),
                ],
            ),
            Write::DeleteHolder { name, token } => (
                self.sql.delete_holder(),
                vec![ns.clone(), text(name), text(token)],
            ),
            Write::PutWaiter { name, row } => (
                self.sql.put_waiter(),
                vec![
                    ns.clone(),
                    text(name),
                    text(&row.token),
                    text(&row.mode),
                    row.seq.into(),
                    row.expires.into(),
                    text(&row.meta),
                    row.bell.into(),
                ],
            ),
            Write::DeleteWaiter { name, token } => (
                self.sql.delete_waiter(),
                vec![ns.clone(), text(name), text(token)],
            ),
            Write::Wake { .. } => return None,
        })
    }

    /// The connection, in step: a new one if the last was left out of step. A statement cut
    /// off by a timeout leaves its answer to come (mysql_async then marks the connection
    /// disconnected), and a blind release's answers are never read (`stale`): the next
    /// statement would take those answers for its own. Dropping the old connection also ends
    /// any transaction the cut-off statement left open.
    async fn session(&self) -> StoreResult<tokio::sync::MutexGuard<'_, Conn>> {
        let mut c = self.conn.lock().await;
        if self.stale.load(Ordering::SeqCst) || c.is_disconnected() {
            *c = self.dial().await?;
            self.stale.store(false, Ordering::SeqCst);
        }
        Ok(c)
    }

    /// A new connection, dialled again while the server is coming back (a restart).
    async fn dial(&self) -> StoreResult<Conn> {
        redial(self.timeout, || async {
            Conn::new(self.opts.clone()).await.map_err(classify)
        })
        .await
    }

    async fn setup(&self, c: &mut Conn) -> StoreResult<()> {
        let err = |e| schema::setup_error(e, &self.sql.prefix, &self.user, &self.db);
        // Named locks are per server: one client creates, the others wait and find it done.
        let _: Option<i64> = c
            .query_first("SELECT GET_LOCK('dlock.setup', 10)")
            .await
            .map_err(err)?;
        let mut result = Ok(());
        for stmt in &self.sql.setup {
            if let Err(e) = c.query_drop(stmt).await {
                result = Err(err(e));
                break;
            }
        }
        let _ = c.query_drop("DO RELEASE_LOCK('dlock.setup')").await;
        result
    }
}

/// The loaded rows, per name in request order.
fn load(names: &[String], records: &[Row], holders: &[Row], waiters: &[Row]) -> Vec<Rows> {
    let text = |row: &Row, i: usize| -> String {
        let bytes: Vec<u8> = row.get(i).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let int = |row: &Row, i: usize| -> i64 { row.get(i).unwrap_or(0) };
    names
        .iter()
        .map(|name| {
            let mut r = Rows {
                name: name.clone(),
                previous: "none".into(),
                ..Rows::default()
            };
            if let Some(rec) = records.iter().find(|row| text(row, 0) == *name) {
                r.fence = int(rec, 1);
                r.previous = text(rec, 2);
                r.wseq = int(rec, 3);
            }
            r.holders = holders
                .iter()
                .filter(|row| text(row, 0) == *name)
                .map(|row| HolderRow {
                    token: text(row, 1),
                    mode: text(row, 2),
                    fence: int(row, 3),
                    expires: int(row, 4),
                    meta: text(row, 5),
                })
                .collect();
            r.waiters = waiters
                .iter()
                .filter(|row| text(row, 0) == *name)
                .map(|row| WaiterRow {
                    token: text(row, 1),
                    mode: text(row, 2),
                    seq: int(row, 3),
                    expires: int(row, 4),
                    meta: text(row, 5),
                    bell: int(row, 6),
                    ttl: 0,
                })
                .collect();
            r
        })
        .collect()
}

#[async_trait]
impl Backend for Mysql {
    fn describe(&self) -> &str {
        &self.desc
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.record_shard_list(tag, write).await
    }

    async fn transact(
        &self,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        let mut c = self.session().await?;
        let mut tries = 0;
        loop {
            let e = match self.attempt(&mut c, names, create, &mut *decide).await {
                Ok(bells) => {
                    // After the commit, so the woken waiter finds the lock free.
                    for bell in bells.into_iter().filter(|b| *b > 0) {
                        let _ = c.query_drop(format!("KILL CONNECTION {bell}")).await;
                    }
                    return Ok(());
                }
                Err(e) => e,
            };
            tries += 1;
            if tries > 3 {
                return Err(classify(e));
            }
            if schema::connection_lost(&e) {
                // The server went away (a restart, a dropped connection): a new session. A
                // transaction cut off before its answer is tried again; every operation is
                // safe to repeat (a repeated grant finds its own row and reports busy).
                *c = self.dial().await?;
                continue;
            }
            let _ = c.query_drop("ROLLBACK").await;
            if schema::missing_tables(&e) {
                self.setup(&mut c).await?;
            } else if !schema::retryable(&e) {
                return Err(classify(e));
            }
        }
    }

    async fn release_unheard(&self, names: &[String], token: &str) -> Option<bool> {
        let mut c = self.conn.lock().await;
        let sql = self.sql.release_unheard(&self.namespace, names, token);
        self.stale.store(true, Ordering::SeqCst);
        // Long enough to write the query, never waiting on its answer: the first answer
        // to arrive may be that of the statement the unheard attempt was cut off in.
        let _ = tokio::time::timeout(BLIND_SEND, c.query_drop(sql)).await;
        None
    }

    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>> {
        Ok(Box::new(
            self.bells
                .ring_for(token, self.opts.clone())
                .await
                .map_err(classify)?,
        ))
    }

    fn bell(&self, token: &str) -> i64 {
        self.bells.id(token)
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query).await
    }

    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let mut c = self.session().await?;
        let p = Value::from(prefix.as_bytes());
        let rows: Vec<Row> = match c
            .exec(
                self.sql.held_names(),
                vec![Value::from(self.namespace.as_bytes()), p.clone(), p],
            )
            .await
        {
            Err(e) if schema::missing_tables(&e) => return Ok(Vec::new()),
            r => r.map_err(classify)?,
        };
        Ok(rows
            .iter()
            .map(|r| {
                let b: Vec<u8> = r.get(0).unwrap_or_default();
                String::from_utf8_lossy(&b).into_owned()
            })
            .collect())
    }
}
