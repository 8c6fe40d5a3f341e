//! Logistic regression (AHP paper §3.4): `p = σ(β₀ + Σ βᵢxᵢ)`, binary cross-entropy minimised by
//! full-batch gradient descent, class 1 predicted when p > 0.5; with more than two classes, its
//! multinomial form (a softmax over one logit per class).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::metrics::ConfusionMatrix;
use crate::params::{ParamResult, at_least, positive, require};

/// `[logreg]` as written: a key left out takes its default for the data's classes
/// ([`LogRegHyper::for_classes`]); a run's resolved file writes every key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogRegSection {
    /// Gradient descent step size.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0.1))]
    pub learning_rate: Option<f64>,
    /// Full-batch gradient steps over the whole training split per round (on a table of more
    /// than three classes: 3 per class).
    #[serde(
        deserialize_with = "crate::params::at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 10))]
    pub local_epochs: Option<u32>,
    /// L2 penalty on the weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0.0))]
    pub l2: Option<f64>,
}

impl LogRegSection {
    /// The written keys over `base`, which fills in the others.
    pub fn over(&self, base: LogRegHyper) -> LogRegHyper {
        LogRegHyper {
            learning_rate: self.learning_rate.unwrap_or(base.learning_rate),
            local_epochs: self.local_epochs.unwrap_or(base.local_epochs),
            l2: self.l2.unwrap_or(base.l2),
        }
    }
}

impl From<LogRegHyper> for LogRegSection {
    fn from(h: LogRegHyper) -> Self {
        LogRegSection {
            learning_rate: Some(h.learning_rate),
            local_epochs: Some(h.local_epochs),
            l2: Some(h.l2),
        }
    }
}

/// Logistic regression's training (AHP paper §3.4), every setting decided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogRegHyper {
    /// Gradient descent step size.
    pub learning_rate: f64,
    /// Full-batch gradient steps over the whole training split per round.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub local_epochs: u32,
    /// L2 penalty on the weights.
    pub l2: f64,
}

impl Default for LogRegHyper {
    fn default() -> Self {
        LogRegHyper {
            learning_rate: 0.1,
            local_epochs: 10,
            l2: 0.0,
        }
    }
}

impl LogRegHyper {
    /// The defaults for `classes` classes: the AHP paper's binary runs take 10 steps a round; a
    /// softmax over many classes needs more steps at the same rate (3 per class; measured on
    /// scikit-learn's digits and a 26-class table, docs/results/tables.md).
    pub fn for_classes(classes: usize) -> LogRegHyper {
        let steps = u32::try_from(3 * classes).unwrap_or(u32::MAX);
        LogRegHyper {
            local_epochs: steps.max(10),
            ..LogRegHyper::default()
        }
    }

    /// The settings, refused where a value is out of its range.
    pub fn check(self) -> ParamResult<LogRegHyper> {
        positive("logreg.learning_rate", self.learning_rate)?;
        require(
            "logreg.local_epochs",
            "at least 1",
            self.local_epochs,
            self.local_epochs > 0,
        )?;
        require(
            "logreg.l2",
            "zero or positive",
            self.l2,
            self.l2.is_finite() && self.l2 >= 0.0,
        )?;
        Ok(self)
    }
}

/// Logistic regression: one logit (class 1's) for two classes, as the AHP paper has it; for
/// more, one logit per class under a softmax (multinomial logistic regression), trained the
/// same way on the mean cross-entropy.
#[derive(Debug, Clone, PartialEq)]
pub struct LogReg {
    /// `outputs × features`, row-major: one row for two classes, one per class for more.
    pub weights: Vec<f64>,
    /// One per output.
    pub biases: Vec<f64>,
}

/// Logits of a model for `classes` classes: one below three, one per class from three.
pub fn outputs_for(classes: usize) -> usize {
    if classes <= 2 { 1 } else { classes }
}

impl LogReg {
    /// A two-class model of zeros.
    pub fn zeros(features: usize) -> LogReg {
        LogReg::for_classes(features, 2)
    }

    pub fn for_classes(features: usize, classes: usize) -> LogReg {
        let outputs = outputs_for(classes);
        LogReg {
            weights: vec![0.0; outputs * features],
            biases: vec![0.0; outputs],
        }
    }

    /// A two-class model.
    pub fn binary(weights: Vec<f64>, bias: f64) -> LogReg {
        LogReg {
            weights,
            biases: vec![bias],
        }
    }

    pub fn outputs(&self) -> usize {
        self.biases.len()
    }

    pub fn features(&self) -> usize {
        self.weights.len() / self.outputs().max(1)
    }

    pub fn classes(&self) -> usize {
        match self.outputs() {
            1 => 2,
            k => k,
        }
    }

