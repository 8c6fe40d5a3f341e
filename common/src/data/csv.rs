//! Delimited text files (by the `csv` crate: quoted fields, any one-byte delimiter; gzipped when
//! the name ends in `.gz`): numeric features, one label column, missing values by a declared
//! policy.

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Dataset;
use crate::{FlintError, Result};

/// What a missing feature value (one of [`CsvSpec::missing`]) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Missing {
    /// The file is refused, naming the first missing value (the default: nothing changes the
    /// data unless the experiment says so).
    #[default]
    Refuse,
    /// Rows with a missing feature or label are left out (the loader logs how many).
    Drop,
    /// A missing feature becomes the mean of that column over the client's own training split
    /// (see `shard`); a missing label still drops its row.
    Impute,
}

/// A column of a table: its 0-based index, or its name in the header line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Column {
    Index(usize),
    Name(String),
}

impl<'de> Deserialize<'de> for Column {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Column, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Column;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a column's 0-based index or its name in the header")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Column, E> {
                usize::try_from(v)
                    .map(Column::Index)
                    .map_err(|_| E::custom(format!("column {v} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Column, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "a column counts from 0 (or is named), got {v}"
                    ))),
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Column, E> {
                match v.trim() {
                    "" => Err(E::custom("an empty column name")),
                    name => Ok(Column::Name(name.to_string())),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// The tokens read as "missing" unless `data.missing` says otherwise.
pub const DEFAULT_MISSING: &[&str] = &["", "?", "NA", "NaN"];

#[derive(Debug, Clone, PartialEq)]
pub struct CsvSpec {
    /// Absolute, or relative to the data directory.
    pub path: String,
    /// 0-based; `None` = the last column.
    pub label_column: Option<usize>,
    /// Labels as written in the file, in class-index order (class 1 is the positive class).
    pub classes: Vec<String>,
    pub header: bool,
    /// The experiment does not say `data.header`: the file's first line decides
    /// ([`looks_like_header`]), and `header` is that decision once the file is read.
    pub detect_header: bool,
    /// 0-based columns to ignore (e.g. a record id).
    pub skip_columns: Vec<usize>,
    /// The label's and skipped columns' names, found in the header line when the file is read
    /// (into `label_column` and `skip_columns`).
    pub named: Named,
    /// The number of features the file must have (`data.features`); it is also how the server
    /// knows the model's shape without trusting a client's word.
    pub features: Option<usize>,
    pub delimiter: u8,
    /// Field values (after trimming) that mean "no value".
    pub missing: Vec<String>,
    pub on_missing: Missing,
    /// Feature names for a file without a header (the known datasets'); a header's names win.
    pub names: Vec<String>,
}

impl CsvSpec {
    /// A comma-separated file with its label last, no header, and the default missing tokens.
    pub fn new(path: impl Into<String>, classes: Vec<String>) -> CsvSpec {
        CsvSpec {
            path: path.into(),
            label_column: None,
            classes,
            header: false,
            detect_header: false,
            skip_columns: Vec::new(),
            named: Named::default(),
            features: None,
            delimiter: b',',
            missing: DEFAULT_MISSING.iter().map(|t| t.to_string()).collect(),
            on_missing: Missing::Refuse,
            names: Vec::new(),
        }
    }

    fn is_missing(&self, field: &str) -> bool {
        self.missing.iter().any(|m| m == field)
    }

    fn reader<'a>(&self, text: &'a [u8]) -> ::csv::Reader<&'a [u8]> {
        ::csv::ReaderBuilder::new()
            .delimiter(self.delimiter)
            .has_headers(false)
            .flexible(true)
            .trim(::csv::Trim::All)
            .from_reader(text)
    }
}

/// The file's bytes, gunzipped when its name ends in `.gz`.
fn read(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| FlintError::io(path, e))?;
    if path.extension().is_none_or(|e| e != "gz") {
        return Ok(bytes);
    }
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .map_err(|e| FlintError::data(path, format!("not a gzip file: {e}")))?;
    Ok(text)
}

