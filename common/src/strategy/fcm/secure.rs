//! Step 4 under `[secagg]`: the server sees no map and no score. Each client sums as
//! [score × its matrix, score, its matrix], score its weight's numerator (1, its accuracy or
//! its precision, eq. 9–13); the sum gives the weighted mean Σ s_k W_k / Σ s_k, and where every
//! score is 0 the plain mean the paper falls back to (ΣW_k / K). The weights it records are
//! the roster's equal shares: the scores stay with their clients.

use std::collections::BTreeMap;

use super::{Aggregation, FcmRound, FcmServer};
use crate::strategy::{Aggregate, Downloads, RoundReport};
use crate::wire::proto::{AdjacencyMatrix, Payload, payload::Kind};
use crate::wire::{self, proto::DataSummary};
use crate::{ClientId, FlintError, Result, Round};

/// Values a client sums for a map of `concepts` concepts.
pub fn len(concepts: usize) -> usize {
    2 * concepts * concepts + 1
}

/// A client's upload as its secure aggregation sums it.
pub fn input(update: &Payload, aggregation: Aggregation) -> Result<Vec<f64>> {
    let Some(Kind::AdjacencyMatrix(m)) = &update.kind else {
        return Err(FlintError::InvalidUpdate(
            "secure aggregation of an FCM sums its adjacency matrix".into(),
        ));
    };
    let score = match aggregation {
        Aggregation::Mean => 1.0,
        Aggregation::Accuracy => m.local_accuracy,
        Aggregation::Precision => m.local_precision,
    };
    let w = m.weights.iter().map(|&v| f64::from(v));
    let weighted = w.clone().map(|v| score * v);
    Ok(weighted.chain([score]).chain(w).collect())
}

impl FcmServer {
    pub(super) fn equal_weights(
        clients: &BTreeMap<ClientId, DataSummary>,
        roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        if let Some(id) = roster.iter().find(|id| !clients.contains_key(id)) {
            return Err(FlintError::InvalidUpdate(format!(
                "client {id} never joined"
            )));
        }
        Ok(roster.iter().map(|&id| (id, 1.0)).collect())
    }

    /// The global map from the survivors' sum (their weights all 1).
    pub(super) fn map_from_sum(
        &mut self,
        round: Round,
        weights: &BTreeMap<ClientId, f64>,
        sum: &[f64],
    ) -> Result<Aggregate> {
        crate::strategy::require_updates(round, weights)?;
        let cells = (sum.len() - 1) / 2;
        let n = (cells as f64).sqrt().round() as usize;
        if len(n) != sum.len() || n <= self.classes() {
            return Err(FlintError::InvalidUpdate(format!(
                "a secure sum of {} values fits no map of {} classes",
                sum.len(),
                self.classes()
            )));
        }
        let (weighted, rest) = sum.split_at(cells);
        let (scores, plain) = (rest[0], &rest[1..]);
        let fallback = scores <= 0.0;
        let global: Vec<f64> = match fallback {
            false => weighted.iter().map(|v| v / scores).collect(),
            true => plain.iter().map(|v| v / weights.len() as f64).collect(),
        };
        let matrix = Payload {
            kind: Some(Kind::AdjacencyMatrix(AdjacencyMatrix {
                concepts: n as u32,
                // A convex combination of weights in [−1, 1] stays there; clamp rounding only.
                weights: global.iter().map(|g| g.clamp(-1.0, 1.0) as f32).collect(),
                local_accuracy: 0.0,
                local_precision: 0.0,
            })),
        };
        let (global, _) = wire::decode_map(&matrix, n - self.classes(), self.classes())?;
        let share = 1.0 / weights.len() as f64;
        let ids: Vec<ClientId> = weights.keys().copied().collect();
        let privacy = self.count_private(&ids)?;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_map(&global, None)),
            weights: weights.keys().map(|&c| (c, share)).collect(),
            report: RoundReport::of(&FcmRound {
                aggregation: self.aggregation(),
                equal_weights_fallback: fallback,
            }),
            local: BTreeMap::new(),
            privacy,
        })
    }
}
