//! `fedtmos` and `ensemble` as the framework runs them (FedTM, the iterative baseline, in its own
//! module): one round of convolutional multi-class machines.

use serde::Serialize;

use super::{
    CODE_WEIGHT_RESOLUTION, EnsembleServer, FedTmosClient, FedTmosServer, FedTmosSpec, Preset,
};
use crate::data::DataShape;
use crate::data::images::BitShard;
use crate::model::tm::ClauseBanks;
use crate::params::ParamResult;
use crate::strategy::contract::{Facts, Strategy, StrategyParams};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::robust::RobustHyper;
use crate::strategy::sections::{Checked, Sections};
use crate::strategy::{ClientStrategy, ModelKind, ServerStrategy};
use crate::{ClientId, Result};

/// K of TopK on a table: one holder's include bits. ORing two holders' makes every averaged
/// clause demand both holders' literals; on six tables one holder's moved FedTM by −1 to +34
/// points and FedTMOS by 0 to +37 (docs/results/tables.md).
pub const TABLE_TOP_K: usize = 1;
/// R on a table: a table's machine (T = 50) learns weights of a few units, which the code's
/// truncation of θ · n_c / n floors to 0 (docs/results/tables.md).
const TABLE_WEIGHT_RESOLUTION: u32 = 256;

/// What FedTMOS's family reads where the file leaves it out, beside the run's `[tm]`.
#[derive(Debug, Clone, Copy)]
pub struct TableDefaults {
    /// K of TopK: FedTMOS and FedTM OR include bits; the ensemble does not.
    pub top_k: bool,
    /// R: only FedTMOS scales weights.
    pub weight_resolution: bool,
}

impl FedTmosSpec {
    /// The family's settings on this data: on a table, its machines read a row of `row_bits`
    /// as one patch, and the keys the file leaves out take the table's K ([`TABLE_TOP_K`]) and
    /// R (`TABLE_WEIGHT_RESOLUTION`) where `defaults` says the strategy reads them.
    pub fn for_data(c: &Checked, s: &Sections, shape: &DataShape, defaults: TableDefaults) -> Self {
        let mut fedtmos = c.fedtmos;
        let written = s.fedtmos.unwrap_or_default();
        if shape.table {
            fedtmos.table_bits = shape.row_bits;
            if defaults.top_k {
                fedtmos.server.top_k = written.top_k.unwrap_or(TABLE_TOP_K);
            }
            if defaults.weight_resolution {
                let resolution = written.weight_resolution;
                fedtmos.server.weight_resolution = resolution.unwrap_or(TABLE_WEIGHT_RESOLUTION);
            }
        }
        FedTmosSpec {
            tm: c.tm.tm,
            fedtmos,
        }
    }

    /// K where it is not what the file would give without it: the table's K on a table, the
    /// preset's on images (so a preset set on a resolved file decides it).
    pub fn top_k_written(&self, preset: Preset) -> Option<usize> {
        let k = self.fedtmos.server.top_k;
        let unwritten = match self.fedtmos.table_bits {
            Some(_) => TABLE_TOP_K,
            None => preset.top_k(),
        };
        (k != unwritten).then_some(k)
    }

    fn models_in_a_composite(&self, clients: usize) -> usize {
        clients + self.fedtmos.server.models + 1
    }
}

/// The family's facts: one round (FedTM overrides), a bank of clauses per class.
pub const ONE_SHOT_TM: Facts = Facts {
    one_shot: true,
    banks: ClauseBanks::PerClass,
    ..Facts::federated(ModelKind::Tm)
};

impl Strategy for FedTmosSpec {
    const FACTS: Facts = ONE_SHOT_TM;

    fn check(_: ModelKind, c: &Checked, s: &Sections, shape: &DataShape) -> ParamResult<Self> {
        let defaults = TableDefaults {
            top_k: true,
            weight_resolution: true,
        };
        Ok(FedTmosSpec::for_data(c, s, shape, defaults))
    }
}

impl StrategyParams for FedTmosSpec {
    fn why_not_secagg(&self) -> &'static str {
        "its k-means clusters each client's class vectors"
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::ConvTm(*self)
    }

    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        // The run's seed seeds its k-means.
        Box::new(FedTmosServer::new(self.fedtmos, &self.tm, classes, seed).with_robust(robust))
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        let Some(section) = out.fedtmos.as_mut() else {
            return;
        };
        section.top_k = self.top_k_written(section.preset);
        // R where it is not the images' default (a table's is always written, so that the
        // resolved file reads back as it ran).
        let r = self.fedtmos.server.weight_resolution;
        let table = self.fedtmos.table_bits.is_some();
        section.weight_resolution = (table || r != CODE_WEIGHT_RESOLUTION).then_some(r);
    }

    fn models_per_download(&self, clients: usize) -> usize {
        self.models_in_a_composite(clients)
    }

    fn copy_data_epoch(&self) -> bool {
        self.fedtmos.copy_data_epoch
    }
}

/// FedTMOS's ensemble baseline: one round; every client predicts with all clients' machines.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EnsembleSpec(pub FedTmosSpec);

impl Strategy for EnsembleSpec {
    /// It keeps every machine: nothing is averaged.
    const FACTS: Facts = Facts {
        averages: false,
        ..ONE_SHOT_TM
    };

    fn check(_: ModelKind, c: &Checked, s: &Sections, shape: &DataShape) -> ParamResult<Self> {
        let defaults = TableDefaults {
            top_k: false,
            weight_resolution: false,
        };
        Ok(EnsembleSpec(FedTmosSpec::for_data(c, s, shape, defaults)))
    }
}

impl StrategyParams for EnsembleSpec {
    fn why_not_secagg(&self) -> &'static str {
        "the ensemble sends every client's own machine"
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::ConvTm(self.0)
    }

    fn server(&self, classes: usize, _: u64, _: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(EnsembleServer::new(self.0.fedtmos, &self.0.tm, classes))
    }

    fn bits_client(
        &self,
        _features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        clients: usize,
    ) -> Result<Box<dyn ClientStrategy<BitShard>>> {
        // The clients' own machines come back unscaled.
        let mut hyper = self.0.fedtmos;
        hyper.server.weight_resolution = CODE_WEIGHT_RESOLUTION;
        let client = FedTmosClient::new(self.0.tm, hyper, classes, seed, client, clients, 0)?;
        Ok(Box::new(client))
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn models_per_download(&self, clients: usize) -> usize {
        self.0.models_in_a_composite(clients)
    }

    fn copy_data_epoch(&self) -> bool {
        self.0.fedtmos.copy_data_epoch
    }
}
