//! Blind and Blended Blind federated learning of FCMs (Blind FL, "Federated learning for FCMs"
//! steps 1–8; "Aggregation methods" eq. 9–13).
//!
//! Round 1 has no download: there is no initial model (step 1). Each client trains its map by
//! PSO, seeded with the map it holds from round 2 on (steps 2, 6), and uploads it with its
//! accuracy and precision on its own test split (step 3). The server averages the matrices with
//! equal, accuracy- or precision-proportional weights (step 4) and broadcasts the result. A blind
//! client takes the global map as its new local map; a blended one the element-wise mean of the
//! global and its previous local map (step 5).

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::robust::RobustHyper;
use super::{
    Aggregate, ClientStrategy, Downloads, LocalMetrics, RoundReport, ServerStrategy, unexpected,
};
use crate::data::Shard;
use crate::metrics::ConfusionMatrix;
use crate::model::fcm::{self, Activation, Fcm, FcmHyper, Fitness};
use crate::model::pso::PsoHyper;
use crate::params::{ParamResult, name_of};
use crate::rng::FlintRng;
use crate::strategy::decoder::{MapDecoder, UpdateDecoder};
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, Update};
use crate::{ClientId, FlintError, Result, Round};

/// `[fcm]`: the map, its dynamics and PSO's objective, and the Blind FL server's aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FcmSection {
    /// `tanh` or `sigmoid`.
    pub activation: Activation,
    /// λ; unset: the paper's for the activation (2 for tanh, 5 for the sigmoid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slope: Option<f64>,
    /// The dynamics stop when ‖c(t) − c(t−1)‖ is below this.
    pub tolerance: f64,
    /// Iteration cap of the dynamics (with more than two classes: 200 / classes, at least 10).
    #[serde(
        deserialize_with = "crate::params::at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 100))]
    pub max_iterations: Option<usize>,
    /// PSO's objective: `jaccard` (1 − Jaccard of the positive class) or `sample-jaccard`
    /// (eq. 7 per sample, averaged: the error rate).
    pub fitness: Fitness,
    /// Server aggregation of `blind-fcm` / `blended-fcm`: `mean` (eq. 9), `accuracy` (eq. 10–11)
    /// or `precision` (eq. 12–13).
    pub aggregation: Aggregation,
}

impl Default for FcmSection {
    fn default() -> Self {
        FcmSection {
            activation: Activation::Tanh,
            slope: None,
            tolerance: 1e-5,
            max_iterations: None,
            fitness: Fitness::Jaccard,
            aggregation: Aggregation::Mean,
        }
    }
}

impl FcmSection {
    /// The map's checked settings and the server's aggregation.
    pub fn check(&self) -> ParamResult<(FcmHyper, Aggregation)> {
        let hyper = FcmHyper {
            activation: self.activation,
            fitness: self.fitness,
            slope: self.slope.unwrap_or(self.activation.paper_slope()),
            tolerance: self.tolerance,
            max_iterations: self.max_iterations.unwrap_or(PAPER_MAX_ITERATIONS),
        }
        .check()?;
        Ok((hyper, self.aggregation))
    }
}

/// The dynamics' iteration cap for a map of `classes` class concepts where `[fcm]` leaves it
/// out: the paper's 100 for two classes, 200 / classes for more, at least 10. Each step costs
/// about classes × (features + classes) products per row, and the class-to-class links keep a
/// many-class map from settling, so a 26-class table at 100 steps took over 4 minutes a round
/// on this machine (10 clients, 2 cores) and 27 s at 10, equally accurate
/// (docs/results/tables.md).
pub fn settle_steps(classes: usize) -> usize {
    (200 / classes.max(1)).clamp(10, PAPER_MAX_ITERATIONS)
}

/// The Blind FL paper's iteration cap of the dynamics.
pub const PAPER_MAX_ITERATIONS: usize = 100;

/// How the server weights the participants' maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Aggregation {
    /// Eq. 9: 1/n each.
    Mean,
    /// Eq. 10–11: accuracy_i / Σ accuracy.
    Accuracy,
    /// Eq. 12–13: precision_i / Σ precision.
    Precision,
}

