//! FedAvg (AHP paper §3.5) and its AHP-weighted variant (§3.6): w = Σ_k A_k w_k, with
//! A_k = n_k / n or the AHP client weight, computed over the clients that answered the round.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ahp::{self, AhpHyper, CriteriaValues};
use super::robust::RobustHyper;
use super::{Aggregate, ClientStrategy, Downloads, RoundReport, ServerStrategy, unexpected};
use crate::data::Shard;
use crate::metrics::ConfusionMatrix;
use crate::model::logreg::{LogReg, LogRegHyper};
use crate::rng::FlintRng;
use crate::strategy::decoder::{LinearDecoder, UpdateDecoder};
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, Update};
use crate::{ClientId, FlintError, Result, Round};

#[derive(Debug, Clone)]
enum Weighting {
    DatasetSize,
    Ahp(AhpHyper),
}

pub struct FedAvgServer {
    weighting: Weighting,
    /// The run's classes: two give the paper's binary model, more a softmax one.
    classes: usize,
    robust: RobustHyper,
}

impl FedAvgServer {
    pub fn by_size(classes: usize) -> Self {
        FedAvgServer {
            weighting: Weighting::DatasetSize,
            classes,
            robust: RobustHyper::default(),
        }
    }

    pub fn by_ahp(hyper: AhpHyper, classes: usize) -> Self {
        FedAvgServer {
            weighting: Weighting::Ahp(hyper),
            classes,
            robust: RobustHyper::default(),
        }
    }

    /// Averaging by `robust` instead of the papers' weighted mean.
    pub fn with_robust(mut self, robust: RobustHyper) -> Self {
        self.robust = robust;
        self
    }

    /// Aggregation weights of the given clients, in id order, summing to 1.
    pub fn weights(&self, clients: &BTreeMap<ClientId, &DataSummary>) -> Vec<f64> {
        let samples = |s: &DataSummary| s.train_class_counts.iter().sum::<u64>() as f64;
        match &self.weighting {
            Weighting::DatasetSize => {
                let total: f64 = clients.values().map(|s| samples(s)).sum();
                clients
                    .values()
                    .map(|s| {
                        if total > 0.0 {
                            samples(s) / total
                        } else {
                            1.0 / clients.len() as f64
                        }
                    })
                    .collect()
            }
            Weighting::Ahp(hyper) => {
                let values: Vec<CriteriaValues> = clients
                    .values()
                    .map(|s| CriteriaValues {
                        compute_ghz: s.compute_ghz,
                        gini: ahp::gini_impurity(&s.train_class_counts),
                        size: samples(s),
                    })
                    .collect();
                ahp::client_weights(hyper, &values)
            }
        }
    }
}

impl ServerStrategy for FedAvgServer {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        Some(wire::encode_linear(&LogReg::for_classes(
            features,
            self.classes,
        )))
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(LinearDecoder {
            classes: self.classes,
        })
    }

    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        if updates.is_empty() {
            return Err(FlintError::InvalidUpdate(format!(
                "round {round} has no updates to aggregate"
            )));
        }
        let participants: BTreeMap<ClientId, &DataSummary> = updates
            .keys()
            .map(|id| {
                clients.get(id).map(|s| (*id, s)).ok_or_else(|| {
                    FlintError::InvalidUpdate(format!(
                        "update from client {id}, which never joined"
                    ))
                })
            })
            .collect::<Result<_>>()?;
        let weights = self.weights(&participants);
        let models: Vec<&LogReg> = updates
            .values()
            .map(|u| match u {
                Update::Linear(m) => Ok(m),
                other => Err(unexpected("linear_model", other)),
            })
            .collect::<Result<_>>()?;
        let features = models[0].features();
        let mut global = LogReg::for_classes(features, self.classes);
        let mut flat = Vec::with_capacity(models.len());
        for model in &models {
            if model.weights.len() != global.weights.len() || model.outputs() != global.outputs() {
                return Err(FlintError::InvalidUpdate(format!(
                    "updates disagree on the model's shape: {} and {} weights",
                    model.weights.len(),
                    global.weights.len()
                )));
            }
            flat.push([&model.weights[..], &model.biases[..]].concat());
        }
        let views: Vec<&[f64]> = flat.iter().map(Vec::as_slice).collect();
        let (combined, weights) = self.robust.combine(&views, &weights);
        let (w, b) = combined.split_at(global.weights.len());
        global.weights.copy_from_slice(w);
        global.biases.copy_from_slice(b);
        let weights: BTreeMap<ClientId, f64> = updates.keys().copied().zip(weights).collect();
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_linear(&global)),
            weights,
            report: RoundReport::FedAvg,
            local: BTreeMap::new(),
        })
    }
}

/// A client of FedAvg: its local logistic regression, replaced by each download.
pub struct FedAvgClient {
    model: LogReg,
    hyper: LogRegHyper,
    /// No download replaces the model (`local`, `central`): a restart needs it back.
    keeps_model: bool,
}

