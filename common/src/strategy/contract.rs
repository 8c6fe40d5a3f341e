//! What a strategy contributes to the framework, implemented by its checked settings (its spec)
//! in its own module; `registry` names every strategy's spec once.
//!
//! Two traits because the framework needs both a spec's type (to check a file into it:
//! [`Strategy`]) and its value behind a reference (to run it: [`StrategyParams`]).

use std::fmt::Debug;

use super::model_spec::ModelSpec;
use super::sections::{Checked, Sections};
use super::{ClientStrategy, ModelKind, ServerStrategy};
use crate::ClientId;
use crate::Result;
use crate::data::images::{BitShard, PixelShard};
use crate::data::pixels::PixelRows;
use crate::data::{DataShape, Shard};
use crate::model::tm::ClauseBanks;
use crate::params::ParamResult;
use crate::strategy::robust::RobustHyper;
use crate::wire::Compression;
use crate::wire::proto::Payload;

/// What a strategy is, before any file says how to run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The model it trains; `None` for a baseline, which trains the one the file names.
    pub model: Option<ModelKind>,
    /// Whether its server averages the clients' updates, where `[robust]` applies.
    pub averages: bool,
    /// Whether its mean weights each client by what that client declares (its rows, AHP's
    /// criteria): one liar would take the weight, so by default none takes more than twice
    /// the round's equal share.
    pub declared_weights: bool,
    /// One upload and one download: `rounds` must be 1 and is by default.
    pub one_shot: bool,
    /// Whether every client ends with one global model (a shared test set measures it), or
    /// each with its own.
    pub one_model: bool,
    /// How its Tsetlin Machines hold clauses: FedTMOS's family reads a table's row as one patch,
    /// a bank per class.
    pub banks: ClauseBanks,
}

impl Facts {
    /// A federated strategy of `model` that averages into one global model over rounds.
    pub const fn federated(model: ModelKind) -> Facts {
        Facts {
            model: Some(model),
            averages: true,
            declared_weights: false,
            one_shot: false,
            one_model: true,
            banks: ClauseBanks::Shared,
        }
    }
}

/// A strategy's checked settings, as a type: its facts and how a file's sections check into it.
pub trait Strategy: StrategyParams + Sized {
    const FACTS: Facts;

    /// The settings of a run training `model` on data of `shape`, from the sections `c` holds
    /// checked (at the data's defaults) and `s` as written: checked once, never changed after.
    fn check(model: ModelKind, c: &Checked, s: &Sections, shape: &DataShape) -> ParamResult<Self>;
}

/// A strategy's checked settings, as a value: what a run asks of it.
pub trait StrategyParams: Debug + Send + Sync {
    /// The model every client trains.
    fn model(&self) -> ModelSpec;

    /// The server half; `seed` is the run's, `robust` how it averages (the checks refuse
    /// anything but the plain mean where nothing is averaged).
    fn server(&self, classes: usize, seed: u64, robust: RobustHyper) -> Box<dyn ServerStrategy>;

    /// Images per class the server holds from the data's test split (FLIS's server set);
    /// `None`: the server reads no data, and [`StrategyParams::server`] is its server.
    fn server_images_per_class(&self) -> Option<usize> {
        None
    }

    /// The server half of a strategy whose server holds images, given them.
    fn server_holding(
        &self,
        classes: usize,
        seed: u64,
        robust: RobustHyper,
        _held: PixelRows,
    ) -> Box<dyn ServerStrategy> {
        self.server(classes, seed, robust)
    }

    /// The client half of a model that trains on a table.
    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        self.model().table_client(features, classes)
    }

    /// The client half of a model that trains on booleanized images; its machine's initial
    /// state derives from (seed, client). `clients`: the run's, bounding what a download holds.
    fn bits_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        clients: usize,
    ) -> Result<Box<dyn ClientStrategy<BitShard>>> {
        self.model()
            .bits_client(features, classes, seed, client, clients)
    }

    /// The client half of a model that trains on images as bytes (a neural network); its
    /// first network derives from the run's seed. `clients`: the run's, bounding what a
    /// download holds.
    fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        _clients: usize,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        self.model().pixels_client(features, classes, seed, client)
    }

    /// Whether a client's model after a round is the download alone, nothing of its own
    /// training kept beside it, so a replayed download can be measured by a client prepared
    /// afresh.
    fn model_is_the_download(&self) -> bool;

    /// Writes into `out` what this strategy reads beyond its model's sections (`written`: the
    /// file's sections as written).
    fn resolve(&self, _written: &Sections, _out: &mut Sections) {}

    /// The knobs a grid's table tells runs of this strategy apart by, in one line.
    fn setting(&self, images: bool, compression: Compression) -> String {
        self.model().setting(images, compression)
    }

    /// How many of the model's largest updates one download may take (2: one model, with room
    /// to spare); the one-shot composites send every client's machine besides.
    fn models_per_download(&self, _clients: usize) -> usize {
        2
    }

    /// A bound on the encoded bytes of one client's update (the model's, unless the strategy
    /// sends more beside it).
    fn update_bytes_bound(&self, features: usize, classes: usize) -> u64 {
        self.model().update_bytes_bound(features, classes)
    }

    /// The upload a client would send under these settings, from one kept by a run whose
    /// clients sent more (a one-shot run with every rule's statistics, replayed under one
    /// rule): what a replay counts as the upload's bytes. By default the kept one.
    fn upload_as_sent(&self, kept: &Payload) -> Payload {
        kept.clone()
    }

    /// Whether `[dp]` applies: the strategy clips, noises and accounts as `strategy::privacy`
    /// says (the averaging strategies); the others refuse a mechanism.
    fn takes_dp(&self) -> bool {
        false
    }

    /// Whether `[secagg]` applies: the server needs only the weighted sum of the updates, and
    /// the client's update as that sum's terms ([`StrategyParams::secure_input`]).
    fn takes_secagg(&self) -> bool {
        false
    }

    /// Why `[secagg]` does not apply, for the refusal.
    fn why_not_secagg(&self) -> &'static str {
        "its aggregation is not a weighted sum of the updates"
    }

    /// A client's update as the values its secure aggregation sums (before its weight).
    fn secure_input(&self, _update: &crate::wire::proto::Payload) -> crate::Result<Vec<f64>> {
        Err(crate::FlintError::Config(
            "this strategy does not aggregate securely".into(),
        ))
    }

    /// The group a client's secure input is summed in, from its update: public, and only
    /// inputs of one group are summed together (by default every client's: group 0).
    fn secure_group(&self, _update: &crate::wire::proto::Payload) -> crate::Result<u32> {
        Ok(0)
    }

    /// The largest |value| of one client's weighted secure input `secagg.bound` defaults to.
    fn secure_bound(&self) -> f64 {
        100.0
    }

    /// Whether every client must declare its compute power.
    fn needs_compute_ghz(&self) -> bool {
        false
    }

    /// `fedtmos.copy_data_epoch`: clients first fit one epoch on another client's rows.
    fn copy_data_epoch(&self) -> bool {
        false
    }
}
