//! `dlock shards adopt`: make the `--shard` list the one its stores serve, so a changed list
//! (a shard added, removed or re-formed) can be used. Every client of the old list must be
//! stopped first: adopt refuses while a lock is held, but cannot see a client that is about
//! to take one (see `crate::shard::record`).

use std::time::Duration;

use serde_json::json;

use super::Ctx;
use crate::cli::{ShardsAction, ShardsArgs};
use crate::exit::{Error, Result};

pub async fn run(args: ShardsArgs, ctx: &Ctx) -> Result<i32> {
    match args.action {
        ShardsAction::Adopt => adopt(ctx).await,
    }
}

async fn adopt(ctx: &Ctx) -> Result<i32> {
    let shards = &ctx.shards;
    if !shards.is_sharded() {
        return Err(Error::usage(
            "dlock shards adopt needs the new shard list: give it with --shard (repeated) or \
             DLOCK_SHARDS",
        ));
    }
    // Listing a store may take longer than one lock request; still bounded.
    let limit = shards.all()[0]
        .engine
        .store_timeout()
        .max(Duration::from_secs(2));
    let written = shards.adopt(limit).await?;
    let fp = shards.fingerprint();
    if ctx.out.json {
        ctx.out.json_value(&json!({
            "adopted": true,
            "fingerprint": fp,
            "shards": shards.all().iter().map(|s| &s.label).collect::<Vec<_>>(),
            "stores_written": written,
        }));
    } else {
        ctx.out.notice(&format!(
            "adopted the list of {} shard(s) (fingerprint {fp}) on {written} store(s)",
            shards.all().len()
        ));
    }
    Ok(0)
}