    /// Parameters on the wire and in the papers' byte convention: weights and biases.
    pub fn parameters(&self) -> usize {
        self.weights.len() + self.biases.len()
    }

    fn logit(&self, k: usize, row: &[f64]) -> f64 {
        let f = self.features();
        self.biases[k]
            + self.weights[k * f..(k + 1) * f]
                .iter()
                .zip(row)
                .map(|(w, x)| w * x)
                .sum::<f64>()
    }

    /// P(class 1) of a two-class model.
    pub fn probability(&self, row: &[f64]) -> f64 {
        sigmoid(self.logit(0, row))
    }

    /// Class probabilities (softmax of the logits; for two classes, 1 − p and p).
    pub fn probabilities(&self, row: &[f64]) -> Vec<f64> {
        if self.outputs() == 1 {
            let p = self.probability(row);
            return vec![1.0 - p, p];
        }
        let logits: Vec<f64> = (0..self.outputs()).map(|k| self.logit(k, row)).collect();
        let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exp: Vec<f64> = logits.iter().map(|z| (z - top).exp()).collect();
        let sum: f64 = exp.iter().sum();
        exp.iter().map(|e| e / sum).collect()
    }

    pub fn predict(&self, row: &[f64]) -> u32 {
        if self.outputs() == 1 {
            return u32::from(self.logit(0, row) > 0.0);
        }
        // The first of the largest logits.
        (0..self.outputs())
            .map(|k| (k, self.logit(k, row)))
            .fold((0, f64::NEG_INFINITY), |best, (k, z)| {
                if z > best.1 { (k, z) } else { best }
            })
            .0 as u32
    }

    /// Mean cross-entropy over `data`.
    pub fn loss(&self, data: &Dataset) -> f64 {
        let eps = 1e-12;
        let sum: f64 = (0..data.len())
            .map(|i| {
                if self.outputs() == 1 {
                    let p = self.probability(data.row(i)).clamp(eps, 1.0 - eps);
                    if data.y[i] == 1 {
                        -p.ln()
                    } else {
                        -(1.0 - p).ln()
                    }
                } else {
                    -self.probabilities(data.row(i))[data.y[i] as usize]
                        .max(eps)
                        .ln()
                }
            })
            .sum();
        sum / data.len().max(1) as f64
    }

    /// `epochs` full-batch gradient-descent steps on the mean cross-entropy (+ ½·l2·‖β‖²).
    pub fn train(&mut self, data: &Dataset, hyper: &LogRegHyper) {
        if data.is_empty() {
            return;
        }
        if self.outputs() > 1 {
            return self.train_softmax(data, hyper);
        }
        let n = data.len() as f64;
        let mut grad = vec![0.0; self.features()];
        for _ in 0..hyper.local_epochs {
            grad.iter_mut().for_each(|g| *g = 0.0);
            let mut grad_bias = 0.0;
            for i in 0..data.len() {
                let row = data.row(i);
                let err = self.probability(row) - f64::from(data.y[i]);
                grad_bias += err;
                for (g, x) in grad.iter_mut().zip(row) {
                    *g += err * x;
                }
            }
            for (w, g) in self.weights.iter_mut().zip(&grad) {
                *w -= hyper.learning_rate * (g / n + hyper.l2 * *w);
            }
            self.biases[0] -= hyper.learning_rate * grad_bias / n;
        }
    }

    /// The gradient of the mean cross-entropy under a softmax: (p_k − [y = k])·x per class.
    fn train_softmax(&mut self, data: &Dataset, hyper: &LogRegHyper) {
        let (n, f, k) = (data.len() as f64, self.features(), self.outputs());
        let mut grad = vec![0.0; k * f];
        let mut grad_bias = vec![0.0; k];
        for _ in 0..hyper.local_epochs {
            grad.iter_mut().for_each(|g| *g = 0.0);
            grad_bias.iter_mut().for_each(|g| *g = 0.0);
            for i in 0..data.len() {
                let row = data.row(i);
                let p = self.probabilities(row);
                for (c, pc) in p.iter().enumerate() {
                    let err = pc - f64::from(u8::from(data.y[i] as usize == c));
                    grad_bias[c] += err;
                    for (g, x) in grad[c * f..(c + 1) * f].iter_mut().zip(row) {
                        *g += err * x;
                    }
                }
            }
            for (w, g) in self.weights.iter_mut().zip(&grad) {
                *w -= hyper.learning_rate * (g / n + hyper.l2 * *w);
            }
            for (b, g) in self.biases.iter_mut().zip(&grad_bias) {
                *b -= hyper.learning_rate * g / n;
            }
        }
    }

