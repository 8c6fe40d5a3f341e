use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{Needs, OneShotHyper, OneShotRule, dense, fisher, ot_fusion, regmean};
use crate::model::cnn::statistics::{dense_layers, gram_len, unpack_grams};
use crate::model::cnn::{ArchName, Architecture};
use crate::parallel;
use crate::rng::{FlintRng, derive_rng};
use crate::strategy::decoder::UpdateDecoder;
use crate::strategy::fedavg_cnn::{architecture, initial_download, n_k_over_n, weighted_mean};
use crate::strategy::report::Tagged;
use crate::strategy::{Aggregate, Downloads, RoundReport, ServerStrategy, unexpected};
use crate::wire::Update;
use crate::wire::network::{NetworkStatistics, decode_statistics, encode_params};
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, FlintError, Result, Round};

/// What the round's rule did, and how long it took on the server (FedTMOS Table 2's "server
/// latency": the combination alone, not the decoding of the uploads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneShotRound {
    pub rule: String,
    pub networks: u32,
    pub combine_ms: f64,
    /// OT-Fusion: the hidden neurons, over every client, its alignment moved from their own
    /// place (0: the clients' networks were aligned already, and the fusion is their mean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_neurons: Option<u32>,
    /// DENSE: the threads its passes ran on, without which its time cannot be compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

impl Tagged for OneShotRound {
    const TAG: &'static str = "oneshot";
}

/// Reads a network and exactly the statistics the run asks for.
pub struct StatisticsDecoder {
    pub arch: ArchName,
    pub classes: usize,
    pub needs: Needs,
}

impl UpdateDecoder for StatisticsDecoder {
    fn decode(&self, _client: ClientId, features: usize, update: &Payload) -> Result<Update> {
        let arch = architecture(self.arch, features, self.classes)?;
        let gram = if self.needs.gram { gram_len(&arch) } else { 0 };
        let fisher = if self.needs.fisher { arch.params } else { 0 };
        let diagonal = if self.needs.gram {
            gram_diagonal(&arch)
        } else {
            Vec::new()
        };
        decode_statistics(update, arch.params, gram, fisher, &diagonal).map(Update::Statistics)
    }
}

/// Where each Gram matrix's diagonal sits in the packed triangles.
fn gram_diagonal(arch: &Architecture) -> Vec<usize> {
    let mut at = 0;
    let mut out = Vec::new();
    for (_, d) in dense_layers(arch) {
        for r in 0..d {
            out.push(at);
            at += d - r;
        }
    }
    out
}

/// The server half: one aggregation under the run's rule.
pub struct OneShotServer {
    pub arch: ArchName,
    pub classes: usize,
    pub seed: u64,
    pub hyper: OneShotHyper,
}

impl ServerStrategy for OneShotServer {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        initial_download(self.arch, features, self.classes, self.seed)
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(StatisticsDecoder {
            arch: self.arch,
            classes: self.classes,
            needs: self.hyper.needs(),
        })
    }

    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        crate::strategy::require_updates(round, updates)?;
        let uploads = uploads(clients, updates)?;
        let features = clients.values().next().map_or(0, |s| s.features as usize);
        let arch = architecture(self.arch, features, self.classes)?;
        let start = Instant::now();
        let mut rng = derive_rng(self.seed, "dense", round);
        let threads = parallel::cores();
        let (combined, moved_neurons) = combine(&arch, &self.hyper, &uploads, threads, &mut rng);
        let combine_ms = start.elapsed().as_secs_f64() * 1e3;
        let weights = n_k_over_n(&uploads.iter().map(|u| u.1).collect::<Vec<_>>());
        Ok(Aggregate {
            downloads: Downloads::Broadcast(encode_params(&combined)),
            weights: updates.keys().copied().zip(weights).collect(),
            report: RoundReport::of(&OneShotRound {
                rule: self.hyper.rule.name().into(),
                networks: uploads.len() as u32,
                combine_ms,
                moved_neurons,
                threads: (self.hyper.rule == OneShotRule::Dense).then_some(threads as u32),
            }),
            local: BTreeMap::new(),
            privacy: None,
        })
    }
}

/// Each upload with its client's training rows n_k, in client-id order.
fn uploads<'a>(
    clients: &BTreeMap<ClientId, DataSummary>,
    updates: &'a BTreeMap<ClientId, Update>,
) -> Result<Vec<(&'a NetworkStatistics, f64)>> {
    updates
        .iter()
        .map(|(id, update)| {
            let Update::Statistics(s) = update else {
                return Err(unexpected("network_params with statistics", update));
            };
            let summary = clients.get(id).ok_or_else(|| {
                FlintError::InvalidUpdate(format!("update from client {id}, which never joined"))
            })?;
            Ok((s, summary.train_class_counts.iter().sum::<u64>() as f64))
        })
        .collect()
}

/// The download under `hyper.rule`: one network, or for the ensemble every client's one after
/// the other; for OT-Fusion, also the neurons its alignment moved. DENSE runs on `threads`.
pub fn combine(
    arch: &Architecture,
    hyper: &OneShotHyper,
    uploads: &[(&NetworkStatistics, f64)],
    threads: usize,
    rng: &mut FlintRng,
) -> (Vec<f32>, Option<u32>) {
    let nets: Vec<&[f32]> = uploads.iter().map(|u| u.0.params.as_slice()).collect();
    let p = n_k_over_n(&uploads.iter().map(|u| u.1).collect::<Vec<_>>());
    let combined = match hyper.rule {
        OneShotRule::Fedavg => weighted_mean(&nets, &p),
        OneShotRule::Ensemble => nets.concat(),
        OneShotRule::Regmean => {
            let grams: Vec<_> = uploads
                .iter()
                .map(|u| unpack_grams(arch, &u.0.gram))
                .collect();
            regmean::merge(arch, &nets, &grams, &p, hyper.regmean_alpha)
        }
        OneShotRule::Fedfisher => {
            let fishers: Vec<&[f32]> = uploads.iter().map(|u| u.0.fisher.as_slice()).collect();
            fisher::merge(&nets, &fishers, &p)
        }
        OneShotRule::Dense => {
            dense::distill(threads, arch, &nets, weighted_mean(&nets, &p), hyper, rng)
        }
        OneShotRule::OtFusion => {
            let (fused, moved) = ot_fusion::fuse(arch, &nets, &p);
            return (fused, Some(moved));
        }
    };
    (combined, None)
}
