//! `[tpfl]`: TPFL's section, its checked settings and the typed choices among them
//! (confidence, cluster mean, rounding).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::data::images::{Holdout, ShardSizes};
use crate::params::{ParamResult, at_least, require};
use crate::wire::WeightCoding;

/// How a client measures its confidence in each class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Confidence {
    /// Σ over the confidence set of the weighted class sums (the code).
    Weighted,
    /// Σ of the signs of the weights of the firing clauses (the paper's formula).
    Votes,
}

/// `[tpfl]`: TPFL's rounds (TPFL §5, Table 2); where the paper and its published code differ,
/// the key says which each value follows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TpflHyper {
    /// Local training epochs per round (TPFL Table 2).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub local_epochs: u32,
    /// `disjoint` (test and confidence rows never overlap training rows) or `paper-code` (both
    /// are subsets of the client's training rows, as the published code).
    pub evaluation: Holdout,
    /// Test rows per client.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub test_samples: usize,
    /// Confidence rows per client.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub confidence_samples: usize,
    /// `weighted` (Σ of weighted class sums, the code) or `votes` (Σ of the signs of the weights
    /// of firing clauses, the paper's formula without weights).
    pub confidence: Confidence,
    /// `members` (the paper's mean) or `with-previous` (the code also averages in the cluster's
    /// previous aggregate).
    pub cluster_mean: ClusterMean,
    /// How the average becomes integer weights: `nearest` or `truncate` (the code).
    pub rounding: Rounding,
    /// Upload the weights minus the vector last received for that class (the default: 6.6
    /// rather than 8.4 bits a weight on MNIST's experiment 5); `false` sends the weights
    /// themselves, as the paper.
    pub delta: bool,
    /// How weight vectors travel, both ways: `arithmetic` (an adaptive arithmetic code, within
    /// a few percent of their entropy) or `varint` (zig-zag varints, a byte or two each).
    pub coding: WeightCoding,
}

impl Default for TpflHyper {
    fn default() -> Self {
        TpflHyper {
            local_epochs: 10,
            evaluation: Holdout::Disjoint,
            test_samples: 15_000,
            confidence_samples: 15_000,
            confidence: Confidence::Weighted,
            cluster_mean: ClusterMean::Members,
            rounding: Rounding::Nearest,
            delta: true,
            coding: WeightCoding::Arithmetic,
        }
    }
}

impl TpflHyper {
    /// The settings, refused where a value is out of its range.
    pub fn check(self) -> ParamResult<TpflHyper> {
        let at_least_one = |key, n: usize| require(key, "at least 1", n, n > 0);
        require(
            "tpfl.local_epochs",
            "at least 1",
            self.local_epochs,
            self.local_epochs > 0,
        )?;
        at_least_one("tpfl.test_samples", self.test_samples)?;
        at_least_one("tpfl.confidence_samples", self.confidence_samples)?;
        Ok(self)
    }
}

impl TpflHyper {
    /// A client's split sizes, with `train` rows from the partition.
    pub fn sizes(&self, train: usize) -> ShardSizes {
        ShardSizes {
            train,
            test: self.test_samples,
            confidence: Some(self.confidence_samples),
        }
    }
}

/// How a cluster's average is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterMean {
    /// The paper: the plain mean of the members' vectors.
    Members,
    /// The published code: a cluster that existed in an earlier round also averages in its
    /// previous aggregate, as one extra row.
    WithPrevious,
}

/// How a client turns its cluster's (real-valued) average back into integer clause weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Rounding {
    /// To the nearest integer, halves away from zero (Flint's default: unbiased in sign).
    Nearest,
    /// Toward zero, as the published code's integer cast does.
    Truncate,
}

/// TPFL's coalesced machine and its rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TmSpec {
    pub tm: crate::model::tm::TmHyper,
    pub tpfl: TpflHyper,
    /// `[dp]` of TPFL's runs (off for the baselines that train this machine).
    pub dp: crate::strategy::privacy::DpHyper,
}
