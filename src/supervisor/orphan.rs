//! The release a watchdog asks for once dlock has died and the job's whole tree is gone: the
//! watchdog execs dlock's own command line with `exec::RELEASE_VAR` set (see
//! `exec::release`), and that dlock, instead of running the command again, releases the
//! lease the dead one held, so that the next holder enters about a kill grace after the crash
//! instead of a ttl later. The stores, namespace and shards come from the same command line
//! and environment as the dead dlock's; the names and the token from the job's variables.

use super::watchdog::exec::RELEASE_VAR;
use crate::shard::Shards;
use crate::store::Outcome;

/// The status the job ended with, when this process is such a release.
pub fn requested() -> Option<i32> {
    std::env::var(RELEASE_VAR).ok()?.parse().ok()
}

/// Release the dead dlock's lease. Nobody waits for this process and its output goes to
/// /dev/null: a store that does not answer leaves the lease to run out, as before.
/// The next holder is told the job failed, with its status: it was stopped because dlock died.
pub async fn release(shards: &Shards, status: i32) -> i32 {
    let names: Vec<String> = std::env::var("DLOCK_NAME")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let token = std::env::var("DLOCK_TOKEN").unwrap_or_default();
    if names.is_empty() || token.is_empty() {
        return 1;
    }
    shards
        .release(&names, &token, Outcome::Failed(Some(status)))
        .await;
    0
}
