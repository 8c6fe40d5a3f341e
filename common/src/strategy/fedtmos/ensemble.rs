//! The ensemble baseline's server half: every client's own machine back to every client.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::super::{Aggregate, Downloads, RoundReport, ServerStrategy};
use super::machines::tm_uploads;
use super::section::FedTmosHyper;
use crate::model::tm::TmHyper;
use crate::model::tm::parts::{TmParts, TmUpload};
use crate::strategy::decoder::{TmDecoder, UpdateDecoder};
use crate::wire::proto::DataSummary;
use crate::wire::{self, CompositeDownload, TmShape, Update};
use crate::{ClientId, Result, Round};

/// The ensemble baseline's record of its round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnsembleRound {
    /// The clients whose machines the download carries.
    pub clients: Vec<ClientId>,
}

impl crate::strategy::report::Tagged for EnsembleRound {
    const TAG: &'static str = "ensemble";
}

/// Every client's own machine as it uploaded it (unscaled), in client-id order, without its
/// counts: the ensemble baseline (docs/papers/fedtmos.md §14).
pub(super) fn client_machines(uploads: &BTreeMap<ClientId, &TmUpload>) -> Vec<(ClientId, TmParts)> {
    uploads
        .iter()
        .map(|(&id, u)| {
            let mut parts = u.parts.clone();
            parts.classes.values_mut().for_each(|c| c.samples = 0);
            (id, parts)
        })
        .collect()
}

/// The ensemble baseline (docs/papers/fedtmos.md §14): no scaling, no clustering; every client's own
/// machine goes back to every client, which predicts with all of them as one composite.
pub struct EnsembleServer {
    shape: TmShape,
}

impl EnsembleServer {
    pub fn new(hyper: FedTmosHyper, tm: &TmHyper, classes: usize) -> EnsembleServer {
        EnsembleServer {
            shape: hyper.shape(tm, classes),
        }
    }
}

impl ServerStrategy for EnsembleServer {
    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(TmDecoder { shape: self.shape })
    }

    fn aggregate(
        &mut self,
        _round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let machines = client_machines(&tm_uploads(updates)?);
        let clients = machines.iter().map(|&(id, _)| id).collect();
        let download = CompositeDownload {
            models: machines.into_iter().map(|(_, m)| m).collect(),
            ensemble: Vec::new(),
        };
        let n = updates.len() as f64;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_tm_composite(&download, self.shape)),
            weights: updates.keys().map(|&id| (id, 1.0 / n)).collect(),
            report: RoundReport::of(&EnsembleRound { clients }),
            local: BTreeMap::new(),
            privacy: None,
        })
    }
}
