//! The PostgreSQL store's tables and statements, and what its errors mean for dlock.
//!
//! Three tables in one schema (`?schema=`, default `dlock`): `records` (per name: the last
//! fence, how the last lease ended, the waiters' arrival counter; never expires), `holders`
//! and `waiters` (one row per token per name, each with its expiry in ms on the server's
//! clock). They are created on first use, under a transaction-scoped advisory lock so two
//! clients starting at once cannot trip over each other's CREATE.

use tokio_postgres::error::SqlState;

use crate::store::StoreError;
use crate::store::sql::hex;

/// Every statement the store sends, with its schema filled in once.
pub struct Sql {
    pub schema: String,
    pub setup: String,
    pub create_records: String,
    pub lock_records: String,
    pub clock: &'static str,
    pub rows: String,
    pub put_record: String,
    pub put_holder: String,
    pub delete_holder: String,
    pub put_waiter: String,
    pub delete_waiter: String,
    pub wake: &'static str,
    pub held_names: String,
}

/// An advisory lock key of dlock's own, held while creating its tables.
pub(super) const SETUP_LOCK: i64 = 0x646c_6f63_6b00;

/// A first attempt's queue of its own (`Backend::transact_arrival`): a lock per name, taken
/// before the records' and held to the end of the transaction, so that the crowd waits here
/// and at most one of it holds or waits for a record's row lock at a time. In name order: the
/// names come sorted, and `unnest` keeps their order (no sort to plan). Its first key,
/// 1684828003 (0x646c6f63, "dloc"), puts it in the two-key space, apart from `SETUP_LOCK`'s
/// and any one-key lock of the database's own users. Only an order: two names that share a
/// door (their hashes meet) share a queue, and a client without doors locks the records as
/// before.
pub const DOOR: &str = "SELECT pg_advisory_xact_lock(1684828003, hashtext($1 || '/' || n))
     FROM unnest($2::text[]) AS n";

impl Sql {
    pub fn new(schema: &str) -> Sql {
        let s = schema;
        Sql {
            schema: s.to_string(),
            setup: format!(
                "SELECT pg_advisory_xact_lock({SETUP_LOCK});
                 CREATE SCHEMA IF NOT EXISTS {s};
                 CREATE TABLE IF NOT EXISTS {s}.records (
                     ns text NOT NULL, name text NOT NULL,
                     fence bigint NOT NULL DEFAULT 0,
                     previous text NOT NULL DEFAULT 'none',
                     wseq bigint NOT NULL DEFAULT 0,
                     PRIMARY KEY (ns, name));
                 CREATE TABLE IF NOT EXISTS {s}.holders (
                     ns text NOT NULL, name text NOT NULL, token text NOT NULL,
                     mode text NOT NULL, fence bigint NOT NULL, expires bigint NOT NULL,
                     meta text NOT NULL,
                     PRIMARY KEY (ns, name, token));
                 CREATE TABLE IF NOT EXISTS {s}.waiters (
                     ns text NOT NULL, name text NOT NULL, token text NOT NULL,
                     mode text NOT NULL, seq bigint NOT NULL, expires bigint NOT NULL,
                     meta text NOT NULL,
                     PRIMARY KEY (ns, name, token));"
            ),
            create_records: format!(
                "INSERT INTO {s}.records (ns, name)
                 SELECT $1, n FROM unnest($2::text[]) AS n ORDER BY n
                 ON CONFLICT DO NOTHING"
            ),
            lock_records: format!(
                "SELECT name, fence, previous, wseq FROM {s}.records
                 WHERE ns = $1 AND name = ANY($2) ORDER BY name FOR UPDATE"
            ),
            // Read after the records are locked: the decision's clock is never older than
            // the state it judges. As the timestamp itself: no arithmetic for the server to
            // look up and plan in a new session (see `server_ms`).
            clock: "SELECT clock_timestamp()",
            // Holders and waiters in one statement: one parse and plan fewer per operation.
            rows: format!(
                "SELECT name, true, token, mode, fence, expires, meta FROM {s}.holders
                 WHERE ns = $1 AND name = ANY($2)
                 UNION ALL
                 SELECT name, false, token, mode, seq, expires, meta FROM {s}.waiters
                 WHERE ns = $1 AND name = ANY($2)"
            ),
            put_record: format!(
                "UPDATE {s}.records SET fence = $3, previous = $4, wseq = $5
                 WHERE ns = $1 AND name = $2"
            ),
            put_holder: format!(
                "INSERT INTO {s}.holders (ns, name, token, mode, fence, expires, meta)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (ns, name, token) DO UPDATE SET mode = EXCLUDED.mode,
                   fence = EXCLUDED.fence, expires = EXCLUDED.expires, meta = EXCLUDED.meta"
            ),
            delete_holder: format!(
                "DELETE FROM {s}.holders WHERE ns = $1 AND name = $2 AND token = $3"
            ),
            put_waiter: format!(
                "INSERT INTO {s}.waiters (ns, name, token, mode, seq, expires, meta)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (ns, name, token) DO UPDATE SET mode = EXCLUDED.mode,
                   seq = EXCLUDED.seq, expires = EXCLUDED.expires, meta = EXCLUDED.meta"
            ),
            delete_waiter: format!(
                "DELETE FROM {s}.waiters WHERE ns = $1 AND name = $2 AND token = $3"
            ),
            wake: "SELECT pg_notify($1, '')",
            held_names: format!(
                "SELECT DISTINCT name FROM {s}.holders
                 WHERE ns = $1 AND left(name, length($2)) = $2 ORDER BY name"
            ),
        }
    }
}

