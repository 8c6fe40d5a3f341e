//! TPFL's core (TPFL §5, Algorithms 1 and 2; what its code does: REFERENCE-NOTES §1): a client's
//! confidence winner, the server's clustering by winning class and per-cluster averaging, and
//! how a client applies its cluster's average. The federation shell (wire, strategy wiring) is
//! built on these.

use std::collections::BTreeMap;

use crate::{ClientId, FlintError, Result};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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
/// nobody won this round have no cluster; their previous aggregate is kept.
pub fn cluster(
    uploads: &BTreeMap<ClientId, (u32, Vec<i32>)>,
    previous: &mut BTreeMap<u32, Vec<f64>>,
    how: ClusterMean,
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
        let mut rows = members.len() as f64;
        if how == ClusterMean::WithPrevious
            && let Some(prev) = previous.get(&class)
            && prev.len() == sum.len()
        {
            sum.iter_mut().zip(prev).for_each(|(s, p)| *s += p);
            rows += 1.0;
        }
        let mean: Vec<f64> = sum.iter().map(|s| s / rows).collect();
        previous.insert(class, mean.clone());
        out.insert(class, Cluster { members, mean });
    }
    Ok(out)
}

/// How a client turns its cluster's (real-valued) average back into integer clause weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = cluster(&u, &mut previous, ClusterMean::Members).unwrap();
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![0, 4]);
        assert_eq!(c[&0].members, vec![1, 3]);
        assert_eq!(c[&0].mean, vec![3.0, -2.0, 1.5]);
        assert_eq!(c[&4].members, vec![2]);
        assert_eq!(c[&4].mean, vec![5.0, 5.0, -5.0]);
        assert_eq!(previous.len(), 2);
    }

    #[test]
    fn a_client_whose_winner_changes_moves_cluster_and_the_code_variant_remembers() {
        let mut previous = BTreeMap::new();
        let r1 = uploads(&[(1, 0, vec![2, 2]), (2, 1, vec![6, 0])]);
        cluster(&r1, &mut previous, ClusterMean::WithPrevious).unwrap();
        // Round 2: client 1 now wins class 1 and joins client 2's cluster; class 0 is empty.
        let r2 = uploads(&[(1, 1, vec![0, 3]), (2, 1, vec![3, 3])]);
        let c = cluster(&r2, &mut previous, ClusterMean::WithPrevious).unwrap();
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(c[&1].members, vec![1, 2]);
        // (0 + 3 + previous 6) / 3, (3 + 3 + previous 0) / 3.
        assert_eq!(c[&1].mean, vec![3.0, 2.0]);
        // The empty cluster keeps its aggregate for a later round.
        assert_eq!(previous[&0], vec![2.0, 2.0]);
        let mut fresh = BTreeMap::new();
        let paper = cluster(&r2, &mut fresh, ClusterMean::Members).unwrap();
        assert_eq!(paper[&1].mean, vec![1.5, 3.0]);
    }

    #[test]
    fn vectors_of_different_lengths_in_one_cluster_are_refused() {
        let u = uploads(&[(1, 0, vec![1, 2]), (2, 0, vec![1])]);
        let e = cluster(&u, &mut BTreeMap::new(), ClusterMean::Members)
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
}
