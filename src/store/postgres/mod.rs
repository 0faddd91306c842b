//! The PostgreSQL store: `postgres://[user[:pass]@]host[:port][/db][?sslmode=&ca_file=&schema=]`.
//!
//! One connection per process. Every operation is one transaction (see `crate::store::sql`)
//! whose statements go out pipelined: BEGIN, lock the records, read the server's clock, read
//! holders and waiters; then, after the rules decided, every write and COMMIT in one more
//! flight. So an operation costs two round trips, and it holds its row locks only for the time
//! between them (a name's first grant creates its record first, in one more try). Expiry is
//! judged by `clock_timestamp()` read inside the transaction. Only grants, renewals and fence
//! raises wait for their commit to reach the disk (see `sql::Decision::flush`).
//!
//! Waiting is notified: a waiter LISTENs on a channel of its own token, and a release's
//! transaction NOTIFYs the longest-waiting live waiter only (delivered on commit). Nothing
//! else depends on the session, so behind a pooler in transaction mode (PgBouncer), where
//! LISTEN does not reach the waiter, locking stays correct and a waiter falls back to
//! looking again every `MAX_POLL`.

mod doctor;
mod schema;
mod shards;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::{BoxFuture, join_all};
use tokio_postgres::types::{FromSql, ToSql, Type, accepts};
use tokio_postgres::{Client, Row, SimpleQueryMessage};

use super::record::rules::{Far, HolderRow, Rows, Rules, WaiterRow, Write};
use super::record::{Backend, Decide, RecordStore as SqlStore};
use super::server::ServerUrl;
use super::sql::{UrlOptions, redial};
use super::{ErrorKind, Health, HealthQuery, Listener, StoreResult, TagWrite};
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
    /// How long a broken connection is dialled again within one call (`sql::redial`).
    timeout: Duration,
    /// The URL's port (`session_listens`).
    port: u16,
}

type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// The channels this session listens on, and the port the server took the connection on
/// (`Postgres::session_listens`), asked once behind a waiter's LISTEN.
const LISTENS: &str =
    "SELECT ARRAY(SELECT pg_listening_channels())::text[], coalesce(inet_server_port(), 0)";

