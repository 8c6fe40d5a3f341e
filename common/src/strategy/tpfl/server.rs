//! TPFL's server half (Algorithm 2): its decoder of winners and delta uploads, its aggregation
//! into per-cluster downloads, its round report and the state it keeps between rounds.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use super::clustering::{Cluster, cluster, from_sums, to_weights};
use super::private::private_clusters;
use super::section::TpflHyper;
use crate::strategy::decoder::UpdateDecoder;
use crate::strategy::privacy::{self, DpHyper, NoiseKey, PrivacyState, PrivateMean};
use crate::strategy::robust::RobustHyper;
use crate::strategy::{
    Aggregate, Downloads, GroupSum, RoundReport, ServerStrategy, StrategyState, unexpected,
};
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, Update, Winner, WinnerUpload};
use crate::{ClientId, FlintError, Result, Round};

/// TPFL's record of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TpflRound {
    /// Members of each cluster, keyed by the class they won.
    pub clusters: BTreeMap<u32, Vec<ClientId>>,
    /// TPFL's accounting: one float64 vector per cluster, counted once.
    pub paper_download_bytes: u64,
    pub winners: BTreeMap<ClientId, WinnerRecord>,
}

impl crate::strategy::report::Tagged for TpflRound {
    const TAG: &'static str = "tpfl";
}

impl TpflRound {
    pub fn cluster_count(&self) -> usize {
        self.clusters.len()
    }
}

/// A round's untyped `details` as results files wrote them before the typed report, as far
/// as they are still read: TPFL's alone.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LegacyDetails {
    clusters: Option<BTreeMap<u32, Vec<ClientId>>>,
    paper_download_bytes: Option<u64>,
    #[serde(default)]
    winners: BTreeMap<ClientId, WinnerRecord>,
}

impl LegacyDetails {
    /// TPFL's report, where these details hold one.
    pub fn report(self) -> Option<TpflRound> {
        Some(TpflRound {
            clusters: self.clusters?,
            paper_download_bytes: self.paper_download_bytes?,
            winners: self.winners,
        })
    }
}

/// What a client said it was surest of.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WinnerRecord {
    pub class: u32,
    pub confidence: f64,
}

/// What the server keeps between rounds: each class's previous aggregate, and with `delta`
/// every vector it sent (the bases of later delta uploads).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TpflState {
    pub previous: Vec<(u32, Vec<f64>)>,
    pub sent: Vec<SentVector>,
    /// Under `[dp]`: the rounds each client has spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy: Option<PrivacyState>,
}

impl crate::strategy::report::Tagged for TpflState {
    const TAG: &'static str = "tpfl";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentVector {
    pub client: ClientId,
    pub class: u32,
    pub round: Round,
    pub weights: Vec<i32>,
}

/// With `delta`, the last vector sent to each client for each class, with the round it
/// aggregates: the bases of delta uploads. A client refers to the last one it received; one
/// that missed it (a download it never took) refers to an older one, which is gone, and is
/// answered [`FlintError::NoBase`]: it sends the weights themselves.
type Sent = BTreeMap<(ClientId, u32), (Round, Vec<i32>)>;

/// Algorithm 2 on the server: cluster by winning class, average, send each member its
/// cluster's average. It sends nothing before round 1 (clients start from their own machines).
pub struct TpflServer {
    pub(super) classes: usize,
    pub(super) clauses: usize,
    hyper: TpflHyper,
    previous: BTreeMap<u32, Vec<f64>>,
    robust: RobustHyper,
    /// `[dp]`: each cluster's mean clipped and noised.
    privacy: Option<PrivateMean>,
    /// Shared with the decoder, which reads it off the round state's lock; written only by
    /// `aggregate` and `restore`, while no round is open.
    sent: Arc<RwLock<Sent>>,
}

impl TpflServer {
    pub fn new(classes: usize, clauses: usize, hyper: TpflHyper) -> TpflServer {
        TpflServer {
            classes,
            clauses,
            hyper,
            previous: BTreeMap::new(),
            robust: RobustHyper::default(),
            privacy: None,
            sent: Arc::default(),
        }
    }

    /// Clusters averaged under `dp` (nothing changes where it is off); `seed` draws the noise.
    pub fn with_privacy(mut self, dp: DpHyper, seed: u64) -> Self {
        self.privacy = (!dp.is_off()).then(|| PrivateMean::new(dp, seed));
        self
    }

    /// Each cluster combined by `robust` instead of the paper's mean.
    pub fn with_robust(mut self, robust: RobustHyper) -> Self {
        self.robust = robust;
        self
    }

