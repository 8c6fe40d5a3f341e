//! The core's modules form layers (docs/ARCHITECTURE.md): each imports only from the layers
//! above it, so there is no import cycle and settings flow one way (`config` may import the
//! algorithms, never the reverse). Below the modules, no source file of any crate imports one
//! that imports it back, however far round (a module's own file using its submodules is
//! containment, not an import). Read from the paths of the whole sources, every
//! `#[cfg(test)]` item left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules of `flint-common`, by layer; a module may import from lower numbers.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("hex", 0),
    ("link", 0),
    ("params", 0),
    ("parallel", 0),
    ("rng", 0),
    ("text", 0),
    ("metrics", 0),
    ("data", 1),
    ("secagg", 1),
    ("degenerate", 1),
    ("model", 2),
    ("wire", 3),
    ("strategy", 4),
    ("config", 5),
    ("clients", 6),
];

/// `source` without its `#[cfg(test)]` items (a test module, a test-only function or import):
/// what is left is what the build compiles.
fn without_tests(source: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut rest = source;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        rest = &rest[at + MARK.len()..];
        rest = &rest[item_end(rest)..];
    }
    out.push_str(rest);
    out
}

/// Where the item at the start of `code` ends: after its first `;` outside braces, or after
/// the braces it opens (strings, characters and comments skipped).
fn item_end(code: &str) -> usize {
    let bytes = code.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += code[i..].find('\n').unwrap_or(code.len() - i);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += code[i..].find("*/").map_or(code.len() - i, |e| e + 1);
            }
            b'"' => i += string_end(&code[i..]),
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                i += code[i + 2..].find('\'').map_or(code.len() - i, |e| e + 2);
            }
            b';' if depth == 0 => return i + 1,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    code.len()
}

/// The length of the string literal at the start of `code` less one (its closing quote's
/// index).
fn string_end(code: &str) -> usize {
    let bytes = code.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i,
            _ => i += 1,
        }
    }
    code.len()
}

