//! `blind-fcm` and `blended-fcm` as the framework runs them: the same map, training and server;
//! they differ in what a client does with the global map (step 5).

use serde::Serialize;

use super::{Blend, FcmClient, FcmServer, FcmSpec};
use crate::Result;
use crate::data::{DataShape, Shard};
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};
use crate::wire::Compression;

/// Blind FL: the new local map is the global one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BlindFcmSpec(pub FcmSpec);

/// Blended Blind FL: the new local map is the mean of the global and the previous local map.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BlendedFcmSpec(pub FcmSpec);

fn server(f: &FcmSpec, classes: usize, robust: RobustHyper) -> Box<dyn ServerStrategy> {
    Box::new(FcmServer::new(classes, f.aggregation).with_robust(robust))
}

/// The map's setting, led by the server's weighting.
fn setting(f: &FcmSpec, images: bool, compression: Compression) -> String {
    let map = ModelSpec::Fcm(*f).setting(images, compression);
    format!("{} {map}", f.aggregation.name())
}

impl Strategy for BlindFcmSpec {
    const FACTS: Facts = Facts::federated(ModelKind::Fcm);

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(BlindFcmSpec(c.fcm))
    }
}

impl StrategyParams for BlindFcmSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::Fcm(self.0)
    }

    fn server(&self, classes: usize, _: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        server(&self.0, classes, robust)
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn setting(&self, images: bool, compression: Compression) -> String {
        setting(&self.0, images, compression)
    }
}

impl Strategy for BlendedFcmSpec {
    const FACTS: Facts = Facts {
        one_model: false,
        ..Facts::federated(ModelKind::Fcm)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(BlendedFcmSpec(c.fcm))
    }
}

impl StrategyParams for BlendedFcmSpec {
    fn model(&self) -> ModelSpec {
        ModelSpec::Fcm(self.0)
    }

    fn server(&self, classes: usize, _: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        server(&self.0, classes, robust)
    }

    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        let f = self.0;
        let client = FcmClient::new(features, classes, f.fcm, f.pso, Blend::Average);
        Ok(Box::new(client))
    }

    /// Each client blends the aggregate with its own map.
    fn model_is_the_download(&self) -> bool {
        false
    }

    fn setting(&self, images: bool, compression: Compression) -> String {
        setting(&self.0, images, compression)
    }
}