    pub fn evaluate(&self, data: &Dataset) -> ConfusionMatrix {
        let predicted: Vec<u32> = (0..data.len()).map(|i| self.predict(data.row(i))).collect();
        ConfusionMatrix::from_predictions(self.classes(), &data.y, &predicted)
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> Dataset {
        // Class 1 exactly when x > 0.
        let xs: Vec<f64> = (-10..=10)
            .filter(|&i| i != 0)
            .map(|i| f64::from(i) / 5.0)
            .collect();
        Dataset {
            features: 1,
            y: xs.iter().map(|&x| u32::from(x > 0.0)).collect(),
            x: xs,
            classes: vec!["neg".into(), "pos".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        }
    }

    #[test]
    fn gradient_descent_lowers_the_loss_and_separates_a_line() {
        let d = line();
        let mut m = LogReg::zeros(1);
        let before = m.loss(&d);
        assert!((before - std::f64::consts::LN_2).abs() < 1e-12);
        let hyper = LogRegHyper {
            learning_rate: 0.5,
            local_epochs: 200,
            l2: 0.0,
        };
        m.train(&d, &hyper);
        assert!(m.loss(&d) < before / 4.0);
        assert_eq!(m.evaluate(&d).metrics().accuracy, 1.0);
    }

    #[test]
    fn one_step_matches_the_hand_computed_gradient() {
        // Two rows: x = 1 (class 1), x = -1 (class 0). At β = 0, p = ½ for both:
        // ∂L/∂β₁ = ((½−1)·1 + (½−0)·(−1)) / 2 = −½, ∂L/∂β₀ = ((½−1) + ½) / 2 = 0.
        let d = Dataset {
            features: 1,
            x: vec![1.0, -1.0],
            y: vec![1, 0],
            classes: vec!["a".into(), "b".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        };
        let mut m = LogReg::zeros(1);
        m.train(
            &d,
            &LogRegHyper {
                learning_rate: 0.2,
                local_epochs: 1,
                l2: 0.0,
            },
        );
        assert_eq!(m.weights, vec![0.1]);
        assert_eq!(m.biases, vec![0.0]);
    }

    /// Three classes on a line: x < −1, −1 ≤ x ≤ 1, x > 1 (the middle one needs both logits).
    fn three() -> Dataset {
        let xs: Vec<f64> = (-30..=30).map(|i| f64::from(i) / 10.0).collect();
        Dataset {
            features: 1,
            y: xs
                .iter()
                .map(|&x| {
                    if x < -1.0 {
                        0
                    } else if x <= 1.0 {
                        1
                    } else {
                        2
                    }
                })
                .collect(),
            x: xs,
            classes: vec!["low".into(), "mid".into(), "high".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        }
    }

    /// FedAvg of logistic regression once panicked on any data of more than two classes.
    #[test]
    fn three_classes_train_under_a_softmax_and_are_told_apart() {
        let d = three();
        let mut m = LogReg::for_classes(1, 3);
        assert_eq!((m.outputs(), m.classes(), m.parameters()), (3, 3, 6));
        let before = m.loss(&d);
        assert!((before - 3f64.ln()).abs() < 1e-12, "uniform at zero: ln 3");
        m.train(
            &d,
            &LogRegHyper {
                learning_rate: 0.5,
                local_epochs: 2000,
                l2: 0.0,
            },
        );
        assert!(m.loss(&d) < before / 3.0, "{}", m.loss(&d));
        let cm = m.evaluate(&d);
        assert_eq!(cm.classes(), 3);
        assert!(cm.metrics().accuracy > 0.9, "{:?}", cm.metrics());
        let p = m.probabilities(&[0.0]);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(m.predict(&[-3.0]), 0);
        assert_eq!(m.predict(&[0.0]), 1);
        assert_eq!(m.predict(&[3.0]), 2);
    }

    #[test]
    fn one_softmax_step_matches_the_hand_computed_gradient() {
        // One row x = 1 of class 2, three classes, all zero: p = ⅓ each, so
        // ∂L/∂w_k = (⅓ − [k = 2])·1 and the step is −lr times that.
        let d = Dataset {
            features: 1,
            x: vec![1.0],
            y: vec![2],
            classes: vec!["a".into(), "b".into(), "c".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        };
        let mut m = LogReg::for_classes(1, 3);
        m.train(
            &d,
            &LogRegHyper {
                learning_rate: 0.3,
                local_epochs: 1,
                l2: 0.0,
            },
        );
        let third = 0.3 / 3.0;
        let want = [-third, -third, 0.3 - third];
        for (w, e) in m.weights.iter().zip(want) {
            assert!((w - e).abs() < 1e-15, "{:?}", m.weights);
        }
        assert_eq!(m.weights, m.biases);
    }
}
