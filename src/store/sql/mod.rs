//! What the PostgreSQL and MySQL/MariaDB stores share: the `Store` contract over one
//! transaction per operation.
//!
//! Each operation is one transaction on the database: lock the names' record rows (in name
//! order, so two multi-name grants cannot deadlock), load their holders and waiters with the
//! server's clock, decide by `rules` (the same rules as the Redis scripts), write, commit.
//! Expiry is judged only by the server's clock reading taken inside that transaction. A
//! backend (`Backend`) knows its database's SQL, its connection and how it wakes waiters;
//! nothing in here knows which database it talks to.

pub mod rules;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::server::ServerUrl;
use super::tls::Files;
use super::{
    Acquire, Attempt, Finding, Health, HealthQuery, Listener, LockState, Outcome as End, Severity,
    Store, StoreError, StoreResult, TagWrite,
};
use rules::{GrantRequest, Outcome, Rows, Write};

/// How long a waiter row lives unless its waiter comes back (a waiter looks again at least
/// every `MAX_POLL`), so a killed waiter leaves nothing behind for long.
const WAITER_TTL: Duration = Duration::from_secs(2);

/// Decides on the rows a transaction loaded, given the server's clock in ms.
pub type Decide<'a> = &'a mut (dyn FnMut(i64, &mut [Rows]) -> Decision + Send);

/// What a transaction writes, and whether its commit must reach the disk before it returns.
pub struct Decision {
    pub writes: Vec<Write>,
    /// A grant, a renewal or a fence raise must survive a crash of the server: forgetting one
    /// could let a second holder in or repeat a fence. Everything else (a release, a waiter
    /// queueing, a purge of the expired) may commit without waiting for the disk, where the
    /// database allows that per transaction: a crash that forgets it leaves a lease to expire
    /// at its deadline, as a crashed holder's would, and any later flushed commit flushes it
    /// too, the log being one sequence.
    pub flush: bool,
}

/// One database: its SQL, its connection, its wake-ups.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The URL with secrets redacted.
    fn describe(&self) -> &str;

    /// One transaction over `names` (sorted): create the missing records (with `create`),
    /// lock the records in name order, load every name's rows (a name with no record loads as
    /// empty) and then the server's clock; apply what `decide` returns; commit.
    async fn transact(&self, names: &[String], create: bool, decide: Decide<'_>)
    -> StoreResult<()>;

    /// Start listening for the wake-ups addressed to this waiter's token.
    async fn listen(&self, token: &str) -> StoreResult<Box<dyn Listener>>;

    /// This process's bell for a waiter (see `rules::WaiterRow::bell`).
    fn bell(&self, _token: &str) -> i64 {
        0
    }

    /// The namespace's shard-list record (`Store::shard_list`), in a table of its own.
    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String>;

    /// Names under the prefix that have a holder row (live or not).
    async fn held_names(&self, prefix: &str) -> StoreResult<Vec<String>>;

    /// What `dlock doctor` reports of the server (version, clock, durability).
    async fn health(&self, _query: HealthQuery) -> StoreResult<Health> {
        Ok(Health::default())
    }

    /// Release `token` on `names` for an attempt whose answer was never heard: one message on
    /// the connection already open (a new one cannot start while answers are lost: its
    /// handshake's answers are lost too), sent before any answer is awaited, so it reaches the
    /// server even when no answer ever comes back. The message ends whatever transaction the
    /// unheard attempt left open, then, in one transaction that locks the records as every
    /// grant does, deletes the token's own holder and waiter rows (never another token's) and
    /// wakes the next waiter of each name it held. It leaves each record's `previous` as it
    /// was (see `SqlStore::release`). `Some(held)` once its answer is heard; `None` when the
    /// answer cannot be trusted, the server answered with an error, or there is no open
    /// connection: the caller then releases the usual way too.
    async fn release_unheard(&self, names: &[String], token: &str) -> Option<bool>;
}

/// Dial a new connection after the old one broke (a restart, a failover, a dropped socket):
/// tried again with a short jittered backoff (25 ms, doubling to 400 ms) while the server is
/// unreachable, for at most `patience` (the store timeout, which the engine bounds each call
/// by anyway). So an operation rides out a restart shorter than that, and a longer outage is
/// the engine's to wait through, call after call. Any other failure is answered at once.
pub async fn redial<T, F, Fut>(patience: Duration, mut dial: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(25);
    loop {
        match dial().await {
            // A server at its connection limit is not asked again within the call: the
            // engine's wait paces those dials (`Engine::ride_out`).
            Err(e)
                if e.kind() == super::ErrorKind::Unavailable
                    && e.limit().is_none()
                    && start.elapsed() + pause < patience =>
            {
                // Many clients broken by one restart must not come back in step.
                let jittered = pause.mul_f64(0.5 + crate::sys::random_f64());
                tokio::time::sleep(jittered).await;
                pause = (pause * 2).min(Duration::from_millis(400));
            }
            r => return r,
        }
    }
}

