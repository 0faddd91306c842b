//! The MySQL/MariaDB store's tables and statements, and what its errors mean for dlock.
//!
//! Three InnoDB tables in the URL's database, named by a prefix (`?table=`, default `dlock`):
//! `_records`, `_holders`, `_waiters`, as in the PostgreSQL store. Names and tokens are
//! VARBINARY: a case-insensitive collation must never make `Deploy` and `deploy` one lock.
//! The tables are created on first use under a named lock, so two clients starting at once
//! cannot trip over each other's CREATE.

use mysql_async::Error;

use crate::store::StoreError;
use crate::store::sql::hex;

/// Every statement the store sends, with its tables filled in once. Statements over a list
/// of names take the list as `IN (…)` with one placeholder per name (`in_list`).
pub struct Sql {
    pub prefix: String,
    pub setup: Vec<String>,
    records: String,
    holders: String,
    waiters: String,
}

/// The server's clock in ms since the epoch, independent of the session's time zone.
macro_rules! clock_expr {
    () => {
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000"
    };
}
pub const CLOCK_EXPR: &str = clock_expr!();
pub const CLOCK: &str = concat!("SELECT ", clock_expr!());

impl Sql {
    pub fn new(prefix: &str) -> Sql {
        let (r, h, w) = (
            format!("{prefix}_records"),
            format!("{prefix}_holders"),
            format!("{prefix}_waiters"),
        );
        Sql {
            prefix: prefix.to_string(),
            setup: vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {r} (
                       ns VARBINARY(255) NOT NULL, name VARBINARY(255) NOT NULL,
                       fence BIGINT NOT NULL DEFAULT 0,
                       previous VARBINARY(16) NOT NULL DEFAULT 'none',
                       wseq BIGINT NOT NULL DEFAULT 0,
                       PRIMARY KEY (ns, name)) ENGINE=InnoDB"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (
                       ns VARBINARY(255) NOT NULL, name VARBINARY(255) NOT NULL,
                       token VARBINARY(64) NOT NULL, mode VARBINARY(16) NOT NULL,
                       fence BIGINT NOT NULL, expires BIGINT NOT NULL, meta BLOB NOT NULL,
                       PRIMARY KEY (ns, name, token)) ENGINE=InnoDB"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {w} (
                       ns VARBINARY(255) NOT NULL, name VARBINARY(255) NOT NULL,
                       token VARBINARY(64) NOT NULL, mode VARBINARY(16) NOT NULL,
                       seq BIGINT NOT NULL, expires BIGINT NOT NULL, meta BLOB NOT NULL,
                       bell BIGINT NOT NULL DEFAULT 0,
                       PRIMARY KEY (ns, name, token)) ENGINE=InnoDB"
                ),
            ],
            records: r,
            holders: h,
            waiters: w,
        }
    }

    pub fn create_records(&self, n: usize) -> String {
        let values = vec!["(?, ?)"; n].join(", ");
        format!(
            "INSERT INTO {} (ns, name) VALUES {values} ON DUPLICATE KEY UPDATE name = name",
            self.records
        )
    }

    pub fn lock_records(&self, n: usize) -> String {
        format!(
            "SELECT name, fence, previous, wseq FROM {} WHERE ns = ? AND name IN ({})
             ORDER BY name FOR UPDATE",
            self.records,
            in_list(n)
        )
    }

    /// Locking reads: they see the newest committed rows whatever the isolation level.
    pub fn holders(&self, n: usize) -> String {
        format!(
            "SELECT name, token, mode, fence, expires, meta FROM {} WHERE ns = ? AND name IN ({})
             FOR UPDATE",
            self.holders,
            in_list(n)
        )
    }

    pub fn waiters(&self, n: usize) -> String {
        format!(
            "SELECT name, token, mode, seq, expires, meta, bell FROM {} WHERE ns = ? AND name IN ({})
             FOR UPDATE",
            self.waiters,
            in_list(n)
        )
    }

    pub fn put_record(&self) -> String {
        format!(
            "UPDATE {} SET fence = ?, previous = ?, wseq = ? WHERE ns = ? AND name = ?",
            self.records
        )
    }

    pub fn put_holder(&self) -> String {
        format!(
            "INSERT INTO {} (ns, name, token, mode, fence, expires, meta)
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE mode = VALUES(mode), fence = VALUES(fence),
               expires = VALUES(expires), meta = VALUES(meta)",
            self.holders
        )
    }

    pub fn put_waiter(&self) -> String {
        format!(
            "INSERT INTO {} (ns, name, token, mode, seq, expires, meta, bell)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE mode = VALUES(mode), seq = VALUES(seq),
               expires = VALUES(expires), meta = VALUES(meta), bell = VALUES(bell)",
            self.waiters
        )
    }

    pub fn delete_holder(&self) -> String {
        format!(
            "DELETE FROM {} WHERE ns = ? AND name = ? AND token = ?",
            self.holders
        )
    }

    pub fn delete_waiter(&self) -> String {
        format!(
            "DELETE FROM {} WHERE ns = ? AND name = ? AND token = ?",
            self.waiters
        )
    }

    /// The text of `Backend::release_unheard`: one COM_QUERY of several statements, sent as
    /// text so nothing waits on a prepare answer. ROLLBACK ends a transaction the unheard
    /// attempt may have left open on this connection (its row locks with it); then one
    /// transaction locks the records in name order (as a grant does), picks the bell of the
    /// longest-waiting live waiter of each name the token holds, and deletes the token's
    /// holder and waiter rows, only those; after the commit the bells are rung as a release
    /// rings them (a KILL of a gone waiter's connection fails, and skips only the rings after
    /// it: those waiters look again within `MAX_POLL`). Every
    /// value goes in as a hex literal (a binary string, as the columns are).
    pub fn release_unheard(&self, ns: &str, names: &[String], token: &str) -> String {
        let lit = |v: &str| format!("X'{}'", hex(v));
        let (ns, t) = (lit(ns), lit(token));
        let list: Vec<String> = names.iter().map(|n| lit(n)).collect();
        let list = list.join(", ");
        let (r, h, w) = (&self.records, &self.holders, &self.waiters);
        let mine = format!("ns = {ns} AND name IN ({list}) AND token = {t}");
        let mut sql = format!(
            "ROLLBACK;
             START TRANSACTION;
             SELECT name FROM {r} WHERE ns = {ns} AND name IN ({list}) ORDER BY name FOR UPDATE;
             SET @dlock_now = {CLOCK_EXPR};"
        );
        for (i, name) in names.iter().enumerate() {
            let name = lit(name);
            sql += &format!(
                "SET @dlock_bell{i} = (SELECT bell FROM {w}
                   WHERE ns = {ns} AND name = {name} AND token <> {t} AND expires > @dlock_now
                     AND EXISTS (SELECT 1 FROM {h} WHERE ns = {ns} AND name = {name}
                                 AND token = {t})
                   ORDER BY seq LIMIT 1);"
            );
        }
        sql += &format!(
            "DELETE FROM {h} WHERE {mine};
             DELETE FROM {w} WHERE {mine};
             COMMIT;"
        );
        for i in 0..names.len() {
            sql += &format!(
                "SET @dlock_ring = IF(IFNULL(@dlock_bell{i}, 0) > 0,
                   CONCAT('KILL CONNECTION ', @dlock_bell{i}), 'DO 0');
                 PREPARE dlock_ring FROM @dlock_ring;
                 EXECUTE dlock_ring;
                 DEALLOCATE PREPARE dlock_ring;"
            );
        }
        sql
    }

    pub fn held_names(&self) -> String {
        format!(
            "SELECT DISTINCT name FROM {} WHERE ns = ? AND LEFT(name, LENGTH(?)) = ? ORDER BY name",
            self.holders
        )
    }
}