pub fn load(path: &Path, spec: &CsvSpec) -> Result<Dataset> {
    let text = read(path)?;
    let data = parse_bytes(&text, spec).map_err(|reason| FlintError::data(path, reason))?;
    Ok(data)
}

/// What an experiment may leave to the file: its class labels, sorted (numerically when every
/// label is a number), and its feature columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub classes: Vec<String>,
    pub features: usize,
    /// Whether the file has a header line, as given or detected.
    pub header: bool,
}

/// The file's [`Shape`], read once.
pub fn infer_shape(path: &Path, spec: &CsvSpec) -> Result<Shape> {
    let text = read(path)?;
    shape_of(&text, spec).map_err(|reason| FlintError::data(path, reason))
}

fn shape_of(text: &[u8], spec: &CsvSpec) -> std::result::Result<Shape, String> {
    let spec = &with_header_decided(text, spec)?;
    let mut labels = std::collections::BTreeSet::new();
    let mut columns = None;
    for (line, record) in records(text, spec) {
        let record = record?;
        if record.len() == 1 && record[0].is_empty() {
            continue;
        }
        columns.get_or_insert(record.len());
        let at = spec.label_column.unwrap_or(record.len() - 1);
        let label = record.get(at).ok_or_else(|| {
            format!(
                "line {line}: label column {at} but only {} columns (data.label_column counts from 0){}",
                record.len(),
                delimiter_hint(text, spec)
            )
        })?;
        if !spec.is_missing(label) {
            labels.insert(label.to_string());
        }
    }
    let mut labels: Vec<String> = labels.into_iter().collect();
    if labels.len() < 2 {
        return Err(format!(
            "the label column holds {} distinct label(s), {labels:?}: a classifier needs two{}",
            labels.len(),
            delimiter_hint(text, spec)
        ));
    }
    if labels
        .iter()
        .all(|l| l.parse::<f64>().is_ok_and(f64::is_finite))
    {
        labels.sort_by(|a, b| {
            a.parse::<f64>()
                .unwrap()
                .total_cmp(&b.parse::<f64>().unwrap())
        });
    }
    let features = feature_columns(spec, columns.unwrap_or(0)).len();
    if features == 0 {
        return Err(format!(
            "no feature column: every column is the label or skipped{}",
            delimiter_hint(text, spec)
        ));
    }
    Ok(Shape {
        classes: labels,
        features,
        header: spec.header,
    })
}

/// The data records with their 1-based line numbers, past the header.
fn records<'a>(
    text: &'a [u8],
    spec: &CsvSpec,
) -> impl Iterator<Item = (u64, std::result::Result<::csv::StringRecord, String>)> + 'a {
    let header = spec.header;
    let mut lines = LineCounter::new(text);
    spec.reader(text)
        .into_records()
        .enumerate()
        .skip(usize::from(header))
        .map(move |(i, r)| match r {
            Ok(r) => (lines.at(r.position(), i), Ok(r)),
            Err(e) => {
                let line = lines.at(e.position(), i);
                (line, Err(format!("line {line}: {}", csv_error(&e))))
            }
        })
}

/// 1-based line numbers from a record's byte offset, counted as the records come. The reader's
/// own count is one short after `\r\n`: a record's offset is where the reader resumed, which
/// may be the `\n` of the line before and of empty lines it skipped; the record's line is that of
/// its first byte past them.
struct LineCounter<'a> {
    text: &'a [u8],
    counted: usize,
    newlines: u64,
}

impl<'a> LineCounter<'a> {
    fn new(text: &'a [u8]) -> Self {
        LineCounter {
            text,
            counted: 0,
            newlines: 0,
        }
    }

