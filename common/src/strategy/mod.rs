//! Strategies: each has a server half, a pure function of the updates it is given, and a client
//! half that trains on a shard and applies downloads. Neither does I/O.
//!
//! A strategy is its own module and one line of `registry`: its spec type implements
//! `contract::Strategy`, checked from the file's sections (`sections`) into a [`StrategySpec`];
//! received updates reach it only through its own [`UpdateDecoder`] (see `wire::convert`), and
//! it reports each round as a [`RoundReport`] of its own type.

pub mod ahp;
pub mod contract;
pub mod decoder;
pub mod fcm;
pub mod fedavg;
pub mod fedavg_cnn;
pub mod fedprox;
pub mod fedtm;
pub mod fedtmos;
pub mod flis;
pub mod ifca;
pub mod local;
pub mod model_spec;
pub mod oneshot;
pub mod privacy;
pub mod registry;
pub mod report;
pub mod resume;
pub mod robust;
pub mod sections;
pub mod spec;
pub mod tpfl;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::metrics::ConfusionMatrix;
use crate::model::tm::composite::CompositeOptions;
use crate::params::name_of;
use crate::rng::FlintRng;
use crate::wire::Update;
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round};

pub use crate::metrics::LocalMetrics;
pub use decoder::UpdateDecoder;
pub use fcm::FcmSpec;
pub use fedtmos::FedTmosSpec;
pub use model_spec::ModelSpec;
pub use registry::{StrategyKind, StrategySpec};
pub use report::{RoundReport, StrategyState};
pub use sections::Sections;
pub use tpfl::TmSpec;

/// The models, as `model = "…"` writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    #[serde(rename = "logreg")]
    LogReg,
    Fcm,
    /// TPFL's coalesced Tsetlin Machine, on booleanized images.
    Tm,
    /// A convolutional network on images (the neural baselines).
    Cnn,
}

impl ModelKind {
    pub fn name(self) -> String {
        name_of(&self)
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

/// A round's result: the downloads, each participant's aggregation weight, and the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    pub downloads: Downloads,
    pub weights: BTreeMap<ClientId, f64>,
    pub report: RoundReport,
    /// What each participant said about its own model in its update, where the update says it.
    pub local: BTreeMap<ClientId, LocalMetrics>,
    /// What `[dp]` added and spent this round; `None` without it.
    pub privacy: Option<privacy::PrivacySpent>,
}

pub trait ServerStrategy: Send {
    /// What round 1 starts from, given the feature count the clients declared (by default
    /// nothing: each client starts from its own model).
    fn initial_download(&self, _features: usize) -> Option<Payload> {
        None
    }
    /// How this strategy's updates are read: shared with the shell, which decodes off the lock
    /// of the round state (the decoder sees what the strategy sent, never what it is building).
    fn decoder(&self) -> Arc<dyn UpdateDecoder>;
    /// Decodes one received update with [`ServerStrategy::decoder`].
    fn decode(&self, client: ClientId, features: usize, update: &Payload) -> Result<Update> {
        self.decoder().decode(client, features, update)
    }
    /// Combines a round's decoded updates; both maps iterate in client-id order.
    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate>;
    /// Under `[secagg]`: how many values a client's update sums as, for a model of `features`
    /// (`None`: this strategy does not aggregate securely).
    fn secure_len(&self, _features: usize) -> Option<usize> {
        None
    }
    /// Under `[secagg]`: how many groups clients declare their inputs in (a group's inputs are
    /// summed apart from the others'); by default one.
    fn secure_groups(&self) -> u32 {
        1
    }
    /// Under `[secagg]`: the weight each member of `roster` multiplies its update by before it
    /// is masked (public: from the declared summaries); at most 1.
    fn secure_weights(
        &self,
        _clients: &BTreeMap<ClientId, DataSummary>,
        _roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        Err(FlintError::Config(
            "this strategy does not aggregate securely".into(),
        ))
    }
    /// Under `[secagg]`: the round's aggregate from `sum`, Σ weight × update over the clients
    /// of `weights` (those whose masked input was summed), all the server holds of them.
    fn aggregate_sum(
        &mut self,
        _round: Round,
        _weights: &BTreeMap<ClientId, f64>,
        _sum: &[f64],
    ) -> Result<Aggregate> {
        Err(FlintError::Config(
            "this strategy does not aggregate securely".into(),
        ))
    }
    /// Under `[secagg]`: the round's aggregate from each group's sum (keyed by group; `clients`:
    /// every joined client's summary); a strategy of one group takes it by
    /// [`ServerStrategy::aggregate_sum`].
    fn aggregate_groups(
        &mut self,
        round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        sums: &BTreeMap<u32, GroupSum>,
    ) -> Result<Aggregate> {
        match (sums.len(), sums.get(&0)) {
            (1, Some(g)) => self.aggregate_sum(round, &g.weights, &g.sum),
            _ => Err(FlintError::InvalidUpdate(format!(
                "round {round}'s secure sums are of groups {:?}; this strategy sums group 0 alone",
                sums.keys().collect::<Vec<_>>()
            ))),
        }
    }
    /// Draws the noise this server adds (`dp.mechanism = "central"`) from `key` rather than the
    /// run's seed; whether it adds any (by default none).
    fn set_noise_key(&mut self, _key: privacy::NoiseKey) -> bool {
        false
    }
    /// What the strategy keeps between rounds (by default nothing).
    fn snapshot(&self) -> StrategyState {
        StrategyState::stateless()
    }
    /// Takes back what [`ServerStrategy::snapshot`] gave, into a strategy built from the same
    /// spec (by default: nothing to take, and a state that is something is refused).
    fn restore(&mut self, state: StrategyState) -> Result<()> {
        state.expect_stateless("this strategy")
    }
}

/// One group's part of a secure round: the weights of the clients whose masked inputs it
/// summed, and Σ weight × input over them, all the server holds of those inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSum {
    pub weights: BTreeMap<ClientId, f64>,
    pub sum: Vec<f64>,
}