/// The top-level modules a source names through `crate::…`.
fn imports(source: &str) -> BTreeSet<String> {
    let code = without_tests(source);
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

/// Code below a test module is read; the test items themselves are not.
#[test]
fn the_scan_skips_test_items_and_reads_what_follows_them() {
    let s = "use crate::data::Shard;\n#[cfg(test)]\nuse crate::rng::X;\n\
             #[cfg(test)]\nmod tests {\n    use crate::config::X;\n    fn f() { let _ = \"}\"; let _ = '{'; }\n}\n\
             // a comment with a } in it\nuse crate::model::Y;\n\
             #[cfg(test)]\nfn helper() -> u8 { 0 }\nuse crate::wire::Z;";
    let got: Vec<String> = imports(s).into_iter().collect();
    assert_eq!(got, ["data", "model", "wire"]);
}

#[test]
fn the_scan_reads_grouped_and_plain_paths() {
    let s = "use crate::data::Shard;\nuse crate::{ClientId, wire::{Update, proto}, model::fcm};\n\
             #[cfg(test)]\nmod tests { use crate::config::X; }";
    let got: Vec<String> = imports(s).into_iter().collect();
    assert_eq!(got, ["data", "model", "wire"]);
}

/// A source file's module path below its crate's `src/`: `a/b.rs` and `a/b/mod.rs` are
/// `["a", "b"]`; `lib.rs` and `main.rs` are the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// The paths a source names, each as module segments from the crate root: `crate::a::b`, and
/// `super::…` and `self::…` relative to `module`.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let starts_word = at == 0 || !code[..at].ends_with(|c: char| ident(c) || c == ':');
        let head: String = rest.chars().take_while(|&c| ident(c)).collect();
        let relative = head == "crate" || head == "super" || head == "self";
        if starts_word && relative && rest[head.len()..].starts_with("::") {
            let path: String = rest
                .chars()
                .take_while(|&c| {
                    ident(c) || c == ':' || c == '{' || c == '}' || c == ',' || c == ' ' || c == '*'
                })
                .collect();
            for full in expand(&path) {
                out.push(absolute(&full, module));
            }
            at += head.len() + 2;
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// `a::{b, c::{d}}` as `a::b`, `a::c::d`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.trim().trim_end_matches("::").to_string()];
    };
    let prefix = &path[..open];
    top_level_items(&path[open + 1..])
        .into_iter()
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

fn absolute(path: &str, module: &[String]) -> Vec<String> {
    let mut segments: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut base: Vec<String> = match segments.first() {
        Some(&"crate") => {
            segments.remove(0);
            Vec::new()
        }
        _ => module.to_vec(),
    };
    while let Some(&first) = segments.first() {
        match first {
            "super" => {
                base.pop();
            }
            "self" => {}
            _ => break,
        }
        segments.remove(0);
    }
    base.extend(segments.iter().map(|s| s.to_string()));
    base
}

/// The file of the deepest module `path` names, if it names one.
fn file_of(src: &Path, path: &[String]) -> Option<PathBuf> {
    (1..=path.len()).rev().find_map(|n| {
        let dir = path[..n].iter().fold(src.to_path_buf(), |p, s| p.join(s));
        let file = dir.with_extension("rs");
        let module = dir.join("mod.rs");
        [file, module].into_iter().find(|f| f.is_file())
    })
}

/// Every file-to-file import of one crate.
fn file_edges(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut edges = BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = without_tests(&text);
        let module = module_of(f.strip_prefix(src).unwrap());
        // A module's own file (`mod.rs`, `lib.rs`) contains the files below its folder.
        let contains = |t: &Path| {
            let own = matches!(
                f.file_name().and_then(|n| n.to_str()),
                Some("mod.rs" | "lib.rs" | "main.rs")
            );
            own && f.parent().is_some_and(|dir| t.starts_with(dir))
        };
        let to: BTreeSet<PathBuf> = named_paths(&code, &module)
            .iter()
            .filter_map(|p| file_of(src, p))
            .filter(|t| *t != f && !contains(t))
            .collect();
        edges.insert(f, to);
    }
    edges
}

/// A cycle of `edges`, if there is one, as the files round it.
fn cycle(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    fn visit(
        at: &PathBuf,
        edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        path: &mut Vec<PathBuf>,
        done: &mut BTreeSet<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            return Some(path[i..].to_vec());
        }
        if !done.insert(at.clone()) {
            return None;
        }
        path.push(at.clone());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_source_file_imports_one_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut total = 0;
    for krate in ["common", "shell", "server", "client", "deploy"] {
        let src = root.join(krate).join("src");
        let edges = file_edges(&src);
        total += edges.values().map(BTreeSet::len).sum::<usize>();
        if let Some(round) = cycle(&edges) {
            let names: Vec<String> = round
                .iter()
                .map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string())
                .collect();
            panic!("{krate}: an import cycle: {}", names.join(" → "));
        }
    }
    assert!(total > 50, "the scan found the imports: {total}");
}

#[test]
fn the_file_scan_resolves_relative_paths_and_finds_a_cycle() {
    let module = vec!["model".to_string(), "tm".to_string(), "infer".to_string()];
    let code = "use super::multiclass::argmax;\nuse crate::{data::booleanize::BitRows, rng};\n";
    let got = named_paths(code, &module);
    let want: Vec<Vec<String>> = [
        vec!["model", "tm", "multiclass", "argmax"],
        vec!["data", "booleanize", "BitRows"],
        vec!["rng"],
    ]
    .iter()
    .map(|v| v.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(got, want);
    let (a, b, c) = (PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c"));
    let mut edges = BTreeMap::from([
        (a.clone(), BTreeSet::from([b.clone()])),
        (b.clone(), BTreeSet::from([c.clone()])),
        (c.clone(), BTreeSet::new()),
    ]);
    assert_eq!(cycle(&edges), None);
    edges.get_mut(&c).unwrap().insert(a.clone());
    assert_eq!(cycle(&edges), Some(vec![a, b, c]));
}
