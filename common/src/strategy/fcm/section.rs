use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::fcm::{Activation, FcmHyper, Fitness};
use crate::model::pso::PsoHyper;
use crate::params::{ParamResult, name_of};
use crate::strategy::LocalMetrics;

/// `[fcm]`: the map, its dynamics and PSO's objective, and the Blind FL server's aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FcmSection {
    /// `tanh` or `sigmoid`.
    pub activation: Activation,
    /// λ; unset: the paper's for the activation (2 for tanh, 5 for the sigmoid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slope: Option<f64>,
    /// The dynamics stop when ‖c(t) − c(t−1)‖ is below this.
    pub tolerance: f64,
    /// Iteration cap of the dynamics (with more than two classes: 200 / classes, at least 10).
    #[serde(
        deserialize_with = "crate::params::at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 100))]
    pub max_iterations: Option<usize>,
    /// PSO's objective: `jaccard` (1 − Jaccard of the positive class) or `sample-jaccard`
    /// (eq. 7 per sample, averaged: the error rate).
    pub fitness: Fitness,
    /// Server aggregation of `blind-fcm` / `blended-fcm`: `mean` (eq. 9), `accuracy` (eq. 10–11)
    /// or `precision` (eq. 12–13).
    pub aggregation: Aggregation,
}

impl Default for FcmSection {
    fn default() -> Self {
        FcmSection {
            activation: Activation::Tanh,
            slope: None,
            tolerance: 1e-5,
            max_iterations: None,
            fitness: Fitness::Jaccard,
            aggregation: Aggregation::Mean,
        }
    }
}

impl FcmSection {
    /// The map's checked settings and the server's aggregation.
    pub fn check(&self) -> ParamResult<(FcmHyper, Aggregation)> {
        let hyper = FcmHyper {
            activation: self.activation,
            fitness: self.fitness,
            slope: self.slope.unwrap_or(self.activation.paper_slope()),
            tolerance: self.tolerance,
            max_iterations: self.max_iterations.unwrap_or(PAPER_MAX_ITERATIONS),
        }
        .check()?;
        Ok((hyper, self.aggregation))
    }
}

/// The dynamics' iteration cap for a map of `classes` class concepts where `[fcm]` leaves it
/// out: the paper's 100 for two classes, 200 / classes for more, at least 10. Each step costs
/// about classes × (features + classes) products per row, and the class-to-class links keep a
/// many-class map from settling, so a 26-class table at 100 steps took over 4 minutes a round
/// on this machine (10 clients, 2 cores) and 27 s at 10, equally accurate
/// (docs/results/tables.md).
pub fn settle_steps(classes: usize) -> usize {
    (200 / classes.max(1)).clamp(10, PAPER_MAX_ITERATIONS)
}

/// The Blind FL paper's iteration cap of the dynamics.
pub const PAPER_MAX_ITERATIONS: usize = 100;

/// How the server weights the participants' maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Aggregation {
    /// Eq. 9: 1/n each.
    Mean,
    /// Eq. 10–11: accuracy_i / Σ accuracy.
    Accuracy,
    /// Eq. 12–13: precision_i / Σ precision.
    Precision,
}

impl Aggregation {
    pub fn name(self) -> String {
        name_of(&self)
    }

    /// The participants' weights, in the order given, summing to 1. When every score is 0 (no
    /// participant predicted a positive right) the normalisation is undefined and the mean is
    /// used; the second value says so.
    pub fn weights(self, locals: &[LocalMetrics]) -> (Vec<f64>, bool) {
        let n = locals.len() as f64;
        let score = |m: &LocalMetrics| match self {
            Aggregation::Mean => 1.0,
            Aggregation::Accuracy => m.accuracy,
            Aggregation::Precision => m.precision,
        };
        let total: f64 = locals.iter().map(score).sum();
        if total > 0.0 {
            (locals.iter().map(|m| score(m) / total).collect(), false)
        } else {
            (vec![1.0 / n; locals.len()], true)
        }
    }
}

/// Blind FL's map, its training, and the server's weighting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FcmSpec {
    pub fcm: FcmHyper,
    pub pso: PsoHyper,
    pub aggregation: Aggregation,
    /// `[dp]` of Blind FL's runs (off for the baselines that train this map).
    pub dp: crate::strategy::privacy::DpHyper,
}
