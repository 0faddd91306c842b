//! `dlock inspect`: who holds a lock, its fence, its waiters, and each store's view.

use serde::Serialize;
use serde_json::json;

use super::Ctx;
use super::engine_error;
use crate::cli::InspectArgs;
use crate::engine::EngineError;
use crate::exit::Result;
use crate::output::printable;
use crate::store::{ErrorKind, Holder, LockState, Previous, StoreError, StoreResult, Waiter};

/// A holder as the quorum sees it: the owner's lease on how many stores.
#[derive(Serialize, Clone)]
pub struct QuorumHolder {
    #[serde(flatten)]
    pub holder: Holder,
    pub stores: usize,
}

/// One name's state over all stores that answered.
pub struct Merged {
    /// Owners that hold it on a majority (on one store: every holder).
    pub holders: Vec<QuorumHolder>,
    /// Owners that hold it on some stores but not a majority.
    pub partial: Vec<QuorumHolder>,
    pub waiters: Vec<Waiter>,
    pub fence: u64,
    pub previous: Previous,
}

pub fn merge(states: &[&LockState], need: usize) -> Merged {
    let mut by_owner: Vec<QuorumHolder> = Vec::new();
    for st in states {
        for h in &st.holders {
            match by_owner.iter_mut().find(|q| q.holder.owner == h.owner) {
                Some(q) => {
                    q.stores += 1;
                    q.holder.ttl_left_ms = q.holder.ttl_left_ms.min(h.ttl_left_ms);
                    q.holder.fence = q.holder.fence.max(h.fence);
                }
                None => by_owner.push(QuorumHolder {
                    holder: h.clone(),
                    stores: 1,
                }),
            }
        }
    }
    by_owner.sort_by_key(|q| q.holder.fence);
    let (holders, partial) = by_owner.into_iter().partition(|q| q.stores >= need);
    Merged {
        holders,
        partial,
        waiters: states
            .iter()
            .map(|s| &s.waiters)
            .find(|w| !w.is_empty())
            .cloned()
            .unwrap_or_default(),
        fence: states.iter().map(|s| s.fence).max().unwrap_or(0),
        previous: states.iter().map(|s| s.previous).max().unwrap_or_default(),
    }
}

/// The owner as people name machines: user@host pid N.
pub fn who(h: &Holder) -> String {
    crate::meta::who(&h.meta)
}

/// The holders for `--json`, each with the pid of the process that holds and whether it still
/// runs (null: another host's).
fn holders_json(holders: &[QuorumHolder]) -> Vec<serde_json::Value> {
    holders
        .iter()
        .map(|q| {
            let mut v = json!(q);
            v["pid"] = json!(crate::meta::holder_pid(&q.holder.meta));
            v["alive"] = json!(crate::meta::alive(&q.holder.meta));
            v["keepalive"] = super::keepalive::shown_json(&q.holder.meta);
            v
        })
        .collect()
}

/// The states of the stores that answered, or the error to exit with when fewer than `need`
/// did: refused (77) if any store refused, else unavailable (69).
pub fn answered(
    results: &[(String, StoreResult<LockState>, Vec<String>)],
    need: usize,
) -> Result<Vec<&LockState>> {
    let answered: Vec<&LockState> = results
        .iter()
        .filter_map(|(_, r, _)| r.as_ref().ok())
        .collect();
    if answered.len() >= need {
        return Ok(answered);
    }
    let errors = results
        .iter()
        .filter_map(|(_, r, _)| r.as_ref().err())
        .map(|e| match e.kind() {
            ErrorKind::Refused => e.clone(),
            _ => StoreError::unavailable(e.to_string()),
        });
    let refused = errors.clone().any(|e| e.kind() == ErrorKind::Refused);
    let msg: Vec<String> = errors.map(|e| e.to_string()).collect();
    let msg = msg.join("; ");
    Err(engine_error(if refused {
        EngineError::Refused(msg)
    } else {
        EngineError::Unavailable(msg)
    }))
}

pub fn expires(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(ms.div_ceil(1000))).to_string()
}

