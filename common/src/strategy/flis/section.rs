use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, require};

/// FLIS's two ways of clustering.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum FlisVariant {
    /// Dynamic clustering: neighbourhoods formed again from every round's networks.
    #[default]
    Dc,
    /// Clustering once, from the first round's networks, kept for the run.
    Hc,
}

/// `[flis]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FlisHyper {
    pub variant: FlisVariant,
    /// The least similarity (the fraction of server images two networks predict alike) that
    /// puts a client in another's cluster [default: 0.4 for dc, 0.96 for hc, the authors'
    /// scripts' values as their code applies them].
    pub threshold: Option<f64>,
    /// Images per class the server holds from the data's test split, the first of each class
    /// in file order (the authors' code: 250, 2,500 on ten classes).
    pub server_per_class: u32,
}

impl Default for FlisHyper {
    fn default() -> Self {
        FlisHyper {
            variant: FlisVariant::Dc,
            threshold: None,
            server_per_class: 250,
        }
    }
}

impl FlisHyper {
    pub fn check(self) -> ParamResult<FlisHyper> {
        let threshold = self.threshold();
        require(
            "flis.threshold",
            "above 0 and at most 1",
            threshold,
            threshold > 0.0 && threshold <= 1.0,
        )?;
        require(
            "flis.server_per_class",
            "from 1 to 6,000",
            self.server_per_class,
            (1..=6_000).contains(&self.server_per_class),
        )?;
        Ok(self)
    }

    /// The threshold as written, or the variant's.
    pub fn threshold(&self) -> f64 {
        self.threshold.unwrap_or(match self.variant {
            FlisVariant::Dc => 0.4,
            FlisVariant::Hc => 0.96,
        })
    }
}