/// `text` as hex digits: how names and tokens go into a statement that is sent as text (a
/// release that cannot wait for a Parse or prepare answer), so no setting of the server's
/// (standard_conforming_strings, NO_BACKSLASH_ESCAPES) can change what a quote means.
pub fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// `doctor`'s durability finding for a SQL server: a commit a crash can lose is a grant or a
/// fence bump forgotten, so fences could repeat (and, in a quorum, a restarted member grant
/// what a majority still holds). `lossy` says which setting allows that.
pub fn durability(q: HealthQuery, lossy: Option<&str>) -> Finding {
    match lossy {
        None => Finding::new(
            "persistence",
            Severity::Ok,
            "every commit is flushed: grants and fences survive a crash",
        ),
        Some(why) => Finding::new(
            "persistence",
            if q.in_quorum {
                Severity::Void
            } else {
                Severity::Warn
            },
            format!(
                "{why}: a crash can forget the last grants and fence bumps, so fences could \
                 repeat{}",
                if q.in_quorum {
                    " and this member could grant a lock the majority still holds"
                } else {
                    ""
                }
            ),
        ),
    }
}

/// What a SQL store's URL says beyond its server: where its tables go (`?schema=` or
/// `?table=`, named by `tables`, default `dlock`), TLS (`?sslmode=` with `?ca_file=`), and the
/// user (default: the login name). Unknown parameters are refused.
pub struct UrlOptions {
    pub tables: String,
    /// `Some` with `sslmode=require` or `verify-full`; the CA is required (always verified).
    pub tls: Option<(Files, Vec<u8>)>,
    /// `sslmode=require`: the certificate's chain is checked, not its host name.
    pub skip_host_check: bool,
    pub user: String,
}

impl UrlOptions {
    pub fn take(url: &mut ServerUrl, tables: &str) -> StoreResult<UrlOptions> {
        let name = match url.take_param(tables) {
            Some(s) => plain_name(tables, &s).map_err(StoreError::invalid)?,
            None => "dlock".to_string(),
        };
        let sslmode = url
            .take_param("sslmode")
            .unwrap_or_else(|| "disable".into());
        url.tls = match sslmode.as_str() {
            "disable" => false,
            "require" | "verify-full" => true,
            other => {
                return Err(StoreError::invalid(format!(
                    "sslmode={other:?}: use disable, require or verify-full"
                )));
            }
        };
        let files = super::tls::take_files(url, "sslmode=require or verify-full")?;
        url.reject_unknown_params().map_err(StoreError::invalid)?;
        let tls = match files {
            None => None,
            Some(f) => {
                let ca = f.ca.clone().ok_or_else(|| {
                    StoreError::invalid(
                        "sslmode=require and verify-full need ?ca_file= (the CA that signed the \
                         server's certificate): dlock always verifies the server",
                    )
                })?;
                Some((f, ca))
            }
        };
        Ok(UrlOptions {
            tables: name,
            tls,
            skip_host_check: sslmode == "require",
            user: url.user.clone().unwrap_or_else(crate::sys::username),
        })
    }
}

/// A schema or table-prefix name dlock may put into SQL as it is: lower-case letters, digits
/// and `_`, at most 48 bytes.
fn plain_name(what: &str, name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{what}={name:?} is not a plain name (lower-case letters, digits and _)"
        ))
    }
}

/// A `Store` over any SQL backend.
pub struct SqlStore<B: Backend> {
    pub backend: B,
    /// Tokens whose last grant attempt's answer was not heard (it errored or was cut off by
    /// the engine's timeout), so the grant may have been committed unheard: their release
    /// goes out blind first (`Backend::release_unheard`).
    unheard: Mutex<HashSet<String>>,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl<B: Backend> SqlStore<B> {
    pub fn new(backend: B) -> SqlStore<B> {
        SqlStore {
            backend,
            unheard: Mutex::default(),
        }
    }

    fn mark_unheard(&self, token: &str, unheard: bool) {
        let mut set = self.unheard.lock().unwrap();
        if unheard {
            set.insert(token.to_string());
        } else {
            set.remove(token);
        }
    }

    fn is_unheard(&self, token: &str) -> bool {
        self.unheard.lock().unwrap().contains(token)
    }

    /// One transaction that decides by `rule` and returns what it answered (the default if
    /// the rule never ran, which a committed transaction rules out). Its commit is flushed if
    /// it writes a holder (a grant or a renewal).
    async fn decide<T: Default + Send>(
        &self,
        names: &[String],
        create: bool,
        rule: impl FnMut(i64, &mut [Rows]) -> (T, Vec<Write>) + Send,
    ) -> StoreResult<T> {
        self.decide_flushing(names, create, false, rule).await
    }

    /// `decide`, flushing the commit whatever it writes with `always_flush` (a fence raise).
    async fn decide_flushing<T: Default + Send>(
        &self,
        names: &[String],
        create: bool,
        always_flush: bool,
        mut rule: impl FnMut(i64, &mut [Rows]) -> (T, Vec<Write>) + Send,
    ) -> StoreResult<T> {
        let mut answer = T::default();
        self.backend
            .transact(names, create, &mut |now, rows| {
                let (a, writes) = rule(now, rows);
                answer = a;
                let flush =
                    always_flush || writes.iter().any(|w| matches!(w, Write::PutHolder { .. }));
                Decision { writes, flush }
            })
            .await?;
        Ok(answer)
    }
}

#[async_trait]
impl<B: Backend> Store for SqlStore<B> {
    fn describe(&self) -> &str {
        self.backend.describe()
    }

