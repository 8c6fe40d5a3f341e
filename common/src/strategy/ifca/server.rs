use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::cnn::{ArchName, Cnn};
use crate::rng::derive_rng;
use crate::strategy::decoder::UpdateDecoder;
use crate::strategy::fedavg_cnn::{
    architecture, combine_networks, n_k_over_n, sample_shares, widen,
};
use crate::strategy::privacy::{
    self, CentralGroup, DpHyper, NoiseKey, PrivacySpent, PrivacyState, PrivateMean,
};
use crate::strategy::report::Tagged;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{
    Aggregate, Downloads, GroupSum, RoundReport, ServerStrategy, StrategyState, survivors_mean,
    unexpected,
};
use crate::wire::Update;
use crate::wire::network::{decode_cluster_params, encode_params};
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round};

/// Which clients chose which cluster in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IfcaRound {
    pub clusters: BTreeMap<u32, Vec<ClientId>>,
}

impl Tagged for IfcaRound {
    const TAG: &'static str = "ifca";
}

/// The k networks, kept between rounds, and under `[dp]` the rounds each client has spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IfcaState {
    pub models: Vec<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy: Option<PrivacyState>,
}

impl Tagged for IfcaState {
    const TAG: &'static str = "ifca";
}

/// k networks, each the first time drawn from the run's seed and its index.
pub fn initial_models(
    arch: ArchName,
    k: usize,
    features: usize,
    classes: usize,
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    let arch = architecture(arch, features, classes)?;
    let draw =
        |j: usize| Cnn::init(arch.clone(), &mut derive_rng(seed, "ifca-init", j as u32)).params;
    Ok((0..k).map(draw).collect())
}

/// Reads an IFCA upload: a cluster of the run's and the run's network.
pub struct ClusterDecoder {
    pub arch: ArchName,
    pub classes: usize,
    pub clusters: usize,
}

impl UpdateDecoder for ClusterDecoder {
    fn decode(&self, _client: ClientId, features: usize, update: &Payload) -> Result<Update> {
        let expected = architecture(self.arch, features, self.classes)?.params;
        let (cluster, params) = decode_cluster_params(update, expected, self.clusters)?;
        Ok(Update::ClusterNetwork { cluster, params })
    }
}

pub struct IfcaServer {
    arch: ArchName,
    k: usize,
    classes: usize,
    seed: u64,
    robust: RobustHyper,
    /// The k networks of the last round; empty until the first download is made.
    models: Vec<Vec<f32>>,
    /// `[dp]`: each cluster's mean clipped and noised from its network, or only counted.
    privacy: Option<PrivateMean>,
}

impl IfcaServer {
    pub fn new(arch: ArchName, k: usize, classes: usize, seed: u64, robust: RobustHyper) -> Self {
        IfcaServer {
            arch,
            k,
            classes,
            seed,
            robust,
            models: Vec::new(),
            privacy: None,
        }
    }

    /// Averaging each cluster under `dp` (nothing changes where it is off).
    pub fn with_privacy(self, dp: DpHyper) -> Self {
        let privacy = (!dp.is_off()).then(|| PrivateMean::new(dp, self.seed));
        IfcaServer { privacy, ..self }
    }

    /// The round's models: the kept ones, or the initial ones for a run's first round.
    fn current(&self, features: usize) -> Result<Vec<Vec<f32>>> {
        match self.models.is_empty() {
            true => initial_models(self.arch, self.k, features, self.classes, self.seed),
            false => Ok(self.models.clone()),
        }
    }
}

/// One upload of a cluster: who sent it, its network and its training rows.
struct Member<'a> {
    client: ClientId,
    params: &'a [f32],
    samples: f64,
}

