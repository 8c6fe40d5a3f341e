//! FedTMOS's server, step by step (FedTMOS §4.2, Algorithms 1–3; what the published code does:
//! FEDTMOS-CODE-NOTES §2). Pure functions of the clients' uploads; the strategy halves and the
//! wire format build on them.
//!
//! 1. Every client's `GiniIndex` g_j = Σ_c p²; x = mean g_j if it exceeds σ, else 1.
//! 2. Scaling: θ'_{j,c} = ⌊x · θ_{j,c} · n_{j,c} / n_j⌋, in float64, truncated once (the code's
//!    `u32(...)`; the paper has clients scale by n_{j,c}/n_j, which would truncate twice).
//! 3. The vectors entering k-means: one per (client, class it holds), class-major and in
//!    client-id order within a class (the code permutes them with numpy's global generator);
//!    with `filter`, only those whose mean scaled weight floors above 0 (the code's
//!    undocumented filter).
//! 4. k-means (`model::kmeans`), k = min(vectors − 1, k_max), seeded from the run.
//! 5. Reassignment into φ server models (Algorithm 2, as the code runs it): clusters with the
//!    fewest distinct classes first; each (client, class) goes to the model without that class
//!    whose average linkage (eq. 5) it raises to the largest value (an empty model counts as
//!    0); if every model holds the class, to the model with the fewest distinct classes, and on
//!    a tie the one that took the fewest clusters ("least overlapping clusters", §4.2.2: the code
//!    compares a cluster id with class counts here, a bug fixed by default). Then every model
//!    holding fewer than 2 classes takes the missing ones from clusters it has not taken, the
//!    combination of largest linkage, each under a client that holds the class (the code takes
//!    the cluster's first client whether or not it holds it, averaging in zeros: fixed by
//!    default, `fill_from = "cluster-first"` does as the code).
//! 6. Averaging (Algorithm 3): per model and class, the truncated mean of the contributors'
//!    scaled weights, and the OR of the include bits of the top K contributors (K = 2) ranked
//!    by their samples of that class (the paper) or by their mean scaled weight (the code).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{
    Aggregate, ClientStrategy, Downloads, Predictor, RoundReport, ServerStrategy, StrategyState,
    restore_stateless, unexpected,
};
use crate::data::booleanize::BitRows;
use crate::data::images::BitShard;
use crate::metrics::{ConfusionMatrix, gini_index};
use crate::model::kmeans::{self, LloydParams};
use crate::model::tm::composite::{
    self, BatchSums, ClassSumProfile, CompositeOptions, Normalization,
};
use crate::model::tm::conv::{ConvTm, PatchSpec};
use crate::model::tm::parts::{ClassParts, IncludeBits, TmParts, TmUpload};
use crate::model::tm::{ExcludedAt, FeedbackMasks, MultiClassTm, TmHyper};
use crate::params::{ParamResult, parse_name_or, positive, require};
use crate::rng::{FlintRng, derive_rng};
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, CompositeDownload, TmShape, Update};
use crate::{ClientId, FlintError, Result, Round};
use prost::Message;

/// How the include bits of a class's contributors are ranked for the top K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BitsBy {
    /// The paper (§4.2.2): the clients with the most samples of the class.
    Samples,
    /// The code: the clients with the largest mean scaled weight of the class.
    MeanWeight,
}

/// Under whose weights the fill step (step 5) adds a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FillFrom {
    /// A client of the cluster that holds the class (the code's bug fixed; the default).
    #[default]
    Holder,
    /// The cluster's first client, whether it holds the class or not; one without a clustered
    /// vector of it (it lacks the class, or the filter dropped it) adds zero weights and no
    /// include bits (the code, FEDTMOS-CODE-NOTES §2.5, for a client that lacks it).
    ClusterFirst,
}

impl FillFrom {
    fn is_holder(&self) -> bool {
        *self == FillFrom::Holder
    }
}

/// The server's settings (checked).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmosServerParams {
    /// φ: server models.
    pub models: usize,
    /// σ: the mean Gini index above which weights are scaled by it.
    pub sigma: f64,
    /// k of k-means, at most (it is also at most the vectors − 1).
    pub k_max: usize,
    /// K of TopK: contributors whose include bits are ORed.
    pub top_k: usize,
    pub bits_by: BitsBy,
    /// The code's filter: drop vectors whose mean scaled weight floors to 0.
    pub filter: bool,
    /// Written into a run's resolved file only when not the default, so runs made before the
    /// key existed keep their fingerprints.
    #[serde(skip_serializing_if = "FillFrom::is_holder")]
    pub fill_from: FillFrom,
}

/// Step 1: x, the mean Gini index if it is above σ, else 1 (no scaling).
pub fn scale_factor(gini_indices: &[f64], sigma: f64) -> f64 {
    if gini_indices.is_empty() {
        return 1.0;
    }
    let mean = gini_indices.iter().sum::<f64>() / gini_indices.len() as f64;
    if mean > sigma { mean } else { 1.0 }
}

/// Step 2: ⌊x · θ · n_c / n⌋ per clause.
pub fn scale(weights: &[u32], class_samples: u64, samples: u64, x: f64) -> Vec<u32> {
    let share = class_samples as f64 / samples.max(1) as f64;
    weights
        .iter()
        .map(|&w| (x * f64::from(w) * share) as u32)
        .collect()
}

fn mean(v: &[u32]) -> f64 {
    v.iter().map(|&w| f64::from(w)).sum::<f64>() / v.len().max(1) as f64
}

/// One (client, class) vector of scaled weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub client: ClientId,
    pub class: u32,
    pub scaled: Vec<u32>,
}

/// Steps 1–3: the scaled vectors that enter k-means, class-major, client-id order within a
/// class; and x.
pub fn entries<U: Borrow<TmUpload>>(
    uploads: &BTreeMap<ClientId, U>,
    sigma: f64,
    filter: bool,
) -> (Vec<Entry>, f64) {
    let ginis: Vec<f64> = uploads
        .values()
        .map(Borrow::borrow)
        .filter(|u| u.parts.samples() > 0)
        .map(|u| u.gini_index)
        .collect();
    let x = scale_factor(&ginis, sigma);
    let classes: BTreeSet<u32> = uploads
        .values()
        .flat_map(|u| u.borrow().parts.classes.keys().copied())
        .collect();
    let mut out = Vec::new();
    for class in classes {
        for (&client, u) in uploads {
            let u = u.borrow();
            let Some(c) = u.parts.classes.get(&class) else {
                continue;
            };
            let scaled = scale(&c.weights, c.samples, u.parts.samples(), x);
            if filter && mean(&scaled).floor() <= 0.0 {
                continue;
            }
            out.push(Entry {
                client,
                class,
                scaled,
            });
        }
    }
    (out, x)
}

/// A k-means cluster: its centroid and its (client, class) members in entry order.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub centroid: Vec<f64>,
    pub members: Vec<(ClientId, u32)>,
}

impl Cluster {
    fn classes(&self) -> BTreeSet<u32> {
        self.members.iter().map(|&(_, c)| c).collect()
    }
}

