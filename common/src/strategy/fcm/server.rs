use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Aggregation;
use crate::model::fcm::Fcm;
use crate::strategy::decoder::{MapDecoder, UpdateDecoder};
use crate::strategy::privacy::{self, DpHyper, NoiseKey, PrivacySpent, PrivateMean};
use crate::strategy::report::Tagged;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{
    Aggregate, Downloads, LocalMetrics, RoundReport, ServerStrategy, StrategyState, unexpected,
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
    /// `[dp]`: the mean map clipped and noised, or only counted (local noise).
    privacy: Option<PrivateMean>,
}

impl FcmServer {
    pub fn new(classes: usize, aggregation: Aggregation) -> Self {
        FcmServer {
            classes,
            aggregation,
            robust: RobustHyper::default(),
            privacy: None,
        }
    }

    /// Averaging under `dp` (nothing changes where it is off); `seed` draws the central noise.
    pub fn with_privacy(mut self, dp: DpHyper, seed: u64) -> Self {
        self.privacy = (!dp.is_off()).then(|| PrivateMean::new(dp, seed));
        self
    }

    /// The round counted for `ids` where their maps came noised (local noise, summed securely
    /// or in the clear).
    pub(super) fn count_private(&mut self, ids: &[ClientId]) -> Result<Option<PrivacySpent>> {
        self.privacy.as_mut().map(|p| p.count(ids)).transpose()
    }

    /// The round's map: under central `[dp]` each change from the last global map (the zero map
    /// in round 1: Blind FL has none) clipped and the mean noised; otherwise `[robust]`'s
    /// combination (the plain mean by default). Clamped to the weights' range either way.
    fn combine(
        &mut self,
        round: Round,
        ids: &[ClientId],
        views: &[&[f64]],
        weights: Vec<f64>,
    ) -> Result<(Vec<f64>, Vec<f64>, Option<PrivacySpent>)> {
        let (mut global, weights, privacy) = match &mut self.privacy {
            Some(p) if p.adds_noise() => {
                let zeros = || vec![0.0; views[0].len()];
                let (mean, spent) = p.central(round, ids, views, &weights, zeros)?;
                (mean, weights, Some(spent))
            }
            other => {
                let spent = other.as_mut().map(|p| p.count(ids)).transpose()?;
                let (mean, weights) = self.robust.combine(views, &weights);
                (mean, weights, spent)
            }
        };
        // Noise leaves the range; a convex combination only by rounding.
        global.iter_mut().for_each(|g| *g = g.clamp(-1.0, 1.0));
        if let Some(p) = &mut self.privacy
            && p.adds_noise()
        {
            p.rebase(&global);
        }
        Ok((global, weights, privacy))
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
        let ids: Vec<ClientId> = updates.keys().copied().collect();
        let (global, weights, privacy) = self.combine(round, &ids, &views, weights)?;
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
        privacy::restore_into(&mut self.privacy, state, "blind fl")
    }
}
