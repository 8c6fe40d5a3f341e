//! The core's modules form layers (docs/ARCHITECTURE.md): each imports only from the layers
//! above it, so there is no import cycle and settings flow one way (`config` may import the
//! algorithms, never the reverse). Read from the `use` paths of the sources, tests excluded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules of `flint-common`, by layer; a module may import from lower numbers.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("params", 0),
    ("rng", 0),
    ("metrics", 0),
    ("logging", 0),
    ("signal", 0),
    ("tls", 0),
    ("data", 1),
    ("model", 2),
    ("wire", 3),
    ("meter", 4),
    ("strategy", 4),
    ("config", 5),
    ("clients", 6),
];

/// The top-level modules a source names through `crate::…`.
fn imports(source: &str) -> BTreeSet<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => top_level_items(group),
            None => vec![rest],
        };
        for name in names {
            let first: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // Items of the crate root (`ClientId`, `Result`, …) are not modules.
            if first.starts_with(|c: char| c.is_ascii_lowercase()) {
                found.insert(first);
            }
        }
    }
    found
}

/// The items of a `{…}` group (its opening brace already taken), split at the commas outside
/// nested groups.
fn top_level_items(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 0usize, Vec::new());
    for (i, ch) in group.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(group[start..i].trim());
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(group[start..].trim());
    items
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_module_imports_only_from_the_layers_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue;
        }
        assert!(
            layer.contains_key(top.as_str()),
            "module {top} has no layer in tests/layers.rs"
        );
        for used in imports(&std::fs::read_to_string(f).unwrap()) {
            if used != top {
                edges.insert((top.clone(), used));
            }
        }
    }
    assert!(edges.len() > 10, "the scan found the imports: {edges:?}");
    let upward: Vec<String> = edges
        .iter()
        .filter(|(from, to)| layer[from.as_str()] <= layer[to.as_str()])
        .map(|(from, to)| format!("{from} imports {to}"))
        .collect();
    assert!(upward.is_empty(), "imports against the layers: {upward:?}");
}

#[test]
fn the_scan_reads_grouped_and_plain_paths() {
    let s = "use crate::data::Shard;\nuse crate::{ClientId, wire::{Update, proto}, model::fcm};\n\
             #[cfg(test)]\nmod tests { use crate::config::X; }";
    let got: Vec<String> = imports(s).into_iter().collect();
    assert_eq!(got, ["data", "model", "wire"]);
}
