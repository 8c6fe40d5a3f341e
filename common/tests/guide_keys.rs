//! The experiments guide's key tables and `flint keys` (the schema) describe one file: the
//! same keys, each text value the schema allows named in the guide's row, and the same default
//! wherever the guide gives a plain value.

use std::collections::BTreeMap;

use flint_common::config::keys::{Key, choices, keys};

const GUIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide/experiments.md");

/// Each key of the guide's "Keys" section, dotted as `--set` names it, with its table row.
fn guide_rows() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(GUIDE).expect("the experiments guide");
    let body = text
        .split("\n## Keys\n")
        .nth(1)
        .expect("a \"## Keys\" section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let mut rows = BTreeMap::new();
    let mut section = String::new();
    for line in body.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            // "Top level", "`[tm]`", "Clients" (`[[clients]]`); a heading of several sections
            // names its keys whole.
            section = match heading {
                "Top level" => String::new(),
                "Clients" => "clients".to_string(),
                h => h.trim_matches(|c| matches!(c, '`' | '[' | ']')).to_string(),
            };
            continue;
        }
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((name, _)) = rest.split_once('`') else {
            continue;
        };
        let key = match section.is_empty() || name.contains('.') {
            true => name.to_string(),
            false => format!("{section}.{name}"),
        };
        rows.insert(key, line.to_string());
    }
    rows
}

/// The row's second cell: the default as the guide writes it.
fn guide_default(row: &str) -> &str {
    row.split('|').nth(2).unwrap_or("").trim()
}

/// A plain default both can be compared on: a number, or one quoted or backticked word.
fn plain(text: &str) -> Option<String> {
    let t = text.trim_matches('`').trim_matches('"');
    if t.parse::<f64>().is_ok() {
        return Some(format!("{}", t.parse::<f64>().ok()?));
    }
    let word = t.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    (word && !t.is_empty() && text != t).then(|| t.to_string())
}

#[test]
fn the_guide_and_flint_keys_describe_the_same_keys() {
    let rows = guide_rows();
    let keys: BTreeMap<String, Key> = keys().into_iter().map(|k| (k.name.clone(), k)).collect();
    let mut wrong = Vec::new();
    for name in keys.keys().filter(|k| !rows.contains_key(*k)) {
        wrong.push(format!("{name}: in `flint keys`, not in the guide"));
    }
    for name in rows.keys().filter(|k| !keys.contains_key(*k)) {
        wrong.push(format!("{name}: in the guide, not in `flint keys`"));
    }
    for (name, key) in &keys {
        let Some(row) = rows.get(name) else { continue };
        for value in choices(name) {
            if !row.contains(&format!("`{value}`")) {
                wrong.push(format!("{name}: the guide's row does not name `{value}`"));
            }
        }
        let (Some(schema), Some(guide)) = (key.default.as_deref(), plain(guide_default(row)))
        else {
            continue;
        };
        let Some(schema) = plain(&format!("`{schema}`")) else {
            continue;
        };
        if schema != guide {
            wrong.push(format!(
                "{name}: default {schema} in `flint keys`, {guide} in the guide"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/guide/experiments.md and `flint keys` disagree:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_guide_is_read_whole() {
    let rows = guide_rows();
    assert!(
        rows.contains_key("name") && rows.contains_key("tm.clauses"),
        "{rows:?}"
    );
    assert_eq!(plain("`iid`").as_deref(), Some("iid"));
    assert_eq!(plain("0.20").as_deref(), Some("0.2"));
    assert_eq!(plain("all declared clients"), None);
}
