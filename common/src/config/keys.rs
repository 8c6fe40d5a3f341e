//! The experiment file's keys, from its types: a JSON Schema (what editors with TOML schema
//! support read, `docs/experiment.schema.json`) and the one-line reference `flint keys` prints.

use schemars::Schema;
use serde_json::Value;

use super::file::ExperimentFile;

/// The JSON Schema of an experiment file, built once per process (every override asks it
/// whether its key holds text).
pub fn schema() -> &'static Schema {
    static SCHEMA: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| schemars::schema_for!(ExperimentFile))
}

/// The schema as `docs/experiment.schema.json` holds it.
pub fn schema_text() -> String {
    let text = serde_json::to_string_pretty(schema()).expect("a schema serialises to json");
    text + "\n"
}

/// One key: its dotted name, its default (TOML) where it has one, whether the file must give
/// it, and its doc's first sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub default: Option<String>,
    pub required: bool,
    pub doc: String,
}

/// Every key of the file: the top-level ones, then each section's, by name.
pub fn keys() -> Vec<Key> {
    let schema = schema();
    let root = schema.as_value();
    let mut out = Vec::new();
    collect(root, root, "", &mut out);
    out.sort_by_key(|k| (k.name.contains('.'), k.name.clone()));
    out
}

fn collect(root: &Value, node: &Value, prefix: &str, out: &mut Vec<Key>) {
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        let key = format!("{prefix}{name}");
        match section(root, property) {
            Some(section) => collect(root, section, &format!("{key}."), out),
            None => out.push(Key {
                name: key,
                default: property
                    .get("default")
                    .filter(|d| !d.is_null())
                    .map(toml_text),
                required: required.contains(&name.as_str()),
                doc: first_sentence(description(root, property)),
            }),
        }
    }
}

/// Whether `key` (dotted, as `--set` names it) holds text: an override of it is taken as given.
pub fn holds_text(key: &str) -> bool {
    let Some(node) = node_of(key) else {
        return false;
    };
    let is_string = |t: &Value| t == "string";
    match node.get("type") {
        Some(Value::Array(types)) => types.iter().any(is_string),
        Some(t) => is_string(t),
        None => false,
    }
}

/// The text values `key` (dotted) allows, where the schema lists them (an enum of strings,
/// or one of constants); none for a free value.
pub fn choices(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(node) = node_of(key) {
        constants(schema().as_value(), node, &mut out);
    }
    out
}

/// The schema node of `key` (dotted, as `--set` names it), its `$ref`s followed.
fn node_of(key: &str) -> Option<&'static Value> {
    let root = schema().as_value();
    let mut node = root;
    for part in key.split('.') {
        let property = node.get("properties")?.get(part)?;
        node = section(root, property).unwrap_or_else(|| resolve(root, property));
    }
    Some(node)
}

fn constants(root: &Value, node: &Value, out: &mut Vec<String>) {
    let node = resolve(root, node);
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        out.extend(values.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(value) = node.get("const").and_then(Value::as_str) {
        out.push(value.to_string());
    }
    for alternatives in ["oneOf", "anyOf"] {
        for alternative in node
            .get(alternatives)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            constants(root, alternative, out);
        }
    }
}

/// The table a property holds, where it is a section (`[tm]`) or an array of tables
/// (`[[clients]]`), following `$ref`s and optional (`null`) alternatives.
fn section<'a>(root: &'a Value, property: &'a Value) -> Option<&'a Value> {
    let target = resolve(root, property);
    if target.get("properties").is_some() {
        return Some(target);
    }
    if let Some(items) = target.get("items") {
        let items = resolve(root, items);
        return items.get("properties").is_some().then_some(items);
    }
    target
        .get("anyOf")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|alternative| section(root, alternative))
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
        return node;
    };
    let path = reference.trim_start_matches('#');
    root.pointer(path).unwrap_or(node)
}

