//! Strategies: each has a server half, a pure function of the updates it is given, and a client
//! half that trains on a shard and applies downloads. Neither does I/O.

pub mod ahp;
pub mod fedavg;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::Experiment;
use crate::data::Dataset;
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
}

impl StrategyKind {
    pub const NAMES: &[&str] = &["fedavg", "fedavg-ahp"];

    pub fn parse(s: &str) -> std::result::Result<StrategyKind, String> {
        match s {
            "fedavg" => Ok(StrategyKind::FedAvg),
            "fedavg-ahp" => Ok(StrategyKind::FedAvgAhp),
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
        }
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
}

pub trait ServerStrategy: Send {
    /// What round 1 starts from, given the feature count the clients declared.
    fn initial_download(&self, features: usize) -> Option<Payload>;
    /// Shape and value checks of one update, before it touches any state.
    fn check_update(&self, features: usize, update: &Payload) -> Result<()>;
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

pub trait ClientStrategy: Send {
    /// Replaces (or blends) the local model with the server's download.
    fn apply(&mut self, download: &Payload) -> Result<()>;
    /// Trains locally for one round and returns the update to upload.
    fn train(&mut self, train: &Dataset, round: Round, rng: &mut FlintRng) -> Result<Payload>;
    fn evaluate(&self, test: &Dataset) -> ConfusionMatrix;
}

pub fn server_strategy(e: &Experiment) -> Box<dyn ServerStrategy> {
    match e.strategy {
        StrategyKind::FedAvg => Box::new(fedavg::FedAvgServer::by_size()),
        StrategyKind::FedAvgAhp => Box::new(fedavg::FedAvgServer::by_ahp(e.ahp.clone())),
    }
}

pub fn client_strategy(e: &Experiment, features: usize) -> Box<dyn ClientStrategy> {
    match e.strategy {
        StrategyKind::FedAvg | StrategyKind::FedAvgAhp => {
            Box::new(fedavg::FedAvgClient::new(features, e.logreg))
        }
    }
}
