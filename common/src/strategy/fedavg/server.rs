use std::collections::BTreeMap;
use std::sync::Arc;

use super::client::flat;
use crate::model::logreg::LogReg;
use crate::strategy::ahp::{self, AhpHyper, CriteriaValues};
use crate::strategy::decoder::{LinearDecoder, UpdateDecoder};
use crate::strategy::privacy::{self, DpHyper, NoiseKey, PrivateMean};
use crate::strategy::report::StrategyState;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{Aggregate, Downloads, RoundReport, ServerStrategy, unexpected};
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
    /// `[dp]`: the mean clipped and noised, or only counted (local noise).
    privacy: Option<PrivateMean>,
}

impl FedAvgServer {
    pub fn by_size(classes: usize) -> Self {
        FedAvgServer {
            weighting: Weighting::DatasetSize,
            classes,
            robust: RobustHyper::default(),
            privacy: None,
        }
    }

    pub fn by_ahp(hyper: AhpHyper, classes: usize) -> Self {
        FedAvgServer {
            weighting: Weighting::Ahp(hyper),
            classes,
            robust: RobustHyper::default(),
            privacy: None,
        }
    }

    /// Averaging by `robust` instead of the papers' weighted mean.
    pub fn with_robust(mut self, robust: RobustHyper) -> Self {
        self.robust = robust;
        self
    }

    /// Averaging under `dp` (nothing changes where it is off); `seed` draws the central noise.
    pub fn with_privacy(mut self, dp: DpHyper, seed: u64) -> Self {
        self.privacy = (!dp.is_off()).then(|| PrivateMean::new(dp, seed));
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
        crate::strategy::require_updates(round, updates)?;
        let participants = summaries_of(clients, updates.keys())?;
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
        let mut flat_models = Vec::with_capacity(models.len());
        for model in &models {
            if model.weights.len() != global.weights.len() || model.outputs() != global.outputs() {
                return Err(FlintError::InvalidUpdate(format!(
                    "updates disagree on the model's shape: {} and {} weights",
                    model.weights.len(),
                    global.weights.len()
                )));
            }
            flat_models.push(flat(model));
        }
        let views: Vec<&[f64]> = flat_models.iter().map(Vec::as_slice).collect();
        let ids: Vec<ClientId> = updates.keys().copied().collect();
        let (combined, weights, privacy) = match &mut self.privacy {
            Some(p) if p.adds_noise() => {
                let initial = || flat(&global);
                let (mean, spent) = p.central(round, &ids, &views, &weights, initial)?;
                (mean, weights, Some(spent))
            }
            // Local noise came with the updates: `[robust]` combines them, the round is counted.
            other => {
                let spent = other.as_mut().map(|p| p.count(&ids)).transpose()?;
                let (mean, weights) = self.robust.combine(&views, &weights);
                (mean, weights, spent)
            }
        };
        let (w, b) = combined.split_at(global.weights.len());
        global.weights.copy_from_slice(w);
        global.biases.copy_from_slice(b);
        let weights: BTreeMap<ClientId, f64> = updates.keys().copied().zip(weights).collect();
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_linear(&global)),
            weights,
            report: RoundReport::plain("fedavg"),
            local: BTreeMap::new(),
            privacy,
        })
    }

    fn secure_len(&self, features: usize) -> Option<usize> {
        Some(flat(&LogReg::for_classes(features, self.classes)).len())
    }

    fn secure_weights(
        &self,
        clients: &BTreeMap<ClientId, DataSummary>,
        roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        let members = summaries_of(clients, roster.iter())?;
        Ok(roster.iter().copied().zip(self.weights(&members)).collect())
    }

    fn aggregate_sum(
        &mut self,
        round: Round,
        weights: &BTreeMap<ClientId, f64>,
        sum: &[f64],
    ) -> Result<Aggregate> {
        let features = features_of(sum.len(), self.classes)?;
        let mut global = LogReg::for_classes(features, self.classes);
        let (mean, shares) = crate::strategy::survivors_mean(round, weights, sum)?;
        let (w, b) = mean.split_at(global.weights.len());
        global.weights.copy_from_slice(w);
        global.biases.copy_from_slice(b);
        let privacy = self
            .privacy
            .as_mut()
            .map(|p| p.count(&ids_of(weights)))
            .transpose()?;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_linear(&global)),
            weights: shares,
            report: RoundReport::plain("fedavg"),
            local: BTreeMap::new(),
            privacy,
        })
    }

    fn set_noise_key(&mut self, key: NoiseKey) -> bool {
        privacy::key_noise(&mut self.privacy, key)
    }

    fn snapshot(&self) -> StrategyState {
        privacy::snapshot_of(&self.privacy)
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        privacy::restore_into(&mut self.privacy, state, "fedavg")
    }
}

/// The summaries of `ids`, each of which must have joined.
fn summaries_of<'a>(
    clients: &'a BTreeMap<ClientId, DataSummary>,
    ids: impl Iterator<Item = &'a ClientId>,
) -> Result<BTreeMap<ClientId, &'a DataSummary>> {
    ids.map(|id| {
        clients.get(id).map(|s| (*id, s)).ok_or_else(|| {
            FlintError::InvalidUpdate(format!("update from client {id}, which never joined"))
        })
    })
    .collect()
}

fn ids_of(weights: &BTreeMap<ClientId, f64>) -> Vec<ClientId> {
    weights.keys().copied().collect()
}

/// The features of a model whose flat vector has `len` values.
fn features_of(len: usize, classes: usize) -> Result<usize> {
    let outputs = crate::model::logreg::outputs_for(classes);
    match len.is_multiple_of(outputs) && len / outputs > 1 {
        true => Ok(len / outputs - 1),
        false => Err(FlintError::InvalidUpdate(format!(
            "a secure sum of {len} values fits no model of {classes} classes"
        ))),
    }
}

/// A client's update as secure aggregation sums it: its weights, then its biases (as
/// [`flat`] lays a model out).
pub fn secure_input(update: &Payload) -> Result<Vec<f64>> {
    let Some(wire::proto::payload::Kind::LinearModel(m)) = &update.kind else {
        return Err(FlintError::InvalidUpdate(
            "secure aggregation of fedavg sums linear models".into(),
        ));
    };
    let biases: Vec<f32> = match m.class_biases.is_empty() {
        true => vec![m.bias],
        false => m.class_biases.clone(),
    };
    Ok(m.weights
        .iter()
        .chain(&biases)
        .map(|&v| f64::from(v))
        .collect())
}
