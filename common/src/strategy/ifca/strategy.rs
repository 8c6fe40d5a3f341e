use serde::Serialize;

use super::{IfcaClient, IfcaHyper, IfcaServer};
use crate::data::DataShape;
use crate::data::images::PixelShard;
use crate::model::cnn::CnnHyper;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::fedavg_cnn::needs_images;
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::privacy::DpHyper;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};
use crate::wire::proto::Payload;
use crate::wire::proto::payload::Kind;
use crate::{ClientId, FlintError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IfcaSpec {
    pub cnn: CnnHyper,
    pub ifca: IfcaHyper,
    pub dp: DpHyper,
}

impl Strategy for IfcaSpec {
    /// Each cluster's mean weights its members by the rows they declare.
    const FACTS: Facts = Facts {
        one_model: false,
        declared_weights: true,
        ..Facts::federated(ModelKind::Cnn)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, shape: &DataShape) -> ParamResult<Self> {
        needs_images(shape, "ifca")?;
        Ok(IfcaSpec {
            cnn: c.cnn,
            ifca: c.ifca,
            dp: c.dp,
        })
    }
}

impl StrategyParams for IfcaSpec {
    /// Per cluster: the choice is public (it is the group), each cluster's networks summed
    /// within it.
    fn takes_secagg(&self) -> bool {
        true
    }

    /// Per cluster, as TPFL's: the choice travels in the clear, the networks are clipped and
    /// noised.
    fn takes_dp(&self) -> bool {
        true
    }

    fn secure_input(&self, update: &Payload) -> Result<Vec<f64>> {
        crate::strategy::fedavg_cnn::secure_input(update)
    }

    fn secure_group(&self, update: &Payload) -> Result<u32> {
        match &update.kind {
            Some(Kind::NetworkParams(n)) => n
                .cluster
                .ok_or_else(|| FlintError::InvalidUpdate("an ifca upload names no cluster".into())),
            _ => Err(FlintError::InvalidUpdate(
                "secure aggregation of ifca sums networks".into(),
            )),
        }
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::Cnn(self.cnn)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let k = self.ifca.clusters as usize;
        let server = IfcaServer::new(self.cnn.architecture, k, classes, seed, robust);
        Box::new(server.with_privacy(self.dp))
    }

    fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        _client: ClientId,
        _clients: usize,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        let k = self.ifca.clusters as usize;
        let client = IfcaClient::new(self.cnn, k, features, classes, seed)?;
        Ok(Box::new(client.with_dp(self.dp)))
    }

    /// The client's network is the download's model of lowest loss on its own training data:
    /// the download and its data decide it.
    fn model_is_the_download(&self) -> bool {
        true
    }

    fn models_per_download(&self, _clients: usize) -> usize {
        self.ifca.clusters as usize + 1
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.ifca = Some(self.ifca);
        out.dp = (!self.dp.is_off()).then_some(self.dp);
    }

    fn setting(&self, images: bool, compression: crate::wire::Compression) -> String {
        let model = self.model().setting(images, compression);
        format!(
            "{model}, k = {}{}",
            self.ifca.clusters,
            self.dp.setting_note()
        )
    }
}
