use serde::Serialize;

use super::FedProxHyper;
use crate::ClientId;
use crate::Result;
use crate::data::DataShape;
use crate::data::images::PixelShard;
use crate::model::cnn::CnnHyper;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::fedavg_cnn::{NetworkMean, needs_images, private_cnn_client};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::privacy::DpHyper;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedProxSpec {
    pub cnn: CnnHyper,
    pub fedprox: FedProxHyper,
    pub dp: DpHyper,
}

impl Strategy for FedProxSpec {
    /// n_k / n, from the rows each client declares.
    const FACTS: Facts = Facts {
        declared_weights: true,
        ..Facts::federated(ModelKind::Cnn)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, shape: &DataShape) -> ParamResult<Self> {
        needs_images(shape, "fedprox")?;
        Ok(FedProxSpec {
            cnn: c.cnn,
            fedprox: c.fedprox,
            dp: c.dp,
        })
    }
}

impl StrategyParams for FedProxSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::Cnn(self.cnn)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let server = NetworkMean::new(self.cnn.architecture, classes, seed, "fedprox");
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
        let mu = Some(self.fedprox.mu);
        private_cnn_client(self.cnn, self.dp, mu, (features, classes, seed))
    }

    fn model_is_the_download(&self) -> bool {
        true
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

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.fedprox = Some(self.fedprox);
        out.dp = (!self.dp.is_off()).then_some(self.dp);
    }

    fn setting(&self, images: bool, compression: crate::wire::Compression) -> String {
        format!(
            "{}, μ = {}{}",
            self.model().setting(images, compression),
            self.fedprox.mu,
            self.dp.setting_note()
        )
    }
}
