//! `dlock unlock`: owner-checked release by token, or `--force` for any holder.

use serde_json::json;

use super::Ctx;
use super::engine_error;
use crate::cli::UnlockArgs;
use crate::engine::EngineError;
use crate::exit::{Error, Result};

pub async fn run(args: UnlockArgs, ctx: &Ctx) -> Result<i32> {
    let names = vec![args.name.clone()];
    let tally = match &args.token {
        Some(token) => ctx.engine.release(&names, token).await,
        None => ctx.engine.force_release(&names).await,
    };
    let released = match ctx.engine.verdict(tally) {
        Ok(_) => true,
        Err(EngineError::NotHolder) if args.force => false,
        Err(EngineError::NotHolder) => {
            return Err(Error::failure(format!(
                "that token does not hold {}: it expired, was released, or belongs to another lease; nothing was changed",
                args.name
            )));
        }
        Err(e) => return Err(engine_error(e)),
    };
    if ctx.out.json {
        ctx.out
            .json_value(&json!({ "name": args.name, "released": released }));
    } else if released {
        ctx.out.notice(&format!("released {}", args.name));
    } else {
        ctx.out.notice(&format!("{} was not held", args.name));
    }
    Ok(0)
}
