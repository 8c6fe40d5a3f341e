use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Aggregation;
use crate::model::fcm::Fcm;
use crate::strategy::decoder::{MapDecoder, UpdateDecoder};
use crate::strategy::report::Tagged;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{
    Aggregate, Downloads, LocalMetrics, RoundReport, ServerStrategy, unexpected,
};
use crate::wire::proto::DataSummary;
use crate::wire::{self, Update};
use crate::{ClientId, FlintError, Result, Round};

/// Blind FL's record of a round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FcmRound {
    pub aggregation: Aggregation,
    /// Every participant scored 0, so the maps were averaged with equal weights.
    pub equal_weights_fallback: bool,
}

impl Tagged for FcmRound {
    const TAG: &'static str = "fcm";
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

    pub(super) fn classes(&self) -> usize {
        self.classes
    }

    pub(super) fn aggregation(&self) -> Aggregation {
        self.aggregation
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

    fn secure_len(&self, features: usize) -> Option<usize> {
        Some(super::secure::len(features + self.classes))
    }

    fn secure_weights(
        &self,
        clients: &BTreeMap<ClientId, DataSummary>,
        roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        FcmServer::equal_weights(clients, roster)
    }

    fn aggregate_sum(
        &mut self,
        round: Round,
        weights: &BTreeMap<ClientId, f64>,
        sum: &[f64],
    ) -> Result<Aggregate> {
        self.map_from_sum(round, weights, sum)
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
            report: RoundReport::of(&FcmRound {
                aggregation: self.aggregation,
                equal_weights_fallback: fallback,
            }),
            local,
            privacy: None,
        })
    }
}