/// Step 4: k-means over the entries, k = min(entries − 1, k_max) (at least 1).
pub fn cluster(entries: &[Entry], k_max: usize, rng: &mut FlintRng) -> Result<Vec<Cluster>> {
    if entries.is_empty() {
        return Err(FlintError::Model(
            "fedtmos has no class weights to cluster".into(),
        ));
    }
    let k = k_max.min(entries.len().saturating_sub(1)).max(1);
    let points: Vec<Vec<f64>> = entries
        .iter()
        .map(|e| e.scaled.iter().map(|&w| f64::from(w)).collect())
        .collect();
    let fit = kmeans::kmeans(&points, k, LloydParams::default(), rng).map_err(FlintError::Model)?;
    let mut clusters: Vec<Cluster> = fit
        .centroids
        .into_iter()
        .map(|centroid| Cluster {
            centroid,
            members: Vec::new(),
        })
        .collect();
    for (e, &l) in entries.iter().zip(&fit.labels) {
        clusters[l].members.push((e.client, e.class));
    }
    Ok(clusters)
}

/// Eq. 5's average linkage of one model: the mean over pairs of its classes of the squared
/// distance between their means (0 below two classes).
pub fn linkage(means: &BTreeMap<u32, Vec<f64>>) -> f64 {
    let all: Vec<&Vec<f64>> = means.values().collect();
    let (mut total, mut pairs) = (0.0, 0usize);
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            total += a
                .iter()
                .zip(b.iter())
                .map(|(x, y)| (x - y).powi(2))
                .sum::<f64>();
            pairs += 1;
        }
    }
    if pairs == 0 {
        0.0
    } else {
        total / pairs as f64
    }
}

/// A server model as reassignment builds it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelPlan {
    /// Each class's mean: its cluster's centroid (averaged with the next one's if the class
    /// comes twice).
    pub means: BTreeMap<u32, Vec<f64>>,
    /// The clients whose weights of the class the model averages.
    pub contributors: BTreeMap<u32, Vec<ClientId>>,
    /// The clusters it took from.
    pub clusters: BTreeSet<usize>,
    /// Contributors the fill named without their holding the class (`FillFrom::ClusterFirst`):
    /// they count as zero weights and no include bits.
    pub absent: BTreeSet<(ClientId, u32)>,
}

impl ModelPlan {
    fn add(&mut self, client: ClientId, class: u32, cluster: usize, centroid: &[f64]) {
        self.contributors.entry(class).or_default().push(client);
        self.means
            .entry(class)
            .and_modify(|m| {
                m.iter_mut()
                    .zip(centroid)
                    .for_each(|(a, b)| *a = (*a + b) / 2.0)
            })
            .or_insert_with(|| centroid.to_vec());
        self.clusters.insert(cluster);
    }

    fn linkage_with(&self, added: &[(u32, &[f64])]) -> f64 {
        let mut means = self.means.clone();
        for (class, centroid) in added {
            means.insert(*class, centroid.to_vec());
        }
        linkage(&means)
    }
}

/// Step 5: Algorithm 2 and the fill (see the module doc).
pub fn reassign(clusters: &[Cluster], models: usize, fill_from: FillFrom) -> Vec<ModelPlan> {
    let mut plans = vec![ModelPlan::default(); models];
    let mut order: Vec<usize> = (0..clusters.len()).collect();
    order.sort_by_key(|&l| clusters[l].classes().len());
    for &l in &order {
        let centroid = &clusters[l].centroid;
        for &(client, class) in &clusters[l].members {
            let mut best: Option<(usize, f64)> = None;
            for (m, plan) in plans.iter().enumerate() {
                if plan.means.contains_key(&class) {
                    continue;
                }
                let l2 = plan.linkage_with(&[(class, centroid)]);
                if best.is_none_or(|(_, b)| l2 > b) {
                    best = Some((m, l2));
                }
            }
            let m = match best {
                Some((m, _)) => m,
                // Every model holds the class: the fewest classes, then the fewest clusters.
                None => (0..plans.len())
                    .min_by_key(|&m| (plans[m].means.len(), plans[m].clusters.len()))
                    .unwrap_or(0),
            };
            plans[m].add(client, class, l, centroid);
        }
    }
    for plan in &mut plans {
        fill(plan, clusters, fill_from);
    }
    plans
}

/// A model with fewer than 2 classes takes the missing ones from clusters it has not taken.
fn fill(plan: &mut ModelPlan, clusters: &[Cluster], fill_from: FillFrom) {
    let need = 2usize.saturating_sub(plan.means.len());
    if need == 0 {
        return;
    }
    // (cluster, class, a client of that cluster holding it), each class from the first cluster
    // (by index) that has it.
    let mut seen = BTreeSet::new();
    let mut candidates: Vec<(usize, u32, ClientId)> = Vec::new();
    for (l, c) in clusters.iter().enumerate() {
        if plan.clusters.contains(&l) {
            continue;
        }
        for &(client, class) in &c.members {
            if !plan.means.contains_key(&class) && seen.insert(class) {
                candidates.push((l, class, client));
            }
        }
    }
    let mut best: Option<(Vec<usize>, f64)> = None;
    let mut consider = |picked: Vec<usize>| {
        let added: Vec<(u32, &[f64])> = picked
            .iter()
            .map(|&i| {
                (
                    candidates[i].1,
                    clusters[candidates[i].0].centroid.as_slice(),
                )
            })
            .collect();
        let l2 = plan.linkage_with(&added);
        if best.as_ref().is_none_or(|(_, b)| l2 > *b) {
            best = Some((picked, l2));
        }
    };
    match (need, candidates.len()) {
        (_, 0) => return,
        (2, n) if n >= 2 => {
            for i in 0..n {
                for j in i + 1..n {
                    consider(vec![i, j]);
                }
            }
        }
        (_, n) => (0..n).for_each(|i| consider(vec![i])),
    }
    let Some((picked, _)) = best else {
        return;
    };
    for i in picked {
        let (l, class, holder) = candidates[i];
        let client = match fill_from {
            FillFrom::Holder => holder,
            FillFrom::ClusterFirst => clusters[l].members[0].0,
        };
        if !clusters
            .iter()
            .any(|c| c.members.contains(&(client, class)))
        {
            plan.absent.insert((client, class));
        }
        plan.add(client, class, l, &clusters[l].centroid);
    }
}