pub async fn run(args: InspectArgs, ctx: &Ctx) -> Result<i32> {
    let shard = ctx.shards.index_of(&args.name);
    let engine = &ctx.shards.all()[shard].engine;
    // A plain client is told when a store is a shard of a list (issue 26), at no extra wait.
    let (results, shard_records) =
        tokio::join!(engine.inspect(&args.name), ctx.shards.shard_records());
    for (store, fp) in &shard_records {
        ctx.out.warn(&format!(
            "{store} is a shard of a shard list (fingerprint {fp}): use that list's --shard \
             flags; without them lock, run and multilock are refused"
        ));
    }
    let need = engine.majority();
    let answered = answered(&results, need)?;
    let merged = merge(&answered, need);
    let held_on = answered.iter().filter(|s| !s.holders.is_empty()).count();
    let unreachable = results.len() - answered.len();
    let quorum = results.len() > 1;
    for (store, _, warnings) in &results {
        if ctx.out.verbose()
            && let Some(why) = crate::store::file::dir::explain(store)
        {
            ctx.out.notice(&format!("{store}: {why}"));
        }
        if quorum {
            for w in warnings {
                ctx.out.warn(&format!("{store} {w}"));
            }
        }
    }
    // Which shard holds the name, when there are several.
    let on_shard = ctx.shards.is_sharded().then(|| {
        let n = ctx.shards.all().len();
        (shard + 1, n, &ctx.shards.all()[shard].label)
    });
    if ctx.out.json {
        let stores: Vec<_> = results
            .iter()
            .map(|(store, r, warnings)| match r {
                Ok(st) => json!({
                    "store": store,
                    "state": if st.holders.is_empty() { "free" } else { "held" },
                    "holders": st.holders,
                    "fence": st.fence,
                    "warnings": warnings,
                }),
                Err(e) => json!({ "store": store, "state": "unreachable", "error": e.to_string(), "warnings": warnings }),
            })
            .collect();
        let mut v = json!({
            "name": args.name,
            "namespace": ctx.namespace,
            "held": !merged.holders.is_empty(),
            "holders": holders_json(&merged.holders),
            "waiters": merged.waiters,
            "fence": merged.fence,
            "previous": merged.previous,
            "previous_exit": merged.previous.exit(),
            "quorum": {
                "stores": results.len(),
                "need": need,
                "held": held_on,
                "free": answered.len() - held_on,
                "unreachable": unreachable,
            },
            "stores": stores,
        });
        if let Some((i, n, label)) = on_shard {
            v["shard"] = json!({ "shard": i, "of": n, "stores": label });
        }
        ctx.out.json_value(&v);
        return Ok(0);
    }
    let out = &ctx.out;
    let state = if merged.holders.is_empty() {
        out.paint("free", |s| colored::Colorize::green(s))
    } else {
        out.paint("held", |s| colored::Colorize::red(s))
    };
    out.line(&format!("{}  {state}", args.name));
    if let Some((i, n, label)) = on_shard {
        out.line(&format!("  shard     {i} of {n}: {label}"));
    }
    for q in &merged.holders {
        let h = &q.holder;
        let since = h
            .meta
            .get("acquired_at")
            .and_then(|v| v.as_str())
            .map_or("?".into(), printable);
        out.line(&format!(
            "  holder    {}  {}  {}  since {since}  expires in {}  fence {}",
            h.owner,
            h.mode,
            who(h),
            expires(h.ttl_left_ms),
            h.fence
        ));
        if let Some(cmd) = h
            .meta
            .get("command")
            .and_then(|v| v.as_str())
            .filter(|c| !c.is_empty())
        {
            out.line(&format!("            command: {}", printable(cmd)));
        }
        if let Some(reason) = crate::meta::field(&h.meta, "reason") {
            out.line(&format!(
                "            reason: {}",
                crate::meta::printable(reason)
            ));
        }
        if let Some(ci) = crate::meta::field(&h.meta, "ci") {
            out.line(&format!("            ci: {}", crate::meta::printable(ci)));
        }
        if let Some(k) = super::keepalive::shown_line(&h.meta) {
            out.line(&format!("            {k}"));
        }
    }
    out.line(&format!("  fence     {}", merged.fence));
    out.line(&format!("  previous  {}", merged.previous));
    if !merged.waiters.is_empty() {
        let w: Vec<String> = merged
            .waiters
            .iter()
            .map(|w| format!("{} ({})", w.owner, w.mode))
            .collect();
        out.line(&format!("  waiters   {}: {}", w.len(), w.join(", ")));
    }
    if quorum {
        let mut summary = format!("{held_on}/{} held", results.len());
        if unreachable > 0 {
            summary.push_str(&format!(", {unreachable} unreachable"));
        }
        out.line(&format!("  stores    {summary} (majority {need})"));
        for (store, r, _) in &results {
            let s = match r {
                Ok(st) if st.holders.is_empty() => "free".to_string(),
                Ok(st) => format!(
                    "held by {}",
                    st.holders
                        .iter()
                        .map(|h| h.owner.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(e) => {
                    let e = e.to_string();
                    let detail = e
                        .strip_prefix(&format!("{store}: "))
                        .unwrap_or(&e)
                        .to_string();
                    format!("unreachable: {detail}")
                }
            };
            out.line(&format!("            {store}  {s}"));
        }
        for q in &merged.partial {
            out.line(&format!(
                "  partial   {} on {} store(s), not a majority",
                q.holder.owner, q.stores
            ));
        }
    }
    Ok(0)
}