/// A property's own doc, or its type's where the property has none.
fn description<'a>(root: &'a Value, property: &'a Value) -> &'a str {
    property
        .get("description")
        .or_else(|| resolve(root, property).get("description"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Up to the first full stop before a capital letter (not "eq. 9" or "e.g. the").
fn first_sentence(doc: &str) -> String {
    let doc = doc.split("\n\n").next().unwrap_or("").replace('\n', " ");
    let end = doc
        .match_indices(". ")
        .find(|(at, _)| doc[at + 2..].chars().next().is_some_and(char::is_uppercase));
    match end {
        Some((at, _)) => doc[..=at].trim().to_string(),
        None => doc.trim().to_string(),
    }
}

fn toml_text(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data.global_test_fraction`'s line names exactly the strategies with one global model
    /// (the ones the check lets hold a shared test set).
    #[test]
    fn the_shared_test_sets_line_names_the_strategies_that_take_one() {
        use crate::strategy::{ModelKind, StrategyKind};
        let keys = keys();
        let doc = &keys
            .iter()
            .find(|k| k.name == "data.global_test_fraction")
            .expect("the key")
            .doc;
        let named: Vec<&str> = doc
            .split(|c: char| !(c.is_alphanumeric() || c == '-'))
            .collect();
        for kind in StrategyKind::ALL {
            let name = kind.name();
            // The networks read images only, whose shared test set is never this key's.
            let facts = kind.facts();
            let takes_one = facts.one_model && facts.model != Some(ModelKind::Cnn);
            assert_eq!(named.contains(&name.as_str()), takes_one, "{name}: {doc}");
        }
    }

    #[test]
    fn every_section_key_is_listed_with_its_default() {
        let keys = keys();
        let find = |name: &str| keys.iter().find(|k| k.name == name);
        let clauses = find("tm.clauses").expect("tm.clauses");
        assert_eq!(clauses.default.as_deref(), Some("100"));
        assert!(clauses.doc.starts_with("Clauses per class"), "{clauses:?}");
        assert_eq!(
            find("fedtmos.preset").and_then(|k| k.default.clone()),
            Some("\"recommended\"".into())
        );
        assert_eq!(
            find("server.round_timeout_secs").and_then(|k| k.default.clone()),
            Some("600.0".into())
        );
        for name in [
            "name",
            "rounds",
            "data.source",
            "partition.kind",
            "clients.name",
        ] {
            assert!(find(name).is_some(), "{name}");
        }
    }

    /// The value of `key` in `section`, as JSON.
    fn field(section: impl serde::Serialize, key: &str) -> Value {
        serde_json::to_value(section).unwrap()[key].clone()
    }

    /// Where a key's default is not the section's own `Default` (the key is an `Option`, its
    /// default the checked form's), the schema states it by hand: each such default is the
    /// one the code applies.
    #[test]
    fn the_schemas_written_defaults_are_the_ones_the_code_applies() {
        use crate::model::logreg::{LogRegHyper, LogRegSection};
        use crate::model::tm::{TmHyper, TmSection};
        use crate::strategy::fcm::FcmSection;
        use crate::strategy::fedtmos::FedTmosSection;
        let schema = schema().as_value();
        let stated = |def: &str, key: &str| {
            let default = schema["$defs"][def]["properties"][key]["default"].clone();
            assert!(!default.is_null(), "{def}.{key} states no default");
            default
        };
        let same = |stated: Value, applied: Value, what: &str| {
            let number = |v: &Value| v.as_f64();
            match (number(&stated), number(&applied)) {
                (Some(a), Some(b)) => assert_eq!(a, b, "{what}"),
                _ => assert_eq!(stated, applied, "{what}"),
            }
        };
        let tm = TmSection::from(TmHyper::default());
        for key in [
            "clauses",
            "t",
            "s",
            "state_bits",
            "weighted",
            "boost_true_positive",
        ] {
            same(stated("TmSection", key), field(tm, key), key);
        }
        let sampling = field(tm, "negative_sampling");
        same(
            stated("TmSection", "negative_sampling"),
            sampling,
            "negative_sampling",
        );
        let logreg = LogRegSection::from(LogRegHyper::default());
        for key in ["learning_rate", "local_epochs", "l2"] {
            same(stated("LogRegSection", key), field(logreg, key), key);
        }
        let (fcm, _) = FcmSection::default().check().unwrap();
        let iterations = Value::from(fcm.max_iterations);
        same(
            stated("FcmSection", "max_iterations"),
            iterations,
            "max_iterations",
        );
        let fedtmos = FedTmosSection::default().check().unwrap();
        let top_k = Value::from(fedtmos.server.top_k);
        same(stated("FedTmosSection", "top_k"), top_k, "top_k");
        let resolution = Value::from(fedtmos.server.weight_resolution);
        same(
            stated("FedTmosSection", "weight_resolution"),
            resolution,
            "weight_resolution",
        );
        let order = serde_json::to_value(fedtmos.epoch_order).unwrap();
        same(
            stated("FedTmosSection", "epoch_order"),
            order,
            "epoch_order",
        );
        let d = crate::data::DataDefaults::default();
        for (key, applied) in [
            ("test_fraction", Value::from(d.test_fraction)),
            ("samples", Value::from(d.samples)),
            ("separation", Value::from(d.separation)),
            ("delimiter", Value::from(d.delimiter.to_string())),
            ("threshold", Value::from(d.threshold)),
            ("adaptive_block", Value::from(d.adaptive_block)),
            ("adaptive_c", Value::from(d.adaptive_c)),
            ("levels", Value::from(d.levels)),
        ] {
            same(stated("DataSection", key), applied, key);
        }
        let p = crate::data::partition::PartitionDefaults::default();
        for (key, applied) in [
            ("samples", Value::from(p.samples)),
            ("iid_alpha", Value::from(p.iid_alpha)),
            ("non_iid_alpha", Value::from(p.non_iid_alpha)),
            ("alpha", Value::from(p.alpha)),
            ("beta", Value::from(p.beta)),
        ] {
            same(stated("PartitionSection", key), applied, key);
        }
    }

    /// `docs/experiment.schema.json` is what the code's types say; regenerate it with
    /// `flint keys --schema > docs/experiment.schema.json`.
    #[test]
    fn the_committed_schema_matches_the_types() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/experiment.schema.json"
        );
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == schema_text(),
            "docs/experiment.schema.json is stale: run `cargo run -p flint -- keys --schema > docs/experiment.schema.json`"
        );
    }
}