    /// The backend opened a session when it connected.
    fn reached(&self) -> bool {
        true
    }

    async fn shard_list(&self, tag: &str, write: TagWrite) -> StoreResult<String> {
        self.backend.shard_list(tag, write).await
    }

    async fn try_acquire(&self, req: &Acquire, queue: bool) -> StoreResult<Attempt> {
        let grant = GrantRequest {
            token: &req.token,
            modes: &req.modes,
            ttl_ms: ms(req.ttl),
            meta: &req.meta,
            queue,
            waiter_ttl_ms: ms(WAITER_TTL),
            bell: self.backend.bell(&req.token),
        };
        // Marked before the transaction is sent, since a timeout drops this future without
        // a word; cleared only once the answer is heard.
        self.mark_unheard(&req.token, true);
        let outcome = self
            .decide(&req.names, true, |now, rows| {
                let (o, writes) = rules::grant(rows, now, &grant);
                (Some(o), writes)
            })
            .await?;
        self.mark_unheard(&req.token, false);
        Ok(match outcome.expect("the transaction decided") {
            Outcome::Granted(g) => Attempt::Granted(g),
            Outcome::Busy(retry) => Attempt::Busy {
                retry_after: retry.map(|r| Duration::from_millis(r.max(0) as u64)),
            },
        })
    }

    async fn listen(&self, req: &Acquire) -> StoreResult<Box<dyn Listener>> {
        self.backend.listen(&req.token).await
    }

    async fn renew(&self, names: &[String], token: &str, ttl: Duration) -> StoreResult<bool> {
        let renewed = self
            .decide(names, false, |now, rows| {
                rules::renew(rows, now, token, ms(ttl))
            })
            .await?;
        if renewed {
            // The grant was applied after all, and its lease is being used (a quorum's other
            // stores granted it): from here it ends as any lease does.
            self.mark_unheard(token, false);
        }
        Ok(renewed)
    }

    /// An attempt whose answer was not heard is released blind first: while answers are lost,
    /// the usual release (read, then write) never gets past its first read, and a grant that
    /// was committed unheard would block the lock until it expires.
    ///
    /// The blind release leaves the record's `previous` alone, where the usual release says
    /// how the lease ended. An unheard grant never let its owner in, so the record still tells the truth
    /// about the last lease that did work: saying `released` would hide from the next holder
    /// that the lease before ran out mid-work. And where it did let its owner in (a quorum's
    /// other stores granted it, and no renewal has been heard here since), this store's older
    /// answer can only make the next holder more careful: the worst answer of a majority wins.
    async fn release(&self, names: &[String], token: &str, outcome: End) -> StoreResult<bool> {
        if self.is_unheard(token)
            && let Some(held) = self.backend.release_unheard(names, token).await
        {
            self.mark_unheard(token, false);
            return Ok(held);
        }
        let held = self
            .decide(names, false, |now, rows| {
                rules::release(rows, now, token, outcome)
            })
            .await?;
        self.mark_unheard(token, false);
        Ok(held)
    }

    async fn force_release(&self, names: &[String]) -> StoreResult<bool> {
        self.decide(names, false, |now, rows| rules::force(rows, now))
            .await
    }

    async fn raise_fence(&self, names: &[String], fences: &[u64]) -> StoreResult<()> {
        self.decide_flushing(names, true, true, |_, rows| {
            ((), rules::raise(rows, fences))
        })
        .await
    }

    async fn inspect(&self, name: &str) -> StoreResult<LockState> {
        let state = self
            .decide(&[name.to_string()], false, |now, rows| {
                (rows.first().map(|r| rules::view(r, now)), Vec::new())
            })
            .await?;
        Ok(state.unwrap_or_else(|| LockState {
            name: name.to_string(),
            ..LockState::default()
        }))
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<LockState>> {
        let names = self.backend.held_names(prefix).await?;
        super::held_states(self, names).await
    }

    async fn health(&self, query: HealthQuery) -> StoreResult<Health> {
        self.backend.health(query).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_spells_every_byte() {
        assert_eq!(super::hex("a'\\;é"), "61275c3bc3a9");
    }
}
