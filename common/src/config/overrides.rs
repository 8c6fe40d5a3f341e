//! The experiment file with its overrides applied, read into an [`ExperimentFile`]: each
//! override's value is TOML (a bare word is a string), set at its dotted key. An error names the
//! key and, read straight from the file, its line and column.

use crate::{FlintError, Result};

use super::file::ExperimentFile;

/// `text` with every `(key, value)` of `overrides` set, in order (the last one wins).
pub(super) fn read(text: &str, overrides: &[(String, String)]) -> Result<ExperimentFile> {
    if overrides.is_empty() {
        return deserialize(text, true).map_err(FlintError::from);
    }
    let mut doc: toml::Table = toml::from_str(text).map_err(|e| located(text, "", e, true))?;
    let keys: Vec<&str> = overrides.iter().map(|(k, _)| k.as_str()).collect();
    if let Ok(file) = deserialize(text, false) {
        for key in file.left_to_overrides(&keys) {
            remove(&mut doc, &key);
        }
    }
    for (key, raw) in overrides {
        set(&mut doc, key, value_of(key, raw)?)?;
    }
    let merged =
        toml::to_string(&doc).map_err(|e| FlintError::Config(format!("overrides: {e}")))?;
    // Line numbers of the merged text are not the file's: where the file alone fails the same
    // way, its error says where.
    let read = deserialize(&merged, false).map_err(|merged| match deserialize(text, true) {
        Err(own) if own.key == merged.key && own.message == merged.message => own,
        _ => merged,
    });
    read.map_err(FlintError::from)
}

/// Removes `key` (`section.key`, any depth) from `doc`, where it is.
fn remove(doc: &mut toml::Table, key: &str) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let Some(last) = parts.pop() else {
        return;
    };
    let mut table = doc;
    for part in parts {
        match table.get_mut(part) {
            Some(toml::Value::Table(t)) => table = t,
            _ => return,
        }
    }
    table.remove(last);
}

fn deserialize(text: &str, lines: bool) -> std::result::Result<ExperimentFile, ReadError> {
    let de = toml::de::Deserializer::parse(text).map_err(|e| located(text, "", e, lines))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        located(text, &path, e.into_inner(), lines)
    })
}

/// Why a file could not be read: the key, what is wrong, and where in the file (empty where
/// the text is not the file's own).
#[derive(Debug)]
struct ReadError {
    key: String,
    message: String,
    at: String,
}

impl From<ReadError> for FlintError {
    fn from(e: ReadError) -> Self {
        let key = match e.key.as_str() {
            "" | "." => String::new(),
            k => format!("{k}: "),
        };
        FlintError::Config(format!("{key}{}{}", e.message, e.at))
    }
}

/// The error `e` at `path`, with its line and column in `text` where `lines`.
fn located(text: &str, path: &str, e: toml::de::Error, lines: bool) -> ReadError {
    let at = match e.span() {
        Some(span) if lines => {
            let before = &text[..span.start.min(text.len())];
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let line = before.matches('\n').count() + 1;
            let column = before[start..].chars().count() + 1;
            format!(" (line {line}, column {column})")
        }
        _ => String::new(),
    };
    ReadError {
        key: path.to_string(),
        message: e.message().trim_end().to_string(),
        at,
    }
}

/// An override's value: the text itself for a key that holds text (`name`, `data.path`), else
/// TOML where it reads as a value (`3`, `true`, `[1, 2]`, `{ a = 1 }`), else the bare word as
/// a string (`sigmoid`).
fn value_of(key: &str, raw: &str) -> Result<toml::Value> {
    let parsed = toml::from_str::<toml::Table>(&format!("v = {raw}")).map(|mut t| t.remove("v"));
    let text = || toml::Value::String(raw.to_string());
    if super::keys::holds_text(key) {
        return Ok(match parsed {
            Ok(Some(v @ toml::Value::String(_))) => v,
            _ => text(),
        });
    }
    match parsed {
        Ok(Some(value)) => Ok(value),
        Err(e) if raw.trim_start().starts_with(['[', '{', '"']) => Err(FlintError::Config(
            format!("override {key}: {raw} is not a TOML value: {}", e.message()),
        )),
        _ => Ok(text()),
    }
}

/// Sets `key` (`section.key`, any depth) in `doc`, making the sections it names.
fn set(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<()> {
    let bad = |m: String| FlintError::Config(format!("override {key}: {m}"));
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts
        .pop()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| bad("empty key".into()))?;
    let mut table = doc;
    for part in parts {
        let entry = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(bad(format!("{part} is a value, not a section"))),
        };
    }
    table.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_toml_and_bare_words_as_strings() {
        let value = |key: &str, raw: &str| value_of(key, raw).unwrap();
        let text = |s: &str| toml::Value::String(s.into());
        assert_eq!(value("rounds", "3"), toml::Value::Integer(3));
        assert_eq!(value("tpfl.delta", "true"), toml::Value::Boolean(true));
        assert_eq!(value("fcm.activation", "sigmoid"), text("sigmoid"));
        let cuts = value("data.cuts", "[[0.5], [1.5, 2.5]]");
        assert_eq!(cuts.as_array().map(Vec::len), Some(2));
        let table = value("x", "{ a = 1 }");
        assert_eq!(table.get("a"), Some(&toml::Value::Integer(1)));
        // A key that holds text takes the text as given, whatever TOML would make of it.
        assert_eq!(value("name", "123"), text("123"));
        assert_eq!(value("name", "2024-06-01"), text("2024-06-01"));
        assert_eq!(value("data.path", "/data/x.csv"), text("/data/x.csv"));
        assert_eq!(value("data.source", "\"csv\""), text("csv"));
        let err = value_of("data.cuts", "[[0.5], [1.5]")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("override data.cuts: [[0.5], [1.5] is not a TOML value"),
            "{err}"
        );
    }

    #[test]
    fn a_key_through_a_value_is_refused() {
        let mut doc: toml::Table = toml::from_str("rounds = 2").unwrap();
        let two = toml::Value::Integer(2);
        let err = set(&mut doc, "rounds.x", two.clone()).unwrap_err();
        assert!(
            err.to_string().contains("rounds is a value, not a section"),
            "{err}"
        );
        set(&mut doc, "server.min_updates", two).unwrap();
        assert_eq!(doc["server"]["min_updates"], toml::Value::Integer(2));
    }

    #[test]
    fn an_error_in_the_file_keeps_its_place_beside_overrides() {
        let text = "name = \"x\"\nrounds = 2\nseed = -1\n";
        let err = read(text, &[("rounds".into(), "3".into())])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("seed: must be a whole number of at least 0, got -1 (line 3"),
            "{err}"
        );
        let err = read(text, &[("seed".into(), "-2".into())])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("seed: must be a whole number of at least 0, got -2"),
            "{err}"
        );
        assert!(!err.contains("line"), "{err}");
    }

    #[test]
    fn an_error_names_the_key_line_and_column() {
        let text = "name = \"x\"\nrounds = -3\n";
        let err = FlintError::from(deserialize(text, true).unwrap_err()).to_string();
        assert!(
            err.contains("rounds: must be a whole number of at least 1, got -3"),
            "{err}"
        );
        assert!(err.contains("(line 2, column 10)"), "{err}");
    }
}