    /// The line of the record at `position` (the `i`-th, 0-based, where it has none).
    fn at(&mut self, position: Option<&::csv::Position>, i: usize) -> u64 {
        let Some(p) = position else {
            return i as u64 + 1;
        };
        let mut start = (p.byte() as usize).min(self.text.len());
        while matches!(self.text.get(start), Some(b'\r' | b'\n')) {
            start += 1;
        }
        let end = start.max(self.counted);
        let newlines = self.text[self.counted..end].iter().filter(|&&b| b == b'\n');
        self.newlines += newlines.count() as u64;
        self.counted = end;
        self.newlines + 1
    }
}

/// The columns that are features: neither the label nor skipped (a column skipped twice, or
/// the label named as skipped too, counts once).
fn feature_columns(spec: &CsvSpec, columns: usize) -> Vec<usize> {
    let label_at = spec.label_column.unwrap_or(columns.saturating_sub(1));
    (0..columns)
        .filter(|i| *i != label_at && !spec.skip_columns.contains(i))
        .collect()
}

/// Columns the experiment names rather than numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Named {
    pub label: Option<String>,
    pub skip: Vec<String>,
}

/// `spec` as the file decides it: `header` where the experiment leaves it open, and the
/// columns it names found in the header line.
fn with_header_decided(text: &[u8], spec: &CsvSpec) -> std::result::Result<CsvSpec, String> {
    let mut decided = spec.clone();
    if spec.detect_header {
        decided.header = looks_like_header(text, spec);
        decided.detect_header = false;
    }
    if decided.named == Named::default() {
        return Ok(decided);
    }
    let names = header(text, &decided)?
        .ok_or("a column named in the experiment needs a header line (data.header = true)")?;
    let at = |name: &str| {
        names.iter().position(|n| n.trim() == name).ok_or_else(|| {
            let shown: Vec<&str> = names.iter().take(12).map(|n| n.trim()).collect();
            format!(
                "no column is named {name:?}; the header names {shown:?}{}",
                if names.len() > 12 { " …" } else { "" }
            )
        })
    };
    if let Some(label) = &spec.named.label {
        decided.label_column = Some(at(label)?);
    }
    for name in &spec.named.skip {
        decided.skip_columns.push(at(name)?);
    }
    decided.named = Named::default();
    Ok(decided)
}

/// Whether a file's first line is a header: one of its feature cells (neither the label nor
/// skipped, nor a missing-value token) is not a number. A table's values are numbers, so a
/// word there is a column's name.
pub fn looks_like_header(text: &[u8], spec: &CsvSpec) -> bool {
    let mut reader = spec.reader(text);
    let mut first = ::csv::StringRecord::new();
    if !matches!(reader.read_record(&mut first), Ok(true)) || first.len() < 2 {
        return false;
    }
    let label_at = spec.label_column.unwrap_or(first.len() - 1);
    first.iter().enumerate().any(|(i, cell)| {
        i != label_at
            && !spec.skip_columns.contains(&i)
            && !spec.is_missing(cell)
            && cell.parse::<f64>().is_err()
    })
}

/// A file's first line of names read as data: a word where a value or label was expected.
fn header_hint(line: u64, spec: &CsvSpec, field: &str) -> &'static str {
    match line == 1 && !spec.header && field.chars().any(char::is_alphabetic) {
        true => "; is line 1 a header? set data.header = true",
        false => "",
    }
}

/// A word in a feature column: the column is the label or not a feature at all.
fn text_column_hint(field: &str) -> &'static str {
    match field.chars().any(char::is_alphabetic) {
        true => {
            "; if this column is the label, set data.label_column; if it is no feature (an id, a name), list it in data.skip_columns"
        }
        false => "",
    }
}

/// Where a file read with the wrong delimiter shows it: its first line has another candidate
/// delimiter. Empty when none is seen.
fn delimiter_hint(text: &[u8], spec: &CsvSpec) -> String {
    let first = text
        .split(|b| *b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))
        .unwrap_or_default();
    let count = |d: u8| first.iter().filter(|b| **b == d).count();
    let seen = [b',', b';', b'\t', b'|']
        .into_iter()
        .filter(|d| *d != spec.delimiter)
        .map(|d| (count(d), d))
        .max();
    match seen {
        Some((n, d)) if n > 0 && count(spec.delimiter) == 0 => format!(
            "; the first line has no {:?} but {n} {:?}: set data.delimiter = {:?}",
            spec.delimiter as char,
            d as char,
            (d as char).to_string()
        ),
        _ => String::new(),
    }
}

