//! TPFL (TPFL §5, Algorithms 1 and 2; what its code does: docs/papers/tpfl.md): a client's
//! confidence winner, the server's clustering by winning class and per-cluster averaging, and
//! the two strategy halves built on them.
//!
//! Rounding: the server rounds each cluster's mean to integer weights (`nearest` by default,
//! `truncate` as the code's integer cast) and sends those, so every member applies the same
//! vector and the download is packed `sint32`.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::{
    Aggregate, ClientStrategy, Downloads, RoundReport, ServerStrategy, StrategyState, unexpected,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decoder::UpdateDecoder;
use super::resume;
use super::robust::RobustHyper;
use crate::data::images::{BitShard, Holdout, ShardSizes};
use crate::metrics::ConfusionMatrix;
use crate::model::tm::{CoalescedTm, FeedbackMasks, TmHyper};
use crate::params::{ParamResult, at_least, require};
use crate::rng::{FlintRng, derive_rng};
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, Update, WeightCoding, Winner, WinnerUpload};
use crate::{ClientId, FlintError, Result, Round};

/// How a client measures its confidence in each class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Confidence {
    /// Σ over the confidence set of the weighted class sums (the code).
    Weighted,
    /// Σ of the signs of the weights of the firing clauses (the paper's formula).
    Votes,
}

/// `[tpfl]`: TPFL's rounds (TPFL §5, Table 2); where the paper and its published code differ,
/// the key says which each value follows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TpflHyper {
    /// Local training epochs per round (TPFL Table 2).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub local_epochs: u32,
    /// `disjoint` (test and confidence rows never overlap training rows) or `paper-code` (both
    /// are subsets of the client's training rows, as the published code).
    pub evaluation: Holdout,
    /// Test rows per client.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub test_samples: usize,
    /// Confidence rows per client.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub confidence_samples: usize,
    /// `weighted` (Σ of weighted class sums, the code) or `votes` (Σ of the signs of the weights
    /// of firing clauses, the paper's formula without weights).
    pub confidence: Confidence,
    /// `members` (the paper's mean) or `with-previous` (the code also averages in the cluster's
    /// previous aggregate).
    pub cluster_mean: ClusterMean,
    /// How the average becomes integer weights: `nearest` or `truncate` (the code).
    pub rounding: Rounding,
    /// Upload the weights minus the vector last received for that class (the default: 6.6
    /// rather than 8.4 bits a weight on MNIST's experiment 5); `false` sends the weights
    /// themselves, as the paper.
    pub delta: bool,
    /// How weight vectors travel, both ways: `arithmetic` (an adaptive arithmetic code, within
    /// a few percent of their entropy) or `varint` (zig-zag varints, a byte or two each).
    pub coding: WeightCoding,
}

impl Default for TpflHyper {
    fn default() -> Self {
        TpflHyper {
            local_epochs: 10,
            evaluation: Holdout::Disjoint,
            test_samples: 15_000,
            confidence_samples: 15_000,
            confidence: Confidence::Weighted,
            cluster_mean: ClusterMean::Members,
            rounding: Rounding::Nearest,
            delta: true,
            coding: WeightCoding::Arithmetic,
        }
    }
}

impl TpflHyper {
    /// The settings, refused where a value is out of its range.
    pub fn check(self) -> ParamResult<TpflHyper> {
        let at_least_one = |key, n: usize| require(key, "at least 1", n, n > 0);
        require(
            "tpfl.local_epochs",
            "at least 1",
            self.local_epochs,
            self.local_epochs > 0,
        )?;
        at_least_one("tpfl.test_samples", self.test_samples)?;
        at_least_one("tpfl.confidence_samples", self.confidence_samples)?;
        Ok(self)
    }
}

impl TpflHyper {
    /// A client's split sizes, with `train` rows from the partition.
    pub fn sizes(&self, train: usize) -> ShardSizes {
        ShardSizes {
            train,
            test: self.test_samples,
            confidence: Some(self.confidence_samples),
        }
    }
}