/// Step 6: Algorithm 3 over the plans. `scaled` holds every contributor's scaled weights.
pub fn average<U: Borrow<TmUpload>>(
    plans: &[ModelPlan],
    uploads: &BTreeMap<ClientId, U>,
    scaled: &BTreeMap<(ClientId, u32), Vec<u32>>,
    top_k: usize,
    bits_by: BitsBy,
) -> Result<Vec<TmParts>> {
    let missing = |client: ClientId, class: u32| {
        FlintError::Model(format!(
            "client {client} contributes class {class} but uploaded none"
        ))
    };
    // Every class has the machine's shape: take it from any upload.
    let (clauses, include_len) = uploads
        .values()
        .find_map(|u| u.borrow().parts.classes.values().next())
        .map_or((0, 0), |c| (c.weights.len(), c.include.0.len()));
    let zeros = vec![0u32; clauses];
    let mut out = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut model = TmParts::default();
        for (&class, contributors) in &plan.contributors {
            let vectors: Vec<&Vec<u32>> = contributors
                .iter()
                .map(|&j| match scaled.get(&(j, class)) {
                    Some(v) => Ok(v),
                    None if plan.absent.contains(&(j, class)) => Ok(&zeros),
                    None => Err(missing(j, class)),
                })
                .collect::<Result<_>>()?;
            let weights: Vec<u32> = (0..clauses)
                .map(|i| {
                    let sum: f64 = vectors.iter().map(|v| f64::from(v[i])).sum();
                    (sum / vectors.len() as f64) as u32
                })
                .collect();
            let mut ranked: Vec<(ClientId, f64)> = contributors
                .iter()
                .zip(&vectors)
                .map(|(&j, v)| {
                    let score = match bits_by {
                        BitsBy::Samples => uploads
                            .get(&j)
                            .and_then(|u| u.borrow().parts.classes.get(&class))
                            .map_or(0.0, |c| c.samples as f64),
                        BitsBy::MeanWeight => mean(v),
                    };
                    (j, score)
                })
                .collect();
            // Highest first; the lower client id on a tie. A client counted twice counts once.
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            ranked.dedup_by_key(|r| r.0);
            ranked.retain(|(j, _)| !plan.absent.contains(&(*j, class)));
            // A class only absent contributors give has no literal, in the machine's shape.
            let mut include = IncludeBits(vec![0; include_len]);
            for (j, _) in ranked.iter().take(top_k) {
                let bits = uploads
                    .get(j)
                    .and_then(|u| u.borrow().parts.classes.get(&class))
                    .ok_or_else(|| missing(*j, class))?;
                include.or(&bits.include);
            }
            let parts = ClassParts {
                weights,
                include,
                samples: 0,
            };
            model.classes.insert(class, parts);
        }
        out.push(model);
    }
    Ok(out)
}

/// What steps 1–6 made of a round's uploads.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps {
    pub models: Vec<TmParts>,
    pub plans: Vec<ModelPlan>,
    /// x.
    pub scale: f64,
    /// Vectors that entered k-means, and its k.
    pub vectors: usize,
    pub clusters: usize,
}

/// Steps 1–6 on a round's uploads.
pub fn server_steps<U: Borrow<TmUpload>>(
    uploads: &BTreeMap<ClientId, U>,
    params: &FedTmosServerParams,
    rng: &mut FlintRng,
) -> Result<Steps> {
    let (entries, x) = entries(uploads, params.sigma, params.filter);
    let clusters = cluster(&entries, params.k_max, rng)?;
    let plans = reassign(&clusters, params.models, params.fill_from);
    let vectors = entries.len();
    // Every contributor a plan names is one of the clustered entries, already scaled.
    let scaled: BTreeMap<(ClientId, u32), Vec<u32>> = entries
        .into_iter()
        .map(|e| ((e.client, e.class), e.scaled))
        .collect();
    let models = average(&plans, uploads, &scaled, params.top_k, params.bits_by)?;
    Ok(Steps {
        models,
        plans,
        scale: x,
        vectors,
        clusters: clusters.len(),
    })
}

/// Defaults of the `[fedtmos]` keys left unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// The paper as written: top-K include bits by samples, no filter, eq. 3's per-sample
    /// composite without clamp, rebuilt machines' excluded automata at the last exclude state.
    Paper,
    /// The published code (FEDTMOS-CODE-NOTES §2–4): bits by mean scaled weight, its
    /// `floor(mean) > 0` filter, one spread per model over the batch with sums clamped to
    /// [−T, T], excluded automata at 0. The code's two reassignment bugs stay fixed.
    PaperCode,
}

/// `[fedtmos]` as written; [`FedTmosSection::check`] makes it a [`FedTmosHyper`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedTmosSection {
    /// `paper` (default) or `paper-code`: the defaults of the keys below left unset.
    pub preset: Option<String>,
    /// φ: server models (default 4, the paper's MNIST).
    pub models: Option<usize>,
    /// σ: the mean Gini index above which weights are scaled (default 0.5).
    pub sigma: Option<f64>,
    /// k of k-means, at most (default 30, the paper's Dir partitions; 10 for S(β)).
    pub k_max: Option<usize>,
    /// K of TopK (default 2).
    pub top_k: Option<usize>,
    /// `samples` (default, the paper) or `mean-weight` (the code).
    pub bits_by: Option<String>,
    /// The code's filter on vectors whose mean scaled weight floors to 0 (default false).
    pub filter: Option<bool>,
    /// Under whose weights the fill step adds a class: `holder` (default) or `cluster-first`
    /// (the code: the cluster's first client, who may not hold it and then adds zeros).
    pub fill_from: Option<String>,
    /// Local training epochs before the one upload (default 30).
    pub local_epochs: Option<u32>,
    /// Convolution patch width W (default 10, the paper's MNIST).
    pub patch: Option<usize>,
    /// Test rows per client (default 1000).
    pub test_samples: Option<usize>,
    /// Composite normalization: `per-sample` (default, eq. 3) or `per-batch` (the code).
    pub normalization: Option<String>,
    /// Clamp class sums to [−T, T] at inference, as the code (default false).
    pub clamp: Option<bool>,
    /// Where a rebuilt machine's excluded automata sit: `last-exclude` (default) or `zero`.
    pub excluded_at: Option<String>,
    /// Also send every client's own machine, so the holder of the shared test set measures the
    /// ensemble baseline, each client alone and both composite readings from the same trained
    /// clients (default false: the download is then J machines larger).
    pub baselines: Option<bool>,
    /// Train one-vs-all with a random stream per class, the classes spread over the cores
    /// (`ConvTm::fit_epoch_threaded`): the same model on any number of cores, but not the
    /// default's, which draws from one stream; faster where a client trains alone.
    pub class_streams: Option<bool>,
    /// The published code's data leak (FEDTMOS-CODE-NOTES §1): every client first fits one
    /// epoch on the training rows of the first client holding the last class, then its own
    /// epochs (default false, in every preset: it hands each client another client's data;
    /// it exists to measure what the leak adds to the paper's figures).
    pub copy_data_epoch: Option<bool>,
}

/// Checked `[fedtmos]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmosHyper {
    pub server: FedTmosServerParams,
    pub local_epochs: u32,
    pub patch: usize,
    pub test_samples: usize,
    pub composite: CompositeOptions,
    pub excluded_at: ExcludedAt,
    pub baselines: bool,
    pub class_streams: bool,
    pub copy_data_epoch: bool,
    /// On a table: the bits of a row (its thermometer code). The machine then reads the whole
    /// row as its one patch (a plain multi-class machine); `None` for 28 × 28 images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_bits: Option<usize>,
}

impl FedTmosSection {
    /// Whether every key a preset decides is written, as in a run's resolved file.
    pub fn writes_every_preset_key(&self) -> bool {
        self.bits_by.is_some()
            && self.filter.is_some()
            && self.normalization.is_some()
            && self.clamp.is_some()
            && self.excluded_at.is_some()
    }