/// Whether inferred classes look like a measurement rather than a label: more than
/// [`MANY_CLASSES`] values, or numbers not all whole. Said by `flint run`, which reads them.
pub fn label_warning(classes: &[String]) -> Option<String> {
    let numbers: Option<Vec<f64>> = classes.iter().map(|c| c.parse::<f64>().ok()).collect();
    let fractional = numbers.is_some_and(|v| v.iter().any(|x| x.fract() != 0.0));
    if classes.len() <= MANY_CLASSES && !fractional {
        return None;
    }
    let why = match fractional {
        true => "numbers that are not all whole",
        false => "very many values",
    };
    Some(format!(
        "the label column holds {} classes, {why}: is it a measurement rather than a label? data.label_column names the label's column (from 0), data.skip_columns leaves columns out",
        classes.len()
    ))
}

/// More inferred classes than this reads as a measurement, not a label.
pub const MANY_CLASSES: usize = 50;

fn csv_error(e: &::csv::Error) -> String {
    match e.kind() {
        ::csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".into(),
        _ => e.to_string().to_lowercase(),
    }
}

pub fn parse(text: &str, spec: &CsvSpec) -> std::result::Result<Dataset, String> {
    parse_bytes(text.as_bytes(), spec)
}

pub fn parse_bytes(text: &[u8], spec: &CsvSpec) -> std::result::Result<Dataset, String> {
    let spec = &with_header_decided(text, spec)?;
    let header_names = header(text, spec)?;
    let mut rows = Rows {
        spec,
        header_names: header_names.as_deref(),
        columns: header_names.as_ref().map(Vec::len),
        x: Vec::new(),
        y: Vec::new(),
        dropped: 0,
        row: Vec::new(),
    };
    for (line, record) in records(text, spec) {
        rows.push(line, &record?)?;
    }
    rows.finish()
}

/// The header's column names, where the file has a header.
fn header(text: &[u8], spec: &CsvSpec) -> std::result::Result<Option<Vec<String>>, String> {
    if !spec.header {
        return Ok(None);
    }
    let mut reader = spec.reader(text);
    let mut first = ::csv::StringRecord::new();
    match reader.read_record(&mut first) {
        Ok(true) => Ok(Some(first.iter().map(str::to_string).collect())),
        Ok(false) => Err("no rows".into()),
        Err(e) => Err(format!("line 1: {}", csv_error(&e))),
    }
}

/// The rows read so far, each checked as it comes.
struct Rows<'a> {
    spec: &'a CsvSpec,
    header_names: Option<&'a [String]>,
    /// Every row's width, fixed by the header or the first row.
    columns: Option<usize>,
    x: Vec<f64>,
    y: Vec<u32>,
    dropped: usize,
    row: Vec<f64>,
}

