//! `fedavg-cnn` as the framework runs it: one network, averaged by dataset size.

use serde::Serialize;

use super::NetworkMean;
use crate::data::DataShape;
use crate::model::cnn::CnnHyper;
use crate::params::{ParamError, ParamResult};
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ModelKind, ServerStrategy};

/// FedAvg of a convolutional network, client weights n_k / n.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedAvgCnnSpec {
    pub cnn: CnnHyper,
}

/// A network reads images: refused on a table.
pub fn needs_images(shape: &DataShape, strategy: &str) -> ParamResult<()> {
    match shape.table {
        true => Err(ParamError::Inconsistent(format!(
            "strategy {strategy} trains a convolutional network on images; this data is a table"
        ))),
        false => Ok(()),
    }
}

impl Strategy for FedAvgCnnSpec {
    /// n_k / n, from the rows each client declares.
    const FACTS: Facts = Facts {
        declared_weights: true,
        ..Facts::federated(ModelKind::Cnn)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, shape: &DataShape) -> ParamResult<Self> {
        needs_images(shape, "fedavg-cnn")?;
        Ok(FedAvgCnnSpec { cnn: c.cnn })
    }
}

impl StrategyParams for FedAvgCnnSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::Cnn(self.cnn)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(NetworkMean {
            arch: self.cnn.architecture,
            classes,
            seed,
            robust,
            tag: "fedavg-cnn",
        })
    }

    fn model_is_the_download(&self) -> bool {
        true
    }
    fn takes_secagg(&self) -> bool {
        true
    }

    fn secure_input(&self, update: &crate::wire::proto::Payload) -> crate::Result<Vec<f64>> {
        crate::strategy::fedavg_cnn::secure_input(update)
    }
}
