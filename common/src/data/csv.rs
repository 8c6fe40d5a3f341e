//! A plain comma-separated loader: numeric features, one label column.

use std::path::Path;

use super::Dataset;
use crate::{FlintError, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct CsvSpec {
    /// Relative to the data directory.
    pub path: String,
    /// 0-based; `None` = the last column.
    pub label_column: Option<usize>,
    /// Labels as written in the file, in class-index order (class 1 is the positive class).
    pub classes: Vec<String>,
    pub header: bool,
    /// 0-based columns to ignore (e.g. a record id).
    pub skip_columns: Vec<usize>,
    /// The number of features the file must have (`data.features`); it is also how the server
    /// knows the model's shape without trusting a client's word.
    pub features: Option<usize>,
}

pub fn load(path: &Path, spec: &CsvSpec) -> Result<Dataset> {
    let text = std::fs::read_to_string(path).map_err(|e| FlintError::io(path, e))?;
    parse(&text, spec).map_err(|reason| FlintError::data(path, reason))
}

pub fn parse(text: &str, spec: &CsvSpec) -> std::result::Result<Dataset, String> {
    let mut features = None;
    let mut x = Vec::new();
    let mut y = Vec::new();
    for (n, line) in text.lines().enumerate().skip(usize::from(spec.header)) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let columns = fields.len();
        let label_at = spec.label_column.unwrap_or(columns - 1);
        if label_at >= columns {
            return Err(format!(
                "line {}: label column {label_at} but only {columns} columns",
                n + 1
            ));
        }
        if let Some(&c) = spec.skip_columns.iter().find(|&&c| c >= columns) {
            return Err(format!(
                "line {}: column {c} is to be skipped but there are only {columns} columns",
                n + 1
            ));
        }
        let width = *features.get_or_insert(columns);
        if columns != width {
            return Err(format!(
                "line {}: {columns} columns, expected {width}",
                n + 1
            ));
        }
        let label = fields[label_at];
        let class = spec
            .classes
            .iter()
            .position(|c| c == label)
            .ok_or_else(|| {
                format!(
                    "line {}: label {label:?} is not one of {:?}",
                    n + 1,
                    spec.classes
                )
            })?;
        y.push(class as u32);
        let kept = |i: &usize| *i != label_at && !spec.skip_columns.contains(i);
        for (i, f) in fields.iter().enumerate().filter(|(i, _)| kept(i)) {
            let v: f64 = f
                .parse()
                .map_err(|_| format!("line {}: column {i} is {f:?}, not a number", n + 1))?;
            if !v.is_finite() {
                return Err(format!("line {}: column {i} is not finite", n + 1));
            }
            x.push(v);
        }
    }
    let columns = features.ok_or("no rows")?;
    // The columns that are neither the label nor skipped (a column skipped twice, or the label
    // named as skipped too, counts once).
    let label_at = spec.label_column.unwrap_or(columns - 1);
    let features = (0..columns)
        .filter(|i| *i != label_at && !spec.skip_columns.contains(i))
        .count();
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
    Ok(Dataset {
        features,
        x,
        y,
        classes: spec.classes.clone(),
        categorical: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CsvSpec {
        CsvSpec {
            path: "x.csv".into(),
            label_column: None,
            classes: vec!["g".into(), "h".into()],
            header: false,
            skip_columns: Vec::new(),
            features: None,
        }
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
        assert!(e.contains("line 2") && e.contains("not a number"), "{e}");
        let e = parse("1,2,g\n1,2,q\n", &spec()).unwrap_err();
        assert!(e.contains("\"q\" is not one of"), "{e}");
        let e = parse("1,2,g\n1,h\n", &spec()).unwrap_err();
        assert!(e.contains("2 columns, expected 3"), "{e}");
        assert_eq!(parse("\n", &spec()).unwrap_err(), "no rows");
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