/// Who is far back in a PostgreSQL line, and how much less often it looks (`Rules::far`).
const FAR: Far = Far {
    ahead: 4,
    factor: 10,
};

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
        Ok(SqlStore::new(Postgres {
            client: tokio::sync::Mutex::new(client),
            config,
            tls,
            sql: Sql::new(&schema),
            namespace: namespace.to_string(),
            desc: url.to_string(),
            user,
            wakeups,
            timeout,
            port: host.port,
        }))
    }

    /// One try of a transaction; the caller rolls back on error, and also when it answers
    /// `Missing`: a name has no record yet, so the try must be made again with `create_first`.
    async fn attempt(
        &self,
        c: &Client,
        names: &[String],
        create: bool,
        (create_first, door): (bool, bool),
        decide: Decide<'_>,
    ) -> Result<Tried, tokio_postgres::Error> {
        let (ns, names_v) = (&self.namespace, names.to_vec());
        let all: [Param; 2] = [(ns, Type::TEXT), (&names_v, Type::TEXT_ARRAY)];
        let begin = c.batch_execute("BEGIN");
        let door = async {
            match door {
                true => c.query_typed(schema::DOOR, &all).await.map(|_| ()),
                false => Ok(()),
            }
        };
        // A record, once made, is never deleted: only a name's first grant creates it, and
        // every other operation saves the statement (and, in a new session, its planning).
        let insert = async {
            if create_first {
                c.query_typed(&self.sql.create_records, &all)
                    .await
                    .map(|_| ())
            } else {
                Ok(())
            }
        };
        let (b, d, cr, records, clock, rows) = tokio::join!(
            begin,
            door,
            insert,
            c.query_typed(&self.sql.lock_records, &all),
            c.query_typed(self.sql.clock, &[]),
            c.query_typed(&self.sql.rows, &all),
        );
        b?;
        d?;
        cr?;
        let (records, clock, rows) = (records?, clock?, rows?);
        if create && !create_first && records.len() < names.len() {
            return Ok(Tried::Missing);
        }
        let now = clock.first().map_or(0, |r| r.get::<_, ServerClock>(0).ms());
        let mut rows = load(names, &records, &rows);
        let decision = decide(now, &mut rows);
        self.apply(c, &decision.writes, !decision.flush).await?;
        Ok(Tried::Done)
    }

    /// `Backend::transact`, through the names' doors first with `door`.
    async fn transaction(
        &self,
        names: &[String],
        create: bool,
        door: bool,
        decide: Decide<'_>,
    ) -> StoreResult<()> {
        let mut c = self.client.lock().await;
        let mut tries = 0;
        let mut create_first = false;
        loop {
            if c.is_closed() {
                // The server went away (a restart, a dropped connection): a new session. A
                // transaction cut off before its answer is tried again; every operation is
                // safe to repeat (a repeated grant finds its own row and reports busy).
                *c = self.reopen().await?;
            }
            let r = self
                .attempt(&c, names, create, (create_first, door), &mut *decide)
                .await;
            let e = match r {
                Ok(Tried::Done) => return Ok(()),
                Ok(Tried::Missing) => {
                    let _ = c.batch_execute("ROLLBACK").await;
                    create_first = true;
                    continue;
                }
                Err(e) => e,
            };
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

    /// Ask the server, right behind a LISTEN, what this session listens on (`LISTENS`), and
    /// note it (a LISTEN that failed leaves its channel out of the answer).
    /// A pooler in transaction mode passes a LISTEN to a server connection the client then
    /// leaves, and may pair the two again and again while the crowd is small: a server port
    /// other than the URL's says there is one in between (PgBouncer's own port), and then
    /// nothing counts as heard. (A port mapped on the way, a container's, costs only that:
    /// waiters far back look as often as the others; so does a server that cannot answer.)
    async fn session_listens(&self, c: &Client) {
        let Ok(rows) = c.query_typed(LISTENS, &[]).await else {
            return;
        };
        let Some(row) = rows.first() else {
            return;
        };
        let port: i32 = row.get(1);
        let channels = match port == i32::from(self.port) {
            true => row.get::<_, Vec<String>>(0).into_iter().collect(),
            false => Default::default(),
        };
        self.wakeups.session_listens(channels);
    }

    /// Every write and the COMMIT, pipelined in order.
    async fn apply(
        &self,
        c: &Client,
        writes: &[Write],
        lazy_commit: bool,
    ) -> Result<(), tokio_postgres::Error> {
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
            let ch = matches!(w, Write::Wake { .. })
                .then(|| channel.next())
                .flatten();
            calls.push(self.call(c, w, ch));
        }
        calls.push(Box::pin(c.batch_execute(if lazy_commit {
            "SET LOCAL synchronous_commit TO OFF; COMMIT"
        } else {
            "COMMIT"
        })));
        join_all(calls).await.into_iter().collect()
    }

    /// The statement that makes one write of the rules (a wake-up: a NOTIFY on `channel`).
    fn call<'a>(
        &'a self,
        c: &'a Client,
        w: &'a Write,
        channel: Option<&'a String>,
    ) -> BoxFuture<'a, Result<(), tokio_postgres::Error>> {
        let ns = &self.namespace;
        match w {
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
                let ch = channel.expect("one channel per wake");
                Box::pin(exec(c, self.sql.wake, vec![(ch, Type::TEXT)]))
            }
        }
    }

    /// The connection, dialled again first if the server dropped it.
    async fn session(&self) -> StoreResult<tokio::sync::MutexGuard<'_, Client>> {
        let mut c = self.client.lock().await;
        if c.is_closed() {
            *c = self.reopen().await?;
        }
        Ok(c)
    }

    /// A new session after the server dropped the old one, dialled again while the server is
    /// coming back; it LISTENs again for this process's waiters (see `open`).
    async fn reopen(&self) -> StoreResult<Client> {
        redial(self.timeout, || {
            open(&self.config, self.tls.as_ref(), &self.wakeups)
        })
        .await
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

/// How one try of a transaction ended.
enum Tried {
    Done,
    Missing,
}

/// The server's clock as PostgreSQL sends a `timestamptz`: microseconds since 2000-01-01 UTC.
struct ServerClock(i64);

impl ServerClock {
    /// Milliseconds since the Unix epoch, as every expiry is kept.
    fn ms(&self) -> i64 {
        const UNIX_TO_2000_MS: i64 = 946_684_800_000;
        self.0.div_euclid(1000) + UNIX_TO_2000_MS
    }
}

impl<'a> FromSql<'a> for ServerClock {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(ServerClock(i64::from_be_bytes(raw.try_into()?)))
    }

    accepts!(TIMESTAMPTZ);
}

