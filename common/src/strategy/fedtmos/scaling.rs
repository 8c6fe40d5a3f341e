//! Steps 1–3: the Gini index, the scaled weights and the vectors that enter k-means.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use crate::ClientId;
use crate::model::tm::parts::TmUpload;

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

pub(super) fn mean(v: &[u32]) -> f64 {
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
/// class, in units of 1/`resolution`; and x. The filter reads whole units, as the code's.
pub fn entries<U: Borrow<TmUpload>>(
    uploads: &BTreeMap<ClientId, U>,
    sigma: f64,
    filter: bool,
    resolution: u32,
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
            let r = f64::from(resolution);
            let scaled = scale(&c.weights, c.samples, u.parts.samples(), x * r);
            if filter && (mean(&scaled) / r).floor() <= 0.0 {
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
