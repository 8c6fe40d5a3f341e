//! `tpfl` as the framework runs it.

use super::{TmSpec, TpflServer};
use crate::data::DataShape;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ModelKind, ServerStrategy};
use crate::wire::proto::Payload;
use crate::wire::{self, Compression, WinnerUpload};
use crate::{FlintError, Result};

impl Strategy for TmSpec {
    /// Personalised: each cluster's members get their cluster's weights.
    const FACTS: Facts = Facts {
        one_model: false,
        ..Facts::federated(ModelKind::Tm)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(TmSpec { dp: c.dp, ..c.tm })
    }
}

impl StrategyParams for TmSpec {
    /// Central noise on each cluster's mean, or each client's on its winner's weights.
    fn takes_dp(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        out.dp = (!self.dp.is_off()).then_some(self.dp);
    }

    fn setting(&self, images: bool, compression: Compression) -> String {
        self.model().setting(images, compression) + &self.dp.setting_note()
    }

    /// Per cluster: the winner is public (it decides the cluster), the weights are summed
    /// within it.
    fn takes_secagg(&self) -> bool {
        true
    }

    fn secure_input(&self, update: &Payload) -> Result<Vec<f64>> {
        let w = secure_winner(update, self.tm.clauses)?;
        Ok(w.weights.iter().map(|&v| f64::from(v)).collect())
    }

    fn secure_group(&self, update: &Payload) -> Result<u32> {
        Ok(secure_winner(update, self.tm.clauses)?.class)
    }

    /// Clause weights are integers that grow with training: room for any a run reaches.
    fn secure_bound(&self) -> f64 {
        1e6
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::Tm(*self)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        let server = TpflServer::new(classes, self.tm.clauses, self.tpfl).with_robust(robust);
        Box::new(server.with_privacy(self.dp, seed))
    }

    /// The clause bank stays local: only the class weights come down.
    fn model_is_the_download(&self) -> bool {
        false
    }
}

/// A winner upload of the weights themselves (a delta is the change since a base of this
/// client's alone, which no sum of others' can take).
fn secure_winner(update: &Payload, clauses: usize) -> Result<WinnerUpload> {
    let w = wire::decode_winner(update, usize::MAX, clauses)?;
    if w.delta_base_round != 0 {
        return Err(FlintError::InvalidUpdate(
            "secure aggregation sums the weights themselves, not a delta".into(),
        ));
    }
    Ok(w)
}
