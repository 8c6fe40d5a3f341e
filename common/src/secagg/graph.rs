//! Who shares keys and masks with whom: every member with every other (Bonawitz et al. 2017),
//! or SecAgg+'s sparse graph (Bell et al. 2020, "Secure single-server aggregation with
//! (poly)logarithmic overhead", §3): a Harary graph of even degree k over a random order of the
//! members, each member sharing and masking with its k neighbours only, so that a client's
//! bytes and work grow with k, not with the group.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use sha2::{Digest, Sha256};

use super::Advert;
use crate::{ClientId, Round};

/// The graph of a group's round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Graph {
    /// Every member is every other's neighbour.
    Complete,
    /// Each member's neighbours (symmetric, never itself).
    Sparse(BTreeMap<ClientId, BTreeSet<ClientId>>),
}

impl Graph {
    /// The graph of `members` at `degree` neighbours each (`None`: complete); complete where the
    /// degree reaches every other member. The order comes from the round and every member's
    /// public keys, so that it is the same wherever it is drawn and no one member chooses it.
    pub fn draw(
        members: &BTreeMap<ClientId, Advert>,
        degree: Option<usize>,
        round: Round,
    ) -> Graph {
        let n = members.len();
        let Some(k) = degree.filter(|&k| k + 1 < n) else {
            return Graph::Complete;
        };
        let mut order: Vec<ClientId> = members.keys().copied().collect();
        order.shuffle(&mut StdRng::from_seed(order_seed(members, round)));
        let mut neighbours: BTreeMap<ClientId, BTreeSet<ClientId>> = BTreeMap::new();
        for (i, &u) in order.iter().enumerate() {
            for step in 1..=k / 2 {
                let v = order[(i + step) % n];
                neighbours.entry(u).or_default().insert(v);
                neighbours.entry(v).or_default().insert(u);
            }
        }
        Graph::Sparse(neighbours)
    }

    /// `client` and its neighbours among `members`: whom it shares its keys with (of the
    /// sparse graph's k neighbours, found without reading the other members).
    pub fn neighbourhood(
        &self,
        client: ClientId,
        members: &BTreeMap<ClientId, Advert>,
    ) -> BTreeSet<ClientId> {
        match self {
            Graph::Complete => members.keys().copied().collect(),
            Graph::Sparse(n) => {
                let own = n.get(&client).into_iter().flatten().copied();
                let hood = own.chain([client]);
                hood.filter(|m| members.contains_key(m)).collect()
            }
        }
    }

    /// Whether `nodes` are one piece once every other member is taken away: else the masks
    /// between the pieces are never added, and unmasking would show each piece's sum.
    pub fn connects(&self, nodes: &BTreeSet<ClientId>) -> bool {
        let Graph::Sparse(neighbours) = self else {
            return true;
        };
        let Some(&first) = nodes.first() else {
            return true;
        };
        let mut seen = BTreeSet::from([first]);
        let mut queue = VecDeque::from([first]);
        while let Some(u) = queue.pop_front() {
            for &v in neighbours.get(&u).into_iter().flatten() {
                if nodes.contains(&v) && seen.insert(v) {
                    queue.push_back(v);
                }
            }
        }
        seen.len() == nodes.len()
    }
}

/// SHA-256 of the round and every member's id and keys, in id order.
fn order_seed(members: &BTreeMap<ClientId, Advert>, round: Round) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"flint secagg graph");
    h.update(round.to_le_bytes());
    for (id, a) in members {
        h.update(id.to_le_bytes());
        h.update(a.envelope_key);
        h.update(a.mask_key);
    }
    h.finalize().into()
}

/// The neighbours a member of a group of `n` gets by default: every other member up to
/// [`super::MAX_GROUP`] (Bonawitz et al.'s complete graph), else the least even number at or
/// above 4 log₂ n (40 at 1,000 members, 54 at 10,000): a neighbourhood whose threshold, more
/// than half of it, survives a tenth of the members dropping with a wide margin.
pub fn default_degree(n: usize) -> Option<usize> {
    if n <= super::MAX_GROUP {
        return None;
    }
    let k = (4.0 * (n as f64).log2()).ceil() as usize;
    Some(k + k % 2)
}
