//! Strategies: each has a server half, a pure function of the updates it is given, and a client
//! half that trains on a shard and applies downloads. Neither does I/O.

pub mod ahp;
pub mod fcm;
pub mod fedavg;
pub mod local;
pub mod tpfl;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Experiment;
use crate::data::Shard;
use crate::data::images::BitShard;
use crate::metrics::ConfusionMatrix;
use crate::rng::FlintRng;
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, Result, Round};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// FedAvg, client weights n_k / n.
    FedAvg,
    /// FedAvg with client weights from the Analytic Hierarchy Process.
    FedAvgAhp,
    /// Blind FL of FCMs: the new local model is the global one.
    BlindFcm,
    /// Blended Blind FL of FCMs: the new local model is the mean of global and previous local.
    BlendedFcm,
    /// Baseline: every client trains alone; nothing is sent back.
    Local,
    /// Baseline: one client holding all the data.
    Central,
    /// TPFL: clients upload their confidence winner's weights; the server averages per class.
    Tpfl,
}

impl StrategyKind {
    pub const NAMES: &[&str] = &[
        "fedavg",
        "fedavg-ahp",
        "blind-fcm",
        "blended-fcm",
        "local",
        "central",
        "tpfl",
    ];

    pub fn parse(s: &str) -> std::result::Result<StrategyKind, String> {
        match s {
            "fedavg" => Ok(StrategyKind::FedAvg),
            "fedavg-ahp" => Ok(StrategyKind::FedAvgAhp),
            "blind-fcm" => Ok(StrategyKind::BlindFcm),
            "blended-fcm" => Ok(StrategyKind::BlendedFcm),
            "local" => Ok(StrategyKind::Local),
            "central" => Ok(StrategyKind::Central),
            "tpfl" => Ok(StrategyKind::Tpfl),
            other => Err(format!(
                "unknown strategy {other:?}; expected one of {:?}",
                Self::NAMES
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::FedAvg => "fedavg",
            StrategyKind::FedAvgAhp => "fedavg-ahp",
            StrategyKind::BlindFcm => "blind-fcm",
            StrategyKind::BlendedFcm => "blended-fcm",
            StrategyKind::Local => "local",
            StrategyKind::Central => "central",
            StrategyKind::Tpfl => "tpfl",
        }
    }

    /// The model this strategy trains, given the experiment's `model` key.
    pub fn model(self, given: Option<&str>) -> std::result::Result<ModelKind, String> {
        let given = given.map(ModelKind::parse).transpose()?;
        let implied = match self {
            StrategyKind::FedAvg | StrategyKind::FedAvgAhp => Some(ModelKind::LogReg),
            StrategyKind::BlindFcm | StrategyKind::BlendedFcm => Some(ModelKind::Fcm),
            StrategyKind::Tpfl => Some(ModelKind::Tm),
            StrategyKind::Local | StrategyKind::Central => None,
        };
        match (implied, given) {
            (Some(i), None) => Ok(i),
            (Some(i), Some(g)) if i == g => Ok(i),
            (Some(i), Some(g)) => Err(format!(
                "strategy {} trains {}, not model {}",
                self.name(),
                i.name(),
                g.name()
            )),
            (None, Some(g)) => Ok(g),
            (None, None) => Err(format!(
                "strategy {} needs a model: set model = \"logreg\", \"fcm\" or \"tm\"",
                self.name()
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    LogReg,
    Fcm,
    /// TPFL's coalesced Tsetlin Machine, on booleanized images.
    Tm,
}

impl ModelKind {
    pub fn parse(s: &str) -> std::result::Result<ModelKind, String> {
        match s {
            "logreg" => Ok(ModelKind::LogReg),
            "fcm" => Ok(ModelKind::Fcm),
            "tm" => Ok(ModelKind::Tm),
            other => Err(format!(
                "unknown model {other:?}; expected logreg, fcm or tm"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::LogReg => "logreg",
            ModelKind::Fcm => "fcm",
            ModelKind::Tm => "tm",
        }
    }
}

/// What a client said about its own freshly trained model when it uploaded (Blind FL: accuracy
/// and precision on its test split, which the server may weight by).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LocalMetrics {
    pub accuracy: f64,
    pub precision: f64,
}

impl LocalMetrics {
    /// Unweighted mean over clients.
    pub fn mean<'a>(all: impl IntoIterator<Item = &'a LocalMetrics>) -> Option<LocalMetrics> {
        let all: Vec<&LocalMetrics> = all.into_iter().collect();
        if all.is_empty() {
            return None;
        }
        let n = all.len() as f64;
        Some(LocalMetrics {
            accuracy: all.iter().map(|m| m.accuracy).sum::<f64>() / n,
            precision: all.iter().map(|m| m.precision).sum::<f64>() / n,
        })
    }
}

/// What the server sends after a round: one model for all, or one per client (personalised).
#[derive(Debug, Clone, PartialEq)]
pub enum Downloads {
    Broadcast(Payload),
    PerClient(BTreeMap<ClientId, Payload>),
}

impl Downloads {
    pub fn for_client(&self, client: ClientId) -> Option<&Payload> {
        match self {
            Downloads::Broadcast(p) => Some(p),
            Downloads::PerClient(m) => m.get(&client),
        }
    }
}

/// A round's result: the downloads, each participant's aggregation weight, and what the
/// strategy wants recorded about the round.
#[derive(Debug, Clone)]
pub struct Aggregate {
    pub downloads: Downloads,
    pub weights: BTreeMap<ClientId, f64>,
    pub details: serde_json::Value,
    /// What each participant said about its own model in its update, where the payload says it.
    pub local: BTreeMap<ClientId, LocalMetrics>,
}

pub trait ServerStrategy: Send {
    /// What round 1 starts from, given the feature count the clients declared.
    fn initial_download(&self, features: usize) -> Option<Payload>;
    /// Shape and value checks of one update, before it touches any state.
    fn check_update(&self, client: ClientId, features: usize, update: &Payload) -> Result<()>;
    /// Combines a round's updates; both maps iterate in client-id order.
    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Payload>,
    ) -> Result<Aggregate>;
    /// What the strategy wants recorded once per run (e.g. AHP priorities).
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// A client half, on the shard type its model reads (`Shard` for tables, `BitShard` for
/// booleanized images).
pub trait ClientStrategy<S>: Send {
    /// Replaces (or blends) the local model with the server's download, the aggregate of
    /// `round`.
    fn apply(&mut self, round: Round, download: &Payload) -> Result<()>;
    /// Trains locally for one round on the shard's training split and returns the update to
    /// upload (Blind FL's update also carries metrics on the test split).
    fn train(&mut self, shard: &S, round: Round, rng: &mut FlintRng) -> Result<Payload>;
    /// The model as it is now, on the shard's test split.
    fn evaluate(&self, shard: &S) -> ConfusionMatrix;
}

/// A client half together with the kind of data it needs.
pub enum ClientHalf {
    Table(Box<dyn ClientStrategy<Shard>>),
    Bits(Box<dyn ClientStrategy<BitShard>>),
}

pub fn server_strategy(e: &Experiment) -> Box<dyn ServerStrategy> {
    let classes = e.data.classes().len();
    match e.strategy {
        StrategyKind::FedAvg => Box::new(fedavg::FedAvgServer::by_size()),
        StrategyKind::FedAvgAhp => Box::new(fedavg::FedAvgServer::by_ahp(e.ahp.clone())),
        StrategyKind::BlindFcm | StrategyKind::BlendedFcm => {
            Box::new(fcm::FcmServer::new(classes, e.aggregation))
        }
        StrategyKind::Tpfl => Box::new(tpfl::TpflServer::new(classes, e.tm.clauses, e.tpfl)),
        StrategyKind::Local | StrategyKind::Central => {
            let model: Box<dyn ServerStrategy> = match e.model {
                ModelKind::LogReg => Box::new(fedavg::FedAvgServer::by_size()),
                ModelKind::Fcm => Box::new(fcm::FcmServer::new(classes, e.aggregation)),
                ModelKind::Tm => Box::new(tpfl::TpflServer::new(classes, e.tm.clauses, e.tpfl)),
            };
            Box::new(local::LocalServer::new(model))
        }
    }
}

/// Client `client`'s half; its model's random initial state derives from (seed, client).
pub fn client_strategy(e: &Experiment, client: ClientId, features: usize) -> ClientHalf {
    let classes = e.data.classes().len();
    let fcm = |blend| {
        ClientHalf::Table(Box::new(fcm::FcmClient::new(
            features, classes, e.fcm, e.pso, blend,
        )))
    };
    match (e.strategy, e.model) {
        (StrategyKind::BlindFcm, _) => fcm(fcm::Blend::Replace),
        (StrategyKind::BlendedFcm, _) => fcm(fcm::Blend::Average),
        // Local baselines never receive a download, so the blend does not matter.
        (_, ModelKind::Fcm) => fcm(fcm::Blend::Replace),
        (_, ModelKind::LogReg) => {
            ClientHalf::Table(Box::new(fedavg::FedAvgClient::new(features, e.logreg)))
        }
        (_, ModelKind::Tm) => ClientHalf::Bits(Box::new(tpfl::TpflClient::new(
            e.tm, e.tpfl, features, classes, e.seed, client,
        ))),
    }
}
