//! The model a client holds at the end of a run, as a file a researcher reads: coefficients
//! and maps with the names of their features, concepts and classes (issue 18 §1).
//!
//! Format `flint-model`, version 1, JSON: `{format, version, client, classes, features,
//! scaling, model: {kind, …}}`. A reader refuses another format or a newer version.

use serde::{Deserialize, Serialize};

use super::fcm::Fcm;
use super::logreg::LogReg;

pub const FORMAT: &str = "flint-model";
pub const VERSION: u32 = 1;

/// What a client half exports: the model alone, without names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum KeptModel {
    /// Logistic regression: one row of weights and one bias per output (one output, for class
    /// 1 against class 0, with two classes; one per class, a softmax, with more).
    Logreg {
        weights: Vec<Vec<f64>>,
        biases: Vec<f64>,
    },
    /// A Fuzzy Cognitive Map: the adjacency matrix over the concepts (the features, then the
    /// classes), row = source, column = target.
    Fcm { matrix: Vec<Vec<f64>> },
}

impl KeptModel {
    pub fn logreg(model: &LogReg) -> KeptModel {
        let features = model.features();
        KeptModel::Logreg {
            weights: model
                .weights
                .chunks(features.max(1))
                .map(<[f64]>::to_vec)
                .collect(),
            biases: model.biases.clone(),
        }
    }

    pub fn fcm(model: &Fcm) -> KeptModel {
        let n = model.concepts();
        KeptModel::Fcm {
            matrix: model.matrix().chunks(n).map(<[f64]>::to_vec).collect(),
        }
    }
}

/// A kept model with the names that make it readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub format: String,
    pub version: u32,
    pub client: String,
    pub classes: Vec<String>,
    /// One per feature (`x<i>` where the data has no names).
    pub features: Vec<String>,
    /// How the client scaled its features before the model saw them (`local-zscore`: the
    /// coefficients are per standard deviation of the client's own training split).
    pub scaling: String,
    pub model: KeptModel,
}

impl ModelFile {
    pub fn new(
        client: &str,
        classes: Vec<String>,
        features: Vec<String>,
        scaling: String,
        model: KeptModel,
    ) -> ModelFile {
        ModelFile {
            format: FORMAT.into(),
            version: VERSION,
            client: client.into(),
            classes,
            features,
            scaling,
            model,
        }
    }

    /// Reads a file, refusing another format, a newer version, or a model whose shape does
    /// not match its names.
    pub fn parse(bytes: &[u8]) -> Result<ModelFile, String> {
        let file: ModelFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if file.format != FORMAT {
            return Err(format!("format {:?}, not {FORMAT:?}", file.format));
        }
        if file.version > VERSION {
            return Err(format!(
                "version {} of the model format; this flint reads up to {VERSION}",
                file.version
            ));
        }
        let (f, k) = (file.features.len(), file.classes.len());
        let fits = match &file.model {
            KeptModel::Logreg { weights, biases } => {
                let outputs = super::logreg::outputs_for(k);
                weights.len() == outputs
                    && biases.len() == outputs
                    && weights.iter().all(|w| w.len() == f)
            }
            KeptModel::Fcm { matrix } => {
                matrix.len() == f + k && matrix.iter().all(|row| row.len() == f + k)
            }
        };
        if !fits {
            return Err(format!(
                "the model's shape does not match its {f} features and {k} classes"
            ));
        }
        Ok(file)
    }