/// A secure round's weighted mean: `sum` (Σ weight × update over the survivors) over the
/// survivors' weights, which were shares of the whole roster; with those weights renormalised.
fn survivors_mean(
    round: Round,
    weights: &BTreeMap<ClientId, f64>,
    sum: &[f64],
) -> Result<(Vec<f64>, BTreeMap<ClientId, f64>)> {
    require_updates(round, weights)?;
    let total: f64 = weights.values().sum();
    let mean = sum.iter().map(|v| v / total).collect();
    Ok((
        mean,
        weights.iter().map(|(&c, &w)| (c, w / total)).collect(),
    ))
}

/// A round no update reached has nothing to aggregate: refused, not averaged into nothing.
fn require_updates<U>(round: Round, updates: &BTreeMap<ClientId, U>) -> Result<()> {
    match updates.is_empty() {
        true => Err(FlintError::InvalidUpdate(format!(
            "round {round} has no updates to aggregate"
        ))),
        false => Ok(()),
    }
}

/// An update of another kind than the strategy decodes: only possible if a caller bypassed
/// `decode`, so it is refused rather than trusted.
fn unexpected(want: &str, got: &Update) -> FlintError {
    FlintError::InvalidUpdate(format!(
        "expected {want} updates to aggregate, got a {}",
        got.kind_name()
    ))
}

/// What an evaluation measured: the model the strategy predicts with, or a baseline its download
/// also carries. Baselines are measured on the run's shared test set only, by its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Predictor {
    /// What the strategy predicts with (wire name: empty).
    Model,
    /// The strategy's composite under another reading (FedTMOS: the other normalization).
    ModelAs(CompositeOptions),
    /// Every client's own machine in one composite (FedTMOS's ensemble baseline).
    Ensemble,
    EnsembleAs(CompositeOptions),
    /// One client's own machine alone.
    Client(ClientId),
}

impl Predictor {
    /// As `EvalReport.predictor` and results.json write it: "", "composite:per-batch+clamp",
    /// "ensemble", "ensemble:per-sample", "client-3".
    pub fn name(self) -> String {
        match self {
            Predictor::Model => String::new(),
            Predictor::ModelAs(o) => format!("composite:{}", o.name()),
            Predictor::Ensemble => "ensemble".into(),
            Predictor::EnsembleAs(o) => format!("ensemble:{}", o.name()),
            Predictor::Client(id) => format!("client-{id}"),
        }
    }

    pub fn parse(name: &str) -> Result<Predictor> {
        let options = |o: &str| {
            CompositeOptions::parse(o).ok_or_else(|| {
                FlintError::InvalidRequest(format!("unknown composite reading {o:?}"))
            })
        };
        if name.is_empty() {
            return Ok(Predictor::Model);
        }
        if name == "ensemble" {
            return Ok(Predictor::Ensemble);
        }
        if let Some(o) = name.strip_prefix("composite:") {
            return options(o).map(Predictor::ModelAs);
        }
        if let Some(o) = name.strip_prefix("ensemble:") {
            return options(o).map(Predictor::EnsembleAs);
        }
        if let Some(id) = name.strip_prefix("client-").and_then(|i| i.parse().ok()) {
            return Ok(Predictor::Client(id));
        }
        let shown: String = name.chars().take(40).collect();
        Err(FlintError::InvalidRequest(format!(
            "unknown predictor {shown:?}"
        )))
    }
}