impl Aggregation {
    pub fn name(self) -> String {
        name_of(&self)
    }

    /// The participants' weights, in the order given, summing to 1. When every score is 0 (no
    /// participant predicted a positive right) the normalisation is undefined and the mean is
    /// used; the second value says so.
    pub fn weights(self, locals: &[LocalMetrics]) -> (Vec<f64>, bool) {
        let n = locals.len() as f64;
        let score = |m: &LocalMetrics| match self {
            Aggregation::Mean => 1.0,
            Aggregation::Accuracy => m.accuracy,
            Aggregation::Precision => m.precision,
        };
        let total: f64 = locals.iter().map(score).sum();
        if total > 0.0 {
            (locals.iter().map(|m| score(m) / total).collect(), false)
        } else {
            (vec![1.0 / n; locals.len()], true)
        }
    }
}

/// Blind FL's record of a round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FcmRound {
    pub aggregation: Aggregation,
    /// Every participant scored 0, so the maps were averaged with equal weights.
    pub equal_weights_fallback: bool,
}

pub struct FcmServer {
    classes: usize,
    aggregation: Aggregation,
    robust: RobustHyper,
}

impl FcmServer {
    pub fn new(classes: usize, aggregation: Aggregation) -> Self {
        FcmServer {
            classes,
            aggregation,
            robust: RobustHyper::default(),
        }
    }

    /// Averaging by `robust` instead of the paper's weighted mean (eq. 9–13's weights still
    /// decide the mean's).
    pub fn with_robust(mut self, robust: RobustHyper) -> Self {
        self.robust = robust;
        self
    }
}

impl ServerStrategy for FcmServer {
    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(MapDecoder {
            classes: self.classes,
        })
    }

    fn aggregate(
        &mut self,
        round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let mut maps = Vec::with_capacity(updates.len());
        let mut local = BTreeMap::new();
        for (id, u) in updates {
            let Update::Map { map, local: l } = u else {
                return Err(unexpected("adjacency_matrix", u));
            };
            maps.push(map);
            local.insert(*id, *l);
        }
        let Some(first) = maps.first() else {
            return Err(FlintError::InvalidUpdate(format!(
                "round {round} has no updates to aggregate"
            )));
        };
        let (features, parameters) = (first.features(), first.parameters().len());
        if let Some(m) = maps.iter().find(|m| m.features() != features) {
            return Err(FlintError::InvalidUpdate(format!(
                "updates disagree on the feature count: {} and {features}",
                m.features()
            )));
        }
        let scores: Vec<LocalMetrics> = local.values().copied().collect();
        let (weights, fallback) = self.aggregation.weights(&scores);
        if let Some(m) = maps.iter().find(|m| m.parameters().len() != parameters) {
            return Err(FlintError::InvalidUpdate(format!(
                "updates disagree on the map's size: {} and {parameters} weights",
                m.parameters().len()
            )));
        }
        let views: Vec<&[f64]> = maps.iter().map(|m| m.parameters()).collect();
        let (mut global, weights) = self.robust.combine(&views, &weights);
        // A convex combination of weights in [−1, 1] stays there; clamp rounding only.
        global.iter_mut().for_each(|g| *g = g.clamp(-1.0, 1.0));
        let global = Fcm::from_parameters(features, self.classes, global)?;
        if fallback {
            tracing::warn!(
                round,
                aggregation = ?self.aggregation,
                "every participant scored 0; aggregating with equal weights"
            );
        }
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_map(&global, None)),
            weights: updates.keys().copied().zip(weights).collect(),
            report: RoundReport::Fcm(FcmRound {
                aggregation: self.aggregation,
                equal_weights_fallback: fallback,
            }),
            local,
        })
    }
}

/// What a client does with the global map (step 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blend {
    /// Blind FL: the new local map is the global map.
    Replace,
    /// Blended Blind FL: the new local map is the mean of the global and the previous local map.
    Average,
}

pub struct FcmClient {
    features: usize,
    classes: usize,
    hyper: FcmHyper,
    pso: PsoHyper,
    blend: Blend,
    model: Option<Fcm>,
}

