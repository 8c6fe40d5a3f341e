//! The client half of FedTMOS and of the ensemble.

use super::super::{ClientStrategy, Predictor};
use super::local::LocalMachine;
use super::machines::sums_of;
use super::section::FedTmosHyper;
use crate::data::images::BitShard;
use crate::metrics::ConfusionMatrix;
use crate::model::tm::TmHyper;
use crate::model::tm::composite::{
    self, BatchSums, ClassSumProfile, CompositeOptions, Normalization,
};
use crate::model::tm::conv::ConvTm;
use crate::rng::FlintRng;
use crate::wire::proto::Payload;
use crate::wire::{self};
use crate::{ClientId, Result, Round};

/// A client of FedTMOS and of the ensemble: trains its convolutional multi-class machine once,
/// uploads the classes it holds with their counts and its Gini index, then predicts with the
/// composite it is sent (FedTMOS: the φ server models; the ensemble: every client's machine).
pub struct FedTmosClient {
    machine: LocalMachine,
    hyper: FedTmosHyper,
    /// The most machines a download's composite may hold (φ, or the run's clients).
    max_models: usize,
    /// The run's clients: the most client machines a download may carry.
    clients: usize,
    composite: Vec<ConvTm>,
    /// With `fedtmos.baselines`: every client's own machine, by client id.
    ensemble: Vec<(ClientId, ConvTm)>,
}

impl FedTmosClient {
    /// `max_models`: φ for FedTMOS, `clients` for the ensemble.
    pub fn new(
        tm: TmHyper,
        hyper: FedTmosHyper,
        classes: usize,
        seed: u64,
        client: ClientId,
        max_models: usize,
        clients: usize,
    ) -> Result<FedTmosClient> {
        Ok(FedTmosClient {
            machine: LocalMachine::new(tm, &hyper, classes, seed, client)?,
            hyper,
            max_models,
            clients,
            composite: Vec::new(),
            ensemble: Vec::new(),
        })
    }
}

impl ClientStrategy<BitShard> for FedTmosClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let d =
            wire::decode_tm_composite(download, self.machine.shape, self.max_models, self.clients)?;
        self.composite = d
            .models
            .iter()
            .map(|m| {
                let resolution = self.hyper.server.weight_resolution;
                self.machine.rebuild.server_model(m, resolution)
            })
            .collect::<Result<_>>()?;
        self.ensemble = d
            .ensemble
            .iter()
            .map(|(id, m)| self.machine.rebuild.machine(m).map(|tm| (*id, tm)))
            .collect::<Result<_>>()?;
        Ok(())
    }

    fn train(&mut self, shard: &BitShard, _round: Round, rng: &mut FlintRng) -> Result<Payload> {
        if let Some(leak) = &shard.prefit {
            self.machine.prefit(&self.hyper, leak, rng);
        }
        self.machine.train_and_upload(&self.hyper, shard, rng)
    }

    /// The composite the client predicts with, as received.
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        crate::model::kept::KeptModel::composite(&self.composite, self.hyper.composite)
    }

    fn evaluate(&self, shard: &BitShard) -> ConfusionMatrix {
        let test = &shard.test;
        let predictions = if self.composite.is_empty() {
            self.machine.tm.predict_batch(test)
        } else {
            let models: Vec<&ConvTm> = self.composite.iter().collect();
            let sums = sums_of(&models, test);
            composite::vote(
                &sums.iter().collect::<Vec<_>>(),
                self.machine.shape.classes,
                self.hyper.composite,
            )
        };
        ConfusionMatrix::from_predictions(self.machine.shape.classes, &test.labels, &predictions)
    }

    fn class_sum_profiles(&self, shard: &BitShard) -> Vec<(String, Vec<ClassSumProfile>)> {
        // The ensemble strategy's composite is the clients' own machines, in client order.
        let names = (1..=self.composite.len())
            .map(|k| format!("composite model {k}"))
            .chain(self.ensemble.iter().map(|(id, _)| format!("client {id}")));
        let machines: Vec<&ConvTm> = self
            .composite
            .iter()
            .chain(self.ensemble.iter().map(|(_, m)| m))
            .collect();
        let sums = sums_of(&machines, &shard.test);
        names
            .zip(&sums)
            .map(|(name, s)| {
                let profiles = composite::class_sum_profiles(
                    s,
                    &shard.test.labels,
                    self.machine.shape.classes,
                );
                (name, profiles)
            })
            .collect()
    }

    /// With the clients' machines in the download: the composite under both readings, the
    /// ensemble under both, and every client alone, from one computation of each machine's sums.
    fn evaluate_all(&self, shard: &BitShard) -> Vec<(Predictor, ConfusionMatrix)> {
        if self.ensemble.is_empty() || self.composite.is_empty() {
            return vec![(Predictor::Model, self.evaluate(shard))];
        }
        let test = &shard.test;
        let classes = self.machine.shape.classes;
        let machines: Vec<&ConvTm> = self
            .composite
            .iter()
            .chain(self.ensemble.iter().map(|(_, m)| m))
            .collect();
        let sums = sums_of(&machines, test);
        let (server, clients) = sums.split_at(self.composite.len());
        let server: Vec<&BatchSums> = server.iter().collect();
        let all: Vec<&BatchSums> = clients.iter().collect();
        let (ours, other) = (self.hyper.composite, self.hyper.composite.other_reading());
        let matrix = |p: Vec<u32>| ConfusionMatrix::from_predictions(classes, &test.labels, &p);
        // One machine alone: the argmax of its sums (a positive constant changes nothing).
        let alone = CompositeOptions {
            normalization: Normalization::PerBatch,
            clamp: false,
        };
        let mut out = vec![
            (
                Predictor::ModelAs(other),
                matrix(composite::vote(&server, classes, other)),
            ),
            (
                Predictor::Ensemble,
                matrix(composite::vote(&all, classes, ours)),
            ),
            (
                Predictor::EnsembleAs(other),
                matrix(composite::vote(&all, classes, other)),
            ),
        ];
        for ((id, _), s) in self.ensemble.iter().zip(clients) {
            out.push((
                Predictor::Client(*id),
                matrix(composite::vote(&[s], classes, alone)),
            ));
        }
        out.push((
            Predictor::Model,
            matrix(composite::vote(&server, classes, ours)),
        ));
        out
    }
}
