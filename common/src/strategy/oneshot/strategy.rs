use serde::Serialize;

use super::{OneShotClient, OneShotHyper, OneShotServer};
use crate::data::DataShape;
use crate::data::images::PixelShard;
use crate::model::cnn::CnnHyper;
use crate::model::cnn::statistics::gram_len;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::fedavg_cnn::{architecture, needs_images};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};
use crate::wire::proto::Payload;
use crate::wire::proto::payload::Kind;
use crate::{ClientId, Result};

/// A one-shot federation of a convolutional network under one of FedTMOS Table 1's server
/// rules.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OneShotSpec {
    pub cnn: CnnHyper,
    pub oneshot: OneShotHyper,
}

impl Strategy for OneShotSpec {
    /// Each rule is its paper's own: `[robust]` does not apply.
    const FACTS: Facts = Facts {
        averages: false,
        one_shot: true,
        ..Facts::federated(ModelKind::Cnn)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, shape: &DataShape) -> ParamResult<Self> {
        needs_images(shape, "oneshot-cnn")?;
        Ok(OneShotSpec {
            cnn: c.cnn,
            oneshot: c.oneshot,
        })
    }
}

impl StrategyParams for OneShotSpec {
    fn why_not_secagg(&self) -> &'static str {
        "the one-shot rules read each client's network"
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::Cnn(self.cnn)
    }

    fn server(&self, classes: usize, seed: u64, _: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(OneShotServer {
            arch: self.cnn.architecture,
            classes,
            seed,
            hyper: self.oneshot,
        })
    }

    fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        _client: ClientId,
        clients: usize,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        let needs = self.oneshot.needs();
        let client = OneShotClient::new(self.cnn, needs, (features, classes), seed, clients)?;
        Ok(Box::new(client))
    }

    /// The network (or the ensemble) is the download.
    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.oneshot = Some(self.oneshot);
    }

    fn setting(&self, images: bool, compression: crate::wire::Compression) -> String {
        let model = self.model().setting(images, compression);
        format!("{model}, {}", self.oneshot.rule.name())
    }

    /// The ensemble's download holds every client's network.
    fn models_per_download(&self, clients: usize) -> usize {
        clients.max(2)
    }

    /// The network with the statistics the rule reads, not those every rule's uploads carry.
    fn upload_as_sent(&self, kept: &Payload) -> Payload {
        let mut sent = kept.clone();
        if let Some(Kind::NetworkParams(n)) = &mut sent.kind {
            let needs = self.oneshot.rule_needs();
            if !needs.gram {
                n.gram.clear();
            }
            if !needs.fisher {
                n.fisher.clear();
            }
        }
        sent
    }

    /// The network, and at most a Gram matrix per dense layer and a Fisher diagonal.
    fn update_bytes_bound(&self, features: usize, classes: usize) -> u64 {
        let network = self.model().update_bytes_bound(features, classes);
        let grams = architecture(self.cnn.architecture, features, classes)
            .map_or(0, |a| 4 * gram_len(&a) as u64 + 16);
        2 * network + grams
    }
}