    fn sent_mut(&self) -> std::sync::RwLockWriteGuard<'_, Sent> {
        // Nothing panics while it is held: a poisoned lock still holds whole entries.
        self.sent.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// TPFL's updates: a confidence winner of the run's shape, a delta rebuilt on what the server
/// sent that client.
pub struct WinnerDecoder {
    classes: usize,
    clauses: usize,
    /// Rows a client's confidence sums over, at most.
    rows: usize,
    sent: Arc<RwLock<Sent>>,
}

impl WinnerDecoder {
    /// The winner's weights as the client holds them (a delta is added to its base).
    fn absolute(&self, client: ClientId, w: WinnerUpload) -> Result<Winner> {
        if w.delta_base_round == 0 {
            return Ok(Winner {
                class: w.class,
                confidence: w.confidence,
                weights: w.weights,
            });
        }
        let sent = self.sent.read().unwrap_or_else(PoisonError::into_inner);
        let base = match sent.get(&(client, w.class)) {
            Some((round, base)) if *round == w.delta_base_round => base,
            held => {
                let held = held.map_or_else(
                    || "none".to_string(),
                    |(round, _)| format!("of round {round}"),
                );
                return Err(FlintError::NoBase(format!(
                    "delta against round {} for class {}, but the base this server holds for client {client} and that class is {held}: send the weights themselves",
                    w.delta_base_round, w.class
                )));
            }
        };
        Ok(Winner {
            class: w.class,
            confidence: w.confidence,
            weights: base
                .iter()
                .zip(&w.weights)
                .map(|(b, d)| b.wrapping_add(*d))
                .collect(),
        })
    }
}

impl UpdateDecoder for WinnerDecoder {
    fn decode(&self, client: ClientId, _features: usize, update: &Payload) -> Result<Update> {
        let upload = wire::decode_winner(update, self.classes, self.clauses)?;
        let winner = self.absolute(client, upload)?;
        check_confidence(&winner, self.rows, self.clauses)?;
        Ok(Update::Winner(winner))
    }
}

/// A confidence the winner's weights can produce: a whole number (a sum of integer class sums)
/// no larger than `rows` rows of its largest class sum, Σ |w| (weighted) or one vote per clause
/// (votes). It is only reported, but a report should not carry −1e308.
fn check_confidence(w: &Winner, rows: usize, clauses: usize) -> Result<()> {
    let per_row = w.weights.iter().map(|v| f64::from(*v).abs()).sum::<f64>();
    let bound = rows as f64 * per_row.max(clauses as f64);
    if w.confidence.fract() == 0.0 && w.confidence.abs() <= bound {
        return Ok(());
    }
    Err(FlintError::InvalidUpdate(format!(
        "confidence {:e} is not a sum of class sums over at most {rows} rows of these weights (|confidence| ≤ {bound:e})",
        w.confidence
    )))
}

impl TpflServer {
    /// Each member its cluster's weights; with `delta`, what it was sent is kept as its base.
    fn downloads(
        &self,
        round: Round,
        clusters: &BTreeMap<u32, Cluster>,
        winners: BTreeMap<ClientId, WinnerRecord>,
    ) -> Aggregate {
        let mut downloads = BTreeMap::new();
        let mut weights = BTreeMap::new();
        let mut members = BTreeMap::new();
        let mut sent = self.sent_mut();
        for (&class, c) in clusters {
            let v = to_weights(&c.mean, self.hyper.rounding);
            let download = wire::encode_class_weights(class, &v, self.hyper.coding);
            for &m in &c.members {
                downloads.insert(m, download.clone());
                weights.insert(m, 1.0 / c.members.len() as f64);
                if self.hyper.delta {
                    sent.insert((m, class), (round, v.clone()));
                }
            }
            members.insert(class, c.members.clone());
        }
        drop(sent);
        Aggregate {
            downloads: Downloads::PerClient(downloads),
            weights,
            report: RoundReport::of(&TpflRound {
                clusters: members,
                paper_download_bytes: (8 * self.clauses * clusters.len()) as u64,
                winners,
            }),
            local: BTreeMap::new(),
            privacy: None,
        }
    }
}

impl ServerStrategy for TpflServer {
    fn initial_download(&self, _features: usize) -> Option<Payload> {
        None
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(WinnerDecoder {
            classes: self.classes,
            clauses: self.clauses,
            rows: self.hyper.confidence_samples,
            sent: Arc::clone(&self.sent),
        })
    }

