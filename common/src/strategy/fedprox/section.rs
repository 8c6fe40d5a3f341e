use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, require};

/// `[fedprox]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FedProxHyper {
    /// The proximal term's weight μ (TPFL §6.6: 0.1).
    pub mu: f64,
}

impl Default for FedProxHyper {
    fn default() -> Self {
        FedProxHyper { mu: 0.1 }
    }
}

impl FedProxHyper {
    pub fn check(self) -> ParamResult<FedProxHyper> {
        require(
            "fedprox.mu",
            "finite and at least 0",
            self.mu,
            self.mu.is_finite() && self.mu >= 0.0,
        )?;
        Ok(self)
    }
}
