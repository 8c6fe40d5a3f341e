use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, at_least, require};

/// `[ifca]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct IfcaHyper {
    /// k, the cluster models every client downloads each round (IFCA's code on rotated MNIST
    /// and Fashion-MNIST: 4).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub clusters: u32,
}

impl Default for IfcaHyper {
    fn default() -> Self {
        IfcaHyper { clusters: 4 }
    }
}

impl IfcaHyper {
    pub fn check(self) -> ParamResult<IfcaHyper> {
        require(
            "ifca.clusters",
            "from 1 to 64",
            self.clusters,
            (1..=64).contains(&self.clusters),
        )?;
        Ok(self)
    }
}