/// The text of `Backend::release_unheard`: one simple-query message, so nothing in it waits
/// on a Parse or Describe answer. ROLLBACK ends a transaction the unheard attempt may have left
/// open on this connection (its row locks with it); then one transaction locks the records in
/// name order (as a grant does, so the two cannot deadlock), counts the token's live holder
/// rows (the `held` answer), wakes the longest-waiting live waiter of each name the token
/// holds (delivered on commit), and deletes the token's holder and waiter rows, only those.
/// Every value goes in as hex, decoded by the server.
pub fn release_unheard(schema: &str, ns: &str, names: &[String], token: &str) -> String {
    let s = schema;
    let text = |v: &str| format!("convert_from(decode('{}', 'hex'), 'UTF8')", hex(v));
    let (ns, t) = (text(ns), text(token));
    let names: Vec<String> = names.iter().map(|n| text(n)).collect();
    let names = format!("ARRAY[{}]::text[]", names.join(", "));
    let now = "floor(extract(epoch FROM clock_timestamp()) * 1000)::int8";
    let mine = format!("ns = {ns} AND name = ANY({names}) AND token = {t}");
    format!(
        "ROLLBACK;
         BEGIN;
         SET LOCAL synchronous_commit TO OFF;
         SELECT 1 FROM {s}.records WHERE ns = {ns} AND name = ANY({names})
           ORDER BY name FOR UPDATE;
         SELECT count(*) AS held FROM {s}.holders WHERE {mine} AND expires > {now};
         SELECT pg_notify('dlock_wake_' || next.token, '') FROM (
           SELECT DISTINCT ON (w.name) w.token FROM {s}.waiters w
           WHERE w.ns = {ns} AND w.token <> {t} AND w.expires > {now}
             AND w.name IN (SELECT name FROM {s}.holders WHERE {mine})
           ORDER BY w.name, w.seq) AS next;
         DELETE FROM {s}.holders WHERE {mine};
         DELETE FROM {s}.waiters WHERE {mine};
         COMMIT"
    )
}

/// The channel a waiter listens on: its own, so a release wakes one waiter, not the herd.
/// Tokens are hex, so the quoted identifier needs no escaping.
pub fn channel(token: &str) -> String {
    format!("dlock_wake_{token}")
}

/// Whether an error says dlock's tables (or schema) are not there yet.
pub fn missing_tables(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::INVALID_SCHEMA_NAME
    )
}

/// Whether the transaction lost a race the database broke up (worth one more try).
pub fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::UNIQUE_VIOLATION
    )
}

/// What creating the tables failing means: without the right, the one line says what an
/// administrator must run (docs/postgres.md, installed as /usr/share/doc/dlock/postgres.md, has
/// the whole setup).
pub fn setup_error(e: tokio_postgres::Error, schema: &str, user: &str) -> StoreError {
    if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        return StoreError::refused(format!(
            "refused: user {user:?} may not create dlock's tables; have an administrator run \
             `CREATE SCHEMA {schema} AUTHORIZATION \"{user}\";` (or name a schema it owns with \
             ?schema=; see /usr/share/doc/dlock/postgres.md)"
        ))
        .with_source(e);
    }
    classify(e)
}

/// Map a PostgreSQL client error to what it means for dlock (and its exit code).
pub fn classify(e: tokio_postgres::Error) -> StoreError {
    let error = match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            StoreError::refused(format!(
                "refused: {} (check the user and password: in the URL, ?password_file=, \
                 ?password_env= or DLOCK_PASSWORD)",
                db_message(&e)
            ))
        }
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => StoreError::refused(format!(
            "refused: {} (the user needs SELECT, INSERT, UPDATE and DELETE on dlock's tables; \
             see /usr/share/doc/dlock/postgres.md)",
            db_message(&e)
        )),
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => StoreError::invalid(format!(
            "{}; create it or name an existing database in the URL",
            db_message(&e)
        )),
        // 53300 ("sorry, too many clients already", or the slots left are reserved): the
        // server is full, not gone; a wait rides it out without holding a connection.
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => StoreError::at_limit(
            "max_connections",
            format!(
                "PostgreSQL is at its connection limit (max_connections): {}",
                db_message(&e)
            ),
        ),
        // PgBouncer's own limit, said with a protocol-violation code.
        Some(_) if db_message(&e).contains("no more connections allowed") => StoreError::at_limit(
            "max_client_conn",
            format!(
                "PgBouncer is at its connection limit (max_client_conn): {}",
                db_message(&e)
            ),
        ),
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::CRASH_SHUTDOWN =>
        {
            StoreError::unavailable(format!("PostgreSQL is not serving: {}", db_message(&e)))
        }
        Some(_) => StoreError::protocol(format!("unexpected answer: {}", db_message(&e))),
        None if e.is_closed() => StoreError::unavailable("the connection to PostgreSQL closed"),
        None => match crate::store::io_cause(&e) {
            Some(io) => StoreError::unavailable(format!("cannot reach PostgreSQL: {io}")),
            None => StoreError::unavailable(format!(
                "cannot talk to PostgreSQL: {e} (is this a PostgreSQL server?)"
            )),
        },
    };
    error.with_source(e)
}

/// The server's own message, without the client's "db error:" prefix.
fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => d.message().to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// A quote in a name cannot end the literal it goes into: it goes in as hex.
    #[test]
    fn a_blind_release_spells_names_in_hex() {
        let sql = super::release_unheard("dlock", "ns", &["x'y".into()], "t");
        assert!(
            !sql.contains("x'y") && sql.contains("decode('782779', 'hex')"),
            "{sql}"
        );
    }
}
