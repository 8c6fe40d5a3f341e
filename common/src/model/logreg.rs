//! Logistic regression (AHP paper §3.4): `p = σ(β₀ + Σ βᵢxᵢ)`, binary cross-entropy minimised by
//! full-batch gradient descent, class 1 predicted when p > 0.5.

use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::metrics::ConfusionMatrix;
use crate::params::{ParamResult, positive, require};

/// `[logreg]` as written; [`LogRegSection::check`] makes it a [`LogRegHyper`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRegSection {
    pub learning_rate: Option<f64>,
    /// Full-batch gradient steps per round.
    pub local_epochs: Option<u32>,
    pub l2: Option<f64>,
}

/// Checked hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LogRegHyper {
    pub learning_rate: f64,
    /// Gradient steps over the whole training split per round.
    pub local_epochs: u32,
    pub l2: f64,
}

impl LogRegSection {
    pub fn check(&self) -> ParamResult<LogRegHyper> {
        let l2 = self.l2.unwrap_or(0.0);
        let local_epochs = self.local_epochs.unwrap_or(10);
        Ok(LogRegHyper {
            learning_rate: positive("logreg.learning_rate", self.learning_rate.unwrap_or(0.1))?,
            local_epochs: require(
                "logreg.local_epochs",
                "at least 1",
                local_epochs,
                local_epochs > 0,
            )?,
            l2: require(
                "logreg.l2",
                "zero or positive",
                l2,
                l2.is_finite() && l2 >= 0.0,
            )?,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogReg {
    pub weights: Vec<f64>,
    pub bias: f64,
}

impl LogReg {
    pub fn zeros(features: usize) -> LogReg {
        LogReg {
            weights: vec![0.0; features],
            bias: 0.0,
        }
    }

    pub fn features(&self) -> usize {
        self.weights.len()
    }

    /// Parameters on the wire and in the papers' byte convention: weights and bias.
    pub fn parameters(&self) -> usize {
        self.weights.len() + 1
    }

    fn logit(&self, row: &[f64]) -> f64 {
        self.bias
            + self
                .weights
                .iter()
                .zip(row)
                .map(|(w, x)| w * x)
                .sum::<f64>()
    }

    pub fn probability(&self, row: &[f64]) -> f64 {
        sigmoid(self.logit(row))
    }

    pub fn predict(&self, row: &[f64]) -> u32 {
        u32::from(self.logit(row) > 0.0)
    }

    /// Mean binary cross-entropy over `data`.
    pub fn loss(&self, data: &Dataset) -> f64 {
        let eps = 1e-12;
        let sum: f64 = (0..data.len())
            .map(|i| {
                let p = self.probability(data.row(i)).clamp(eps, 1.0 - eps);
                if data.y[i] == 1 {
                    -p.ln()
                } else {
                    -(1.0 - p).ln()
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
            self.bias -= hyper.learning_rate * grad_bias / n;
        }
    }

    pub fn evaluate(&self, data: &Dataset) -> ConfusionMatrix {
        let predicted: Vec<u32> = (0..data.len()).map(|i| self.predict(data.row(i))).collect();
        ConfusionMatrix::from_predictions(2, &data.y, &predicted)
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
        assert_eq!(m.bias, 0.0);
    }
}
