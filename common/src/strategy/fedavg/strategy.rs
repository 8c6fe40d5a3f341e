//! `fedavg` and `fedavg-ahp` as the framework runs them: one logistic regression, averaged by
//! dataset size or by the AHP client weights.

use serde::Serialize;

use super::FedAvgServer;
use crate::data::DataShape;
use crate::model::logreg::LogRegHyper;
use crate::params::ParamResult;
use crate::strategy::ahp::{AhpCriterion, AhpHyper, AhpSection};
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ModelKind, ServerStrategy};

/// FedAvg, client weights n_k / n.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedAvgSpec {
    pub logreg: LogRegHyper,
}

/// FedAvg with client weights from the Analytic Hierarchy Process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FedAvgAhpSpec {
    pub logreg: LogRegHyper,
    pub ahp: AhpHyper,
}

impl Strategy for FedAvgSpec {
    const FACTS: Facts = Facts::federated(ModelKind::LogReg);

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(FedAvgSpec { logreg: c.logreg })
    }
}

impl StrategyParams for FedAvgSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::LogReg(self.logreg)
    }

    fn server(&self, classes: usize, _: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(FedAvgServer::by_size(classes).with_robust(robust))
    }

    fn model_is_the_download(&self) -> bool {
        true
    }
}

impl Strategy for FedAvgAhpSpec {
    const FACTS: Facts = Facts::federated(ModelKind::LogReg);

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(FedAvgAhpSpec {
            logreg: c.logreg,
            ahp: c.ahp.clone(),
        })
    }
}

impl StrategyParams for FedAvgAhpSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::LogReg(self.logreg)
    }

    fn server(&self, classes: usize, _: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(FedAvgServer::by_ahp(self.ahp.clone(), classes).with_robust(robust))
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.ahp = Some(AhpSection {
            criteria: self.ahp.criteria.clone(),
            preference: self.ahp.matrix.clone(),
        });
    }

    fn needs_compute_ghz(&self) -> bool {
        self.ahp.criteria.contains(&AhpCriterion::ComputeGhz)
    }
}