    /// After `preset` changed from `before`'s (`--set fedtmos.preset=…` on a run's resolved
    /// file, which writes every default out): each key a preset sets that still holds
    /// `before`'s preset value is unset, so the new preset decides it; a key given another
    /// value, or named in `kept` (set on the command line too), stays.
    pub fn follow_preset(&mut self, before: &FedTmosSection, kept: &[&str]) {
        if self.preset == before.preset {
            return;
        }
        let old = FedTmosSection {
            preset: before.preset.clone(),
            ..FedTmosSection::default()
        };
        let Ok(old) = old.check() else {
            return;
        };
        let Ok(now) = FedTmosSection {
            preset: None,
            ..self.clone()
        }
        .check() else {
            return;
        };
        let free = |key: &str| !kept.contains(&key);
        if free("bits_by") && now.server.bits_by == old.server.bits_by {
            self.bits_by = None;
        }
        if free("filter") && now.server.filter == old.server.filter {
            self.filter = None;
        }
        if free("normalization") && now.composite.normalization == old.composite.normalization {
            self.normalization = None;
        }
        if free("clamp") && now.composite.clamp == old.composite.clamp {
            self.clamp = None;
        }
        if free("excluded_at") && now.excluded_at == old.excluded_at {
            self.excluded_at = None;
        }
    }

    pub fn check(&self) -> ParamResult<FedTmosHyper> {
        let at_least_one = |key, n: usize| require(key, "at least 1", n, n > 0);
        let epochs = self.local_epochs.unwrap_or(30);
        let code = parse_name_or("fedtmos.preset", self.preset.as_deref(), Preset::Paper)?
            == Preset::PaperCode;
        let (bits_by, composite, excluded_at) = match code {
            true => (BitsBy::MeanWeight, CompositeOptions::CODE, ExcludedAt::Zero),
            false => (
                BitsBy::Samples,
                CompositeOptions::default(),
                ExcludedAt::LastExclude,
            ),
        };
        Ok(FedTmosHyper {
            server: FedTmosServerParams {
                models: at_least_one("fedtmos.models", self.models.unwrap_or(4))?,
                sigma: positive("fedtmos.sigma", self.sigma.unwrap_or(0.5))?,
                k_max: at_least_one("fedtmos.k_max", self.k_max.unwrap_or(30))?,
                top_k: at_least_one("fedtmos.top_k", self.top_k.unwrap_or(2))?,
                bits_by: parse_name_or("fedtmos.bits_by", self.bits_by.as_deref(), bits_by)?,
                filter: self.filter.unwrap_or(code),
                fill_from: parse_name_or(
                    "fedtmos.fill_from",
                    self.fill_from.as_deref(),
                    FillFrom::Holder,
                )?,
            },
            local_epochs: require("fedtmos.local_epochs", "at least 1", epochs, epochs > 0)?,
            patch: at_least_one("fedtmos.patch", self.patch.unwrap_or(10))?,
            test_samples: at_least_one("fedtmos.test_samples", self.test_samples.unwrap_or(1000))?,
            composite: CompositeOptions {
                normalization: parse_name_or(
                    "fedtmos.normalization",
                    self.normalization.as_deref(),
                    composite.normalization,
                )?,
                clamp: self.clamp.unwrap_or(composite.clamp),
            },
            excluded_at: parse_name_or(
                "fedtmos.excluded_at",
                self.excluded_at.as_deref(),
                excluded_at,
            )?,
            baselines: self.baselines.unwrap_or(false),
            class_streams: self.class_streams.unwrap_or(false),
            copy_data_epoch: self.copy_data_epoch.unwrap_or(false),
            table_bits: None,
        })
    }
}

impl FedTmosHyper {
    /// `local_epochs` epochs of the client's machine on its training rows.
    pub(crate) fn train_locally(
        &self,
        tm: &mut ConvTm,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
    ) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for _ in 0..self.local_epochs {
            match self.class_streams {
                true => tm.fit_epoch_threaded(data, masks, rng, cores),
                false => tm.fit_epoch(data, masks, rng),
            }
        }
    }

    pub(crate) fn rebuild(&self, tm: TmHyper, classes: usize) -> Rebuild {
        Rebuild {
            tm,
            spec: self.patch_spec(),
            classes,
            excluded_at: self.excluded_at,
        }
    }

    /// The convolution over 28 × 28 single-channel images (MNIST, Fashion-MNIST); on a table,
    /// one 1 × 1 "image" with a channel per bit, whose one patch is the whole row.
    pub fn patch_spec(&self) -> PatchSpec {
        match self.table_bits {
            Some(bits) => PatchSpec {
                width: 1,
                height: 1,
                channels: bits,
                patch: 1,
            },
            None => PatchSpec {
                width: 28,
                height: 28,
                channels: 1,
                patch: self.patch,
            },
        }
    }

    /// What every exchanged machine must look like.
    pub fn shape(&self, tm: &TmHyper, classes: usize) -> TmShape {
        TmShape {
            classes,
            clauses: tm.clauses,
            literals: 2 * self.patch_spec().patch_features(),
        }
    }
}

/// FedTMOS's record of its round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FedTmosRound {
    /// x: the factor the weights were scaled by (1: none).
    pub scale: f64,
    /// (client, class) vectors that entered k-means, and the clusters they formed.
    pub vectors: usize,
    pub clusters: usize,
    /// Per server model, per class, the clients whose weights it averages.
    pub models: Vec<BTreeMap<u32, Vec<ClientId>>>,
    /// Payload bytes of the download: the φ server models, and the clients' own machines it also
    /// carries with `fedtmos.baselines` (0 without).
    #[serde(default)]
    pub composite_bytes: u64,
    #[serde(default)]
    pub ensemble_bytes: u64,
}

/// The ensemble baseline's record of its round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnsembleRound {
    /// The clients whose machines the download carries.
    pub clients: Vec<ClientId>,
}

/// Every client's own machine as it uploaded it (unscaled), in client-id order, without its
/// counts: the ensemble baseline (FEDTMOS-CODE-NOTES §4).
fn client_machines(uploads: &BTreeMap<ClientId, &TmUpload>) -> Vec<(ClientId, TmParts)> {
    uploads
        .iter()
        .map(|(&id, u)| {
            let mut parts = u.parts.clone();
            parts.classes.values_mut().for_each(|c| c.samples = 0);
            (id, parts)
        })
        .collect()
}

pub(crate) fn tm_uploads(
    updates: &BTreeMap<ClientId, Update>,
) -> Result<BTreeMap<ClientId, &TmUpload>> {
    updates
        .iter()
        .map(|(&id, u)| match u {
            Update::Tm(t) => Ok((id, t)),
            other => Err(unexpected("tm_upload", other)),
        })
        .collect()
}

/// The server: steps 1–6 on the one round's uploads; it broadcasts the φ server models.
pub struct FedTmosServer {
    hyper: FedTmosHyper,
    shape: TmShape,
    seed: u64,
}

impl FedTmosServer {
    pub fn new(hyper: FedTmosHyper, tm: &TmHyper, classes: usize, seed: u64) -> FedTmosServer {
        FedTmosServer {
            shape: hyper.shape(tm, classes),
            hyper,
            seed,
        }
    }
}

