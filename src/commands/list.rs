//! `dlock list [PREFIX]`: the locks that are held, one line each.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use serde_json::json;

use super::Ctx;
use super::engine_error;
use super::inspect::{Merged, expires, merge, who};
use crate::cli::ListArgs;
use crate::engine::{Engine, EngineError};
use crate::exit::Result;
use crate::meta::{field, printable};
use crate::store::LockState;

/// `  reason: TEXT  ci: URL`, escaped, for a holder that gave them.
fn why(meta: &serde_json::Value) -> String {
    let mut s = String::new();
    if let Some(r) = field(meta, "reason") {
        s.push_str(&format!("  reason: {}", printable(r)));
    }
    if let Some(c) = field(meta, "ci") {
        s.push_str(&format!("  ci: {}", printable(c)));
    }
    s
}

/// The held names of one shard, each merged over the shard's stores.
async fn shard_rows(engine: &Engine, prefix: &str) -> Result<Vec<(String, Merged)>> {
    let results = engine.list(prefix).await;
    let need = engine.majority();
    let mut errors = Vec::new();
    let mut by_name: BTreeMap<String, Vec<LockState>> = BTreeMap::new();
    let mut answered = 0;
    for (_, r) in results {
        match r {
            Ok(states) => {
                answered += 1;
                for st in states {
                    by_name.entry(st.name.clone()).or_default().push(st);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    if answered < need {
        return Err(engine_error(EngineError::Unavailable(errors.join("; "))));
    }
    let mut rows = Vec::new();
    for (name, states) in by_name {
        let refs: Vec<&LockState> = states.iter().collect();
        let m = merge(&refs, need);
        if !m.holders.is_empty() {
            rows.push((name, m));
        }
    }
    Ok(rows)
}

pub async fn run(args: ListArgs, ctx: &Ctx) -> Result<i32> {
    // Every shard at once; a shard without a majority fails the whole list, as a store
    // quorum without one does.
    let all = ctx.shards.all();
    let per_shard = join_all(all.iter().map(|s| shard_rows(&s.engine, &args.prefix))).await;
    let mut rows: Vec<(usize, String, Merged)> = Vec::new();
    for (i, r) in per_shard.into_iter().enumerate() {
        rows.extend(r?.into_iter().map(|(name, m)| (i, name, m)));
    }
    rows.sort_by(|a, b| a.1.cmp(&b.1));
    let sharded = ctx.shards.is_sharded();
    if ctx.out.json {
        let locks: Vec<_> = rows
            .iter()
            .map(|(shard, name, m)| {
                let mut v = json!({
                    "name": name,
                    "mode": m.holders[0].holder.mode,
                    "holders": m.holders,
                    "waiters": m.waiters.len(),
                    "fence": m.fence,
                });
                if sharded {
                    v["shard"] = json!(shard + 1);
                }
                v
            })
            .collect();
        ctx.out
            .json_value(&json!({ "namespace": ctx.namespace, "locks": locks }));
        return Ok(0);
    }
    if rows.is_empty() {
        return Ok(0);
    }
    let width = rows
        .iter()
        .map(|(_, n, _)| n.len())
        .max()
        .unwrap_or(4)
        .max(4);
    // The shard column only when there are shards: a plain table stays as scripts know it.
    let shard = |s: String| {
        if sharded {
            format!("{s:>5}  ")
        } else {
            String::new()
        }
    };
    ctx.out.line(&format!(
        "{:width$}  {}{:<9}  {:>7}  {:>6}  {:>9}  OWNER",
        "NAME",
        shard("SHARD".into()),
        "MODE",
        "HOLDERS",
        "FENCE",
        "EXPIRES"
    ));
    // The reason and the CI job follow the owner, each only when the holder gave one.
    for (i, name, m) in rows {
        let first = &m.holders[0].holder;
        ctx.out.line(&format!(
            "{name:width$}  {}{:<9}  {:>7}  {:>6}  {:>9}  {}",
            shard((i + 1).to_string()),
            first.mode.to_string(),
            m.holders.len(),
            m.fence,
            expires(
                m.holders
                    .iter()
                    .map(|q| q.holder.ttl_left_ms)
                    .max()
                    .unwrap_or(0)
            ),
            who(first) + &why(&first.meta)
        ));
    }
    Ok(0)
}
