//! Every exit code dlock can end with, and the error type that carries one.
//!
//! The codes are pinned by the design contract (scripts test them), so each has exactly one
//! home here and the rest of the program only says which situation it is in.

use std::fmt;

/// The pinned exit codes. `run` passes its child's own status through instead of `Success`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    Success,
    /// A token that does not hold the lock, or another plain failure.
    Failure,
    /// Bad flag, URL, duration or name (sysexits EX_USAGE).
    Usage,
    /// No majority of the stores could be reached in time (EX_UNAVAILABLE).
    Unavailable,
    /// `run`: the lease was lost while the child ran, and the child was stopped (EX_SOFTWARE).
    LockLost,
    /// Not acquired: busy with `-n`, or `-w` ran out (EX_TEMPFAIL; `-E` replaces it).
    NotAcquired,
    /// The store refused us: authentication or permission (EX_NOPERM).
    Refused,
    /// The store, as it is set up, can never do what was asked (EX_CONFIG): retrying is
    /// pointless until someone changes its configuration, unlike `Unavailable`.
    Config,
    /// dlock could not write its own result (`lock`'s token to a full disk or a closed
    /// stdout): the lock was released first, since nobody has its token (EX_IOERR).
    IoError,
    /// `run --max-runtime`: the command ran too long and was stopped (as `timeout(1)`).
    TimedOut,
    /// Any other number: a child's status passed through, 128+N for a signal, or `-E CODE`.
    Raw(i32),
}

impl From<ExitCode> for i32 {
    fn from(code: ExitCode) -> i32 {
        match code {
            ExitCode::Success => 0,
            ExitCode::Failure => 1,
            ExitCode::Usage => 64,
            ExitCode::Unavailable => 69,
            ExitCode::LockLost => 70,
            ExitCode::IoError => 74,
            ExitCode::NotAcquired => 75,
            ExitCode::Refused => 77,
            ExitCode::Config => 78,
            ExitCode::TimedOut => 124,
            ExitCode::Raw(n) => n,
        }
    }
}

/// An error that ends the command: what to tell the user, and the code to exit with.
#[derive(Debug)]
pub struct Error {
    pub code: ExitCode,
    pub message: String,
    /// What went wrong, in one word, for `--json`'s `error.kind` where the code alone does
    /// not say it (a `-E CODE`, a signal, a command that could not be run).
    kind: Option<&'static str>,
}

impl Error {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            kind: None,
        }
    }
    /// The same error, with the word `--json` gives as its `error.kind`.
    pub fn with_kind(mut self, kind: &'static str) -> Self {
        self.kind = Some(kind);
        self
    }
    /// Interrupted by signal `sig`: exit 128+N, nothing on stderr (the user sent it).
    pub fn interrupted(sig: i32) -> Self {
        Error::new(ExitCode::Raw(128 + sig), "").with_kind("interrupted")
    }
    /// `error.kind` under `--json`: the word given, else the one of the exit code.
    pub fn kind(&self) -> &'static str {
        self.kind.unwrap_or(match self.code {
            ExitCode::Success => "none",
            ExitCode::Failure | ExitCode::Raw(_) => "failure",
            ExitCode::Usage => "usage",
            ExitCode::Unavailable => "unavailable",
            ExitCode::LockLost => "lock_lost",
            ExitCode::NotAcquired => "not_acquired",
            ExitCode::Refused => "refused",
            ExitCode::Config => "config",
            ExitCode::IoError => "io_error",
            ExitCode::TimedOut => "timed_out",
        })
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Error::new(ExitCode::Usage, message)
    }
    pub fn failure(message: impl Into<String>) -> Self {
        Error::new(ExitCode::Failure, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_contract() {
        let pinned = [
            (ExitCode::Success, 0),
            (ExitCode::Failure, 1),
            (ExitCode::Usage, 64),
            (ExitCode::Unavailable, 69),
            (ExitCode::LockLost, 70),
            (ExitCode::IoError, 74),
            (ExitCode::NotAcquired, 75),
            (ExitCode::Refused, 77),
            (ExitCode::Config, 78),
            (ExitCode::TimedOut, 124),
        ];
        for (code, n) in pinned {
            assert_eq!(i32::from(code), n, "{code:?}");
        }
    }
}
