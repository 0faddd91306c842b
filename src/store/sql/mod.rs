//! What the PostgreSQL and MySQL/MariaDB stores share beyond the record engine
//! (`store::record`): redialling, statements sent as text, `doctor`'s durability finding and
//! the URL options.

use std::time::Duration;

use super::server::ServerUrl;
use super::tls::Files;
use super::{Finding, HealthQuery, Severity, StoreError, StoreResult};

// The record engine, where the SQL stores first had it (a backend written against
// `sql::Backend` builds unchanged).
#[allow(unused_imports)]
pub use super::record::{Backend, Decide, Decision, RecordStore as SqlStore, rules};

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

#[cfg(test)]
mod tests {
    #[test]
    fn hex_spells_every_byte() {
        assert_eq!(super::hex("a'\\;é"), "61275c3bc3a9");
    }
}
