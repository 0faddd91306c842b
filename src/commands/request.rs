//! Building a grant request from a command's arguments.

use std::ffi::OsString;
use std::time::Duration;

use serde_json::json;

use crate::cli::{HolderArgs, ModeArgs};
use crate::store::{Acquire, Mode};

/// A request's mode in JSON: the one mode of all its names, or "mixed" (the names' own
/// modes are then in "modes").
pub fn mode_json(req: &Acquire) -> serde_json::Value {
    req.uniform().map_or_else(|| json!("mixed"), |m| json!(m))
}

pub fn mode(args: &ModeArgs) -> Mode {
    match (args.shared, args.limit) {
        (true, _) => Mode::Shared,
        (false, Some(k)) => Mode::Limit(k),
        (false, None) => Mode::Exclusive,
    }
}

/// A grant request for `named` (each name with its mode; put in canonical order: sorted,
/// without duplicates), with what the holder says of itself (`--reason`, the CI job) in its
/// metadata.
pub fn holder_request(
    mut named: Vec<(String, Mode)>,
    ttl: Duration,
    command: &[OsString],
    detached: bool,
    holder: &HolderArgs,
) -> Acquire {
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named.dedup_by(|a, b| a.0 == b.0);
    let (names, modes) = named.into_iter().unzip();
    Acquire {
        names,
        modes,
        token: crate::names::new_token(),
        ttl,
        meta: crate::meta::holder_with(command, holder.reason.as_deref()),
        detached,
    }
}

pub fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}
