use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::cnn::{ArchName, Architecture, Cnn};
use crate::rng::derive_rng;
use crate::strategy::decoder::UpdateDecoder;
use crate::strategy::privacy::{self, DpHyper, NoiseKey, PrivacySpent, PrivateMean};
use crate::strategy::report::StrategyState;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{Aggregate, Downloads, RoundReport, ServerStrategy, unexpected};
use crate::wire::Update;
use crate::wire::network::{decode_params, encode_params};
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round};

/// The run's network for `features` pixels (a square image of one channel) and `classes`.
pub fn architecture(name: ArchName, features: usize, classes: usize) -> Result<Architecture> {
    let side = (features as f64).sqrt().round() as usize;
    if side * side != features {
        return Err(FlintError::Config(format!(
            "a convolutional network reads square images; {features} pixels are not one"
        )));
    }
    Architecture::new(name, 1, side, classes)
}

/// Every client's and the server's first network: one draw from the run's seed.
pub fn initial_network(name: ArchName, features: usize, classes: usize, seed: u64) -> Result<Cnn> {
    let arch = architecture(name, features, classes)?;
    Ok(Cnn::init(arch, &mut derive_rng(seed, "cnn-init", 0)))
}

/// Reads a network's parameters, as many as the run's architecture has.
pub struct NetworkDecoder {
    pub arch: ArchName,
    pub classes: usize,
}

impl NetworkDecoder {
    pub fn of(arch: ArchName, classes: usize) -> Arc<dyn UpdateDecoder> {
        Arc::new(NetworkDecoder { arch, classes })
    }
}

impl UpdateDecoder for NetworkDecoder {
    fn decode(&self, _client: ClientId, features: usize, update: &Payload) -> Result<Update> {
        let expected = architecture(self.arch, features, self.classes)?.params;
        decode_params(update, expected).map(Update::Network)
    }
}

/// The weighted mean of the clients' networks, weights n_k / n over the clients that answered
/// (or as `[robust]` says), clipped and noised under central `[dp]`.
pub struct NetworkMean {
    pub arch: ArchName,
    pub classes: usize,
    pub seed: u64,
    pub robust: RobustHyper,
    /// The name its rounds are reported under.
    pub tag: &'static str,
    /// `[dp]`: the mean clipped and noised, or only counted (local noise).
    pub privacy: Option<PrivateMean>,
}

impl NetworkMean {
    /// The papers' plain mean, reported under `tag`.
    pub fn new(arch: ArchName, classes: usize, seed: u64, tag: &'static str) -> NetworkMean {
        NetworkMean {
            arch,
            classes,
            seed,
            robust: RobustHyper::default(),
            tag,
            privacy: None,
        }
    }

    /// Combining by `robust` instead of the weighted mean.
    pub fn with_robust(self, robust: RobustHyper) -> NetworkMean {
        NetworkMean { robust, ..self }
    }

    /// Averaging under `dp` (nothing changes where it is off); the run's seed draws the noise.
    pub fn with_privacy(self, dp: DpHyper) -> NetworkMean {
        let privacy = (!dp.is_off()).then(|| PrivateMean::new(dp, self.seed));
        NetworkMean { privacy, ..self }
    }

    /// The mean as `[robust]` or central `[dp]` combine it; under local `[dp]` the round is
    /// counted. `features` sizes round 1's base, the run's initial network.
    fn combine(
        &mut self,
        round: Round,
        ids: &[ClientId],
        vectors: &[&[f32]],
        weights: &[f64],
        features: usize,
    ) -> Result<(Vec<f32>, Vec<f64>, Option<PrivacySpent>)> {
        let Some(p) = self.privacy.as_mut().filter(|p| p.adds_noise()) else {
            let spent = self.privacy.as_mut().map(|p| p.count(ids)).transpose()?;
            let (global, weights) = combine_networks(&self.robust, vectors, weights);
            return Ok((global, weights, spent));
        };
        // Round 1's base: the run's initial network, drawn only where no base is kept.
        let initial = match p.state().global.is_empty() {
            true => widen(&initial_network(self.arch, features, self.classes, self.seed)?.params),
            false => Vec::new(),
        };
        let wide: Vec<Vec<f64>> = vectors.iter().map(|v| widen(v)).collect();
        let views: Vec<&[f64]> = wide.iter().map(Vec::as_slice).collect();
        let (mean, spent) = p.central(round, ids, &views, weights, || initial)?;
        let global: Vec<f32> = mean.iter().map(|&x| x as f32).collect();
        // The next round's changes are measured from the network the clients are sent.
        p.rebase(&widen(&global));
        Ok((global, weights.to_vec(), Some(spent)))
    }
}

/// A network's float32 parameters as the float64 the mechanisms work in.
pub fn widen(params: &[f32]) -> Vec<f64> {
    params.iter().map(|&x| f64::from(x)).collect()
}

