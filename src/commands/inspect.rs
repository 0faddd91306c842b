//! `dlock inspect`: who holds a lock, its fence, its waiters, and each store's view.

use serde_json::json;

use super::Ctx;
use super::engine_error;
use crate::cli::InspectArgs;
use crate::engine::{Merged, NameView, QuorumHolder};
use crate::exit::Result;
use crate::output::{Output, printable};
use crate::store::Holder;

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

pub fn expires(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(ms.div_ceil(1000))).to_string()
}

pub async fn run(args: InspectArgs, ctx: &Ctx) -> Result<i32> {
    let shard = ctx.shards.index_of(&args.name);
    let engine = &ctx.shards.all()[shard].engine;
    // A plain client is told when a store is a shard of a list (issue 26), at no extra wait.
    let (view, shard_records) = tokio::join!(engine.view(&args.name), ctx.shards.shard_records());
    for (store, fp) in &shard_records {
        ctx.out.warn(&format!(
            "{store} is a shard of a shard list (fingerprint {fp}): use that list's --shard \
             flags; without them lock, run and multilock are refused"
        ));
    }
    let view = view.quorate().map_err(engine_error)?;
    let quorum = view.stores.len() > 1;
    for (store, _, warnings) in &view.stores {
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
        (shard + 1, n, ctx.shards.all()[shard].label.as_str())
    });
    let shown = Shown {
        name: &args.name,
        merged: view.merged(),
        view: &view,
        on_shard,
    };
    if ctx.out.json {
        ctx.out.json_value(&shown.json(&ctx.namespace));
    } else {
        shown.print(&ctx.out);
    }
    Ok(0)
}

/// What `inspect` shows of a name.
struct Shown<'a> {
    name: &'a str,
    view: &'a NameView,
    /// The name over a majority of the stores.
    merged: Merged,
    /// The shard that holds the name (1-based), of how many, and its stores, when sharded.
    on_shard: Option<(usize, usize, &'a str)>,
}

impl Shown<'_> {
    /// How many of the stores that answered show a holder.
    fn held_on(&self) -> usize {
        let answered = self.view.answered();
        answered.iter().filter(|s| !s.holders.is_empty()).count()
    }

    fn json(&self, namespace: &str) -> serde_json::Value {
        let (view, merged) = (self.view, &self.merged);
        let stores: Vec<_> = view
            .stores
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
        let answered = view.answered().len();
        let held_on = self.held_on();
        let mut v = json!({
            "name": self.name,
            "namespace": namespace,
            "held": !merged.holders.is_empty(),
            "holders": holders_json(&merged.holders),
            "waiters": merged.waiters,
            "fence": merged.fence,
            "previous": merged.previous,
            "previous_exit": merged.previous.exit(),
            "quorum": {
                "stores": view.stores.len(),
                "need": view.need,
                "held": held_on,
                "free": answered - held_on,
                "unreachable": view.stores.len() - answered,
            },
            "stores": stores,
        });
        if let Some((i, n, label)) = self.on_shard {
            v["shard"] = json!({ "shard": i, "of": n, "stores": label });
        }
        v
    }

    fn print(&self, out: &Output) {
        let merged = &self.merged;
        let state = if merged.holders.is_empty() {
            out.paint("free", |s| colored::Colorize::green(s))
        } else {
            out.paint("held", |s| colored::Colorize::red(s))
        };
        out.line(&format!("{}  {state}", printable(self.name)));
        if let Some((i, n, label)) = self.on_shard {
            out.line(&format!("  shard     {i} of {n}: {}", printable(label)));
        }
        for q in &merged.holders {
            print_holder(out, &q.holder);
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
        if self.view.stores.len() > 1 {
            self.print_stores(out);
        }
    }

    /// Each store's answer, and the owners that hold the name on some stores but no majority.
    fn print_stores(&self, out: &Output) {
        let stores = &self.view.stores;
        let unreachable = stores.len() - self.view.answered().len();
        let mut summary = format!("{}/{} held", self.held_on(), stores.len());
        if unreachable > 0 {
            summary.push_str(&format!(", {unreachable} unreachable"));
        }
        out.line(&format!(
            "  stores    {summary} (majority {})",
            self.view.need
        ));
        for (store, r, _) in stores {
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
                    let detail = e.strip_prefix(&format!("{store}: ")).unwrap_or(&e);
                    format!("unreachable: {detail}")
                }
            };
            out.line(&format!("            {store}  {s}"));
        }
        for q in &self.merged.partial {
            out.line(&format!(
                "  partial   {} on {} store(s), not a majority",
                q.holder.owner, q.stores
            ));
        }
    }
}

/// A holder's lines: who, since when, until when, its fence, and what it said of itself.
fn print_holder(out: &Output, h: &Holder) {
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