impl Rows<'_> {
    fn column_name(&self, i: usize) -> String {
        match self.header_names {
            Some(names) => format!("column {:?}", names[i]),
            None => format!("column {i}"),
        }
    }

    /// One record: its label and features, or left out where a value is missing and
    /// `on_missing` says to drop it; an empty line is skipped.
    fn push(&mut self, line: u64, record: &::csv::StringRecord) -> std::result::Result<(), String> {
        let spec = self.spec;
        if record.len() == 1 && record[0].is_empty() {
            return Ok(());
        }
        let width = record.len();
        let label_at = spec.label_column.unwrap_or(width - 1);
        if label_at >= width {
            return Err(format!(
                "line {line}: label column {label_at} but only {width} columns (data.label_column counts from 0)"
            ));
        }
        if let Some(&c) = spec.skip_columns.iter().find(|&&c| c >= width) {
            return Err(format!(
                "line {line}: column {c} is to be skipped but there are only {width} columns"
            ));
        }
        let expected = *self.columns.get_or_insert(width);
        if width != expected {
            return Err(format!("line {line}: {width} columns, expected {expected}"));
        }
        let label = &record[label_at];
        if spec.is_missing(label) {
            if spec.on_missing == Missing::Refuse {
                return Err(format!(
                    "line {line}: the label is missing ({label:?}); data.on_missing = \"drop\" leaves such rows out"
                ));
            }
            self.dropped += 1;
            return Ok(());
        }
        let class = spec
            .classes
            .iter()
            .position(|c| c == label)
            .ok_or_else(|| {
                format!(
                    "line {line}: label {label:?} is not one of data.classes {:?}{}",
                    spec.classes,
                    header_hint(line, spec, label)
                )
            })?;
        match self.features(line, record, label_at)? {
            true => {
                self.y.push(class as u32);
                self.x.extend_from_slice(&self.row);
            }
            false => self.dropped += 1,
        }
        Ok(())
    }

    /// The record's features into `row`; false where one is missing and the row is dropped.
    fn features(
        &mut self,
        line: u64,
        record: &::csv::StringRecord,
        label_at: usize,
    ) -> std::result::Result<bool, String> {
        let spec = self.spec;
        self.row.clear();
        let mut complete = true;
        let kept = |i: &usize| *i != label_at && !spec.skip_columns.contains(i);
        for (i, f) in record.iter().enumerate().filter(|(i, _)| kept(i)) {
            if spec.is_missing(f) {
                match spec.on_missing {
                    Missing::Refuse => {
                        return Err(format!(
                            "line {line}, {}: missing value {f:?}; set data.on_missing = \"drop\" or \"impute\"",
                            self.column_name(i)
                        ));
                    }
                    Missing::Drop => complete = false,
                    Missing::Impute => self.row.push(f64::NAN),
                }
                continue;
            }
            let v: f64 = f.parse().map_err(|_| {
                let hint = match header_hint(line, spec, f) {
                    "" => text_column_hint(f),
                    hint => hint,
                };
                format!(
                    "line {line}, {}: {f:?} is not a number{hint}",
                    self.column_name(i)
                )
            })?;
            if !v.is_finite() {
                return Err(format!(
                    "line {line}, {}: {f:?} is not finite",
                    self.column_name(i)
                ));
            }
            self.row.push(v);
        }
        Ok(complete)
    }

    /// The table, once every row is read: its feature columns (neither the label nor skipped;
    /// a column skipped twice, or the label named as skipped too, counts once) checked
    /// against `data.features`.
    fn finish(self) -> std::result::Result<Dataset, String> {
        let spec = self.spec;
        let columns = self.columns.ok_or("no rows")?;
        let kept = feature_columns(spec, columns);
        let features = kept.len();
        if features == 0 {
            return Err(format!(
                "{columns} column(s), all label or skipped: no feature column"
            ));
        }
        if let Some(declared) = spec.features
            && declared != features
        {
            return Err(format!(
                "{features} feature columns, but data.features says {declared}"
            ));
        }
        if self.y.is_empty() {
            return Err(format!(
                "no rows left: all {} have a missing value (data.on_missing = \"drop\")",
                self.dropped
            ));
        }
        if self.dropped > 0 {
            tracing::info!(
                dropped = self.dropped,
                kept = self.y.len(),
                "rows with a missing value left out"
            );
        }
        let feature_names = match self.header_names {
            Some(names) => kept.iter().map(|&i| names[i].clone()).collect(),
            None if spec.names.len() == features => spec.names.clone(),
            None => Vec::new(),
        };
        Ok(Dataset {
            features,
            x: self.x,
            y: self.y,
            classes: spec.classes.clone(),
            categorical: Vec::new(),
            feature_names,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CsvSpec {
        CsvSpec::new("x.csv", vec!["g".into(), "h".into()])
    }

    #[test]
    fn parses_rows_and_maps_labels_to_class_indices() {
        let d = parse("1.5,2,g\n\n3,-4e1,h\n", &spec()).unwrap();
        assert_eq!(d.features, 2);
        assert_eq!(d.x, vec![1.5, 2.0, 3.0, -40.0]);
        assert_eq!(d.y, vec![0, 1]);
    }

    #[test]
    fn errors_name_the_line_and_what_was_expected() {
        let e = parse("1,2,g\n1,x,h\n", &spec()).unwrap_err();
        assert!(e.starts_with("line 2, column 1: \"x\" is not a number; if this column is the label, set data.label_column; if it is no feature (an id, a name), list it in data.skip_columns"), "{e}");
        let e = parse("1,2,g\n1,2.3.4,h\n", &spec()).unwrap_err();
        assert_eq!(e, "line 2, column 1: \"2.3.4\" is not a number");
        let e = parse("1,2,g\n1,2,q\n", &spec()).unwrap_err();
        assert!(e.contains("\"q\" is not one of data.classes"), "{e}");
        let e = parse("1,2,g\n1,h\n", &spec()).unwrap_err();
        assert!(e.contains("line 2: 2 columns, expected 3"), "{e}");
        // Windows line endings, and an empty line, count as lines too.
        let e = parse("1,2,g\r\n1,2,h\r\n\r\n1,h\r\n", &spec()).unwrap_err();
        assert!(e.contains("line 4: 2 columns, expected 3"), "{e}");
        let e = parse("1,2,g\r\n1,x,h\r\n", &spec()).unwrap_err();
        assert!(
            e.starts_with("line 2, column 1: \"x\" is not a number"),
            "{e}"
        );
        assert_eq!(parse("\n", &spec()).unwrap_err(), "no rows");
        assert_eq!(
            parse_bytes(b"1,2,g\n1,\xff,h\n", &spec()).unwrap_err(),
            "line 2: not valid UTF-8"
        );
    }

    /// Found on public tables tried as a newcomer would: `"pos"` was once read with its quotes.
    #[test]
    fn mistakes_in_reading_a_table_come_with_a_hint() {
        let s = CsvSpec::new("t.csv", vec!["a".into(), "b".into()]);
        // A header read as data.
        let e = parse("x,y,label\n1,2,a\n3,4,b\n", &s).unwrap_err();
        assert!(e.contains("set data.header = true"), "{e}");
        // Semicolons read with the default comma.
        let e = shape_of(b"1;2;a\n3;4;b\n", &s).unwrap_err();
        assert!(e.contains("set data.delimiter = \";\""), "{e}");
        // A label column past the row.
        let past = CsvSpec {
            label_column: Some(3),
            ..s.clone()
        };
        let e = shape_of(b"1,2,a\n3,4,b\n", &past).unwrap_err();
        assert!(e.contains("counts from 0"), "{e}");
        // No hint where the delimiter is right.
        let e = shape_of(b"1,2,a\n3,4,a\n", &s).unwrap_err();
        assert!(!e.contains("delimiter"), "{e}");
    }

    /// Where the experiment does not say `data.header`, the first line decides: a
    /// word among its feature cells is a column's name; numbers (or missing tokens) are data.
    #[test]
    fn a_header_is_detected_where_the_experiment_does_not_say() {
        let open = CsvSpec {
            detect_header: true,
            ..CsvSpec::new("t.csv", vec!["a".into(), "b".into()])
        };
        let named = parse("width,height,label\n1,2,a\n3,4,b\n", &open).unwrap();
        assert_eq!(named.feature_names, ["width", "height"]);
        assert_eq!(named.y, [0, 1]);
        let bare = parse("1,2,a\n3,4,b\n", &open).unwrap();
        assert_eq!(
            (bare.x, bare.y),
            (vec![1.0, 2.0, 3.0, 4.0], vec![0, 1]),
            "line 1 is data"
        );
        assert!(looks_like_header(b"x,y,label\n1,2,a\n", &open));
        assert!(!looks_like_header(b"1,2,a\n3,4,b\n", &open));
        assert!(
            !looks_like_header(b"?,2,a\n3,4,b\n", &open),
            "a missing value is no name"
        );
        // The label's column and skipped ones do not count: their words are data.
        let skip = CsvSpec {
            skip_columns: vec![0],
            ..open.clone()
        };
        assert!(!looks_like_header(b"row-1,2,a\nrow-2,4,b\n", &skip));
        // Given, it is what the experiment says.
        let given = CsvSpec {
            header: false,
            ..CsvSpec::new("t.csv", vec!["a".into(), "b".into()])
        };
        assert!(parse("width,height,label\n1,2,a\n", &given).is_err());
        assert!(
            shape_of(b"width,height,label\n1,2,a\n3,4,b\n", &open)
                .unwrap()
                .header
        );
    }

    #[test]
    fn a_label_that_looks_like_a_measurement_is_said() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(label_warning(&names(&["a", "b", "c"])).is_none());
        assert!(label_warning(&names(&["1", "2", "3"])).is_none());
        let w = label_warning(&names(&["0.5", "1.25", "2"])).unwrap();
        assert!(w.contains("not all whole"), "{w}");
        let ages: Vec<String> = (18..90).map(|a| a.to_string()).collect();
        let w = label_warning(&ages).unwrap();
        assert!(w.contains("72 classes, very many values"), "{w}");
    }

    #[test]
    fn quoted_fields_and_other_delimiters_are_read_as_fields() {
        let quoted = CsvSpec {
            header: true,
            ..CsvSpec::new("q.csv", vec!["neg".into(), "pos".into()])
        };
        let d = parse(
            "\"a, the first\",\"b\",\"label\"\n\"1.5\", 2 ,\"pos\"\n3,\"4\",neg\n",
            &quoted,
        )
        .unwrap();
        assert_eq!((d.x, d.y), (vec![1.5, 2.0, 3.0, 4.0], vec![1, 0]));
        assert_eq!(d.feature_names, vec!["a, the first", "b"]);
        let tabs = CsvSpec {
            delimiter: b'\t',
            ..spec()
        };
        let d = parse("1,5\t2\tg\n", &tabs).unwrap_err();
        assert_eq!(d, "line 1, column 0: \"1,5\" is not a number");
        assert_eq!(parse("1.5\t2\th\n", &tabs).unwrap().x, vec![1.5, 2.0]);
    }

    #[test]
    fn missing_values_are_refused_dropped_or_left_for_the_client_to_impute() {
        let text = "a,b,label\n1,?,g\n2,3,h\n,4,h\n5,6,NA\n";
        let refuse = CsvSpec {
            header: true,
            ..spec()
        };
        assert_eq!(
            parse(text, &refuse).unwrap_err(),
            "line 2, column \"b\": missing value \"?\"; set data.on_missing = \"drop\" or \"impute\""
        );
        let drop = CsvSpec {
            on_missing: Missing::Drop,
            ..refuse.clone()
        };
        let d = parse(text, &drop).unwrap();
        assert_eq!((d.x, d.y), (vec![2.0, 3.0], vec![1]));
        let impute = CsvSpec {
            on_missing: Missing::Impute,
            ..refuse.clone()
        };
        let d = parse(text, &impute).unwrap();
        assert_eq!(d.y, vec![0, 1, 1], "a row without a label is dropped");
        assert!(d.x[1].is_nan() && d.x[4].is_nan());
        assert_eq!((d.x[0], d.x[2], d.x[3], d.x[5]), (1.0, 2.0, 3.0, 4.0));
        let all = CsvSpec {
            on_missing: Missing::Drop,
            ..spec()
        };
        assert!(
            parse("?,g\n", &all)
                .unwrap_err()
                .starts_with("no rows left")
        );
    }

    #[test]
    fn classes_are_inferred_sorted_numerically_when_every_label_is_a_number() {
        let s = spec();
        assert_eq!(
            shape_of(b"1,10\n2,2\n3,10\n4,1\n", &s).unwrap(),
            Shape {
                classes: vec!["1".into(), "2".into(), "10".into()],
                features: 1,
                header: false,
            }
        );
        assert_eq!(
            shape_of(b"1,versicolor\n2,setosa\n3,?\n", &s)
                .unwrap()
                .classes,
            vec!["setosa", "versicolor"]
        );
        let header = CsvSpec {
            header: true,
            label_column: Some(0),
            ..s.clone()
        };
        assert_eq!(
            shape_of(b"y,x\nb,1\na,2\n", &header).unwrap().classes,
            vec!["a", "b"]
        );
        assert!(shape_of(b"1,a\n2,a\n", &s).unwrap_err().contains("two"));
        let skipped = CsvSpec {
            skip_columns: vec![0, 0, 3],
            ..s.clone()
        };
        assert_eq!(
            shape_of(b"7,1,2,3,a\n8,1,2,3,b\n", &skipped)
                .unwrap()
                .features,
            2
        );
    }

    /// The label and skipped columns by their header names, wherever they sit.
    #[test]
    fn columns_named_in_the_header_are_found_there() {
        let named = CsvSpec {
            header: true,
            named: Named {
                label: Some("species".into()),
                skip: vec!["id".into()],
            },
            ..CsvSpec::new("x.csv", vec!["a".into(), "b".into()])
        };
        let d = parse("id,species,width\n7,b,1.5\n8,a,2.5\n", &named).unwrap();
        assert_eq!((d.features, d.y.clone()), (1, vec![1, 0]));
        assert_eq!(d.x, vec![1.5, 2.5]);
        let unknown = CsvSpec {
            named: Named {
                label: Some("kind".into()),
                skip: Vec::new(),
            },
            ..named.clone()
        };
        let e = parse("id,species,width\n7,b,1.5\n", &unknown).unwrap_err();
        assert!(
            e.contains(r#"no column is named "kind"; the header names ["id", "species", "width"]"#),
            "{e}"
        );
        let headless = CsvSpec {
            header: false,
            ..named
        };
        let e = parse("7,b,1.5\n", &headless).unwrap_err();
        assert!(e.contains("needs a header line"), "{e}");
    }

    /// Found by the `csv` fuzz target: one column, skipped, subtracted past zero and gave a
    /// dataset of `usize::MAX` features.
    #[test]
    fn a_file_whose_columns_are_all_label_or_skipped_is_refused() {
        let s = CsvSpec {
            skip_columns: vec![0],
            ..spec()
        };
        assert_eq!(
            parse("g\nh\n", &s).unwrap_err(),
            "1 column(s), all label or skipped: no feature column"
        );
        assert_eq!(
            parse("7,g\n", &s).unwrap_err(),
            "2 column(s), all label or skipped: no feature column"
        );
        let twice = CsvSpec {
            skip_columns: vec![0, 0],
            ..spec()
        };
        assert_eq!(parse("7,1,g\n", &twice).unwrap().features, 1);
    }

    #[test]
    fn header_and_label_column_are_honoured() {
        let s = CsvSpec {
            label_column: Some(0),
            header: true,
            ..spec()
        };
        let d = parse("label,a\nh,7\n", &s).unwrap();
        assert_eq!((d.x.clone(), d.y.clone()), (vec![7.0], vec![1]));
        let s = CsvSpec {
            label_column: Some(1),
            skip_columns: vec![0],
            ..spec()
        };
        let d = parse("842302,h,1.5,2\n9,g,3,4\n", &s).unwrap();
        assert_eq!(
            (d.features, d.x.clone(), d.y.clone()),
            (2, vec![1.5, 2.0, 3.0, 4.0], vec![1, 0])
        );
        assert!(
            parse(
                "1,h\n",
                &CsvSpec {
                    skip_columns: vec![5],
                    ..spec()
                }
            )
            .unwrap_err()
            .contains("column 5")
        );
    }
}
