use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Clusters, FlisHyper, FlisVariant, inference_similarity, neighbourhoods};
use crate::data::pixels::PixelRows;
use crate::model::cnn::Cnn;
use crate::strategy::decoder::UpdateDecoder;
use crate::strategy::fedavg_cnn::{
    NetworkDecoder, architecture, combine_networks, initial_download, n_k_over_n, weighted_networks,
};
use crate::strategy::report::Tagged;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{Aggregate, Downloads, RoundReport, ServerStrategy, StrategyState};
use crate::wire::Update;
use crate::wire::network::encode_params;
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round, model::cnn::ArchName};

/// A round's clusters: each participant's cluster size (its members that uploaded), and how
/// many distinct clusters the participants had.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlisRound {
    pub sizes: BTreeMap<ClientId, u32>,
    pub distinct: u32,
    /// The clients whose clusters were formed this round: every participant for dc and in hc's
    /// first round; after it, hc's clients that had none yet.
    pub placed: Vec<ClientId>,
}

impl Tagged for FlisRound {
    const TAG: &'static str = "flis";
}

/// FLIS-HC's clusters, formed once and kept.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FlisState {
    pub clusters: Clusters,
}

impl Tagged for FlisState {
    const TAG: &'static str = "flis";
}

pub struct FlisServer {
    pub arch: ArchName,
    pub classes: usize,
    pub seed: u64,
    pub robust: RobustHyper,
    pub hyper: FlisHyper,
    /// The server's images, from the data's test split.
    pub held: PixelRows,
    /// FLIS-HC's clusters once formed; empty before (and always for dc).
    pub kept: Clusters,
}

impl FlisServer {
    /// Each network's predicted class for every held image, in client-id order.
    fn predictions(&self, features: usize, networks: &[&[f32]]) -> Result<Vec<Vec<u32>>> {
        if self.held.is_empty() {
            return Err(FlintError::Config(
                "flis's server holds no images to compare the networks on".into(),
            ));
        }
        if features != self.held.per {
            return Err(FlintError::Config(format!(
                "flis's server images have {} pixels, the clients' {features}",
                self.held.per
            )));
        }
        let arch = architecture(self.arch, features, self.classes)?;
        let samples = crate::strategy::fedavg_cnn::samples(&self.held);
        let predict = |params: &&[f32]| {
            let cnn = Cnn {
                arch: arch.clone(),
                params: params.to_vec(),
            };
            cnn.predict(&samples)
        };
        Ok(networks.iter().map(predict).collect())
    }

    /// The round's clusters, and whose were formed this round: every client's for dc and for
    /// hc's first round; after it, hc's kept clusters, with one formed for each uploader it
    /// has none for (a client that missed the first round), from this round's networks.
    fn clusters(
        &self,
        ids: &[ClientId],
        features: usize,
        networks: &[&[f32]],
    ) -> Result<(Clusters, Vec<ClientId>)> {
        let keeps = self.hyper.variant == FlisVariant::Hc && !self.kept.is_empty();
        let placed: Vec<ClientId> = match keeps {
            true => ids
                .iter()
                .copied()
                .filter(|c| !self.kept.iter().any(|(k, _)| k == c))
                .collect(),
            false => ids.to_vec(),
        };
        if placed.is_empty() {
            return Ok((self.kept.clone(), placed));
        }
        let sim = inference_similarity(&self.predictions(features, networks)?);
        let formed = neighbourhoods(ids, &sim, self.hyper.threshold());
        if !keeps {
            return Ok((formed, placed));
        }
        let mut clusters = self.kept.clone();
        clusters.extend(formed.into_iter().filter(|(c, _)| placed.contains(c)));
        clusters.sort_by_key(|(c, _)| *c);
        Ok((clusters, placed))
    }
}

/// Each answering client's download: the mean of its cluster's networks that answered this
/// round (weights n_k / n within the cluster, or as `[robust]` says), with its own weight there.
fn cluster_means(
    robust: &RobustHyper,
    clusters: &[(ClientId, Vec<ClientId>)],
    networks: &BTreeMap<ClientId, (&[f32], f64)>,
) -> (BTreeMap<ClientId, Payload>, BTreeMap<ClientId, f64>) {
    let (mut downloads, mut weights) = (BTreeMap::new(), BTreeMap::new());
    for (client, members) in clusters {
        let present: Vec<&(&[f32], f64)> = members.iter().filter_map(|m| networks.get(m)).collect();
        let Some(own) = members.iter().position(|m| m == client) else {
            continue;
        };
        if !networks.contains_key(client) {
            continue;
        }
        let vectors: Vec<&[f32]> = present.iter().map(|(v, _)| *v).collect();
        let samples: Vec<f64> = present.iter().map(|(_, n)| *n).collect();
        let (mean, w) = combine_networks(robust, &vectors, &n_k_over_n(&samples));
        let own = members[..own]
            .iter()
            .filter(|m| networks.contains_key(m))
            .count();
        weights.insert(*client, w[own]);
        downloads.insert(*client, encode_params(&mean));
    }
    (downloads, weights)
}

impl ServerStrategy for FlisServer {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        initial_download(self.arch, features, self.classes, self.seed)
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        NetworkDecoder::of(self.arch, self.classes)
    }

    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        crate::strategy::require_updates(round, updates)?;
        let (vectors, samples) = weighted_networks(clients, updates)?;
        let ids: Vec<ClientId> = updates.keys().copied().collect();
        let features = clients.values().next().map_or(0, |s| s.features as usize);
        let (clusters, placed) = self.clusters(&ids, features, &vectors)?;
        let networks = ids
            .iter()
            .copied()
            .zip(vectors.iter().copied().zip(samples))
            .collect();
        let (downloads, weights) = cluster_means(&self.robust, &clusters, &networks);
        let present: Vec<&(ClientId, Vec<ClientId>)> = clusters
            .iter()
            .filter(|(c, _)| networks.contains_key(c))
            .collect();
        let sizes = present
            .iter()
            .map(|(c, m)| {
                (
                    *c,
                    m.iter().filter(|x| networks.contains_key(x)).count() as u32,
                )
            })
            .collect();
        let distinct = {
            let mut sets: Vec<&Vec<ClientId>> = present.iter().map(|(_, m)| m).collect();
            sets.sort();
            sets.dedup();
            sets.len() as u32
        };
        if self.hyper.variant == FlisVariant::Hc {
            self.kept = clusters;
        }
        Ok(Aggregate {
            downloads: Downloads::PerClient(downloads),
            weights,
            report: RoundReport::of(&FlisRound {
                sizes,
                distinct,
                placed,
            }),
            local: BTreeMap::new(),
            privacy: None,
        })
    }

    /// Nothing for dc, whose clusters are the round's; hc's clusters once formed.
    fn snapshot(&self) -> StrategyState {
        match self.hyper.variant {
            FlisVariant::Dc => StrategyState::stateless(),
            FlisVariant::Hc => StrategyState::of(&FlisState {
                clusters: self.kept.clone(),
            }),
        }
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        if self.hyper.variant == FlisVariant::Dc {
            return state.expect_stateless("flis-dc");
        }
        let state: FlisState = state.expect("flis")?;
        let sound = state.clusters.windows(2).all(|w| w[0].0 < w[1].0)
            && state.clusters.iter().all(|(c, m)| m.contains(c));
        if !sound {
            return Err(FlintError::Model(
                "flis-hc's kept clusters are not one per client, each holding its client".into(),
            ));
        }
        self.kept = state.clusters;
        Ok(())
    }
}