impl ServerStrategy for FedTmosServer {
    fn initial_download(&self, _features: usize) -> Option<Payload> {
        None
    }

    fn decode(&self, _client: ClientId, _features: usize, update: &Payload) -> Result<Update> {
        wire::decode_tm_upload(update, self.shape).map(Update::Tm)
    }

    fn aggregate(
        &mut self,
        round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let uploads = tm_uploads(updates)?;
        let mut rng = derive_rng(self.seed, "fedtmos-kmeans", round);
        let steps = server_steps(&uploads, &self.hyper.server, &mut rng)?;
        let mut download = CompositeDownload {
            models: steps.models,
            ensemble: Vec::new(),
        };
        let composite_bytes = wire::encode_tm_composite(&download, self.shape).encoded_len();
        if self.hyper.baselines {
            download.ensemble = client_machines(&uploads);
        }
        let payload = wire::encode_tm_composite(&download, self.shape);
        let ensemble_bytes = payload.encoded_len() - composite_bytes;
        let n = updates.len() as f64;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(payload),
            weights: updates.keys().map(|&id| (id, 1.0 / n)).collect(),
            report: RoundReport::FedTmos(FedTmosRound {
                scale: steps.scale,
                vectors: steps.vectors,
                clusters: steps.clusters,
                models: steps.plans.into_iter().map(|p| p.contributors).collect(),
                composite_bytes: composite_bytes as u64,
                ensemble_bytes: ensemble_bytes as u64,
            }),
            local: BTreeMap::new(),
        })
    }

    fn snapshot(&self) -> StrategyState {
        StrategyState::Stateless
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        restore_stateless("fedtmos", state)
    }
}

/// The ensemble baseline (FEDTMOS-CODE-NOTES §4): no scaling, no clustering; every client's own
/// machine goes back to every client, which predicts with all of them as one composite.
pub struct EnsembleServer {
    shape: TmShape,
}

impl EnsembleServer {
    pub fn new(hyper: FedTmosHyper, tm: &TmHyper, classes: usize) -> EnsembleServer {
        EnsembleServer {
            shape: hyper.shape(tm, classes),
        }
    }
}

impl ServerStrategy for EnsembleServer {
    fn initial_download(&self, _features: usize) -> Option<Payload> {
        None
    }

    fn decode(&self, _client: ClientId, _features: usize, update: &Payload) -> Result<Update> {
        wire::decode_tm_upload(update, self.shape).map(Update::Tm)
    }

    fn aggregate(
        &mut self,
        _round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let machines = client_machines(&tm_uploads(updates)?);
        let clients = machines.iter().map(|&(id, _)| id).collect();
        let download = CompositeDownload {
            models: machines.into_iter().map(|(_, m)| m).collect(),
            ensemble: Vec::new(),
        };
        let n = updates.len() as f64;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_tm_composite(&download, self.shape)),
            weights: updates.keys().map(|&id| (id, 1.0 / n)).collect(),
            report: RoundReport::Ensemble(EnsembleRound { clients }),
            local: BTreeMap::new(),
        })
    }

    fn snapshot(&self) -> StrategyState {
        StrategyState::Stateless
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        restore_stateless("ensemble", state)
    }
}

/// What every FedTMOS-family client needs to rebuild machines of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rebuild {
    tm: TmHyper,
    spec: PatchSpec,
    classes: usize,
    excluded_at: ExcludedAt,
}

impl Rebuild {
    pub(crate) fn machine(&self, parts: &TmParts) -> Result<ConvTm> {
        let given: Vec<(u32, &[u32], &[u8])> = parts
            .classes
            .iter()
            .map(|(&c, p)| (c, &p.weights[..], &p.include.0[..]))
            .collect();
        MultiClassTm::rebuild(
            self.tm,
            self.spec.patch_features(),
            self.classes,
            &given,
            self.excluded_at,
        )
        .and_then(|tm| ConvTm::from_multiclass(self.spec, tm))
        .map_err(|e| FlintError::InvalidUpdate(format!("download: {e}")))
    }
}

/// The upload of FedTMOS, FedTM and the ensemble (§4.2.1): for every class the client holds,
/// its weights, include bits and samples; and the client's Gini index.
pub(crate) fn upload_of(tm: &ConvTm, counts: &[u64]) -> Result<TmUpload> {
    let tm = tm
        .multiclass()
        .ok_or_else(|| FlintError::Model("fedtmos trains the multi-class form".into()))?;
    let classes = counts
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, &n)| {
            let parts = ClassParts {
                weights: tm.class_weights(c).to_vec(),
                include: IncludeBits(tm.include_bits(c)),
                samples: n,
            };
            (c as u32, parts)
        })
        .collect();
    Ok(TmUpload {
        parts: TmParts { classes },
        gini_index: gini_index(counts),
    })
}

/// Each machine's class sums over `data`, on as many threads as there are cores.
fn sums_of(machines: &[&ConvTm], data: &BitRows) -> Vec<BatchSums> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = machines.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = machines
            .chunks(per)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|m| BatchSums::of(*m, data))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("class sums never panic"))
            .collect()
    })
}

/// A client of FedTMOS and of the ensemble: trains its convolutional multi-class machine once,
/// uploads the classes it holds with their counts and its Gini index, then predicts with the
/// composite it is sent (FedTMOS: the φ server models; the ensemble: every client's machine).
pub struct FedTmosClient {
    tm: ConvTm,
    masks: FeedbackMasks,
    hyper: FedTmosHyper,
    shape: TmShape,
    rebuild: Rebuild,
    /// The most machines a download's composite may hold (φ, or the run's clients).
    max_models: usize,
    /// The run's clients: the most client machines a download may carry.
    clients: usize,
    composite: Vec<ConvTm>,
    /// With `fedtmos.baselines`: every client's own machine, by client id.
    ensemble: Vec<(ClientId, ConvTm)>,
}

impl FedTmosClient {
    /// `max_models`: φ for FedTMOS, `clients` for the ensemble.
    pub fn new(
        tm: TmHyper,
        hyper: FedTmosHyper,
        classes: usize,
        seed: u64,
        client: ClientId,
        max_models: usize,
        clients: usize,
    ) -> Result<FedTmosClient> {
        let mut rng = derive_rng(seed, "tm-init", client);
        Ok(FedTmosClient {
            tm: ConvTm::new(tm, hyper.patch_spec(), classes).map_err(FlintError::Model)?,
            masks: FeedbackMasks::new(tm.s, &mut rng),
            shape: hyper.shape(&tm, classes),
            rebuild: hyper.rebuild(tm, classes),
            hyper,
            max_models,
            clients,
            composite: Vec::new(),
            ensemble: Vec::new(),
        })
    }
}