impl FedAvgClient {
    pub fn new(features: usize, classes: usize, hyper: LogRegHyper) -> Self {
        FedAvgClient {
            model: LogReg::for_classes(features, classes),
            hyper,
            keeps_model: false,
        }
    }

    /// A client whose model no download replaces (the `local` and `central` baselines).
    pub fn keeping_its_model(self) -> Self {
        FedAvgClient {
            keeps_model: true,
            ..self
        }
    }
}

impl ClientStrategy<Shard> for FedAvgClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        self.model = wire::decode_linear(download, self.model.features(), self.model.classes())?;
        Ok(())
    }

    fn train(&mut self, shard: &Shard, _round: Round, _rng: &mut FlintRng) -> Result<Payload> {
        self.model.train(&shard.train, &self.hyper);
        Ok(wire::encode_linear(&self.model))
    }

    fn evaluate(&self, shard: &Shard) -> ConfusionMatrix {
        self.model.evaluate(&shard.test)
    }

    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        Some(crate::model::kept::KeptModel::logreg(&self.model))
    }

    /// The model, where no download replaces it, its weights' bits; under FedAvg the client
    /// carries nothing (its training draws no random numbers).
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let m = &self.model;
        let (weights, biases) = (
            super::resume::floats(&m.weights),
            super::resume::floats(&m.biases),
        );
        self.keeps_model
            .then(|| super::resume::frame(&[&weights, &biases]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [weights, biases] = super::resume::unframe(state, 2)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        let (weights, biases) = (
            super::resume::floats_from(weights)?,
            super::resume::floats_from(biases)?,
        );
        if weights.len() != self.model.weights.len() || biases.len() != self.model.biases.len() {
            return Err(super::resume::bad("the model is not this run's"));
        }
        self.model = LogReg { weights, biases };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proto::LinearModel;
    use crate::wire::proto::payload::Kind;

    fn summary(counts: [u64; 2], ghz: f64) -> DataSummary {
        DataSummary {
            train_class_counts: counts.to_vec(),
            test_samples: 0,
            features: 1,
            compute_ghz: ghz,
        }
    }

    fn payload(w: f32, b: f32) -> Payload {
        Payload {
            kind: Some(Kind::LinearModel(LinearModel {
                weights: vec![w],
                bias: b,
                class_biases: Vec::new(),
            })),
        }
    }

    fn update(w: f32, b: f32) -> Update {
        FedAvgServer::by_size(2)
            .decode(1, 1, &payload(w, b))
            .unwrap()
    }

    #[test]
    fn fedavg_weights_by_training_samples() {
        // §3.5: w = Σ n_k/n w_k; n = (1, 3) gives (¼, ¾).
        let clients = BTreeMap::from([(1, summary([1, 0], 1.0)), (2, summary([2, 1], 1.0))]);
        let updates = BTreeMap::from([(1, update(4.0, 1.0)), (2, update(8.0, -1.0))]);
        let agg = FedAvgServer::by_size(2)
            .aggregate(1, &clients, &updates)
            .unwrap();
        assert_eq!(agg.weights, BTreeMap::from([(1, 0.25), (2, 0.75)]));
        let Downloads::Broadcast(p) = agg.downloads else {
            panic!("fedavg broadcasts")
        };
        assert_eq!(p, payload(7.0, -0.5));
    }

    #[test]
    fn weights_are_renormalised_over_the_clients_that_answered() {
        let clients = BTreeMap::from([
            (1, summary([5, 5], 4.5)),
            (2, summary([9, 1], 1.5)),
            (3, summary([1, 1], 3.0)),
        ]);
        let updates = BTreeMap::from([(1, update(1.0, 0.0)), (3, update(1.0, 0.0))]);
        let server = FedAvgServer::by_ahp(
            crate::strategy::ahp::AhpSection::default().check().unwrap(),
            2,
        );
        let mut s = server;
        let agg = s.aggregate(2, &clients, &updates).unwrap();
        assert_eq!(agg.weights.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
        assert!((agg.weights.values().sum::<f64>() - 1.0).abs() < 1e-12);
        // Client 1 has more compute and as good a balance: it must weigh more.
        assert!(agg.weights[&1] > agg.weights[&3]);
    }

    #[test]
    fn non_linear_updates_are_refused() {
        let server = FedAvgServer::by_size(2);
        let wrong = Payload {
            kind: Some(Kind::GiniIndex(crate::wire::proto::GiniIndex {
                value: 0.5,
            })),
        };
        let err = server.decode(1, 1, &wrong).unwrap_err().to_string();
        assert!(err.contains("expected a linear_model"), "{err}");
        let err = server
            .decode(1, 2, &payload(1.0, 0.0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 weights, expected 2"), "{err}");
        let err = server
            .decode(1, 1, &payload(f32::NAN, 0.0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not finite"), "{err}");
    }
}
