//! `dlock unlock`: owner-checked release by token, or `--force` for any holder.

use serde_json::json;

use super::Ctx;
use super::engine_error;
use crate::cli::UnlockArgs;
use crate::engine::{EngineError, QuorumHolder, merge};
use crate::exit::{Error, Result};
use crate::meta;
use crate::store::Outcome;

pub async fn run(args: UnlockArgs, ctx: &Ctx) -> Result<i32> {
    let names = vec![args.name.clone()];
    // Whoever --force is about to break, read just before: the person breaking a lock (and
    // the one whose lock it was) should learn whose work was cut short, and since when.
    let broken = if args.force {
        holders(ctx, &args.name).await
    } else {
        Vec::new()
    };
    let engine = ctx.shards.engine(&args.name);
    let tally = match &args.token {
        // A script's own release: its work ended as it meant it to. A `lock --keepalive`
        // renewer of this token stops renewing first (one step for the script).
        Some(token) => {
            super::keepalive::stop::stop(token).await;
            engine.release(&names, token, Outcome::Released).await
        }
        None => engine.force_release(&names).await,
    };
    let released = match engine.verdict(tally) {
        Ok(_) => true,
        Err(EngineError::NotHolder) if args.force => false,
        Err(EngineError::NotHolder) => {
            return Err(Error::failure(format!(
                "that token does not hold {}: it expired, was released, or belongs to another lease; nothing was changed",
                args.name
            ))
            .with_kind("not_holder"));
        }
        Err(e) => return Err(engine_error(e)),
    };
    let broken: Vec<&QuorumHolder> = if released {
        broken.iter().collect()
    } else {
        Vec::new()
    };
    for q in &broken {
        let h = &q.holder;
        ctx.out.warn(&format!(
            "broke {}: it was held by {} ({}, fence {}, owner {})",
            meta::printable(&args.name),
            meta::summary(&h.meta),
            h.mode,
            h.fence,
            h.owner
        ));
    }
    if ctx.out.json {
        let broken: Vec<_> = broken
            .iter()
            .map(|q| {
                let mut v = serde_json::to_value(q).unwrap_or_default();
                v["held_for_ms"] =
                    json!(meta::held_for(&q.holder.meta).map(|d| d.as_millis() as u64));
                v
            })
            .collect();
        let mut v = json!({ "name": args.name, "released": released });
        if args.force {
            v["broken"] = json!(broken);
        }
        ctx.out.json_value(&v);
    } else if released {
        ctx.out.notice(&format!("released {}", args.name));
    } else {
        ctx.out.notice(&format!("{} was not held", args.name));
    }
    Ok(0)
}

/// Every holder any store reports for `name` (a failed read only means less to report).
async fn holders(ctx: &Ctx, name: &str) -> Vec<QuorumHolder> {
    let view = ctx.shards.engine(name).view(name).await;
    merge(&view.answered(), 1).holders
}