    /// The model as text: for logistic regression each output's `top` largest coefficients by
    /// magnitude, for an FCM its `top` strongest links into the classes and between them.
    pub fn explain(&self, top: usize) -> String {
        let mut out = String::new();
        match &self.model {
            KeptModel::Logreg { weights, biases } => {
                let scale = match self.scaling.as_str() {
                    "local-zscore" => " (per standard deviation of the client's training split)",
                    "local-minmax" => " (per range of the client's training split)",
                    _ => "",
                };
                out += &format!("logistic regression, coefficients{scale}\n");
                for (o, (row, bias)) in weights.iter().zip(biases).enumerate() {
                    let target = if weights.len() == 1 {
                        format!(
                            "{} (against {})",
                            self.classes.get(1).map_or("1", String::as_str),
                            self.classes.first().map_or("0", String::as_str)
                        )
                    } else {
                        self.classes[o].clone()
                    };
                    out += &format!("  class {target}: bias {bias:+.4}\n");
                    let mut order: Vec<usize> = (0..row.len()).collect();
                    order.sort_by(|&a, &b| row[b].abs().total_cmp(&row[a].abs()).then(a.cmp(&b)));
                    for &i in order.iter().take(top) {
                        out += &format!("    {:+.4}  {}\n", row[i], self.features[i]);
                    }
                }
            }
            KeptModel::Fcm { matrix } => {
                let concepts: Vec<String> = self
                    .features
                    .iter()
                    .cloned()
                    .chain(self.classes.iter().map(|c| format!("class {c}")))
                    .collect();
                out += &format!(
                    "fuzzy cognitive map, {} concepts; the strongest links:\n",
                    concepts.len()
                );
                let mut links: Vec<(usize, usize, f64)> = matrix
                    .iter()
                    .enumerate()
                    .flat_map(|(s, row)| {
                        row.iter()
                            .enumerate()
                            .filter(|(_, w)| **w != 0.0)
                            .map(move |(t, &w)| (s, t, w))
                    })
                    .collect();
                links.sort_by(|a, b| {
                    b.2.abs()
                        .total_cmp(&a.2.abs())
                        .then((a.0, a.1).cmp(&(b.0, b.1)))
                });
                for (s, t, w) in links.into_iter().take(top) {
                    out += &format!("  {w:+.4}  {} -> {}\n", concepts[s], concepts[t]);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn a_logistic_regression_keeps_one_row_per_output_and_reads_back() {
        let mut m = LogReg::for_classes(3, 3);
        m.weights = vec![0.1, -2.0, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0, -3.0];
        m.biases = vec![0.5, -0.5, 0.0];
        let f = ModelFile::new(
            "c",
            names("k", 3),
            names("f", 3),
            "none".into(),
            KeptModel::logreg(&m),
        );
        let back = ModelFile::parse(&serde_json::to_vec(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert_eq!(
            f.explain(2),
            "logistic regression, coefficients\n  class k0: bias +0.5000\n    -2.0000  f1\n    +0.5000  f2\n\
             \x20 class k1: bias -0.5000\n    +1.0000  f0\n    +0.0000  f1\n\
             \x20 class k2: bias +0.0000\n    -3.0000  f2\n    +0.0000  f0\n"
        );
        let binary = LogReg::for_classes(2, 2);
        let f = ModelFile::new(
            "c",
            vec!["no".into(), "yes".into()],
            names("f", 2),
            "local-zscore".into(),
            KeptModel::logreg(&binary),
        );
        assert!(
            f.explain(1).contains("class yes (against no)"),
            "{}",
            f.explain(1)
        );
        assert!(ModelFile::parse(&serde_json::to_vec(&f).unwrap()).is_ok());
    }

    #[test]
    fn an_fcm_keeps_its_whole_matrix_and_names_its_concepts() {
        let mut params = vec![0.0; Fcm::parameter_count(2, 2)];
        params[1] = -0.9; // feature 1 -> class 0
        params[2] = 0.3; // class 1 -> class 0
        let m = Fcm::from_parameters(2, 2, params).unwrap();
        let f = ModelFile::new(
            "c",
            vec!["B".into(), "M".into()],
            vec!["radius".into(), "area".into()],
            "local-minmax".into(),
            KeptModel::fcm(&m),
        );
        let KeptModel::Fcm { matrix } = &f.model else {
            unreachable!()
        };
        assert_eq!(matrix.len(), 4);
        assert_eq!(matrix[1][2], -0.9);
        assert_eq!(matrix[3][2], 0.3);
        assert_eq!(
            f.explain(2),
            "fuzzy cognitive map, 4 concepts; the strongest links:\n  -0.9000  area -> class B\n  +0.3000  class M -> class B\n"
        );
        assert_eq!(
            ModelFile::parse(&serde_json::to_vec(&f).unwrap()).unwrap(),
            f
        );
    }

    #[test]
    fn another_format_a_newer_version_or_a_wrong_shape_is_refused() {
        let m = LogReg::for_classes(2, 2);
        let good = ModelFile::new(
            "c",
            names("k", 2),
            names("f", 2),
            "none".into(),
            KeptModel::logreg(&m),
        );
        let with = |edit: &dyn Fn(&mut ModelFile)| {
            let mut f = good.clone();
            edit(&mut f);
            ModelFile::parse(&serde_json::to_vec(&f).unwrap()).unwrap_err()
        };
        assert!(with(&|f| f.format = "other".into()).contains("format"));
        assert!(with(&|f| f.version = VERSION + 1).contains("reads up to"));
        assert!(with(&|f| f.features.pop().map_or((), drop)).contains("does not match"));
    }
}