impl FcmClient {
    pub fn new(
        features: usize,
        classes: usize,
        hyper: FcmHyper,
        pso: PsoHyper,
        blend: Blend,
    ) -> Self {
        FcmClient {
            features,
            classes,
            hyper,
            pso,
            blend,
            model: None,
        }
    }

    pub fn model(&self) -> Option<&Fcm> {
        self.model.as_ref()
    }
}

impl ClientStrategy<Shard> for FcmClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let (global, _) = wire::decode_map(download, self.features, self.classes)?;
        self.model = Some(match (self.blend, &self.model) {
            (Blend::Average, Some(local)) => global.blend(local)?,
            _ => global,
        });
        Ok(())
    }

    fn train(&mut self, shard: &Shard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        let t = fcm::train(
            &shard.train,
            self.classes,
            &self.hyper,
            &self.pso,
            self.model.as_ref(),
            rng,
        )?;
        let m = t.model.evaluate(&self.hyper, &shard.test).metrics();
        tracing::debug!(
            round,
            fitness = t.fitness,
            evaluations = t.evaluations,
            accuracy = m.accuracy,
            precision = m.precision,
            "fcm trained"
        );
        let payload = wire::encode_map(
            &t.model,
            Some(LocalMetrics {
                accuracy: m.accuracy,
                precision: m.precision,
            }),
        );
        self.model = Some(t.model);
        Ok(payload)
    }

    fn evaluate(&self, shard: &Shard) -> ConfusionMatrix {
        let test = &shard.test;
        match &self.model {
            Some(m) => m.evaluate(&self.hyper, test),
            None => Fcm::zeros(self.features, self.classes).evaluate(&self.hyper, test),
        }
    }

    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        self.model.as_ref().map(crate::model::kept::KeptModel::fcm)
    }

    /// The local map (blended: what the next download is averaged with; PSO seeds a particle
    /// with it), its weights' bits; none before the first round.
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let map = self
            .model
            .as_ref()
            .map(|m| super::resume::floats(m.parameters()));
        Some(super::resume::frame(&[&map.unwrap_or_default()]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [map] = super::resume::unframe(state, 1)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        self.model = match map.is_empty() {
            true => None,
            false => {
                let params = super::resume::floats_from(map)?;
                let m = Fcm::from_parameters(self.features, self.classes, params);
                Some(m.map_err(|e| super::resume::bad(&e.to_string()))?)
            }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fcm::Activation;
    use crate::wire::proto::AdjacencyMatrix;
    use crate::wire::proto::payload::Kind;

    fn m(accuracy: f64, precision: f64) -> LocalMetrics {
        LocalMetrics {
            accuracy,
            precision,
        }
    }

    #[test]
    fn weights_follow_eq_9_11_and_13() {
        let locals = [m(0.9, 0.5), m(0.6, 0.0), m(0.5, 0.5)];
        let (w, fb) = Aggregation::Mean.weights(&locals);
        assert_eq!((w, fb), (vec![1.0 / 3.0; 3], false));
        let (w, _) = Aggregation::Accuracy.weights(&locals);
        assert_eq!(w, vec![0.9 / 2.0, 0.6 / 2.0, 0.5 / 2.0]);
        let (w, _) = Aggregation::Precision.weights(&locals);
        assert_eq!(w, vec![0.5, 0.0, 0.5]);
        let (w, fb) = Aggregation::Precision.weights(&[m(0.7, 0.0), m(0.8, 0.0)]);
        assert_eq!((w, fb), (vec![0.5, 0.5], true));
    }

    fn summary(features: u32) -> DataSummary {
        DataSummary {
            train_class_counts: vec![1, 1],
            test_samples: 1,
            features,
            compute_ghz: 1.0,
        }
    }

    fn upload(params: Vec<f64>, accuracy: f64, precision: f64) -> Payload {
        let map = Fcm::from_parameters(1, 2, params).unwrap();
        wire::encode_map(&map, Some(m(accuracy, precision)))
    }

    fn decoded(p: &Payload) -> Update {
        FcmServer::new(2, Aggregation::Mean)
            .decode(1, 1, p)
            .unwrap()
    }

    fn params_of(p: &Payload) -> Vec<f64> {
        wire::decode_map(p, 1, 2).unwrap().0.parameters().to_vec()
    }

    #[test]
    fn server_sends_nothing_first_then_the_weighted_average() {
        let mut s = FcmServer::new(2, Aggregation::Accuracy);
        assert_eq!(s.initial_download(1), None);
        let clients = BTreeMap::from([(1, summary(1)), (2, summary(1))]);
        let updates = BTreeMap::from([
            (1, decoded(&upload(vec![1.0, 0.5, -1.0, 0.0], 0.75, 0.5))),
            (2, decoded(&upload(vec![0.0, -0.5, 1.0, 0.25], 0.25, 0.5))),
        ]);
        let agg = s.aggregate(1, &clients, &updates).unwrap();
        assert_eq!(agg.weights, BTreeMap::from([(1, 0.75), (2, 0.25)]));
        assert_eq!(agg.local[&1], m(0.75, 0.5));
        let Downloads::Broadcast(p) = &agg.downloads else {
            panic!("blind fl broadcasts")
        };
        assert_eq!(params_of(p), vec![0.75, 0.25, -0.5, 0.0625]);
        // The download carries no client's metrics.
        assert_eq!(wire::decode_map(p, 1, 2).unwrap().1.accuracy, 0.0);
    }

    fn hyper() -> FcmHyper {
        FcmHyper {
            activation: Activation::Tanh,
            fitness: crate::model::fcm::Fitness::Jaccard,
            slope: 2.0,
            tolerance: 1e-5,
            max_iterations: 100,
        }
    }

    #[test]
    fn blind_takes_the_global_map_and_blended_averages_it_with_the_local_one() {
        let local = Fcm::from_parameters(1, 2, vec![1.0, 0.5, -1.0, 0.0]).unwrap();
        let global = upload(vec![0.0, -0.5, 1.0, 0.5], 0.0, 0.0);
        for (blend, want) in [
            (Blend::Replace, vec![0.0, -0.5, 1.0, 0.5]),
            (Blend::Average, vec![0.5, 0.0, 0.0, 0.25]),
        ] {
            let mut c = FcmClient::new(1, 2, hyper(), PsoHyper::default(), blend);
            c.model = Some(local.clone());
            c.apply(1, &global).unwrap();
            assert_eq!(c.model().unwrap().parameters(), &want[..], "{blend:?}");
        }
        // A blended client without a local map yet takes the global one.
        let mut c = FcmClient::new(1, 2, hyper(), PsoHyper::default(), Blend::Average);
        c.apply(1, &global).unwrap();
        assert_eq!(c.model().unwrap().parameters(), &[0.0, -0.5, 1.0, 0.5]);
    }

    #[test]
    fn updates_are_checked_against_the_run() {
        let s = FcmServer::new(2, Aggregation::Mean);
        let good = upload(vec![0.1, 0.2, 0.3, 0.4], 0.5, 0.5);
        s.decode(1, 1, &good).unwrap();
        let e = s.decode(1, 2, &good).unwrap_err().to_string();
        assert!(e.contains("expected 4×4"), "{e}");
        let bad = upload(vec![0.1, 0.2, 0.3, 0.4], 1.5, 0.5);
        let e = s.decode(1, 1, &bad).unwrap_err().to_string();
        assert!(e.contains("local_accuracy is 1.5"), "{e}");
        let nan = Payload {
            kind: Some(Kind::AdjacencyMatrix(AdjacencyMatrix {
                concepts: 3,
                weights: vec![0.0, 0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                local_accuracy: 0.5,
                local_precision: 0.5,
            })),
        };
        let e = s.decode(1, 1, &nan).unwrap_err().to_string();
        assert!(e.contains("not finite"), "{e}");
        let wrong = wire::encode_linear(&crate::model::logreg::LogReg::zeros(1));
        let e = s.decode(1, 1, &wrong).unwrap_err().to_string();
        assert!(e.contains("expected an adjacency_matrix"), "{e}");
    }
}