/// Each update's parameters in client-id order, with its client's training rows n_k.
pub fn weighted_networks<'a>(
    clients: &BTreeMap<ClientId, DataSummary>,
    updates: &'a BTreeMap<ClientId, Update>,
) -> Result<(Vec<&'a [f32]>, Vec<f64>)> {
    let mut vectors = Vec::with_capacity(updates.len());
    let mut samples = Vec::with_capacity(updates.len());
    for (id, update) in updates {
        let Update::Network(params) = update else {
            return Err(unexpected("network_params", update));
        };
        let summary = clients.get(id).ok_or_else(|| {
            FlintError::InvalidUpdate(format!("update from client {id}, which never joined"))
        })?;
        vectors.push(params.as_slice());
        samples.push(summary.train_class_counts.iter().sum::<u64>() as f64);
    }
    Ok((vectors, samples))
}

/// n_k / n; equal weights where no client holds a sample.
pub fn n_k_over_n(samples: &[f64]) -> Vec<f64> {
    let total: f64 = samples.iter().sum();
    match total > 0.0 {
        true => samples.iter().map(|n| n / total).collect(),
        false => vec![1.0 / samples.len().max(1) as f64; samples.len()],
    }
}

/// Combines float32 networks as `robust` says, in f64 (the robust rules work in f64).
pub fn combine_networks(
    robust: &RobustHyper,
    vectors: &[&[f32]],
    weights: &[f64],
) -> (Vec<f32>, Vec<f64>) {
    let wide: Vec<Vec<f64>> = vectors
        .iter()
        .map(|v| v.iter().map(|&x| f64::from(x)).collect())
        .collect();
    let views: Vec<&[f64]> = wide.iter().map(Vec::as_slice).collect();
    let (combined, weights) = robust.combine(&views, weights);
    (combined.into_iter().map(|x| x as f32).collect(), weights)
}

/// The p-weighted mean of the networks: [`combine_networks`] under the papers' plain mean.
pub fn weighted_mean(nets: &[&[f32]], p: &[f64]) -> Vec<f32> {
    combine_networks(&RobustHyper::default(), nets, p).0
}

/// Round 1's download of a one-network strategy: the run's initial network.
pub fn initial_download(
    arch: ArchName,
    features: usize,
    classes: usize,
    seed: u64,
) -> Option<Payload> {
    let cnn = initial_network(arch, features, classes, seed).ok()?;
    Some(encode_params(&cnn.params))
}

impl ServerStrategy for NetworkMean {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        initial_download(self.arch, features, self.classes, self.seed)
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        NetworkDecoder::of(self.arch, self.classes)
    }

    fn secure_len(&self, features: usize) -> Option<usize> {
        architecture(self.arch, features, self.classes)
            .ok()
            .map(|a| a.params)
    }

    fn secure_weights(
        &self,
        clients: &BTreeMap<ClientId, DataSummary>,
        roster: &[ClientId],
    ) -> Result<BTreeMap<ClientId, f64>> {
        sample_shares(clients, roster)
    }

    fn aggregate_sum(
        &mut self,
        round: Round,
        weights: &BTreeMap<ClientId, f64>,
        sum: &[f64],
    ) -> Result<Aggregate> {
        let (mean, shares) = crate::strategy::survivors_mean(round, weights, sum)?;
        let global: Vec<f32> = mean.iter().map(|&v| v as f32).collect();
        let ids: Vec<ClientId> = weights.keys().copied().collect();
        let privacy = self.privacy.as_mut().map(|p| p.count(&ids)).transpose()?;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(encode_params(&global)),
            weights: shares,
            report: RoundReport::plain(self.tag),
            local: BTreeMap::new(),
            privacy,
        })
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
        // Every summary's features are the run's: the server checked them at Join.
        let features = clients.get(&ids[0]).map_or(0, |s| s.features as usize);
        let weights = n_k_over_n(&samples);
        let (global, weights, privacy) = self.combine(round, &ids, &vectors, &weights, features)?;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(encode_params(&global)),
            weights: ids.into_iter().zip(weights).collect(),
            report: RoundReport::plain(self.tag),
            local: BTreeMap::new(),
            privacy,
        })
    }

    fn set_noise_key(&mut self, key: NoiseKey) -> bool {
        privacy::key_noise(&mut self.privacy, key)
    }

    fn snapshot(&self) -> StrategyState {
        privacy::snapshot_of(&self.privacy)
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        privacy::restore_into(&mut self.privacy, state, self.tag)
    }
}

/// A client's network as secure aggregation sums it: its parameters, as the upload holds them.
/// Each member of `roster`'s share of its training rows, n_k / n: the public weights of a
/// secure sum of networks.
pub fn sample_shares(
    clients: &BTreeMap<ClientId, DataSummary>,
    roster: &[ClientId],
) -> Result<BTreeMap<ClientId, f64>> {
    let samples = roster
        .iter()
        .map(|id| {
            let s = clients
                .get(id)
                .ok_or_else(|| FlintError::InvalidUpdate(format!("client {id} never joined")))?;
            Ok(s.train_class_counts.iter().sum::<u64>() as f64)
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(roster.iter().copied().zip(n_k_over_n(&samples)).collect())
}

pub fn secure_input(update: &Payload) -> Result<Vec<f64>> {
    let Some(crate::wire::proto::payload::Kind::NetworkParams(n)) = &update.kind else {
        return Err(FlintError::InvalidUpdate(
            "secure aggregation of a network sums its parameters".into(),
        ));
    };
    Ok(n.params.iter().map(|&v| f64::from(v)).collect())
}