/// Algorithm 1, step 6: the class with the largest confidence and that confidence (the lowest
/// class on a tie). `None` for no classes.
pub fn confidence_winner(confidence: &[i64]) -> Option<(u32, i64)> {
    let mut best: Option<(u32, i64)> = None;
    for (c, &v) in confidence.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((c as u32, v));
        }
    }
    best
}

/// How a cluster's average is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterMean {
    /// The paper: the plain mean of the members' vectors.
    Members,
    /// The published code: a cluster that existed in an earlier round also averages in its
    /// previous aggregate, as one extra row.
    WithPrevious,
}

/// One cluster of a round: the clients whose winner was `class`, and their average.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub members: Vec<ClientId>,
    pub mean: Vec<f64>,
}

/// Algorithm 2: clusters keyed by winning class, members in client-id order. `previous` holds
/// each class's aggregate of earlier rounds (used by `WithPrevious`, and updated here). Classes
/// nobody won this round have no cluster; their previous aggregate is kept. A cluster's
/// members count alike; `robust` may replace their mean.
pub fn cluster(
    uploads: &BTreeMap<ClientId, (u32, Vec<i32>)>,
    previous: &mut BTreeMap<u32, Vec<f64>>,
    how: ClusterMean,
    robust: &RobustHyper,
) -> Result<BTreeMap<u32, Cluster>> {
    let mut sums: BTreeMap<u32, (Vec<ClientId>, Vec<f64>)> = BTreeMap::new();
    for (&id, (class, weights)) in uploads {
        let (members, sum) = sums
            .entry(*class)
            .or_insert_with(|| (Vec::new(), vec![0.0; weights.len()]));
        if sum.len() != weights.len() {
            return Err(FlintError::InvalidUpdate(format!(
                "client {id} sent {} weights for class {class}, the cluster has {}",
                weights.len(),
                sum.len()
            )));
        }
        members.push(id);
        for (s, &w) in sum.iter_mut().zip(weights) {
            *s += f64::from(w);
        }
    }
    let mut out = BTreeMap::new();
    for (class, (members, mut sum)) in sums {
        let prev = previous
            .get(&class)
            .filter(|p| how == ClusterMean::WithPrevious && p.len() == sum.len());
        let mean: Vec<f64> = if robust.is_plain() {
            let mut rows = members.len() as f64;
            if let Some(prev) = prev {
                sum.iter_mut().zip(prev).for_each(|(s, p)| *s += p);
                rows += 1.0;
            }
            sum.iter().map(|s| s / rows).collect()
        } else {
            let mut rows: Vec<Vec<f64>> = members
                .iter()
                .map(|id| uploads[id].1.iter().map(|&w| f64::from(w)).collect())
                .collect();
            rows.extend(prev.cloned());
            let views: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
            robust
                .combine(&views, &vec![1.0 / rows.len() as f64; rows.len()])
                .0
        };
        previous.insert(class, mean.clone());
        out.insert(class, Cluster { members, mean });
    }
    Ok(out)
}

/// How a client turns its cluster's (real-valued) average back into integer clause weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Rounding {
    /// To the nearest integer, halves away from zero (Flint's default: unbiased in sign).
    Nearest,
    /// Toward zero, as the published code's integer cast does.
    Truncate,
}

pub fn to_weights(mean: &[f64], rounding: Rounding) -> Vec<i32> {
    mean.iter()
        .map(|&m| match rounding {
            Rounding::Nearest => m.round() as i32,
            Rounding::Truncate => m.trunc() as i32,
        })
        .collect()
}

/// TPFL's record of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TpflRound {
    /// Members of each cluster, keyed by the class they won.
    pub clusters: BTreeMap<u32, Vec<ClientId>>,
    /// TPFL's accounting: one float64 vector per cluster, counted once.
    pub paper_download_bytes: u64,
    pub winners: BTreeMap<ClientId, WinnerRecord>,
}