/// The round's uploads grouped by the cluster each chose, in client-id order.
fn by_cluster<'a>(
    clients: &BTreeMap<ClientId, DataSummary>,
    updates: &'a BTreeMap<ClientId, Update>,
) -> Result<BTreeMap<u32, Vec<Member<'a>>>> {
    let mut members: BTreeMap<u32, Vec<Member>> = BTreeMap::new();
    for (&client, update) in updates {
        let Update::ClusterNetwork { cluster, params } = update else {
            return Err(unexpected("network_params with a cluster", update));
        };
        let summary = clients.get(&client).ok_or_else(|| {
            FlintError::InvalidUpdate(format!("update from client {client}, which never joined"))
        })?;
        let samples = summary.train_class_counts.iter().sum::<u64>() as f64;
        members.entry(*cluster).or_default().push(Member {
            client,
            params,
            samples,
        });
    }
    Ok(members)
}

impl IfcaServer {
    /// The round's k networks kept and sent to every client, with who chose which.
    fn keep(
        &mut self,
        models: Vec<Vec<f32>>,
        weights: BTreeMap<ClientId, f64>,
        clusters: BTreeMap<u32, Vec<ClientId>>,
    ) -> Aggregate {
        let download = encode_models(&models);
        self.models = models;
        Aggregate {
            downloads: Downloads::Broadcast(download),
            weights,
            report: RoundReport::of(&IfcaRound { clusters }),
            local: BTreeMap::new(),
            privacy: None,
        }
    }
}

/// Each chosen cluster's network: its members' networks combined as `robust` says, n_k / n
/// within it; the members' weights.
fn combined_clusters(
    members: &BTreeMap<u32, Vec<Member<'_>>>,
    models: &mut [Vec<f32>],
    robust: &RobustHyper,
) -> BTreeMap<ClientId, f64> {
    let mut weights = BTreeMap::new();
    for (&cluster, list) in members {
        let vectors: Vec<&[f32]> = list.iter().map(|m| m.params).collect();
        let samples: Vec<f64> = list.iter().map(|m| m.samples).collect();
        let (mean, w) = combine_networks(robust, &vectors, &n_k_over_n(&samples));
        models[cluster as usize] = mean;
        weights.extend(list.iter().map(|m| m.client).zip(w));
    }
    weights
}

/// Central `[dp]` per cluster: each member's change from its cluster's network clipped, the
/// cluster's n_k / n mean noised from the cluster's own stream (the cluster's choice is public,
/// as TPFL's winner).
fn noised_clusters(
    round: Round,
    members: &BTreeMap<u32, Vec<Member<'_>>>,
    models: &mut [Vec<f32>],
    privacy: &mut PrivateMean,
) -> Result<(BTreeMap<ClientId, f64>, Option<PrivacySpent>)> {
    let wide: BTreeMap<u32, Vec<Vec<f64>>> = members
        .iter()
        .map(|(&c, list)| (c, list.iter().map(|m| widen(m.params)).collect()))
        .collect();
    let mut weights = BTreeMap::new();
    let groups: Vec<CentralGroup<'_>> = members
        .iter()
        .map(|(&cluster, list)| {
            let samples: Vec<f64> = list.iter().map(|m| m.samples).collect();
            let group_weights = n_k_over_n(&samples);
            weights.extend(list.iter().map(|m| m.client).zip(group_weights.clone()));
            CentralGroup {
                id: cluster,
                clients: list.iter().map(|m| m.client).collect(),
                vectors: wide[&cluster].iter().map(Vec::as_slice).collect(),
                weights: group_weights,
                base: widen(&models[cluster as usize]),
            }
        })
        .collect();
    let (means, spent) = privacy.central_groups(round, &groups)?;
    for (group, mean) in groups.iter().zip(means) {
        models[group.id as usize] = mean.iter().map(|&x| x as f32).collect();
    }
    Ok((weights, Some(spent)))
}

/// The k networks one after the other, as one download.
pub fn encode_models(models: &[Vec<f32>]) -> Payload {
    encode_params(&models.concat())
}

