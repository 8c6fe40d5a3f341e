//! `fedavg-cnn` as the framework runs it: one network, averaged by dataset size.

use serde::Serialize;

use super::{CnnClient, NetworkMean};
use crate::data::DataShape;
use crate::data::images::PixelShard;
use crate::model::cnn::CnnHyper;
use crate::params::{ParamError, ParamResult};
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::privacy::DpHyper;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};
use crate::{ClientId, Result};

/// FedAvg of a convolutional network, client weights n_k / n.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedAvgCnnSpec {
    pub cnn: CnnHyper,
    pub dp: DpHyper,
}

/// A network federation's client: local SGD (held near the download by FedProx's `mu`), its
/// own noise under local `dp`.
pub fn private_cnn_client(
    cnn: CnnHyper,
    dp: DpHyper,
    mu: Option<f64>,
    (features, classes, seed): (usize, usize, u64),
) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
    let client = CnnClient::new(cnn, features, classes, seed)?.with_dp(dp);
    Ok(Box::new(match mu {
        Some(mu) => client.with_proximal(mu),
        None => client,
    }))
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
        Ok(FedAvgCnnSpec {
            cnn: c.cnn,
            dp: c.dp,
        })
    }
}

impl StrategyParams for FedAvgCnnSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::Cnn(self.cnn)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let server = NetworkMean::new(self.cnn.architecture, classes, seed, "fedavg-cnn");
        Box::new(server.with_robust(robust).with_privacy(self.dp))
    }

    fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        _client: ClientId,
        _clients: usize,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        private_cnn_client(self.cnn, self.dp, None, (features, classes, seed))
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

    fn secure_input(&self, update: &crate::wire::proto::Payload) -> crate::Result<Vec<f64>> {
        crate::strategy::fedavg_cnn::secure_input(update)
    }

    fn setting(&self, images: bool, compression: crate::wire::Compression) -> String {
        self.model().setting(images, compression) + &self.dp.setting_note()
    }
}
