//! `tpfl` as the framework runs it.

use super::{TmSpec, TpflServer};
use crate::data::DataShape;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ModelKind, ServerStrategy};

impl Strategy for TmSpec {
    /// Personalised: each cluster's members get their cluster's weights.
    const FACTS: Facts = Facts {
        one_model: false,
        ..Facts::federated(ModelKind::Tm)
    };

    fn check(_: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(c.tm)
    }
}

impl StrategyParams for TmSpec {
    fn why_not_secagg(&self) -> &'static str {
        "TPFL's clusters from the confidence winners and FedTM's class averages are not yet \
         summed securely"
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::Tm(*self)
    }

    fn server(&self, classes: usize, _: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(TpflServer::new(classes, self.tm.clauses, self.tpfl).with_robust(robust))
    }

    /// The clause bank stays local: only the class weights come down.
    fn model_is_the_download(&self) -> bool {
        false
    }
}
