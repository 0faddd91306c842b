//! `dlock check`: whether a token still holds a lock, for a script to ask before a step that
//! must not run unlocked (etcd-io/etcd#6127). Exit 0 while it holds; 1 (`not_holder`, as
//! `unlock` and `extend` say of a token that does not hold) when it does not; 69 (77 if a
//! store refused) when no majority of the stores answers: "not known" never passes for "held".

use serde_json::json;

use super::Ctx;
use super::engine_error;
use super::inspect::expires;
use crate::cli::CheckArgs;
use crate::exit::{Error, Result};

pub async fn run(args: CheckArgs, ctx: &Ctx) -> Result<i32> {
    let engine = ctx.shards.engine(&args.name);
    let view = engine
        .view(&args.name)
        .await
        .quorate()
        .map_err(engine_error)?;
    // The stores show a holder by the first digits of its token only (the token itself would
    // let any reader release the lock): a lease held by a majority under this token's digits.
    let owner = crate::names::owner_id(&args.token);
    let merged = view.merged();
    let ours = merged.holders.iter().find(|q| q.holder.owner == owner);
    if ctx.out.json {
        let mut v = json!({ "name": args.name, "held": ours.is_some() });
        if let Some(q) = ours {
            v["ttl_left_ms"] = json!(q.holder.ttl_left_ms);
            v["fence"] = json!(q.holder.fence);
        }
        ctx.out.json_value(&v);
    }
    match ours {
        Some(q) => {
            ctx.out.notice(&format!(
                "{} is held by this token (fence {}, expires in {})",
                crate::output::printable(&args.name),
                q.holder.fence,
                expires(q.holder.ttl_left_ms)
            ));
            Ok(0)
        }
        None => Err(Error::failure(format!(
            "that token does not hold {}: it expired, was released, was broken, or belongs \
             to another lease",
            crate::output::printable(&args.name)
        ))
        .with_kind("not_holder")),
    }
}
