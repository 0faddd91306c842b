//! The PostgreSQL store: `postgres://[user[:pass]@]host[:port][/db][?sslmode=&ca_file=&schema=]`.
//!
//! One connection per process. Every operation is one transaction (see `crate::store::sql`)
//! whose statements go out pipelined: BEGIN, create the records, lock them, read the server's
//! clock, read holders and waiters; then, after the rules decided, every write and COMMIT in
//! one more flight. So a grant costs two round trips, and it holds its row locks only for the
//! time between them. Expiry is judged by `clock_timestamp()` read inside the transaction.
//!
//! Waiting is notified: a waiter LISTENs on a channel of its own token, and a release's
//! transaction NOTIFYs the longest-waiting live waiter only (delivered on commit). Nothing
//! else depends on the session, so behind a pooler in transaction mode (PgBouncer), where
//! LISTEN does not reach the waiter, locking stays correct and a waiter falls back to
//! looking again every `MAX_POLL`.

mod doctor;
mod schema;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::{BoxFuture, join_all};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use super::sql::rules::{HolderRow, Rows, WaiterRow, Write};
use super::sql::{Backend, Decide, SqlStore, UrlOptions};
use super::url::ServerUrl;
use super::{Health, HealthQuery, Listener, StoreResult};
use schema::{Sql, classify};
use wake::Wakeups;

pub type PostgresStore = SqlStore<Postgres>;

pub struct Postgres {
    /// The one connection, opened again after the server dropped it. One transaction at a
    /// time holds it: its statements are pipelined, and another's must not interleave.
    client: tokio::sync::Mutex<Client>,
    config: tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    sql: Sql,
    namespace: String,
    desc: String,
    user: String,
    wakeups: Arc<Wakeups>,
}

type Param<'a> = (&'a (dyn ToSql + Sync), Type);

impl Postgres {
    pub async fn connect(
        url: &ServerUrl,
        namespace: &str,
        timeout: Duration,
    ) -> StoreResult<PostgresStore> {
        let mut url = url.clone();
        let options = UrlOptions::take(&mut url, "schema")?;
        let (schema, user) = (options.tables, options.user);
        let db = url.path.trim_start_matches('/');
        let host = &url.hosts[0];
        let mut config = tokio_postgres::Config::new();
        config
            .host(&host.host)
            .port(host.port)
            .user(&user)
            .dbname(if db.is_empty() { &user } else { db })
            .application_name("dlock")
            .connect_timeout(timeout);
        if let Some(p) = &url.password {
            config.password(p);
        }
        let wakeups = Arc::new(Wakeups::default());
        let tls = options
            .tls
            .map(|(f, ca)| wake::tls_connector(&f, &ca))
            .transpose()?;
        let client = open(&config, tls.as_ref(), &wakeups).await?;
        Ok(SqlStore(Postgres {
            client: tokio::sync::Mutex::new(client),
            config,
            tls,
            sql: Sql::new(&schema),
            namespace: namespace.to_string(),
            desc: url.to_string(),
            user,
            wakeups,
        }))
    }

    /// One try of a transaction; the caller rolls back on error.
    async fn attempt(
        &self,
        c: &Client,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> Result<(), tokio_postgres::Error> {
        let (ns, names_v) = (&self.namespace, names.to_vec());
        let all: [Param; 2] = [(ns, Type::TEXT), (&names_v, Type::TEXT_ARRAY)];
        let begin = c.batch_execute("BEGIN");
        let create_f = async {
            if create {
                c.query_typed(&self.sql.create_records, &all)
                    .await
                    .map(|_| ())
            } else {
                Ok(())
            }
        };
        let (b, cr, records, clock, holders, waiters) = tokio::join!(
            begin,
            create_f,
            c.query_typed(&self.sql.lock_records, &all),
            c.query_typed(self.sql.clock, &[]),
            c.query_typed(&self.sql.holders, &all),
            c.query_typed(&self.sql.waiters, &all),
        );
        b?;
        cr?;
        let (records, clock, holders, waiters) = (records?, clock?, holders?, waiters?);
        let now: i64 = clock.first().map_or(0, |r| r.get(0));
        let mut rows = load(names, &records, &holders, &waiters);
        let writes = decide(now, &mut rows);
        self.apply(c, &writes).await
    }

    /// Every write and the COMMIT, pipelined in order.
    async fn apply(&self, c: &Client, writes: &[Write]) -> Result<(), tokio_postgres::Error> {
        let ns = &self.namespace;
        let channels: Vec<String> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Wake { token, .. } => Some(schema::channel(token)),
                _ => None,
            })
            .collect();
        let mut channel = channels.iter();
        let mut calls: Vec<BoxFuture<'_, Result<(), tokio_postgres::Error>>> = Vec::new();
        for w in writes {
            let call: BoxFuture<'_, _> = match w {
                Write::Record {
                    name,
                    fence,
                    previous,
                    wseq,
                } => Box::pin(exec(
                    c,
                    &self.sql.put_record,
                    vec![
                        (ns, Type::TEXT),
                        (name, Type::TEXT),
                        (fence, Type::INT8),
                        (previous, Type::TEXT),
                        (wseq, Type::INT8),
                    ],
                )),
                Write::PutHolder { name, row } => Box::pin(exec(
                    c,
                    &self.sql.put_holder,
                    vec![
                        (ns, Type::TEXT),
                        (name, Type::TEXT),
                        (&row.token, Type::TEXT),
                        (&row.mode, Type::TEXT),
                        (&row.fence, Type::INT8),
                        (&row.expires, Type::INT8),
                        (&row.meta, Type::TEXT),
                    ],
                )),
                Write::DeleteHolder { name, token } => Box::pin(exec(
                    c,
                    &self.sql.delete_holder,
                    vec![(ns, Type::TEXT), (name, Type::TEXT), (token, Type::TEXT)],
                )),
                Write::PutWaiter { name, row } => Box::pin(exec(
                    c,
                    &self.sql.put_waiter,
                    vec![
                        (ns, Type::TEXT),
                        (name, Type::TEXT),
                        (&row.token, Type::TEXT),
                        (&row.mode, Type::TEXT),
                        (&row.seq, Type::INT8),
                        (&row.expires, Type::INT8),
                        (&row.meta, Type::TEXT),
                    ],
                )),
                Write::DeleteWaiter { name, token } => Box::pin(exec(
                    c,
                    &self.sql.delete_waiter,
                    vec![(ns, Type::TEXT), (name, Type::TEXT), (token, Type::TEXT)],
                )),
                Write::Wake { .. } => {
                    let ch = channel.next().expect("one channel per wake");
                    Box::pin(exec(c, self.sql.wake, vec![(ch, Type::TEXT)]))
                }
            };
            calls.push(call);
        }
        calls.push(Box::pin(c.batch_execute("COMMIT")));
        join_all(calls).await.into_iter().collect()
    }

    async fn setup(&self, c: &Client) -> StoreResult<()> {
        c.batch_execute(&self.sql.setup)
            .await
            .map_err(|e| schema::setup_error(e, &self.sql.schema, &self.user))
    }
}

