//! `dlock wait NAME`: until the lock is free, without taking it ("hold `plan` until `apply`
//! finishes"). 0 when free, 75 (or `-E CODE`) when the wait runs out.

use serde_json::json;

use super::Ctx;
use super::waiting::{Outcome, Waiting};
use super::{engine_error, millis};
use crate::cli::WaitArgs;
use crate::engine::{EngineError, Wait};
use crate::events::Events;
use crate::exit::{Error, ExitCode, Result};
use crate::supervisor::signals::{STOPPING, Signals};

pub async fn run(args: WaitArgs, ctx: &Ctx) -> Result<i32> {
    let wait = match args.wait {
        Some(d) if d.is_zero() => Wait::No,
        Some(d) => Wait::For(d),
        None => Wait::Forever,
    };
    let mut signals = Signals::catch(&STOPPING)
        .map_err(|e| Error::failure(format!("cannot catch signals: {e}")))?;
    let names = vec![args.name.clone()];
    let start = tokio::time::Instant::now();
    let no_events = Events::default();
    let (busy, busy_seen) = tokio::sync::watch::channel(0u32);
    let mut waiting = Waiting::new(&ctx.out, &ctx.shards, &names, None, &no_events);
    let engine = ctx.shards.engine(&args.name);
    let waited_free = engine.wait_free(&args.name, wait, Some(&busy));
    let ended = match waiting
        .until_signal(&mut signals, busy_seen, waited_free)
        .await
    {
        Ok(r) => r,
        Err(sig) => {
            waiting.finish(Outcome::Interrupted);
            return Err(Error::interrupted(sig));
        }
    };
    let waited = start.elapsed();
    let free = match ended {
        Ok(()) => true,
        Err(EngineError::NotAcquired) => false,
        Err(e) => {
            waiting.finish(Outcome::Interrupted);
            return Err(engine_error(e));
        }
    };
    waiting.finish(if free { Outcome::Free } else { Outcome::GaveUp });
    // Who still holds it, as the waiting line names them.
    let held_by = match free {
        false if args.conflict_exit_code != Some(0) || ctx.out.json => {
            Waiting::holder(&ctx.shards, &names).await
        }
        _ => None,
    };
    if ctx.out.json {
        let mut v = json!({
            "name": args.name,
            "free": free,
            "waited_ms": millis(waited),
        });
        if !free {
            v["holder"] = json!(held_by.as_ref().map(|h| &h.1));
        }
        ctx.out.json_value(&v);
    }
    let by = held_by.map_or_else(String::new, |h| format!(" {}", h.0));
    if free {
        if !ctx.out.json {
            ctx.out.debug(&format!("{} is free", args.name));
        }
        return Ok(0);
    }
    let code = args
        .conflict_exit_code
        .map_or(ExitCode::NotAcquired, |c| ExitCode::Raw(c.into()));
    let msg = match args.wait {
        _ if args.conflict_exit_code == Some(0) => String::new(),
        Some(w) if !w.is_zero() => format!(
            "{} is still held{by} after waiting {}",
            args.name,
            humantime::format_duration(w)
        ),
        _ => format!("{} is held{by}", args.name),
    };
    Err(Error::new(code, msg).with_kind("not_acquired"))
}
