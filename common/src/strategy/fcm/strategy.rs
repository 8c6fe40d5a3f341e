//! `blind-fcm` and `blended-fcm` as the framework runs them: the same map, training and server;
//! they differ in what a client does with the global map (step 5).

use serde::Serialize;

use super::{Aggregation, Blend, FcmClient, FcmServer, FcmSpec};
use crate::Result;
use crate::data::{DataShape, Shard};
use crate::params::{ParamError, ParamResult};
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};
use crate::wire::Compression;

/// Blind FL's spec; `BLENDED`: a client's new map is the mean of the global and its previous
/// local map (Blended Blind FL), else the global map itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BlindSpec<const BLENDED: bool>(pub FcmSpec);

/// Blind FL: the new local map is the global one.
pub type BlindFcmSpec = BlindSpec<false>;
/// Blended Blind FL: the new local map is the mean of the global and the previous local map.
pub type BlendedFcmSpec = BlindSpec<true>;

impl<const BLENDED: bool> Strategy for BlindSpec<BLENDED> {
    /// Blended, each client keeps a map of its own.
    const FACTS: Facts = Facts {
        one_model: !BLENDED,
        ..Facts::federated(ModelKind::Fcm)
    };

    /// `[dp]` over the plain mean only: eq. 10–13 weight each map by its client's own score,
    /// which the clip does not bound, so one client's data would move every weight.
    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        if !c.dp.is_off() && c.fcm.aggregation != Aggregation::Mean {
            return Err(ParamError::Inconsistent(format!(
                "[dp] noises Blind FL's plain mean (fcm.aggregation = \"mean\", eq. 9); the {} \
                 weights come from each client's own score, which the clip does not bound",
                c.fcm.aggregation.name()
            )));
        }
        Ok(BlindSpec(FcmSpec { dp: c.dp, ..c.fcm }))
    }
}

impl<const BLENDED: bool> StrategyParams for BlindSpec<BLENDED> {
    fn model(&self) -> ModelSpec {
        ModelSpec::Fcm(self.0)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let server = FcmServer::new(classes, self.0.aggregation).with_robust(robust);
        Box::new(server.with_privacy(self.0.dp, seed))
    }

    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        let f = self.0;
        let blend = match BLENDED {
            true => Blend::Average,
            false => Blend::Replace,
        };
        let client = FcmClient::new(features, classes, f.fcm, f.pso, blend);
        Ok(Box::new(client.with_dp(f.dp)))
    }

    /// Central noise on the mean map, or each client's on its own.
    fn takes_dp(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.dp = (!self.0.dp.is_off()).then_some(self.0.dp);
    }

    /// Blended, each client blends the aggregate with its own map.
    fn model_is_the_download(&self) -> bool {
        !BLENDED
    }

    fn takes_secagg(&self) -> bool {
        true
    }

    fn secure_input(&self, update: &crate::wire::proto::Payload) -> Result<Vec<f64>> {
        super::secure::input(update, self.0.aggregation)
    }

    /// The map's setting, led by the server's weighting.
    fn setting(&self, images: bool, compression: Compression) -> String {
        let map = ModelSpec::Fcm(self.0).setting(images, compression);
        let dp = self.0.dp.setting_note();
        format!("{} {map}{dp}", self.0.aggregation.name())
    }
}
