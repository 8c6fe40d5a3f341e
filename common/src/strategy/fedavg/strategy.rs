//! `fedavg` and `fedavg-ahp` as the framework runs them: one logistic regression, averaged by
//! dataset size or by the AHP client weights.

use serde::Serialize;

use super::{FedAvgClient, FedAvgServer};
use crate::Result;
use crate::data::DataShape;
use crate::data::Shard;
use crate::model::logreg::LogRegHyper;
use crate::params::ParamResult;
use crate::strategy::ClientStrategy;
use crate::strategy::ahp::{AhpCriterion, AhpHyper, AhpSection};
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::privacy::DpHyper;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ModelKind, ServerStrategy};
use crate::wire::Compression;
use crate::wire::proto::Payload;

/// FedAvg, client weights n_k / n.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedAvgSpec {
    pub logreg: LogRegHyper,
    pub dp: DpHyper,
}

/// FedAvg with client weights from the Analytic Hierarchy Process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FedAvgAhpSpec {
    pub logreg: LogRegHyper,
    pub ahp: AhpHyper,
    pub dp: DpHyper,
}

impl Strategy for FedAvgSpec {
    const FACTS: Facts = Facts {
        declared_weights: true,
        ..Facts::federated(ModelKind::LogReg)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(FedAvgSpec {
            logreg: c.logreg,
            dp: c.dp,
        })
    }
}

impl StrategyParams for FedAvgSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::LogReg(self.logreg)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let server = FedAvgServer::by_size(classes).with_robust(robust);
        Box::new(server.with_privacy(self.dp, seed))
    }

    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        private_client(features, classes, self.logreg, self.dp)
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.dp = (!self.dp.is_off()).then_some(self.dp);
    }

    fn takes_dp(&self) -> bool {
        true
    }

    fn takes_secagg(&self) -> bool {
        true
    }

    fn secure_input(&self, update: &Payload) -> Result<Vec<f64>> {
        super::secure_input(update)
    }

    fn setting(&self, images: bool, compression: Compression) -> String {
        self.model().setting(images, compression) + &self.dp.setting_note()
    }
}

impl Strategy for FedAvgAhpSpec {
    const FACTS: Facts = Facts {
        declared_weights: true,
        ..Facts::federated(ModelKind::LogReg)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(FedAvgAhpSpec {
            logreg: c.logreg,
            ahp: c.ahp.clone(),
            dp: c.dp,
        })
    }
}

impl StrategyParams for FedAvgAhpSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::LogReg(self.logreg)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let server = FedAvgServer::by_ahp(self.ahp.clone(), classes).with_robust(robust);
        Box::new(server.with_privacy(self.dp, seed))
    }

    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        private_client(features, classes, self.logreg, self.dp)
    }

    fn takes_dp(&self) -> bool {
        true
    }

    fn takes_secagg(&self) -> bool {
        true
    }

    fn secure_input(&self, update: &Payload) -> Result<Vec<f64>> {
        super::secure_input(update)
    }

    fn setting(&self, images: bool, compression: Compression) -> String {
        self.model().setting(images, compression) + &self.dp.setting_note()
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.ahp = Some(AhpSection {
            criteria: self.ahp.criteria.clone(),
            preference: self.ahp.matrix.clone(),
        });
        out.dp = (!self.dp.is_off()).then_some(self.dp);
    }

    fn needs_compute_ghz(&self) -> bool {
        self.ahp.criteria.contains(&AhpCriterion::ComputeGhz)
    }
}

/// A client of either weighting: its logistic regression, and its own noise under `dp`.
fn private_client(
    features: usize,
    classes: usize,
    logreg: LogRegHyper,
    dp: DpHyper,
) -> Result<Box<dyn ClientStrategy<Shard>>> {
    let client = FedAvgClient::new(features, classes, logreg);
    Ok(Box::new(client.with_dp(dp)))
}