/// A client half, on the shard type its model reads (`Shard` for tables, `BitShard` for
/// booleanized images, `PixelShard` for images as bytes).
pub trait ClientStrategy<S>: Send {
    /// Replaces (or blends) the local model with the server's download, the aggregate of
    /// `round`.
    fn apply(&mut self, round: Round, download: &Payload) -> Result<()>;
    /// Trains locally for one round on the shard's training split and returns the update to
    /// upload (Blind FL's update also carries metrics on the test split).
    fn train(&mut self, shard: &S, round: Round, rng: &mut FlintRng) -> Result<Payload>;
    /// The model as it is now, on the shard's test split.
    fn evaluate(&self, shard: &S) -> ConfusionMatrix;
    /// The model and every baseline the last download carries, on the shard's test split, the
    /// model last (its holder measures the shared test set this way).
    fn evaluate_all(&self, shard: &S) -> Vec<(Predictor, ConfusionMatrix)> {
        vec![(Predictor::Model, self.evaluate(shard))]
    }
    /// The model as it is now, to keep in the run directory; `None` where there is none yet or
    /// the model has no file format yet.
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        None
    }
    /// What this half carries to its next round beyond the download (its own model, delta
    /// bases, feedback masks), for a client started again to go on exactly; `None` where it
    /// carries nothing (FedTMOS's one round).
    fn checkpoint(&self) -> Option<Vec<u8>> {
        None
    }
    /// The update the server refused for want of its base ([`FlintError::NoBase`]: a delta
    /// taken from a vector it no longer holds), as the weights themselves; `None` where the
    /// update is whole already.
    fn without_base(&self, _update: &Payload) -> Option<Payload> {
        None
    }

    /// Draws the noise this client adds (`dp.mechanism = "local"`) from `noise`'s key rather
    /// than its training stream; whether it adds any (by default none).
    fn set_noise_key(&mut self, _noise: privacy::ClientNoise) -> bool {
        false
    }

    /// Puts back what [`ClientStrategy::checkpoint`] wrote.
    fn restore(&mut self, _state: &[u8]) -> Result<()> {
        Err(resume::bad(
            "this strategy's clients carry nothing to restore",
        ))
    }
    /// For each machine of a composite download (FedTMOS: the server models, and the clients'
    /// own with `fedtmos.baselines`), named, how its class sums behave on the shard's test rows
    /// (`flint replay --sums`); empty where the model is no composite.
    fn class_sum_profiles(
        &self,
        _shard: &S,
    ) -> Vec<(String, Vec<crate::model::tm::composite::ClassSumProfile>)> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::fcm::{Aggregation, FcmServer};
    use super::fedavg::FedAvgServer;
    use super::local::LocalServer;
    use super::tpfl::{ClusterMean, TpflHyper, TpflServer};
    use super::*;
    use crate::model::fcm::Fcm;
    use crate::model::logreg::LogReg;
    use crate::wire;

    fn summaries(features: u32) -> BTreeMap<ClientId, DataSummary> {
        (1..=2)
            .map(|id| {
                let summary = DataSummary {
                    train_class_counts: vec![10 * u64::from(id), 5, 5],
                    test_samples: 4,
                    features,
                    compute_ghz: f64::from(id),
                };
                (id, summary)
            })
            .collect()
    }

    /// Snapshot after round 1, restore into a fresh strategy of the same spec (through JSON, as
    /// a restarted server would read it), and both must decode and aggregate round 2 alike.
    fn round_trips(
        make: impl Fn() -> Box<dyn ServerStrategy>,
        features: u32,
        round1: &[(ClientId, Payload)],
        round2: &[(ClientId, Payload)],
    ) -> (Box<dyn ServerStrategy>, Box<dyn ServerStrategy>) {
        let clients = summaries(features);
        let decode = |s: &dyn ServerStrategy, ups: &[(ClientId, Payload)]| {
            ups.iter()
                .map(|(id, p)| Ok((*id, s.decode(*id, features as usize, p)?)))
                .collect::<Result<BTreeMap<_, _>>>()
        };
        let mut a = make();
        let first = decode(&*a, round1).unwrap();
        a.aggregate(1, &clients, &first).unwrap();
        let json = serde_json::to_string(&a.snapshot()).unwrap();
        let state: StrategyState = serde_json::from_str(&json).unwrap();
        assert_eq!(state, a.snapshot());
        let mut b = make();
        b.restore(state).unwrap();
        let (ua, ub) = (decode(&*a, round2).unwrap(), decode(&*b, round2).unwrap());
        assert_eq!(ua, ub);
        let (ra, rb) = (
            a.aggregate(2, &clients, &ua).unwrap(),
            b.aggregate(2, &clients, &ub).unwrap(),
        );
        assert_eq!(ra, rb);
        assert_eq!(a.snapshot(), b.snapshot());
        (a, b)
    }

    #[test]
    fn fedavg_and_blind_fl_keep_nothing_and_restore_as_they_were() {
        let linear = |w: f64| wire::encode_linear(&LogReg::binary(vec![w, -w], w / 2.0));
        let lr = [(1, linear(1.0)), (2, linear(3.0))];
        let ahp = ahp::AhpSection::default().check().unwrap();
        let (a, _) = round_trips(|| Box::new(FedAvgServer::by_size(2)), 2, &lr, &lr);
        assert!(a.snapshot().is_stateless());
        round_trips(
            || Box::new(FedAvgServer::by_ahp(ahp.clone(), 2)),
            2,
            &lr,
            &lr,
        );
        let map = |x: f64, accuracy: f64| {
            let m = Fcm::from_parameters(1, 3, vec![x; Fcm::parameter_count(1, 3)]).unwrap();
            let local = LocalMetrics {
                accuracy,
                precision: accuracy,
            };
            wire::encode_map(&m, Some(local))
        };
        let maps = [(1, map(0.5, 0.75)), (2, map(-0.25, 0.5))];
        round_trips(
            || Box::new(FcmServer::new(3, Aggregation::Accuracy)),
            1,
            &maps,
            &maps,
        );
        // Under the median the global map is the middle one's weights (0.5, −0.25
        // and 0.25: 0.25), whatever the accuracies that weight the mean.
        let median = robust::RobustHyper {
            rule: robust::Rule::Median,
            ..Default::default()
        };
        let three = [
            (1, map(0.5, 0.75)),
            (2, map(-0.25, 0.5)),
            (3, map(0.25, 0.5)),
        ];
        let mut clients = summaries(1);
        clients.insert(3, clients[&2].clone());
        let mut s = FcmServer::new(3, Aggregation::Mean).with_robust(median);
        let ups = three
            .iter()
            .map(|(id, p)| (*id, s.decode(*id, 1, p).unwrap()))
            .collect();
        let agg = s.aggregate(1, &clients, &ups).unwrap();
        let Downloads::Broadcast(global) = agg.downloads else {
            panic!("a broadcast")
        };
        let global = wire::decode_map(&global, 1, 3).unwrap().0;
        assert!(global.parameters().iter().all(|&w| w == 0.25), "{global:?}");
        let mut s = FcmServer::new(3, Aggregation::Mean);
        let tpfl_state = StrategyState::of(&tpfl::TpflState::default());
        assert!(s.restore(tpfl_state).is_err());
    }

    #[test]
    fn tpfl_restores_its_previous_aggregates_and_delta_bases() {
        // TPFL §5 with the code's cluster mean (the previous aggregate is averaged in) and
        // delta uploads: both depend on what the server kept from round 1.
        let hyper = TpflHyper {
            cluster_mean: ClusterMean::WithPrevious,
            delta: true,
            ..Default::default()
        }
        .check()
        .unwrap();
        assert_eq!(hyper.cluster_mean, ClusterMean::WithPrevious);
        let make = || -> Box<dyn ServerStrategy> { Box::new(TpflServer::new(3, 2, hyper)) };
        let winner = |class, weights: Vec<i32>, base| {
            let upload = wire::WinnerUpload {
                class,
                confidence: 5.0,
                weights,
                delta_base_round: base,
            };
            wire::encode_winner(&upload, wire::WeightCoding::Arithmetic)
        };
        let round1 = [(1, winner(2, vec![4, 6], 0)), (2, winner(2, vec![2, 2], 0))];
        // Round 2: client 1 sends a delta against what it got in round 1.
        let round2 = [
            (1, winner(2, vec![1, -1], 1)),
            (2, winner(0, vec![7, 7], 0)),
        ];
        let (a, _) = round_trips(make, 784, &round1, &round2);
        let state: tpfl::TpflState = a.snapshot().expect("tpfl").unwrap();
        assert_eq!(state.previous.len(), 2, "classes 0 and 2 have aggregates");
        assert_eq!(
            state.sent.len(),
            3,
            "the last vector per client and class: client 1's of class 2 (round 2's), client 2's of classes 2 and 0"
        );
        // Without the restore, the delta has no base and is refused.
        let e = make().decode(1, 784, &round2[0].1).unwrap_err().to_string();
        assert!(e.contains("is none: send the weights themselves"), "{e}");
        let local = || -> Box<dyn ServerStrategy> { Box::new(LocalServer::new(make())) };
        round_trips(local, 784, &round1, &round2);
        assert!(make().restore(StrategyState::stateless()).is_err());
    }
}
