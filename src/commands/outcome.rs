//! Engine outcomes as the pinned exit codes.

use crate::engine::EngineError;
use crate::exit::{Error, ExitCode};
use crate::store::ErrorKind;

/// The pinned exit code for an engine outcome; the stores' failures by their kind.
pub fn engine_error(e: EngineError) -> Error {
    let code = match &e {
        EngineError::NotAcquired => ExitCode::NotAcquired,
        EngineError::Stores(s) => match s.kind() {
            ErrorKind::Refused => ExitCode::Refused,
            ErrorKind::Invalid => ExitCode::Usage,
            ErrorKind::Config => ExitCode::Config,
            ErrorKind::Unavailable | ErrorKind::Protocol | ErrorKind::LeaseGone => {
                ExitCode::Unavailable
            }
        },
        EngineError::Lost(_) => ExitCode::LockLost,
        EngineError::NotHolder => ExitCode::Failure,
    };
    Error::new(code, e.to_string())
}
