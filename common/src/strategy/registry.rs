//! Every strategy, named once: its name in a file, the arm of [`StrategyKind`] and of
//! [`StrategySpec`], and its spec type, which implements [`Strategy`] in the strategy's own
//! module. A new strategy is its module and one line here.
//!
//! A macro rather than a list of trait objects: the kinds stay a plain enum that serde reads
//! with the file's line and column and schemars documents, and a spec stays a value that
//! serializes into `results.json` and compares, with no downcasting.

use serde::{Deserialize, Serialize};

use super::ModelKind;
use super::contract::{Facts, Strategy, StrategyParams};
use super::fcm::{BlendedFcmSpec, BlindFcmSpec};
use super::fedavg::{FedAvgAhpSpec, FedAvgSpec};
use super::fedavg_cnn::FedAvgCnnSpec;
use super::fedprox::FedProxSpec;
use super::fedtm::FedTmSpec;
use super::fedtmos::{EnsembleSpec, FedTmosSpec};
use super::flis::FlisSpec;
use super::ifca::IfcaSpec;
use super::local::{CentralSpec, LocalSpec};
use super::oneshot::OneShotSpec;
use super::sections::{Checked, Sections};
use super::tpfl::TmSpec;
use crate::data::DataShape;
use crate::params::ParamResult;

macro_rules! strategies {
    ($($(#[$doc:meta])* $arm:ident = $name:literal => $spec:ty,)*) => {
        /// The strategies by name, as `strategy = "…"` writes them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
        pub enum StrategyKind {
            $($(#[$doc])* #[serde(rename = $name)] $arm,)*
        }

        /// A checked strategy: one arm per strategy, holding its spec.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub enum StrategySpec {
            $(#[serde(rename = $name)] $arm($spec),)*
        }

        impl StrategyKind {
            pub const ALL: &[StrategyKind] = &[$(StrategyKind::$arm,)*];

            /// What the strategy is, before any file says how to run it.
            pub fn facts(self) -> Facts {
                match self {
                    $(StrategyKind::$arm => <$spec as Strategy>::FACTS,)*
                }
            }

            pub(super) fn check_spec(
                self,
                model: ModelKind,
                c: &Checked,
                s: &Sections,
                shape: &DataShape,
            ) -> ParamResult<StrategySpec> {
                match self {
                    $(StrategyKind::$arm => {
                        <$spec as Strategy>::check(model, c, s, shape).map(StrategySpec::$arm)
                    })*
                }
            }
        }

        impl StrategySpec {
            pub fn kind(&self) -> StrategyKind {
                match self {
                    $(StrategySpec::$arm(_) => StrategyKind::$arm,)*
                }
            }

            /// The spec as its strategy runs it.
            pub fn params(&self) -> &dyn StrategyParams {
                match self {
                    $(StrategySpec::$arm(s) => s,)*
                }
            }
        }
    };
}

strategies! {
    /// FedAvg, client weights n_k / n.
    FedAvg = "fedavg" => FedAvgSpec,
    /// FedAvg with client weights from the Analytic Hierarchy Process.
    FedAvgAhp = "fedavg-ahp" => FedAvgAhpSpec,
    /// Blind FL of FCMs: the new local model is the global one.
    BlindFcm = "blind-fcm" => BlindFcmSpec,
    /// Blended Blind FL of FCMs: the new local model is the mean of global and previous local.
    BlendedFcm = "blended-fcm" => BlendedFcmSpec,
    /// Baseline: every client trains alone; nothing is sent back.
    Local = "local" => LocalSpec,
    /// Baseline: one client holding all the data.
    Central = "central" => CentralSpec,
    /// TPFL: clients upload their confidence winner's weights; the server averages per class.
    Tpfl = "tpfl" => TmSpec,
    /// FedTMOS: one round; clients upload per-class weights, include bits and their Gini index;
    /// the server builds φ server models they predict with together.
    FedTmos = "fedtmos" => FedTmosSpec,
    /// FedTMOS's ensemble baseline: one round; every client predicts with all clients' machines.
    Ensemble = "ensemble" => EnsembleSpec,
    /// FedTM, FedTMOS's iterative baseline: per class the mean weights and the top-K clients'
    /// include bits, every round.
    FedTm = "fedtm" => FedTmSpec,
    /// FedAvg of a convolutional network (TPFL Table 5's FedAvg), weights n_k / n.
    FedAvgCnn = "fedavg-cnn" => FedAvgCnnSpec,
    /// FedProx: FedAvg of a network whose local training keeps it near the global one
    /// (μ‖w − w_global‖²/2).
    FedProx = "fedprox" => FedProxSpec,
    /// IFCA: k networks; each client trains the one of lowest loss on its data, and the server
    /// averages each cluster's.
    Ifca = "ifca" => IfcaSpec,
    /// FLIS: clusters of clients whose networks predict alike on the server's images; each
    /// client downloads its cluster's mean (dc: clusters every round; hc: once).
    Flis = "flis" => FlisSpec,
    /// One-shot FL of a network (FedTMOS Table 1's CNN baselines): each client trains once;
    /// the server combines the networks by `oneshot.rule` (fedavg, ensemble, regmean,
    /// fedfisher, ot-fusion).
    OneShotCnn = "oneshot-cnn" => OneShotSpec,
}
