//! TPFL under central `[dp]`: each cluster's mean is of its members' changes from the class's
//! previous aggregate (zero before its first), each clipped, noised at the cluster's own
//! weight; every member spends one round. The clusters themselves (the confidence winners) are
//! public: the guarantee is for the weights, given them.

use std::collections::BTreeMap;

use super::clustering::Cluster;
use super::section::ClusterMean;
use crate::strategy::privacy::{CentralGroup, PrivacySpent, PrivateMean};
use crate::{ClientId, Result, Round};

/// Algorithm 2's clusters with each mean clipped and noised (the robust rules are refused beside
/// central noise). With `WithPrevious` the previous aggregate is one more row, as in the clear:
/// each member then weighs 1 / (n + 1) and the mean is the base plus their changes.
pub fn private_clusters(
    round: Round,
    uploads: &BTreeMap<ClientId, (u32, Vec<i32>)>,
    previous: &mut BTreeMap<u32, Vec<f64>>,
    how: ClusterMean,
    privacy: &mut PrivateMean,
) -> Result<(BTreeMap<u32, Cluster>, PrivacySpent)> {
    let mut members: BTreeMap<u32, Vec<ClientId>> = BTreeMap::new();
    for (&id, (class, _)) in uploads {
        members.entry(*class).or_default().push(id);
    }
    let rows: BTreeMap<ClientId, Vec<f64>> = uploads
        .iter()
        .map(|(&id, (_, w))| (id, w.iter().map(|&v| f64::from(v)).collect()))
        .collect();
    let groups: Vec<CentralGroup<'_>> = members
        .iter()
        .map(|(&class, ids)| {
            let len = rows[&ids[0]].len();
            let prev = previous.get(&class).filter(|p| p.len() == len);
            let extra = usize::from(how == ClusterMean::WithPrevious && prev.is_some());
            CentralGroup {
                id: class,
                clients: ids.clone(),
                vectors: ids.iter().map(|id| rows[id].as_slice()).collect(),
                weights: vec![1.0 / (ids.len() + extra) as f64; ids.len()],
                base: prev.cloned().unwrap_or_else(|| vec![0.0; len]),
            }
        })
        .collect();
    let (means, spent) = privacy.central_groups(round, &groups)?;
    let mut out = BTreeMap::new();
    for ((class, ids), mean) in members.into_iter().zip(means) {
        previous.insert(class, mean.clone());
        out.insert(class, Cluster { members: ids, mean });
    }
    Ok((out, spent))
}