impl ClientStrategy<BitShard> for FedTmosClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let d = wire::decode_tm_composite(download, self.shape, self.max_models, self.clients)?;
        self.composite = d
            .models
            .iter()
            .map(|m| self.rebuild.machine(m))
            .collect::<Result<_>>()?;
        self.ensemble = d
            .ensemble
            .iter()
            .map(|(id, m)| self.rebuild.machine(m).map(|tm| (*id, tm)))
            .collect::<Result<_>>()?;
        Ok(())
    }

    fn train(&mut self, shard: &BitShard, _round: Round, rng: &mut FlintRng) -> Result<Payload> {
        if let Some(leak) = &shard.prefit {
            self.tm.fit_epoch(leak, &mut self.masks, rng);
        }
        self.hyper
            .train_locally(&mut self.tm, &shard.train, &mut self.masks, rng);
        let upload = upload_of(&self.tm, &shard.train_class_counts())?;
        Ok(wire::encode_tm_upload(&upload, self.shape))
    }

    /// The composite the client predicts with, as received.
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        crate::model::kept::KeptModel::composite(&self.composite, self.hyper.composite)
    }

    fn evaluate(&self, shard: &BitShard) -> ConfusionMatrix {
        let test = &shard.test;
        let predictions = if self.composite.is_empty() {
            self.tm.predict_batch(test)
        } else {
            let models: Vec<&ConvTm> = self.composite.iter().collect();
            let sums = sums_of(&models, test);
            composite::vote(
                &sums.iter().collect::<Vec<_>>(),
                self.shape.classes,
                self.hyper.composite,
            )
        };
        ConfusionMatrix::from_predictions(self.shape.classes, &test.labels, &predictions)
    }

    fn class_sum_profiles(&self, shard: &BitShard) -> Vec<(String, Vec<ClassSumProfile>)> {
        // The ensemble strategy's composite is the clients' own machines, in client order.
        let names = (1..=self.composite.len())
            .map(|k| format!("composite model {k}"))
            .chain(self.ensemble.iter().map(|(id, _)| format!("client {id}")));
        let machines: Vec<&ConvTm> = self
            .composite
            .iter()
            .chain(self.ensemble.iter().map(|(_, m)| m))
            .collect();
        let sums = sums_of(&machines, &shard.test);
        names
            .zip(&sums)
            .map(|(name, s)| {
                let profiles =
                    composite::class_sum_profiles(s, &shard.test.labels, self.shape.classes);
                (name, profiles)
            })
            .collect()
    }

    /// With the clients' machines in the download: the composite under both readings, the
    /// ensemble under both, and every client alone, from one computation of each machine's sums.
    fn evaluate_all(&self, shard: &BitShard) -> Vec<(Predictor, ConfusionMatrix)> {
        if self.ensemble.is_empty() || self.composite.is_empty() {
            return vec![(Predictor::Model, self.evaluate(shard))];
        }
        let test = &shard.test;
        let classes = self.shape.classes;
        let machines: Vec<&ConvTm> = self
            .composite
            .iter()
            .chain(self.ensemble.iter().map(|(_, m)| m))
            .collect();
        let sums = sums_of(&machines, test);
        let (server, clients) = sums.split_at(self.composite.len());
        let server: Vec<&BatchSums> = server.iter().collect();
        let all: Vec<&BatchSums> = clients.iter().collect();
        let (ours, other) = (self.hyper.composite, self.hyper.composite.other_reading());
        let matrix = |p: Vec<u32>| ConfusionMatrix::from_predictions(classes, &test.labels, &p);
        // One machine alone: the argmax of its sums (a positive constant changes nothing).
        let alone = CompositeOptions {
            normalization: Normalization::PerBatch,
            clamp: false,
        };
        let mut out = vec![
            (
                Predictor::ModelAs(other),
                matrix(composite::vote(&server, classes, other)),
            ),
            (
                Predictor::Ensemble,
                matrix(composite::vote(&all, classes, ours)),
            ),
            (
                Predictor::EnsembleAs(other),
                matrix(composite::vote(&all, classes, other)),
            ),
        ];
        for ((id, _), s) in self.ensemble.iter().zip(clients) {
            out.push((
                Predictor::Client(*id),
                matrix(composite::vote(&[s], classes, alone)),
            ));
        }
        out.push((
            Predictor::Model,
            matrix(composite::vote(&server, classes, ours)),
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    fn upload(classes: &[(u32, Vec<u32>, u8, u64)]) -> TmUpload {
        let counts: Vec<u64> = classes.iter().map(|c| c.3).collect();
        let classes = classes
            .iter()
            .map(|(c, w, bits, n)| {
                let up = ClassParts {
                    weights: w.clone(),
                    include: IncludeBits(vec![*bits]),
                    samples: *n,
                };
                (*c, up)
            })
            .collect();
        TmUpload {
            parts: TmParts { classes },
            gini_index: gini_index(&counts),
        }
    }

    #[test]
    fn the_gini_index_and_scaling_follow_section_4_2_1() {
        assert_eq!(gini_index(&[10]), 1.0);
        assert_eq!(gini_index(&[5, 5, 5, 5]), 0.25);
        assert!((gini_index(&[3, 1]) - 0.625).abs() < 1e-12);
        // x is the mean Gini index only above σ.
        assert_eq!(scale_factor(&[0.8, 0.6], 0.5), 0.7);
        assert_eq!(scale_factor(&[0.4, 0.5], 0.5), 1.0);
        // ⌊x · θ · n_c / n⌋, truncated once: 0.7 · 10 · 3/4 = 5.25 → 5; 0.7 · 3 · 3/4 = 1.575 → 1.
        assert_eq!(scale(&[10, 3, 1], 3, 4, 0.7), vec![5, 1, 0]);
    }

    #[test]
    fn vectors_are_class_major_and_the_code_filter_drops_minority_classes() {
        let uploads = BTreeMap::from([
            (1, upload(&[(0, vec![8, 8], 1, 99), (1, vec![8, 8], 1, 1)])),
            (2, upload(&[(0, vec![4, 4], 1, 10)])),
        ]);
        let (all, x) = entries(&uploads, 0.5, false);
        // Client 1's Gini index is 0.99² + 0.01² = 0.9802, client 2's 1: x = 0.9901.
        assert!((x - 0.9901).abs() < 1e-12);
        let keys: Vec<(ClientId, u32)> = all.iter().map(|e| (e.client, e.class)).collect();
        assert_eq!(keys, vec![(1, 0), (2, 0), (1, 1)]);
        // Client 1's class 1: 0.9901 · 8 · 1/100 = 0.08 → 0: the filter drops it.
        let (kept, _) = entries(&uploads, 0.5, true);
        let keys: Vec<(ClientId, u32)> = kept.iter().map(|e| (e.client, e.class)).collect();
        assert_eq!(keys, vec![(1, 0), (2, 0)]);
    }

    fn cluster_of(centroid: Vec<f64>, members: &[(ClientId, u32)]) -> Cluster {
        Cluster {
            centroid,
            members: members.to_vec(),
        }
    }

    #[test]
    fn reassignment_maximizes_linkage_and_never_doubles_a_class_while_a_model_lacks_it() {
        // Algorithm 2 on hand-made clusters: class 0 in clusters at 0 and 10, class 1 at 3,
        // class 2 at 100.
        let clusters = vec![
            cluster_of(vec![0.0], &[(1, 0)]),
            cluster_of(vec![10.0], &[(2, 0)]),
            cluster_of(vec![3.0], &[(3, 1)]),
            cluster_of(vec![100.0], &[(4, 2)]),
        ];
        let plans = reassign(&clusters, 2, FillFrom::Holder);
        // Every cluster has one class; they go in index order. (1, 0) → model 0 (both empty,
        // linkage 0, the first). (2, 0) → model 1, the only one without class 0. (3, 1): model
        // 0 gives |3 − 0|² = 9, model 1 |3 − 10|² = 49 → model 1. (4, 2): model 0 gives
        // 100² = 10000, model 1 (7² + 90² + 97²)/3 ≈ 5853 → model 0.
        assert_eq!(plans[0].contributors[&0], vec![1]);
        assert_eq!(plans[1].contributors[&0], vec![2]);
        assert_eq!(plans[1].contributors[&1], vec![3]);
        let with_2: Vec<usize> = (0..2)
            .filter(|&m| plans[m].contributors.contains_key(&2))
            .collect();
        let l0 = linkage(&BTreeMap::from([(0, vec![0.0]), (2, vec![100.0])]));
        let l1 = linkage(&BTreeMap::from([
            (0, vec![10.0]),
            (1, vec![3.0]),
            (2, vec![100.0]),
        ]));
        assert_eq!(with_2, vec![if l1 > l0 { 1 } else { 0 }]);
        for plan in &plans {
            assert!(plan.means.len() >= 2, "every model holds two classes");
        }
    }

    #[test]
    fn when_every_model_holds_the_class_it_goes_to_the_fewest_classes_then_fewest_clusters() {
        // Class 0 three times (three clusters), two models: the third copy goes where there
        // are fewer classes; both hold one class, and each took one cluster: the first wins
        // the tie, and its mean becomes the average of the two centroids.
        let clusters = vec![
            cluster_of(vec![0.0], &[(1, 0)]),
            cluster_of(vec![4.0], &[(2, 0)]),
            cluster_of(vec![8.0], &[(3, 0)]),
            cluster_of(vec![50.0], &[(4, 1)]),
        ];
        let plans = reassign(&clusters, 2, FillFrom::Holder);
        assert_eq!(plans[0].contributors[&0], vec![1, 3]);
        assert_eq!(plans[0].means[&0], vec![4.0]);
        assert_eq!(plans[1].contributors[&0], vec![2]);
    }

    #[test]
    fn the_fill_takes_a_class_from_an_untaken_cluster_under_a_client_that_holds_it() {
        // One cluster holds classes 0 and 1 (clients 1 and 2), another class 2 (client 3). With
        // three models, model 2 ends with one class and takes another from the clusters it has
        // not taken, under the client of that cluster holding it.
        let clusters = vec![
            cluster_of(vec![0.0], &[(1, 0), (2, 1)]),
            cluster_of(vec![9.0], &[(3, 2)]),
        ];
        let plans = reassign(&clusters, 3, FillFrom::Holder);
        for plan in &plans {
            for (class, clients) in &plan.contributors {
                for &j in clients {
                    let holder = clusters.iter().any(|c| c.members.contains(&(j, *class)));
                    assert!(holder, "client {j} does not hold class {class}");
                }
            }
            assert!(plan.means.len() >= 2, "{plan:?}");
        }
    }

    #[test]
    fn the_codes_fill_adds_a_class_under_the_clusters_first_client_as_zeros() {
        // FEDTMOS-CODE-NOTES §2.5: the code fills under the cluster's first client whether it
        // holds the class or not. The model holds class 0 and takes class 1 from the cluster of
        // (1, 0) and (2, 1): the fixed fill names client 2, the code's client 1, who lacks it.
        let clusters = vec![cluster_of(vec![5.0], &[(1, 0), (2, 1)])];
        let mut plan = ModelPlan::default();
        plan.add(1, 0, 7, &[0.0]);
        let mut fixed = plan.clone();
        fill(&mut fixed, &clusters, FillFrom::Holder);
        assert_eq!(fixed.contributors[&1], vec![2]);
        assert!(fixed.absent.is_empty());
        fill(&mut plan, &clusters, FillFrom::ClusterFirst);
        assert_eq!(plan.contributors[&1], vec![1]);
        assert_eq!(plan.absent, BTreeSet::from([(1, 1)]));
        // Averaged, the absent contributor gives zero weights and no include bits.
        let uploads = BTreeMap::from([
            (1, upload(&[(0, vec![3, 3], 0b0001, 10)])),
            (2, upload(&[(1, vec![4, 4], 0b0010, 10)])),
        ]);
        let scaled = BTreeMap::from([((1, 0), vec![3, 3]), ((2, 1), vec![4, 4])]);
        let model = &average(&[plan], &uploads, &scaled, 2, BitsBy::Samples).unwrap()[0];
        assert_eq!(model.classes[&0].weights, vec![3, 3]);
        assert_eq!(model.classes[&1].weights, vec![0, 0]);
        // No literal, in the shape every class has, so clients can rebuild the machine.
        assert_eq!(model.classes[&1].include, IncludeBits(vec![0]));
        // A contributor the plan does not know as absent is still refused.
        let mut unknown = ModelPlan::default();
        unknown.add(1, 1, 0, &[0.0]);
        assert!(average(&[unknown], &uploads, &scaled, 2, BitsBy::Samples).is_err());
        // The key: `cluster-first` is taken, and only then written into a resolved file.
        let code = FedTmosSection {
            fill_from: Some("cluster-first".into()),
            ..Default::default()
        }
        .check()
        .unwrap();
        assert_eq!(code.server.fill_from, FillFrom::ClusterFirst);
        let written = |p: &FedTmosServerParams| serde_json::to_value(p).unwrap();
        assert_eq!(written(&code.server)["fill_from"], "cluster-first");
        let default = FedTmosSection::default().check().unwrap();
        assert!(written(&default.server).get("fill_from").is_none());
        let bad = FedTmosSection {
            fill_from: Some("first".into()),
            ..Default::default()
        };
        assert!(bad.check().is_err());
    }

    #[test]
    fn averaging_truncates_the_mean_and_ors_the_top_two_include_bits() {
        // Algorithm 3: class 0 from clients 1, 2 and 3 with 5, 50 and 20 samples.
        let uploads = BTreeMap::from([
            (1, upload(&[(0, vec![1, 1], 0b0001, 5)])),
            (2, upload(&[(0, vec![1, 1], 0b0010, 50)])),
            (3, upload(&[(0, vec![1, 1], 0b0100, 20)])),
        ]);
        let scaled = BTreeMap::from([
            ((1, 0), vec![9, 1]),
            ((2, 0), vec![2, 2]),
            ((3, 0), vec![4, 1]),
        ]);
        let plan = ModelPlan {
            contributors: BTreeMap::from([(0, vec![1, 2, 3])]),
            ..Default::default()
        };
        let by_samples = average(
            std::slice::from_ref(&plan),
            &uploads,
            &scaled,
            2,
            BitsBy::Samples,
        )
        .unwrap();
        let class = &by_samples[0].classes[&0];
        // (9 + 2 + 4) / 3 = 5, (1 + 2 + 1) / 3 = 1.33 → 1.
        assert_eq!(class.weights, vec![5, 1]);
        // The most samples: clients 2 and 3.
        assert_eq!(class.include, IncludeBits(vec![0b0110]));
        // By mean scaled weight: client 1 (5), then client 3 (2.5).
        let by_weight = average(&[plan], &uploads, &scaled, 2, BitsBy::MeanWeight).unwrap();
        assert_eq!(by_weight[0].classes[&0].include, IncludeBits(vec![0b0101]));
    }

    #[test]
    fn a_whole_aggregation_covers_every_class_in_every_model_it_can() {
        // Ten clients of two classes each over four classes, two server models.
        let mut uploads = BTreeMap::new();
        for j in 0..10u32 {
            let (a, b) = (j % 4, (j + 1) % 4);
            let w = |c: u32| (0..6).map(|i| 10 + c * 7 + i + j % 3).collect::<Vec<u32>>();
            uploads.insert(j + 1, upload(&[(a, w(a), 1, 30), (b, w(b), 2, 10)]));
        }
        let params = FedTmosServerParams {
            models: 2,
            sigma: 0.5,
            k_max: 5,
            top_k: 2,
            bits_by: BitsBy::Samples,
            filter: false,
            fill_from: FillFrom::Holder,
        };
        let steps = server_steps(&uploads, &params, &mut derive_rng(1, "fedtmos", 0)).unwrap();
        let (models, plans, x) = (steps.models.clone(), steps.plans, steps.scale);
        assert!((x - 0.625).abs() < 1e-12, "every client's Gini is 0.625");
        assert_eq!(models.len(), 2);
        let covered: BTreeSet<u32> = models
            .iter()
            .flat_map(|m| m.classes.keys().copied())
            .collect();
        assert_eq!(covered, BTreeSet::from([0, 1, 2, 3]));
        for (m, p) in models.iter().zip(&plans) {
            assert_eq!(
                m.classes.keys().collect::<Vec<_>>(),
                p.contributors.keys().collect::<Vec<_>>()
            );
            assert!(m.classes.values().all(|c| c.weights.len() == 6));
        }
        // The same seed gives the same models.
        let again = server_steps(&uploads, &params, &mut derive_rng(1, "fedtmos", 0)).unwrap();
        assert_eq!(again.models, models);
    }

    #[test]
    fn the_paper_code_preset_sets_the_codes_defaults_and_keys_still_override() {
        let code = FedTmosSection {
            preset: Some("paper-code".into()),
            ..Default::default()
        }
        .check()
        .unwrap();
        assert_eq!(code.server.bits_by, BitsBy::MeanWeight);
        assert!(code.server.filter);
        assert_eq!(code.composite, CompositeOptions::CODE);
        assert_eq!(code.excluded_at, ExcludedAt::Zero);
        let paper = FedTmosSection::default().check().unwrap();
        assert_eq!(paper.server.bits_by, BitsBy::Samples);
        assert!(!paper.server.filter);
        assert_eq!(paper.composite, CompositeOptions::default());
        assert_eq!(paper.excluded_at, ExcludedAt::LastExclude);
        let mixed = FedTmosSection {
            preset: Some("paper-code".into()),
            filter: Some(false),
            ..Default::default()
        }
        .check()
        .unwrap();
        assert!(!mixed.server.filter);
        let e = FedTmosSection {
            preset: Some("code".into()),
            ..Default::default()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(e.contains("fedtmos.preset"), "{e}");
    }

    fn shape() -> TmShape {
        let (h, tm) = hyper(false);
        h.shape(&tm, 4)
    }

    /// Three clients' uploads in the shape of 2 clauses over 1×1 patches of 28×28 images.
    fn updates() -> BTreeMap<ClientId, Update> {
        let bytes = IncludeBits::bytes_for(2, shape().literals);
        let up = |classes: &[(u32, Vec<u32>, u8, u64)]| {
            let mut u = upload(classes);
            u.parts
                .classes
                .values_mut()
                .for_each(|c| c.include.0.resize(bytes, 0));
            Update::Tm(u)
        };
        BTreeMap::from([
            (
                1,
                up(&[(0, vec![3, 1], 0b0011, 7), (2, vec![5, 5], 0b0101, 3)]),
            ),
            (
                2,
                up(&[(1, vec![2, 8], 0b1010, 4), (3, vec![1, 4], 0b0001, 4)]),
            ),
            (
                3,
                up(&[(0, vec![6, 2], 0b1100, 9), (3, vec![2, 2], 0b0110, 1)]),
            ),
        ])
    }

    fn hyper(baselines: bool) -> (FedTmosHyper, TmHyper) {
        let section = FedTmosSection {
            models: Some(2),
            k_max: Some(3),
            patch: Some(1),
            baselines: Some(baselines),
            ..Default::default()
        };
        let tm = crate::model::tm::TmSection {
            clauses: Some(2),
            ..Default::default()
        };
        (section.check().unwrap(), tm.check().unwrap())
    }

    /// The ensemble baseline (FEDTMOS-CODE-NOTES §4): every client's machine as it uploaded it,
    /// unscaled, in client-id order, without its counts.
    #[test]
    fn the_ensemble_sends_every_clients_own_machine_unscaled_without_counts() {
        let (h, tm) = hyper(false);
        let mut server = EnsembleServer::new(h, &tm, 4);
        let agg = server.aggregate(1, &BTreeMap::new(), &updates()).unwrap();
        let Downloads::Broadcast(p) = &agg.downloads else {
            panic!("one download for all");
        };
        let d = wire::decode_tm_composite(p, shape(), 3, 0).unwrap();
        assert_eq!(d.models.len(), 3);
        let Update::Tm(first) = &updates()[&1] else {
            unreachable!()
        };
        assert_eq!(
            d.models[0].classes[&0].weights,
            first.parts.classes[&0].weights
        );
        assert_eq!(
            d.models[0].classes[&2].include,
            first.parts.classes[&2].include
        );
        assert!(
            d.models
                .iter()
                .flat_map(|m| m.classes.values())
                .all(|c| c.samples == 0)
        );
        assert_eq!(
            agg.report,
            RoundReport::Ensemble(EnsembleRound {
                clients: vec![1, 2, 3]
            })
        );
    }

    #[test]
    fn with_baselines_the_fedtmos_download_also_carries_the_clients_machines() {
        let mut sizes = Vec::new();
        for baselines in [false, true] {
            let (h, tm) = hyper(baselines);
            let mut server = FedTmosServer::new(h, &tm, 4, 7);
            let agg = server.aggregate(1, &BTreeMap::new(), &updates()).unwrap();
            let Downloads::Broadcast(p) = &agg.downloads else {
                panic!("one download for all");
            };
            let d = wire::decode_tm_composite(p, shape(), 2, 3).unwrap();
            let report = agg.report.fedtmos().unwrap().clone();
            assert_eq!(
                report.composite_bytes + report.ensemble_bytes,
                p.encoded_len() as u64
            );
            let ids: Vec<ClientId> = d.ensemble.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, if baselines { vec![1, 2, 3] } else { vec![] });
            sizes.push((d.models, report.composite_bytes));
        }
        assert_eq!(sizes[0], sizes[1], "the server models do not change");
    }
}
