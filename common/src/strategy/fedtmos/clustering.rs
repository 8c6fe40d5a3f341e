//! Steps 4–5: k-means over the scaled vectors, then reassignment into φ server models
//! (Algorithm 2) with its fill step.

use std::collections::{BTreeMap, BTreeSet};

use super::scaling::Entry;
use super::section::FillFrom;
use crate::model::kmeans::{self, LloydParams};
use crate::rng::FlintRng;
use crate::{ClientId, FlintError, Result};

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
    pub(super) fn add(&mut self, client: ClientId, class: u32, cluster: usize, centroid: &[f64]) {
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
pub(super) fn fill(plan: &mut ModelPlan, clusters: &[Cluster], fill_from: FillFrom) {
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
