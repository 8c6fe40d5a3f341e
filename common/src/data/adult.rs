//! Adult / Census Income (UCI 2): `adult.data` and `adult.test` together, 48,842 rows; class 1
//! (the positive class) is `>50K`.
//!
//! Encoding, chosen so a Fuzzy Cognitive Map stays small (one concept per attribute, 12 + 2
//! classes = 14 concepts, 26 learnable weights per class):
//! - numeric attributes are kept as they are: age, education-num, capital-gain, capital-loss,
//!   hours-per-week;
//! - categorical attributes (workclass, marital-status, occupation, relationship, race, sex,
//!   native-country) become one column of category codes, which each client turns into its own
//!   training split's rate of the positive class per category (target encoding, `shard`), so
//!   no client's statistics reach another and the test split never informs the encoding; a
//!   missing value `?` is a category of its own;
//! - `fnlwgt` (the census sampling weight, not an attribute of the person) and `education`
//!   (the same information as `education-num`) are dropped.
//!
//! One-hot encoding would give about 100 concepts and 10,000 weights, more than a swarm of 10
//! particles can search in 20 iterations.

use std::collections::BTreeMap;
use std::path::Path;

use super::Dataset;
use crate::{FlintError, Result};

pub const TRAIN_FILE: &str = "adult/adult.data";
pub const TEST_FILE: &str = "adult/adult.test";

/// Label strings in class order (the test file's trailing dot removed).
pub const CLASSES: [&str; 2] = ["<=50K", ">50K"];

/// The features Adult loads with (every attribute but the dropped ones).
pub fn feature_count() -> usize {
    COLUMNS
        .iter()
        .filter(|(_, c)| *c != Column::Dropped)
        .count()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    Numeric,
    Categorical,
    Dropped,
}

/// The 14 attributes in file order, then the label.
const COLUMNS: [(&str, Column); 14] = [
    ("age", Column::Numeric),
    ("workclass", Column::Categorical),
    ("fnlwgt", Column::Dropped),
    ("education", Column::Dropped),
    ("education-num", Column::Numeric),
    ("marital-status", Column::Categorical),
    ("occupation", Column::Categorical),
    ("relationship", Column::Categorical),
    ("race", Column::Categorical),
    ("sex", Column::Categorical),
    ("capital-gain", Column::Numeric),
    ("capital-loss", Column::Numeric),
    ("hours-per-week", Column::Numeric),
    ("native-country", Column::Categorical),
];

/// Names of the kept columns, in dataset order.
pub fn feature_names() -> Vec<&'static str> {
    COLUMNS
        .iter()
        .filter(|(_, c)| *c != Column::Dropped)
        .map(|(n, _)| *n)
        .collect()
}

pub fn load(data_dir: &Path) -> Result<Dataset> {
    let mut parser = Parser::default();
    for file in [TRAIN_FILE, TEST_FILE] {
        let path = data_dir.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| FlintError::io(&path, e))?;
        parser
            .add(&text)
            .map_err(|reason| FlintError::data(&path, reason))?;
    }
    Ok(parser.finish())
}

/// Reads rows of either file; category codes are given in order of first appearance.
pub struct Parser {
    x: Vec<f64>,
    y: Vec<u32>,
    codes: BTreeMap<(usize, String), usize>,
    /// Codes given so far, per column.
    seen: [usize; COLUMNS.len()],
}

impl Default for Parser {
    fn default() -> Self {
        Parser {
            x: Vec::new(),
            y: Vec::new(),
            codes: BTreeMap::new(),
            seen: [0; COLUMNS.len()],
        }
    }
}

impl Parser {
    pub fn add(&mut self, text: &str) -> std::result::Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            // adult.test opens with a "|1x3 Cross validator" line.
            if line.is_empty() || line.starts_with('|') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields.len() != COLUMNS.len() + 1 {
                return Err(format!(
                    "line {}: {} fields, expected {}",
                    n + 1,
                    fields.len(),
                    COLUMNS.len() + 1
                ));
            }
            let label = fields[COLUMNS.len()].trim_end_matches('.');
            let class = CLASSES.iter().position(|c| *c == label).ok_or_else(|| {
                format!("line {}: label {label:?} is not one of {CLASSES:?}", n + 1)
            })?;
            for (i, ((name, kind), value)) in COLUMNS.iter().zip(&fields).enumerate() {
                match kind {
                    Column::Dropped => {}
                    Column::Numeric => {
                        let v: f64 = value
                            .parse()
                            .ok()
                            .filter(|v: &f64| v.is_finite())
                            .ok_or_else(|| {
                                format!("line {}: {name} is {value:?}, not a number", n + 1)
                            })?;
                        self.x.push(v);
                    }
                    Column::Categorical => {
                        let next = self.seen[i];
                        let code = *self.codes.entry((i, value.to_string())).or_insert(next);
                        if code == next {
                            self.seen[i] += 1;
                        }
                        self.x.push(code as f64);
                    }
                }
            }
            self.y.push(class as u32);
        }
        Ok(())
    }

    pub fn finish(self) -> Dataset {
        debug_assert_eq!(
            feature_count(),
            COLUMNS
                .iter()
                .filter(|(_, c)| *c != Column::Dropped)
                .count()
        );
        let kept: Vec<Column> = COLUMNS
            .iter()
            .map(|(_, c)| *c)
            .filter(|c| *c != Column::Dropped)
            .collect();
        Dataset {
            features: kept.len(),
            x: self.x,
            y: self.y,
            classes: CLASSES.iter().map(|c| c.to_string()).collect(),
            categorical: kept
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == Column::Categorical)
                .map(|(i, _)| i)
                .collect(),
            feature_names: feature_names().into_iter().map(String::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: &str = "\
39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
50, ?, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, >50K

";

    #[test]
    fn rows_become_numbers_and_category_codes() {
        let mut p = Parser::default();
        p.add(ROWS).unwrap();
        p.add("|1x3 Cross validator\n25, State-gov, 1, 11th, 7, Never-married, Sales, Own-child, Black, Female, 0, 0, 40, Peru, <=50K.\n")
            .unwrap();
        let d = p.finish();
        assert_eq!(d.features, 12);
        assert_eq!(d.y, vec![0, 1, 0]);
        assert_eq!(d.categorical, vec![1, 3, 4, 5, 6, 7, 11]);
        assert_eq!(feature_names()[2], "education-num");
        // age, workclass, education-num, marital, occupation, relationship, race, sex, gain, loss, hours, country
        assert_eq!(
            d.row(0),
            &[
                39.0, 0.0, 13.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2174.0, 0.0, 40.0, 0.0
            ]
        );
        assert_eq!(
            d.row(1),
            &[
                50.0, 1.0, 13.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 13.0, 0.0
            ]
        );
        // "State-gov" keeps its code across files; new values get the next code.
        assert_eq!(d.row(2)[1], 0.0);
        assert_eq!(d.row(2)[11], 1.0);
    }

    #[test]
    fn bad_rows_name_the_line() {
        let mut p = Parser::default();
        let e = p.add("1, 2, 3\n").unwrap_err();
        assert!(e.contains("line 1: 3 fields, expected 15"), "{e}");
        let e = p.add(&ROWS.replace("39,", "old,")).unwrap_err();
        assert!(e.contains("age is \"old\""), "{e}");
        let e = p.add(&ROWS.replace(">50K", "rich")).unwrap_err();
        assert!(e.contains("line 2: label \"rich\""), "{e}");
    }
}