/// The loaded rows, per name in request order. `rows` holds holders (second column true)
/// and waiters together.
fn load(names: &[String], records: &[Row], rows: &[Row]) -> Vec<Rows> {
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
            for row in rows.iter().filter(|row| row.get::<_, &str>(0) == name) {
                if row.get(1) {
                    r.holders.push(HolderRow {
                        token: row.get(2),
                        mode: row.get(3),
                        fence: row.get(4),
                        expires: row.get(5),
                        meta: row.get(6),
                    });
                } else {
                    r.waiters.push(WaiterRow {
                        token: row.get(2),
                        mode: row.get(3),
                        seq: row.get(4),
                        expires: row.get(5),
                        meta: row.get(6),
                        bell: 0,
                        ttl: 0,
                    });
                }
            }
            r
        })
        .collect()
}

#[async_trait]
impl Backend for Postgres {
    fn describe(&self) -> &str {
        &self.desc
    }

    /// The SQL stores' rules, with waiters far back in line (four or more ahead) looking
    /// every 5 s, their rows living 20 s (`Far`): a crowd's looks were most of the server's
    /// work, and each one that waited on the name's row lock delayed the release behind it.
    fn rules(&self) -> Rules {
        Rules {
            far: Some(FAR),
            ..Rules::SQL
        }
    }

    fn hears(&self, token: &str) -> bool {
        self.wakeups.hears(&schema::channel(token))
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
        self.transaction(names, create, false, decide).await
    }

    /// Through the names' doors (`schema::DOOR`): in a herd of 300 on one name, the crowd's
    /// first attempts queued on the record's row lock ahead of the releases, and a handoff
    /// there took up to 670 ms.
    async fn transact_arrival(&self, names: &[String], decide: Decide<'_>) -> StoreResult<()> {
        self.transaction(names, true, true, decide).await
    }

    async fn release_unheard(&self, names: &[String], token: &str) -> Option<bool> {
        let c = self.client.lock().await;
        if c.is_closed() {
            return None;
        }
        let sql = schema::release_unheard(&self.sql.schema, &self.namespace, names, token);
        // The message is queued for the connection on the first poll, before any answer is
        // awaited; a timeout that drops this future then drops only the wait. No usual
        // release follows a blind one that was sent: while answers are lost it would only
        // open a transaction it cannot finish, holding the records' row locks against every
        // other client until this process ends.
        match c.simple_query(&sql).await {
            Ok(answer) => Some(answer.iter().any(|m| {
                matches!(m, SimpleQueryMessage::Row(r)
                    if r.try_get("held").ok().flatten().is_some_and(|n| n != "0"))
            })),
            Err(_) => {
                // Its transaction is left aborted: end it, and release the usual way.
                let _ = c.batch_execute("ROLLBACK").await;
                None
            }
        }
    }

    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>> {
        let channel = schema::channel(token);
        let listener = self.wakeups.register(&channel);
        let c = self.session().await?;
        // Pipelined: the question goes out behind the LISTEN, in the same round trip.
        let (listened, _) = tokio::join!(listen_on(&c, &channel), self.session_listens(&c));
        match listened {
            // The connection broke under the LISTEN: the next session LISTENs on every
            // registered channel (`open`), and until then the waiter looks again every
            // `MAX_POLL`.
            Err(e) if e.kind() != ErrorKind::Unavailable => return Err(e),
            _ => {}
        }
        Ok(Box::new(listener))
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.doctor(query).await
    }

    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let c = self.session().await?;
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