/// Connect, run the connection on this runtime, and LISTEN again for this process's waiters
/// (a new session has none of the old one's).
async fn open(
    config: &tokio_postgres::Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
    wakeups: &Arc<Wakeups>,
) -> StoreResult<Client> {
    let client = match tls {
        None => {
            let (client, conn) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(classify)?;
            wake::drive(conn, wakeups.clone());
            client
        }
        Some(tls) => {
            let (client, conn) = config.connect(tls.clone()).await.map_err(classify)?;
            wake::drive(conn, wakeups.clone());
            client
        }
    };
    for channel in wakeups.channels() {
        listen_on(&client, &channel).await?;
    }
    Ok(client)
}

async fn listen_on(c: &Client, channel: &str) -> StoreResult<()> {
    c.batch_execute(&format!("LISTEN \"{channel}\""))
        .await
        .map_err(classify)
}

async fn exec(c: &Client, sql: &str, params: Vec<Param<'_>>) -> Result<(), tokio_postgres::Error> {
    c.query_typed(sql, &params).await.map(|_| ())
}

/// The loaded rows, per name in request order.
fn load(names: &[String], records: &[Row], holders: &[Row], waiters: &[Row]) -> Vec<Rows> {
    names
        .iter()
        .map(|name| {
            let mut r = Rows {
                name: name.clone(),
                previous: "none".into(),
                ..Rows::default()
            };
            if let Some(rec) = records.iter().find(|row| row.get::<_, &str>(0) == name) {
                r.fence = rec.get(1);
                r.previous = rec.get(2);
                r.wseq = rec.get(3);
            }
            r.holders = holders
                .iter()
                .filter(|row| row.get::<_, &str>(0) == name)
                .map(|row| HolderRow {
                    token: row.get(1),
                    mode: row.get(2),
                    fence: row.get(3),
                    expires: row.get(4),
                    meta: row.get(5),
                })
                .collect();
            r.waiters = waiters
                .iter()
                .filter(|row| row.get::<_, &str>(0) == name)
                .map(|row| WaiterRow {
                    token: row.get(1),
                    mode: row.get(2),
                    seq: row.get(3),
                    expires: row.get(4),
                    meta: row.get(5),
                    bell: 0,
                })
                .collect();
            r
        })
        .collect()
}

#[async_trait]
impl Backend for Postgres {
    fn describe(&self) -> &str {
        &self.desc
    }

    async fn transact(
        &self,
        names: &[String],
        create: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        let mut c = self.client.lock().await;
        let mut tries = 0;
        loop {
            if c.is_closed() {
                // The server went away (a restart, a dropped connection): a new session. A
                // transaction cut off before its answer is tried again; every operation is
                // safe to repeat (a repeated grant finds its own row and reports busy).
                *c = open(&self.config, self.tls.as_ref(), &self.wakeups).await?;
            }
            let r = self.attempt(&c, names, create, &mut *decide).await;
            let Err(e) = r else { return Ok(()) };
            let _ = c.batch_execute("ROLLBACK").await;
            tries += 1;
            if tries > 3 {
                return Err(classify(e));
            }
            if schema::missing_tables(&e) {
                self.setup(&c).await?;
            } else if !schema::retryable(&e) && !c.is_closed() {
                return Err(classify(e));
            }
        }
    }

    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>> {
        let channel = schema::channel(token);
        let listener = self.wakeups.register(&channel);
        listen_on(&*self.client.lock().await, &channel).await?;
        Ok(Box::new(listener))
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query).await
    }

    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let c = self.client.lock().await;
        let ns = &self.namespace;
        let prefix = prefix.to_string();
        let rows = match c
            .query_typed(
                &self.sql.held_names,
                &[(ns, Type::TEXT), (&prefix, Type::TEXT)],
            )
            .await
        {
            Err(e) if schema::missing_tables(&e) => return Ok(Vec::new()),
            r => r.map_err(classify)?,
        };
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
