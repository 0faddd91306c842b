//! How an engine call fails, and the one rule that turns the stores' failures into one error.

use crate::store::{ErrorKind, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("not acquired: the lock is held by someone else")]
    NotAcquired,
    /// Too few stores answered for a majority, or a store said that what was asked cannot be
    /// done. The store's own error where one store decides; over several, one that names each
    /// failing store, with the deciding store's error as its source (see `unreachable`). Its
    /// kind decides the exit code: unavailable (69), refused (77), invalid (64), config (78).
    #[error("{0}")]
    Stores(StoreError),
    /// The lease can no longer be held by a majority.
    #[error("{0}")]
    Lost(String),
    /// The token does not hold the lock (on enough stores).
    #[error("the token does not hold the lock")]
    NotHolder,
}

impl EngineError {
    /// What kind of failure the stores reported, where they failed.
    pub fn store_kind(&self) -> Option<ErrorKind> {
        match self {
            EngineError::Stores(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// Said by a wait that ends at once because its stores never answered this process: a wrong
/// URL fails fast, so `-w` did not apply (the checker tells these from a wait cut short).
pub const NOT_WAITED: &str = "no answer since dlock started, so not waited for";

/// The one error to report when too few of `n` stores answered: invalid wins (exit 64), then
/// config (78), then refused (77), otherwise unavailable (69); either way every failing store
/// is named on one line.
pub(super) fn unreachable(errors: Vec<StoreError>, n: usize, need: usize) -> EngineError {
    let kind = deciding_kind(&errors);
    let detail: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let mut msg = detail.join("; ");
    if n > 1 {
        msg = format!(
            "no majority of stores reachable ({} of {n} failed, {need} needed): {msg}",
            errors.len()
        );
    }
    one_of(errors, kind, msg)
}

/// The kind of failure that decides over several stores' errors: invalid (64), then config
/// (78), then refused (77), otherwise unavailable (69). Config before refused: a setting to
/// change says more than a permission, and neither is worth a retry.
pub(super) fn deciding_kind(errors: &[StoreError]) -> ErrorKind {
    let has = |kind| errors.iter().any(|e| e.kind() == kind);
    [ErrorKind::Invalid, ErrorKind::Config, ErrorKind::Refused]
        .into_iter()
        .find(|k| has(*k))
        .unwrap_or(ErrorKind::Unavailable)
}

/// The stores' failure of `kind`, said as `msg`: the deciding store's own error (the first of
/// that kind, else the first) when `msg` says just that, else a new one with it as the source.
pub(super) fn one_of(errors: Vec<StoreError>, kind: ErrorKind, msg: String) -> EngineError {
    let i = errors.iter().position(|e| e.kind() == kind).unwrap_or(0);
    let deciding = errors.into_iter().nth(i);
    EngineError::Stores(match deciding {
        Some(e) if e.kind() == kind && e.message() == msg => e,
        Some(e) => StoreError::new(kind, msg).with_source(e),
        None => StoreError::new(kind, msg),
    })
}

/// Why a renewal found the lease gone from `no` of `n` stores, with the reasons some gave.
pub(super) fn gone_message(why: &[String], no: usize, n: usize) -> String {
    match (why, n) {
        ([one], 1) => one.clone(),
        ([], 1) => "the lease is no longer held by the store (taken by `unlock --force`, run out, \
                    or the store's data deleted)"
            .into(),
        ([], _) => {
            format!("the lease is no longer held by a majority ({no} of {n} stores say it is gone)")
        }
        _ => format!(
            "the lease is no longer held by a majority ({no} of {n} stores say it is gone: {})",
            why.join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::ConnectionRefused)
    }

    #[test]
    fn one_store_keeps_its_error_whole() {
        let e = StoreError::refused("s1: no").with_source(io());
        let EngineError::Stores(kept) = unreachable(vec![e], 1, 1) else {
            panic!("not the stores' error");
        };
        assert_eq!(
            (kept.kind(), kept.message()),
            (ErrorKind::Refused, "s1: no")
        );
        let cause = kept.source().expect("the client's error kept");
        assert!(
            cause.downcast_ref::<std::io::Error>().is_some(),
            "{cause:?}"
        );
    }

    #[test]
    fn several_stores_keep_the_deciding_error_as_the_source() {
        let errors = vec![
            StoreError::unavailable("s1: down"),
            StoreError::refused("s2: no").with_source(io()),
        ];
        let e = unreachable(errors, 3, 2);
        assert_eq!(e.store_kind(), Some(ErrorKind::Refused));
        let EngineError::Stores(e) = e else {
            unreachable!()
        };
        assert!(e.message().contains("s1: down; s2: no"), "{e}");
        let deciding = e.source().expect("the refusing store's error");
        assert_eq!(deciding.to_string(), "s2: no");
        assert!(deciding.source().is_some(), "its own source is kept too");
    }
}