impl ServerStrategy for IfcaServer {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        Some(encode_models(&self.current(features).ok()?))
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(ClusterDecoder {
            arch: self.arch,
            classes: self.classes,
            clusters: self.k,
        })
    }

    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        crate::strategy::require_updates(round, updates)?;
        let members = by_cluster(clients, updates)?;
        let features = clients.values().next().map_or(0, |s| s.features as usize);
        let mut models = self.current(features)?;
        let (weights, spent) = match self.privacy.as_mut().filter(|p| p.adds_noise()) {
            Some(p) => noised_clusters(round, &members, &mut models, p)?,
            None => {
                let weights = combined_clusters(&members, &mut models, &self.robust);
                let ids: Vec<ClientId> = updates.keys().copied().collect();
                let spent = self.privacy.as_mut().map(|p| p.count(&ids)).transpose()?;
                (weights, spent)
            }
        };
        let clusters = members
            .iter()
            .map(|(&c, list)| (c, list.iter().map(|m| m.client).collect()))
            .collect();
        let mut aggregate = self.keep(models, weights, clusters);
        aggregate.privacy = spent;
        Ok(aggregate)
    }

    fn secure_len(&self, features: usize) -> Option<usize> {
        architecture(self.arch, features, self.classes)
            .ok()
            .map(|a| a.params)
    }

    /// A client's group is the cluster it chose (public: its network of lowest loss).
    fn secure_groups(&self) -> u32 {
        self.k as u32
    }

    fn secure_weights(
        &self,
        clients: &BTreeMap<ClientId, DataSummary>,
        roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        sample_shares(clients, roster)
    }

    /// Each cluster's network from its members' sum, n_k / n within it; a cluster nobody chose
    /// keeps its network.
    fn aggregate_groups(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        sums: &BTreeMap<u32, GroupSum>,
    ) -> Result<Aggregate> {
        let features = clients.values().next().map_or(0, |s| s.features as usize);
        let mut models = self.current(features)?;
        let (mut weights, mut clusters) = (BTreeMap::new(), BTreeMap::new());
        for (&cluster, g) in sums {
            let slot = models
                .get_mut(cluster as usize)
                .filter(|m| m.len() == g.sum.len());
            let Some(slot) = slot else {
                return Err(FlintError::InvalidUpdate(format!(
                    "a secure sum of {} values for cluster {cluster}; the run has k = {} networks",
                    g.sum.len(),
                    self.k
                )));
            };
            let (mean, shares) = survivors_mean(round, &g.weights, &g.sum)?;
            *slot = mean.iter().map(|&v| v as f32).collect();
            clusters.insert(cluster, shares.keys().copied().collect());
            weights.extend(shares);
        }
        // Local noise came with the masked networks: the round is only counted.
        let summed: Vec<ClientId> = weights.keys().copied().collect();
        let spent = self
            .privacy
            .as_mut()
            .map(|p| p.count(&summed))
            .transpose()?;
        let mut aggregate = self.keep(models, weights, clusters);
        aggregate.privacy = spent;
        Ok(aggregate)
    }

    fn set_noise_key(&mut self, key: NoiseKey) -> bool {
        privacy::key_noise(&mut self.privacy, key)
    }

    fn snapshot(&self) -> StrategyState {
        StrategyState::of(&IfcaState {
            models: self.models.clone(),
            privacy: self.privacy.as_ref().map(|p| p.state().clone()),
        })
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        let state: IfcaState = state.expect("ifca")?;
        if !state.models.is_empty() && state.models.len() != self.k {
            return Err(FlintError::Model(format!(
                "ifca's kept state holds {} models, the run has k = {}",
                state.models.len(),
                self.k
            )));
        }
        // A state kept without `[dp]` would count every client's ε from zero again.
        match (&mut self.privacy, state.privacy) {
            (Some(p), Some(spent)) => p.restore(spent),
            (None, None) => {}
            (Some(_), None) => {
                return Err(FlintError::Model(
                    "ifca's kept state has no [dp] record; this run has [dp]".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(FlintError::Model(
                    "ifca's kept state has a [dp] record; this run has no [dp]".into(),
                ));
            }
        }
        self.models = state.models;
        Ok(())
    }
}
