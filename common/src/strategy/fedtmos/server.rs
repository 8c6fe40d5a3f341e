//! FedTMOS's server half: steps 1–6 on the one round's uploads.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::super::{Aggregate, Downloads, RoundReport, ServerStrategy};
use super::averaging::server_steps;
use super::ensemble::client_machines;
use super::machines::tm_uploads;
use super::section::FedTmosHyper;
use crate::model::tm::TmHyper;
use crate::rng::derive_rng;
use crate::strategy::decoder::{TmDecoder, UpdateDecoder};
use crate::strategy::robust::RobustHyper;
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, CompositeDownload, TmShape, Update};
use crate::{ClientId, Result, Round};
use prost::Message;

/// FedTMOS's record of its round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FedTmosRound {
    /// x: the factor the weights were scaled by (1: none).
    pub scale: f64,
    /// (client, class) vectors that entered k-means, and the clusters they formed.
    pub vectors: usize,
    pub clusters: usize,
    /// Per server model, per class, the clients whose weights it averages.
    pub models: Vec<BTreeMap<u32, Vec<ClientId>>>,
    /// Payload bytes of the download: the φ server models, and the clients' own machines it also
    /// carries with `fedtmos.baselines` (0 without).
    #[serde(default)]
    pub composite_bytes: u64,
    #[serde(default)]
    pub ensemble_bytes: u64,
}

impl crate::strategy::report::Tagged for FedTmosRound {
    const TAG: &'static str = "fedtmos";
}

/// The server: steps 1–6 on the one round's uploads; it broadcasts the φ server models.
pub struct FedTmosServer {
    hyper: FedTmosHyper,
    shape: TmShape,
    seed: u64,
    robust: RobustHyper,
}

impl FedTmosServer {
    pub fn new(hyper: FedTmosHyper, tm: &TmHyper, classes: usize, seed: u64) -> FedTmosServer {
        FedTmosServer {
            shape: hyper.shape(tm, classes),
            hyper,
            seed,
            robust: RobustHyper::default(),
        }
    }

    /// Each server model's classes combined by `robust` instead of Algorithm 3's mean.
    pub fn with_robust(mut self, robust: RobustHyper) -> Self {
        self.robust = robust;
        self
    }
}

impl ServerStrategy for FedTmosServer {
    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(TmDecoder { shape: self.shape })
    }

    fn aggregate(
        &mut self,
        round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let uploads = tm_uploads(updates)?;
        let mut rng = derive_rng(self.seed, "fedtmos-kmeans", round);
        let steps = server_steps(&uploads, &self.hyper.server, &self.robust, &mut rng)?;
        let mut download = CompositeDownload {
            models: steps.models,
            ensemble: Vec::new(),
        };
        if self.hyper.baselines {
            download.ensemble = client_machines(&uploads);
        }
        // Encoded once (the machines' codes are not cheap): the composite's share is measured
        // on the same message without the ensemble.
        let payload = wire::encode_tm_composite(&download, self.shape);
        let composite_bytes = composite_only_len(&payload);
        let ensemble_bytes = payload.encoded_len() - composite_bytes;
        let n = updates.len() as f64;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(payload),
            weights: updates.keys().map(|&id| (id, 1.0 / n)).collect(),
            report: RoundReport::of(&FedTmosRound {
                scale: steps.scale,
                vectors: steps.vectors,
                clusters: steps.clusters,
                models: steps.plans.into_iter().map(|p| p.contributors).collect(),
                composite_bytes: composite_bytes as u64,
                ensemble_bytes: ensemble_bytes as u64,
            }),
            local: BTreeMap::new(),
            privacy: None,
        })
    }
}

/// The encoded length of `payload`'s composite without its ensemble.
fn composite_only_len(payload: &Payload) -> usize {
    use crate::wire::proto::TmComposite;
    use crate::wire::proto::payload::Kind;
    let Some(Kind::TmComposite(c)) = &payload.kind else {
        return payload.encoded_len();
    };
    let models = TmComposite {
        models: c.models.clone(),
        ..TmComposite::default()
    };
    Payload {
        kind: Some(Kind::TmComposite(models)),
    }
    .encoded_len()
}
