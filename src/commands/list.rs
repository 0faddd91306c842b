//! `dlock list [PREFIX]`: the locks that are held, one line each.

use futures_util::future::join_all;
use serde_json::json;

use super::Ctx;
use super::engine_error;
use super::inspect::{expires, who};
use crate::cli::{ListArgs, ListFormat};
use crate::engine::Merged;
use crate::exit::{Error, Result};
use crate::meta::{field, held_for, printable};

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

pub async fn run(args: ListArgs, ctx: &Ctx) -> Result<i32> {
    // Every shard at once; a shard without a majority fails the whole list, as a store
    // quorum without one does.
    let all = ctx.shards.all();
    let per_shard = join_all(all.iter().map(|s| s.engine.held(&args.prefix))).await;
    let mut rows: Vec<(usize, String, Merged)> = Vec::new();
    for (i, r) in per_shard.into_iter().enumerate() {
        let held = r.map_err(engine_error)?;
        rows.extend(held.into_iter().map(|(name, m)| (i, name, m)));
    }
    rows.sort_by(|a, b| a.1.cmp(&b.1));
    let sharded = ctx.shards.is_sharded();
    if args.names {
        for (_, name, _) in &rows {
            ctx.out.line(name);
        }
        return Ok(0);
    }
    if args.format == ListFormat::Prometheus {
        return print_prometheus(ctx, &rows);
    }
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
    // The shard column only when there are shards: a plain table stays as scripts know it.
    let mut head = vec![
        "NAME", "SHARD", "MODE", "HOLDERS", "FENCE", "EXPIRES", "OWNER",
    ];
    if !sharded {
        head.remove(1);
    }
    let mut table = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    // The reason and the CI job follow the owner, each only when the holder gave one.
    for (i, name, m) in rows {
        let first = &m.holders[0].holder;
        let left = m.holders.iter().map(|q| q.holder.ttl_left_ms).max();
        let mut row = vec![
            name,
            (i + 1).to_string(),
            first.mode.to_string(),
            m.holders.len().to_string(),
            m.fence.to_string(),
            expires(left.unwrap_or(0)),
            who(first) + &why(&first.meta),
        ];
        if !sharded {
            row.remove(1);
        }
        table.push(row);
    }
    for line in aligned(&table, &head) {
        ctx.out.line(&line);
    }
    Ok(0)
}

/// `--format prometheus`: the rows as `prometheus` writes them.
fn print_prometheus(ctx: &Ctx, rows: &[(usize, String, Merged)]) -> Result<i32> {
    if ctx.out.json {
        return Err(Error::usage(
            "--json and --format prometheus each choose the output; give one",
        ));
    }
    let named: Vec<(&String, &Merged)> = rows.iter().map(|(_, n, m)| (n, m)).collect();
    ctx.out.line(prometheus(&named, &ctx.namespace).trim_end());
    Ok(0)
}

/// One family's value for a held name (None: not known, no sample).
type Value = fn(&Merged) -> Option<String>;

/// The held names as the Prometheus text format: holders, the oldest holder's age (where
/// the holders said when they took it) and waiters, each labelled by namespace and lock.
fn prometheus(rows: &[(&String, &Merged)], namespace: &str) -> String {
    use crate::metrics::sample;
    let families: [(&str, &str, Value); 3] = [
        (
            "dlock_lock_holders",
            "Holders of the lock (on a majority of the stores).",
            |m| Some(m.holders.len().to_string()),
        ),
        (
            "dlock_lock_held_seconds",
            "How long the lock's oldest holder has held it.",
            |m| {
                let age = m
                    .holders
                    .iter()
                    .filter_map(|q| held_for(&q.holder.meta))
                    .max()?;
                // Holders say when they took it to the second.
                Some(age.as_secs().to_string())
            },
        ),
        ("dlock_lock_waiters", "Clients waiting for the lock.", |m| {
            Some(m.waiters.len().to_string())
        }),
    ];
    let mut out = String::new();
    for (family, help, value) in families {
        out.push_str(&format!("# HELP {family} {help}\n# TYPE {family} gauge\n"));
        for (name, m) in rows {
            if let Some(v) = value(m) {
                let labels = [("namespace", namespace), ("lock", name.as_str())];
                out.push_str(&sample(family, &labels, &v));
            }
        }
    }
    out
}

/// The table's lines, each column as wide as its widest cell (fences grow to 15 digits and
/// more): text columns to the left, numbers to the right, the last column unpadded.
fn aligned(table: &[Vec<String>], head: &[&str]) -> Vec<String> {
    let widths: Vec<usize> = (0..head.len())
        .map(|c| {
            table
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let last = head.len() - 1;
    table
        .iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, cell)| match head[c] {
                    _ if c == last => cell.clone(),
                    "NAME" | "MODE" => format!("{cell:<w$}", w = widths[c]),
                    _ => format!("{cell:>w$}", w = widths[c]),
                })
                .collect();
            cells.join("  ")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_line_up_whatever_their_width() {
        let head = ["NAME", "MODE", "FENCE", "OWNER"];
        let row = |n: &str, f: &str| vec![n.into(), "shared".into(), f.into(), "@h".into()];
        let table = vec![
            head.iter().map(|h| h.to_string()).collect(),
            row("a", "7"),
            row("longer-name", "217880068246000"),
        ];
        let lines = super::aligned(&table, &head);
        let at = |l: &str| l.find('@').or_else(|| l.find("OWNER")).unwrap();
        assert!(lines.iter().all(|l| at(l) == at(&lines[0])), "{lines:#?}");
    }
}