fn in_list(n: usize) -> String {
    vec!["?"; n].join(", ")
}

// MySQL/MariaDB error numbers dlock decides by.
const ER_DBACCESS_DENIED: u16 = 1044;
const ER_ACCESS_DENIED: u16 = 1045;
const ER_BAD_DB: u16 = 1049;
const ER_TABLEACCESS_DENIED: u16 = 1142;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_SPECIFIC_ACCESS_DENIED: u16 = 1227;
const ER_ACCESS_DENIED_NO_PASSWORD: u16 = 1698;
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_CONNECTION_KILLED: u16 = 1927;
const ER_CON_COUNT_ERROR: u16 = 1040;
const ER_TOO_MANY_USER_CONNECTIONS: u16 = 1203;
const ER_USER_LIMIT_REACHED: u16 = 1226;

fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// Whether an error says dlock's tables are not there yet.
pub fn missing_tables(e: &Error) -> bool {
    code(e) == Some(ER_NO_SUCH_TABLE)
}

/// Whether the connection is gone (the server restarted or dropped it), rather than the
/// server having answered with an error.
pub fn connection_lost(e: &Error) -> bool {
    matches!(e, Error::Io(_) | Error::Driver(_))
        || matches!(code(e), Some(ER_CONNECTION_KILLED | ER_SERVER_SHUTDOWN))
}