impl TpflRound {
    pub fn cluster_count(&self) -> usize {
        self.clusters.len()
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
    classes: usize,
    clauses: usize,
    hyper: TpflHyper,
    previous: BTreeMap<u32, Vec<f64>>,
    robust: RobustHyper,
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
            sent: Arc::default(),
        }
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
        self.absolute(client, upload).map(Update::Winner)
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
        let clusters = cluster(
            &uploads,
            &mut self.previous,
            self.hyper.cluster_mean,
            &self.robust,
        )?;
        let mut downloads = BTreeMap::new();
        let mut weights = BTreeMap::new();
        let mut members = BTreeMap::new();
        let mut sent = self.sent_mut();
        for (&class, c) in &clusters {
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
        Ok(Aggregate {
            downloads: Downloads::PerClient(downloads),
            weights,
            report: RoundReport::Tpfl(TpflRound {
                clusters: members,
                paper_download_bytes: (8 * self.clauses * clusters.len()) as u64,
                winners,
            }),
            local: BTreeMap::new(),
        })
    }

    fn snapshot(&self) -> StrategyState {
        StrategyState::Tpfl(TpflState {
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
        })
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        let StrategyState::Tpfl(state) = state else {
            return Err(FlintError::Model(
                "tpfl's server was given another strategy's state".into(),
            ));
        };
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

/// Algorithm 1 on a client: its own coalesced TM, trained for `local_epochs` per round.
pub struct TpflClient {
    tm: CoalescedTm,
    masks: FeedbackMasks,
    hyper: TpflHyper,
    /// The last vector received per class and the round it aggregates (delta bases).
    received: BTreeMap<u32, (Round, Vec<i32>)>,
}

impl TpflClient {
    /// The machine's initial ±1 weights derive from (seed, client).
    pub fn new(
        tm: TmHyper,
        hyper: TpflHyper,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
    ) -> TpflClient {
        let mut rng = derive_rng(seed, "tm-init", client);
        TpflClient {
            tm: CoalescedTm::new(tm, features, classes, &mut rng),
            masks: FeedbackMasks::new(tm.s, &mut rng),
            hyper,
            received: BTreeMap::new(),
        }
    }

    pub fn machine(&self) -> &CoalescedTm {
        &self.tm
    }

    /// Algorithm 1, steps 3–6: confidence per class on `data` and the winner.
    pub fn winner(&self, data: &crate::data::booleanize::BitRows) -> Result<(u32, i64)> {
        let conf = match self.hyper.confidence {
            Confidence::Weighted => self.tm.confidence(data),
            Confidence::Votes => self.tm.vote_confidence(data),
        };
        confidence_winner(&conf)
            .ok_or_else(|| FlintError::Model("a machine without classes has no winner".into()))
    }
}

impl ClientStrategy<BitShard> for TpflClient {
    fn apply(&mut self, round: Round, download: &Payload) -> Result<()> {
        let (class, weights) = wire::decode_class_weights(
            download,
            self.tm.classes(),
            self.tm.clauses(),
        )
        .map_err(|e| match e {
            FlintError::InvalidUpdate(m) => FlintError::InvalidUpdate(format!("download: {m}")),
            other => other,
        })?;
        self.tm
            .set_class_weights(class as usize, &weights)
            .map_err(|e| FlintError::InvalidUpdate(format!("download: {e}")))?;
        self.received.insert(class, (round, weights));
        Ok(())
    }

    fn train(&mut self, shard: &BitShard, _round: Round, rng: &mut FlintRng) -> Result<Payload> {
        for _ in 0..self.hyper.local_epochs {
            self.tm.fit_epoch(&shard.train, &mut self.masks, rng);
        }
        let confidence_rows = shard.confidence.as_ref().ok_or_else(|| {
            FlintError::Model("tpfl needs a confidence split, and this shard has none".into())
        })?;
        let (class, confidence) = self.winner(confidence_rows)?;
        let own = self.tm.class_weights(class as usize);
        let (weights, delta_base_round) = match self.received.get(&class) {
            Some((r, base)) if self.hyper.delta => (
                own.iter()
                    .zip(base)
                    .map(|(w, b)| w.wrapping_sub(*b))
                    .collect(),
                *r,
            ),
            _ => (own.to_vec(), 0),
        };
        let upload = WinnerUpload {
            class,
            confidence: confidence as f64,
            weights,
            delta_base_round,
        };
        Ok(wire::encode_winner(&upload, self.hyper.coding))
    }

    fn evaluate(&self, shard: &BitShard) -> ConfusionMatrix {
        ConfusionMatrix::from_predictions(
            self.tm.classes(),
            &shard.test.labels,
            &self.tm.predict_batch(&shard.test),
        )
    }
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        Some(crate::model::kept::KeptModel::coalesced(&self.tm))
    }

    /// A delta upload as the weights themselves: the delta added back to the base it was
    /// taken from (`None` for an upload that is no delta, or one not taken from what this
    /// client holds).
    fn without_base(&self, update: &Payload) -> Option<Payload> {
        let w = wire::decode_winner(update, self.tm.classes(), self.tm.clauses()).ok()?;
        let (round, base) = self.received.get(&w.class)?;
        if w.delta_base_round == 0 || *round != w.delta_base_round {
            return None;
        }
        let whole = WinnerUpload {
            weights: base
                .iter()
                .zip(&w.weights)
                .map(|(b, d)| b.wrapping_add(*d))
                .collect(),
            delta_base_round: 0,
            ..w
        };
        Some(wire::encode_winner(&whole, self.hyper.coding))
    }

    /// The machine, its feedback masks and the delta bases.
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let (masks, received) = (resume::json(&self.masks), resume::json(&self.received));
        Some(resume::frame(&[&self.tm.to_bytes(), &masks, &received]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [tm, masks, received] = resume::unframe(state, 3)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        let tm = CoalescedTm::from_bytes(tm).map_err(|e| resume::bad(&e))?;
        let same_shape = tm.hyper() == self.tm.hyper()
            && tm.classes() == self.tm.classes()
            && tm.bank().features() == self.tm.bank().features();
        if !same_shape {
            return Err(resume::bad("the machine is not this run's"));
        }
        let masks: FeedbackMasks = resume::from_json(masks)?;
        if !masks.same_draws(&self.masks) {
            return Err(resume::bad("the feedback masks are not this run's"));
        }
        self.masks = masks;
        self.received = resume::from_json(received)?;
        self.tm = tm;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::booleanize::BitRows;

    #[test]
    fn the_winner_is_the_most_confident_class_lowest_on_a_tie() {
        assert_eq!(confidence_winner(&[3, -2, 7, 7]), Some((2, 7)));
        assert_eq!(confidence_winner(&[-5, -1, -3]), Some((1, -1)));
        assert_eq!(confidence_winner(&[]), None);
    }

    fn uploads(v: &[(ClientId, u32, Vec<i32>)]) -> BTreeMap<ClientId, (u32, Vec<i32>)> {
        v.iter().map(|(id, c, w)| (*id, (*c, w.clone()))).collect()
    }

    #[test]
    fn clients_cluster_by_winning_class_and_get_their_clusters_mean() {
        // Algorithm 2 on hand-made uploads: clients 1 and 3 won class 0, client 2 alone won
        // class 4 (a cluster of one), nobody won the other classes (empty clusters).
        let mut previous = BTreeMap::new();
        let u = uploads(&[
            (1, 0, vec![2, -4, 1]),
            (2, 4, vec![5, 5, -5]),
            (3, 0, vec![4, 0, 2]),
        ]);
        let c = cluster(
            &u,
            &mut previous,
            ClusterMean::Members,
            &RobustHyper::default(),
        )
        .unwrap();
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![0, 4]);
        assert_eq!(c[&0].members, vec![1, 3]);
        assert_eq!(c[&0].mean, vec![3.0, -2.0, 1.5]);
        assert_eq!(c[&4].members, vec![2]);
        assert_eq!(c[&4].mean, vec![5.0, 5.0, -5.0]);
        assert_eq!(previous.len(), 2);
    }

    /// A cluster's members combined by the median, the previous aggregate counted
    /// as one more row under the code's variant; one member far out moves nothing.
    #[test]
    fn a_cluster_under_the_median_ignores_its_outlier() {
        let median = RobustHyper {
            rule: crate::strategy::robust::Rule::Median,
            ..Default::default()
        };
        let u = uploads(&[
            (1, 0, vec![2, -4]),
            (2, 0, vec![3, -3]),
            (3, 0, vec![900, 900]),
        ]);
        let c = cluster(&u, &mut BTreeMap::new(), ClusterMean::Members, &median).unwrap();
        assert_eq!(c[&0].mean, vec![3.0, -3.0]);
        let mut previous = BTreeMap::from([(0, vec![2.0, -4.0])]);
        let c = cluster(&u, &mut previous, ClusterMean::WithPrevious, &median).unwrap();
        assert_eq!(
            c[&0].mean,
            vec![2.5, -3.5],
            "four rows: the two middle ones' mean"
        );
    }

    #[test]
    fn a_client_whose_winner_changes_moves_cluster_and_the_code_variant_remembers() {
        let mut previous = BTreeMap::new();
        let r1 = uploads(&[(1, 0, vec![2, 2]), (2, 1, vec![6, 0])]);
        cluster(
            &r1,
            &mut previous,
            ClusterMean::WithPrevious,
            &RobustHyper::default(),
        )
        .unwrap();
        // Round 2: client 1 now wins class 1 and joins client 2's cluster; class 0 is empty.
        let r2 = uploads(&[(1, 1, vec![0, 3]), (2, 1, vec![3, 3])]);
        let c = cluster(
            &r2,
            &mut previous,
            ClusterMean::WithPrevious,
            &RobustHyper::default(),
        )
        .unwrap();
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(c[&1].members, vec![1, 2]);
        // (0 + 3 + previous 6) / 3, (3 + 3 + previous 0) / 3.
        assert_eq!(c[&1].mean, vec![3.0, 2.0]);
        // The empty cluster keeps its aggregate for a later round.
        assert_eq!(previous[&0], vec![2.0, 2.0]);
        let mut fresh = BTreeMap::new();
        let paper = cluster(
            &r2,
            &mut fresh,
            ClusterMean::Members,
            &RobustHyper::default(),
        )
        .unwrap();
        assert_eq!(paper[&1].mean, vec![1.5, 3.0]);
    }

    #[test]
    fn vectors_of_different_lengths_in_one_cluster_are_refused() {
        let u = uploads(&[(1, 0, vec![1, 2]), (2, 0, vec![1])]);
        let e = cluster(
            &u,
            &mut BTreeMap::new(),
            ClusterMean::Members,
            &RobustHyper::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("client 2 sent 1 weights for class 0"), "{e}");
    }

    #[test]
    fn rounding_back_to_integer_weights() {
        let m = [1.5, -1.5, 2.4, -2.6];
        assert_eq!(to_weights(&m, Rounding::Nearest), vec![2, -2, 2, -3]);
        assert_eq!(to_weights(&m, Rounding::Truncate), vec![1, -1, 2, -2]);
    }

    fn hyper() -> TpflHyper {
        TpflHyper::default().check().unwrap()
    }

    fn winner(class: u32, weights: Vec<i32>, base: Round) -> Payload {
        let upload = WinnerUpload {
            class,
            confidence: 10.0,
            weights,
            delta_base_round: base,
        };
        wire::encode_winner(&upload, WeightCoding::Varint)
    }

    /// Decoded as the server decodes every upload.
    fn decoded(s: &TpflServer, updates: Vec<(ClientId, Payload)>) -> BTreeMap<ClientId, Update> {
        updates
            .into_iter()
            .map(|(id, p)| (id, s.decode(id, 784, &p).unwrap()))
            .collect()
    }

    /// What `s` sent client `id`, read as the client reads it.
    fn sent(s: &TpflServer, d: &Downloads, id: ClientId) -> Option<(u32, Vec<i32>)> {
        let p = d.for_client(id)?;
        Some(wire::decode_class_weights(p, s.classes, s.clauses).unwrap())
    }

    /// Algorithm 2, last step: each client gets exactly its cluster's average, and only it.
    #[test]
    fn the_personalised_download_reaches_exactly_its_clusters_members() {
        let mut s = TpflServer::new(3, 4, hyper());
        let updates = decoded(
            &s,
            vec![
                (1, winner(2, vec![1, 2, 3, 4], 0)),
                (2, winner(0, vec![9, 9, 9, 9], 0)),
                (3, winner(2, vec![3, 2, 1, -4], 0)),
                (5, winner(2, vec![2, 5, 2, 3], 0)),
            ],
        );
        let agg = s.aggregate(1, &BTreeMap::new(), &updates).unwrap();
        // Cluster 2 = {1, 3, 5}: mean (2, 3, 2, 1); cluster 0 = {2}, a cluster of one.
        for id in [1, 3, 5] {
            assert_eq!(sent(&s, &agg.downloads, id), Some((2, vec![2, 3, 2, 1])));
        }
        assert_eq!(sent(&s, &agg.downloads, 2), Some((0, vec![9, 9, 9, 9])));
        // A client that sent nothing (4) gets nothing; class 1 had no winner, so no cluster.
        assert_eq!(sent(&s, &agg.downloads, 4), None);
        let report = agg.report.tpfl().unwrap();
        assert_eq!(
            report.clusters,
            BTreeMap::from([(0, vec![2]), (2, vec![1, 3, 5])])
        );
        assert_eq!(report.cluster_count(), 2);
        assert_eq!(report.paper_download_bytes, 2 * 8 * 4);
        assert_eq!(agg.weights[&3], 1.0 / 3.0);
    }

    /// A server of 3 classes and 2 clauses taking deltas.
    fn delta_server() -> TpflServer {
        let h = TpflHyper {
            delta: true,
            ..hyper()
        };
        TpflServer::new(3, 2, h)
    }

    #[test]
    fn a_delta_upload_is_rebuilt_from_what_that_client_was_sent() {
        let mut s = delta_server();
        let r1 = decoded(&s, vec![(1, winner(1, vec![4, 6], 0))]);
        s.aggregate(1, &BTreeMap::new(), &r1).unwrap();
        // Client 1 now holds (4, 6) for class 1 and trained it to (7, 5): it sends (3, -1).
        let delta = winner(1, vec![3, -1], 1);
        let r2 = decoded(&s, vec![(1, delta)]);
        let agg = s.aggregate(2, &BTreeMap::new(), &r2).unwrap();
        assert_eq!(sent(&s, &agg.downloads, 1), Some((1, vec![7, 5])));
        // No base: another client, another class, or a round that sent it nothing.
        for (client, p, held) in [
            (2, winner(1, vec![0, 0], 1), "none"),
            (1, winner(0, vec![0, 0], 1), "none"),
            (1, winner(1, vec![0, 0], 5), "of round 2"),
        ] {
            let e = s.decode(client, 784, &p).unwrap_err();
            assert!(matches!(e, FlintError::NoBase(_)), "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("is {held}: send the weights themselves")),
                "{e}"
            );
        }
        // Only the last vector sent is kept: round 1's went with round 2's.
        let e = s.decode(1, 784, &winner(1, vec![0, 0], 1)).unwrap_err();
        assert!(e.to_string().contains("is of round 2"), "{e}");
        let StrategyState::Tpfl(state) = s.snapshot() else {
            panic!("tpfl's state");
        };
        assert_eq!(state.sent.len(), 1);
    }

    /// A state written when every vector sent was kept restores with the last of each.
    #[test]
    fn an_older_state_keeping_every_vector_restores_the_last_as_base() {
        let mut s = delta_server();
        let vector = |round, weights| SentVector {
            client: 1,
            class: 1,
            round,
            weights,
        };
        let state = TpflState {
            previous: Vec::new(),
            sent: vec![vector(2, vec![7, 5]), vector(1, vec![4, 6])],
        };
        s.restore(StrategyState::Tpfl(state)).unwrap();
        let Update::Winner(w) = s.decode(1, 784, &winner(1, vec![1, 1], 2)).unwrap() else {
            panic!("a winner");
        };
        assert_eq!(w.weights, vec![8, 6]);
        assert!(s.decode(1, 784, &winner(1, vec![1, 1], 1)).is_err());
    }

    /// The shell takes a strategy's decoder once, at the start: it must see the bases sent by
    /// every later aggregation, and those a restarted server restores.
    #[test]
    fn a_decoder_taken_before_the_rounds_sees_every_base_sent_since() {
        let mut s = delta_server();
        let early = s.decoder();
        let r1 = decoded(&s, vec![(1, winner(1, vec![4, 6], 0))]);
        s.aggregate(1, &BTreeMap::new(), &r1).unwrap();
        let delta = winner(1, vec![3, -1], 1);
        let Update::Winner(w) = early.decode(1, 784, &delta).unwrap() else {
            panic!("a winner");
        };
        assert_eq!(w.weights, vec![7, 5]);
        let mut restarted = delta_server();
        let fresh = restarted.decoder();
        assert!(fresh.decode(1, 784, &delta).is_err(), "no base yet");
        restarted.restore(s.snapshot()).unwrap();
        assert_eq!(fresh.decode(1, 784, &delta).unwrap(), Update::Winner(w));
    }

    #[test]
    fn malformed_winners_are_refused_with_the_reason() {
        use crate::wire::proto::payload::Kind;
        let s = TpflServer::new(3, 2, hyper());
        let mut mismatched = winner(1, vec![1, 1], 0);
        if let Some(Kind::ConfidenceWinner(w)) = &mut mismatched.kind {
            w.weights.as_mut().unwrap().class_index = 2;
        }
        let mut nan = winner(1, vec![1, 1], 0);
        if let Some(Kind::ConfidenceWinner(w)) = &mut nan.kind {
            w.confidence = f64::NAN;
        }
        let cases = [
            (winner(3, vec![1, 1], 0), "class 3 of 3 classes"),
            (
                winner(1, vec![1, 1, 1], 0),
                "3 weights for class 1, expected one per clause (2)",
            ),
            (mismatched, "class 1 with the weights of class 2"),
            (nan, "confidence NaN is not finite"),
            (
                wire::encode_class_weights(1, &[1, 1], WeightCoding::Varint),
                "expected a confidence_winner",
            ),
        ];
        for (p, want) in cases {
            let e = s.decode(1, 784, &p).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    /// Three classes; class c sets bit c, plus nine random bits.
    fn one_hot(n: usize, rng: &mut FlintRng) -> BitRows {
        use rand::RngExt;
        let mut rows = BitRows::new(12, 3);
        for i in 0..n {
            let c = (i % 3) as u32;
            let mut bits: Vec<bool> = (0..12).map(|_| rng.random::<bool>()).collect();
            for (b, bit) in bits.iter_mut().take(3).enumerate() {
                *bit = b as u32 == c;
            }
            rows.push(&bits, c);
        }
        rows
    }

    fn client(delta: bool) -> TpflClient {
        let tm = crate::model::tm::testing::hyper(20, 15, 3.0);
        let h = TpflHyper {
            local_epochs: 3,
            delta,
            ..hyper()
        };
        TpflClient::new(tm, h, 12, 3, 7, 1)
    }

    #[test]
    fn a_client_uploads_its_most_confident_class_and_applies_only_that_class() {
        let mut rng = derive_rng(3, "test", 0);
        let all = one_hot(600, &mut rng);
        // The confidence split holds class 2 only, so the client is surest of class 2.
        let only_2: Vec<usize> = (0..all.len()).filter(|&i| all.labels[i] == 2).collect();
        let shard = BitShard {
            train: all.clone(),
            test: all.clone(),
            confidence: Some(all.select(&only_2)),
            prefit: None,
        };
        let mut c = client(false);
        let up = c.train(&shard, 1, &mut rng).unwrap();
        let w = wire::decode_winner(&up, 3, 20).unwrap();
        let conf = c.machine().confidence(shard.confidence.as_ref().unwrap());
        assert_eq!(
            Some((w.class, w.confidence as i64)),
            confidence_winner(&conf)
        );
        assert_eq!(w.class, 2);
        assert_eq!(w.weights, c.machine().class_weights(2));
        assert!(c.evaluate(&shard).metrics().accuracy > 0.9);
        let before: Vec<Vec<i32>> = (0..3)
            .map(|k| c.machine().class_weights(k).to_vec())
            .collect();
        c.apply(
            1,
            &wire::encode_class_weights(2, &[5; 20], WeightCoding::Arithmetic),
        )
        .unwrap();
        assert_eq!(c.machine().class_weights(2), &[5; 20][..]);
        assert_eq!(c.machine().class_weights(0), &before[0][..]);
        assert_eq!(c.machine().class_weights(1), &before[1][..]);
        let e = c
            .apply(
                2,
                &wire::encode_class_weights(2, &[5; 19], WeightCoding::Varint),
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("19 weights for class 2, expected one per clause (20)"),
            "{e}"
        );
        let e = c
            .apply(
                2,
                &wire::encode_class_weights(2, &[5; 19], WeightCoding::Arithmetic),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("download: coded weights of class 2"), "{e}");
    }

    #[test]
    fn with_delta_a_client_sends_its_weights_minus_what_it_received() {
        let mut rng = derive_rng(4, "test", 0);
        let all = one_hot(300, &mut rng);
        let only_2: Vec<usize> = (0..all.len()).filter(|&i| all.labels[i] == 2).collect();
        let shard = BitShard {
            train: all.clone(),
            test: all.clone(),
            confidence: Some(all.select(&only_2)),
            prefit: None,
        };
        let mut c = client(true);
        let first = c.train(&shard, 1, &mut rng).unwrap();
        let w1 = wire::decode_winner(&first, 3, 20).unwrap();
        assert_eq!(w1.class, 2);
        assert_eq!(
            w1.delta_base_round, 0,
            "nothing received yet: absolute weights"
        );
        // The server sends back the client's own vector (a cluster of one).
        let base = w1.weights;
        c.apply(
            1,
            &wire::encode_class_weights(2, &base, WeightCoding::Arithmetic),
        )
        .unwrap();
        let second = c.train(&shard, 2, &mut rng).unwrap();
        let w2 = wire::decode_winner(&second, 3, 20).unwrap();
        assert_eq!((w2.class, w2.delta_base_round), (2, 1));
        let rebuilt: Vec<i32> = base.iter().zip(&w2.weights).map(|(b, d)| b + d).collect();
        assert_eq!(rebuilt, c.machine().class_weights(2));
        assert_ne!(rebuilt, base, "training moved the weights");
        // Refused for want of its base, the delta goes again as the weights themselves.
        let whole = wire::decode_winner(&c.without_base(&second).unwrap(), 3, 20).unwrap();
        assert_eq!((whole.class, whole.delta_base_round), (2, 0));
        assert_eq!(whole.weights, rebuilt);
        assert_eq!(whole.confidence, w2.confidence);
        assert!(c.without_base(&first).is_none(), "no delta");
    }
}