    fn aggregate(
        &mut self,
        round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let mut uploads = BTreeMap::new();
        let mut winners = BTreeMap::new();
        for (&id, u) in updates {
            let Update::Winner(w) = u else {
                return Err(unexpected("confidence_winner", u));
            };
            uploads.insert(id, (w.class, w.weights.clone()));
            winners.insert(
                id,
                WinnerRecord {
                    class: w.class,
                    confidence: w.confidence,
                },
            );
        }
        let how = self.hyper.cluster_mean;
        let (clusters, spent) = match &mut self.privacy {
            Some(p) if p.adds_noise() => {
                let (c, spent) = private_clusters(round, &uploads, &mut self.previous, how, p)?;
                (c, Some(spent))
            }
            // Local noise came with the uploads: the round is only counted.
            other => {
                let c = cluster(&uploads, &mut self.previous, how, &self.robust)?;
                let ids: Vec<ClientId> = uploads.keys().copied().collect();
                (c, other.as_mut().map(|p| p.count(&ids)).transpose()?)
            }
        };
        let mut aggregate = self.downloads(round, &clusters, winners);
        aggregate.privacy = spent;
        Ok(aggregate)
    }

    fn set_noise_key(&mut self, key: NoiseKey) -> bool {
        privacy::key_noise(&mut self.privacy, key)
    }

    /// TPFL's clients sum their winner's weights within the cluster of the class it won.
    fn secure_len(&self, _features: usize) -> Option<usize> {
        Some(self.clauses)
    }

    fn secure_groups(&self) -> u32 {
        self.classes as u32
    }

    /// Every member counts alike (the paper's mean): each adds its weights themselves, so that
    /// the integer sums are exact.
    fn secure_weights(
        &self,
        _clients: &BTreeMap<ClientId, DataSummary>,
        roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        Ok(roster.iter().map(|&c| (c, 1.0)).collect())
    }

    /// Algorithm 2 from each cluster's sum: its members are those whose input it holds (their
    /// confidences stay with them).
    fn aggregate_groups(
        &mut self,
        round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        sums: &BTreeMap<u32, GroupSum>,
    ) -> Result<Aggregate> {
        let mut by_class = BTreeMap::new();
        for (&class, g) in sums {
            if class as usize >= self.classes || g.sum.len() != self.clauses {
                return Err(FlintError::InvalidUpdate(format!(
                    "a secure sum of {} weights for class {class}; the run has {} classes of {} clauses",
                    g.sum.len(),
                    self.classes,
                    self.clauses
                )));
            }
            // Each member's weight is 1: the sum is of the weights themselves.
            let members: Vec<ClientId> = g.weights.keys().copied().collect();
            by_class.insert(class, (members, g.sum.clone()));
        }
        let clusters = from_sums(by_class, &mut self.previous, self.hyper.cluster_mean);
        // Local noise came with the masked weights: the round is only counted.
        let summed: Vec<ClientId> = sums
            .values()
            .flat_map(|g| g.weights.keys().copied())
            .collect();
        let spent = self
            .privacy
            .as_mut()
            .map(|p| p.count(&summed))
            .transpose()?;
        let mut aggregate = self.downloads(round, &clusters, BTreeMap::new());
        aggregate.privacy = spent;
        Ok(aggregate)
    }

    fn snapshot(&self) -> StrategyState {
        StrategyState::of(&TpflState {
            previous: self.previous.iter().map(|(c, v)| (*c, v.clone())).collect(),
            sent: self
                .sent
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(&(client, class), (round, weights))| SentVector {
                    client,
                    class,
                    round: *round,
                    weights: weights.clone(),
                })
                .collect(),
            privacy: self.privacy.as_ref().map(|p| p.state().clone()),
        })
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        let state: TpflState = state.expect("tpfl's server")?;
        let bad = |m: String| Err(FlintError::Model(format!("tpfl state: {m}")));
        if let Some((c, v)) = state
            .previous
            .iter()
            .find(|(c, v)| *c as usize >= self.classes || v.len() != self.clauses)
        {
            return bad(format!(
                "aggregate of class {c} with {} weights, expected {} classes of {} weights",
                v.len(),
                self.classes,
                self.clauses
            ));
        }
        if let Some(s) = state
            .sent
            .iter()
            .find(|s| s.class as usize >= self.classes || s.weights.len() != self.clauses)
        {
            return bad(format!(
                "vector sent to client {} for class {} with {} weights",
                s.client,
                s.class,
                s.weights.len()
            ));
        }
        if let (Some(p), Some(spent)) = (&mut self.privacy, state.privacy) {
            p.restore(spent);
        }
        self.previous = state.previous.into_iter().collect();
        // A state written when every vector was kept: the last of each is the base.
        let mut sent = Sent::new();
        for s in state.sent {
            let key = (s.client, s.class);
            if sent.get(&key).is_none_or(|(round, _)| *round < s.round) {
                sent.insert(key, (s.round, s.weights));
            }
        }
        *self.sent_mut() = sent;
        Ok(())
    }
}
