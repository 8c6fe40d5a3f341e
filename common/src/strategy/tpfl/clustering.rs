//! Algorithm 2's steps (TPFL §5): clusters by winning class, each cluster's average of its
//! members' vectors, and that average rounded back to integer weights.

use std::collections::BTreeMap;

use super::section::{ClusterMean, Rounding};
use crate::strategy::robust::RobustHyper;
use crate::{ClientId, FlintError, Result};

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
    if robust.is_plain() {
        return Ok(from_sums(sums, previous, how));
    }
    let mut out = BTreeMap::new();
    for (class, (members, sum)) in sums {
        let prev = previous_of(previous, class, how, sum.len());
        let mut rows: Vec<Vec<f64>> = members
            .iter()
            .map(|id| uploads[id].1.iter().map(|&w| f64::from(w)).collect())
            .collect();
        rows.extend(prev.cloned());
        let views: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        let mean = robust
            .combine(&views, &vec![1.0 / rows.len() as f64; rows.len()])
            .0;
        previous.insert(class, mean.clone());
        out.insert(class, Cluster { members, mean });
    }
    Ok(out)
}

/// A class's previous aggregate, where `how` averages it in and it is of the cluster's length.
fn previous_of(
    previous: &BTreeMap<u32, Vec<f64>>,
    class: u32,
    how: ClusterMean,
    len: usize,
) -> Option<&Vec<f64>> {
    previous
        .get(&class)
        .filter(|p| how == ClusterMean::WithPrevious && p.len() == len)
}

/// Algorithm 2's means from each cluster's members and the sum of their vectors (all a secure
/// round gives the server): with `WithPrevious`, the cluster's previous aggregate is one more
/// row. `previous` is updated.
pub fn from_sums(
    sums: BTreeMap<u32, (Vec<ClientId>, Vec<f64>)>,
    previous: &mut BTreeMap<u32, Vec<f64>>,
    how: ClusterMean,
) -> BTreeMap<u32, Cluster> {
    let mut out = BTreeMap::new();
    for (class, (members, mut sum)) in sums {
        let mut rows = members.len() as f64;
        if let Some(prev) = previous_of(previous, class, how, sum.len()) {
            sum.iter_mut().zip(prev).for_each(|(s, p)| *s += p);
            rows += 1.0;
        }
        let mean: Vec<f64> = sum.iter().map(|s| s / rows).collect();
        previous.insert(class, mean.clone());
        out.insert(class, Cluster { members, mean });
    }
    out
}

pub fn to_weights(mean: &[f64], rounding: Rounding) -> Vec<i32> {
    mean.iter()
        .map(|&m| match rounding {
            Rounding::Nearest => m.round() as i32,
            Rounding::Truncate => m.trunc() as i32,
        })
        .collect()
}
