//! `dlock extend`: push a lease's expiry out, if the token still holds it.

use serde_json::json;

use super::Ctx;
use super::{engine_error, millis};
use crate::cli::ExtendArgs;
use crate::engine::EngineError;
use crate::exit::{Error, Result};

pub async fn run(args: ExtendArgs, ctx: &Ctx) -> Result<i32> {
    let names = vec![args.name.clone()];
    let engine = ctx.shards.engine(&args.name);
    let tally = engine.extend(&names, &args.token, args.ttl).await;
    match engine.verdict(tally) {
        Ok(_) => {}
        Err(EngineError::NotHolder) => {
            return Err(Error::failure(format!(
                "that token does not hold {}: it expired, was released, or belongs to another lease",
                args.name
            ))
            .with_kind("not_holder"));
        }
        Err(e) => return Err(engine_error(e)),
    }
    if ctx.out.json {
        ctx.out
            .json_value(&json!({ "name": args.name, "ttl_ms": millis(args.ttl) }));
    } else {
        ctx.out.notice(&format!(
            "extended {} by {}",
            args.name,
            humantime::format_duration(args.ttl)
        ));
    }
    Ok(0)
}
