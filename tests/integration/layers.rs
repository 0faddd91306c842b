//! The architecture the folders show, checked: each top-level module of `src/` references
//! (`crate::X`) only modules of its own layer or below, so nothing imports back up a layer,
//! and no two top-level modules import each other, directly or round a circle. A store knows
//! nothing of the engine or the command line; the engine knows stores only through their
//! contract; the supervisor knows no command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers from the ground up: the shared ground (clocks, names, exit codes, output), the
/// stores, the engine, the shard router, the supervisor, the command line and what
/// generates from it, the commands, and the entry points that dispatch to them.
const LAYERS: &[&[&str]] = &[
    &[
        "sys", "names", "meta", "exit", "events", "output", "metrics",
    ],
    &["store"],
    &["engine"],
    &["shard"],
    &["supervisor"],
    &["cli", "docs"],
    &["commands"],
    &["app", "parse", "usage", "main", "lib"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level modules `text` names through `crate::` outside comments, grouped imports
/// (`crate::{a::X, b}`) included.
fn referenced(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            out.extend(inner.split(',').filter_map(|p| first_segment(p.trim())));
        } else {
            out.extend(first_segment(rest));
        }
    }
    out
}

fn first_segment(path: &str) -> Option<String> {
    let seg: String = path
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!seg.is_empty()).then_some(seg)
}

/// Every edge between two different top-level modules: (from, to) -> a file that makes it.
fn edges() -> BTreeMap<(String, String), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = crate::common::files_under(&src);
    let rust = files
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "rs"));
    let mut edges = BTreeMap::new();
    for f in rust {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(f).unwrap();
        for m in referenced(&text) {
            if m != top && layer_of(&m).is_some() {
                edges
                    .entry((top.clone(), m))
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    edges
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let unplaced: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "place {unplaced:?} in LAYERS (tests/integration/layers.rs)"
    );
}

#[test]
fn no_module_imports_one_above_it() {
    let up: Vec<String> = edges()
        .into_iter()
        .filter(|((from, to), _)| layer_of(to) > layer_of(from))
        .map(|((from, to), file)| format!("{from} -> {to} (src/{file})"))
        .collect();
    assert!(up.is_empty(), "imports that run back up a layer: {up:?}");
}

#[test]
fn no_import_circles_between_top_level_modules() {
    let edges = edges();
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    // Depth-first, a module on the current path met again is a circle.
    fn visit<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| *p == m) {
            let mut circle: Vec<String> = path[i..].iter().map(|s| s.to_string()).collect();
            circle.push(m.to_string());
            return Some(circle);
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        for n in next.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for m in next.keys() {
        let circle = visit(m, &next, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "an import circle: {}",
            circle.unwrap().join(" -> ")
        );
    }
}

/// The checker itself can fail: an upward import and a circle are found in made-up text.
#[test]
fn the_scan_sees_plain_and_grouped_imports_but_not_comments() {
    let text = "use crate::engine::Engine;\n// crate::commands in a comment\n\
                use crate::{store::Store, sys};\nlet x = crate::output::printable(y);";
    let got: Vec<String> = referenced(text).into_iter().collect();
    assert_eq!(got, ["engine", "output", "store", "sys"]);
}