/// Whether InnoDB broke the transaction up over a lock (worth one more try).
pub fn retryable(e: &Error) -> bool {
    matches!(code(e), Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT))
}

/// What creating the tables failing means: without the right, the one line says what an
/// administrator must run (docs/mysql.md, installed as /usr/share/doc/dlock/mysql.md, has
/// the whole setup).
pub fn setup_error(e: Error, prefix: &str, user: &str, db: &str) -> StoreError {
    if code(&e) == Some(ER_TABLEACCESS_DENIED) {
        return StoreError::refused(format!(
            "refused: user {user:?} may not create dlock's tables; have an administrator run \
             `GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON {db}.* TO '{user}'@'%';` or create \
             the {prefix}_* tables (see /usr/share/doc/dlock/mysql.md)"
        ))
        .with_source(e);
    }
    classify(e)
}

/// Map a MySQL client error to what it means for dlock (and its exit code).
pub fn classify(e: Error) -> StoreError {
    let error = match &e {
        Error::Server(s) => match s.code {
            ER_ACCESS_DENIED | ER_ACCESS_DENIED_NO_PASSWORD => StoreError::refused(format!(
                "refused: {} (check the user and password: in the URL, ?password_file=, \
                 ?password_env= or DLOCK_PASSWORD)",
                s.message
            )),
            ER_DBACCESS_DENIED | ER_TABLEACCESS_DENIED | ER_SPECIFIC_ACCESS_DENIED => {
                StoreError::refused(format!(
                    "refused: {} (the user needs SELECT, INSERT, UPDATE and DELETE on dlock's \
                     tables; see /usr/share/doc/dlock/mysql.md)",
                    s.message
                ))
            }
            ER_BAD_DB => StoreError::invalid(format!(
                "{}; create it or name an existing database in the URL",
                s.message
            )),
            // The server is full, not gone: a wait rides it out without holding a connection.
            ER_CON_COUNT_ERROR => StoreError::at_limit(
                "max_connections",
                format!(
                    "the server is at its connection limit (max_connections): {}",
                    s.message
                ),
            ),
            ER_TOO_MANY_USER_CONNECTIONS | ER_USER_LIMIT_REACHED => StoreError::at_limit(
                "max_user_connections",
                format!(
                    "the user is at its connection limit (max_user_connections): {}",
                    s.message
                ),
            ),
            // A restart in progress: the server is coming back, as after a dropped socket.
            ER_SERVER_SHUTDOWN | ER_CONNECTION_KILLED => {
                StoreError::unavailable(format!("the server is not serving: {}", s.message))
            }
            _ => StoreError::protocol(format!("unexpected answer: {}", s.message)),
        },
        Error::Io(_) => StoreError::unavailable(format!(
            "cannot reach the server: {}",
            crate::store::io_cause(&e).unwrap_or_else(|| e.to_string())
        )),
        Error::Driver(_) => StoreError::unavailable(format!(
            "cannot talk to the server: {e} (is this a MySQL or MariaDB server?)"
        )),
        _ => StoreError::protocol(format!("unexpected answer: {e}")),
    };
    error.with_source(e)
}

#[cfg(test)]
mod tests {
    /// A quote in a name cannot end the literal it goes into: it goes in as hex.
    #[test]
    fn a_blind_release_spells_names_in_hex() {
        let sql = super::Sql::new("dlock").release_unheard("ns", &["x'y".into()], "t");
        assert!(!sql.contains("x'y") && sql.contains("X'782779'"), "{sql}");
    }
}
