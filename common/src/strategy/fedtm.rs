//! FedTM (FedTMOS §2.2 and §4.2.2; no public code, docs/papers/fedtmos.md §15): the iterative baseline.
//! Every round each client trains its machine for `fedtmos.local_epochs` epochs and uploads what a
//! FedTMOS client uploads; the server makes one global machine, per class the truncated mean of
//! the weights of every client holding the class (unscaled) and the OR of the include bits of the
//! K clients with the most samples of it; every client rebuilds its machine from it and trains on.
//!
//! Choices where the paper is silent: a class no client holds is left out (it votes 0); the
//! rebuilt machine's excluded automata sit where `fedtmos.excluded_at` says (the last exclude
//! state by default, so a literal is one step from inclusion); there is no round-0 model, as
//! none is needed: every client's machine starts from the same state (every automaton at the
//! last exclude state), and only the data and the feedback draws differ.
//!
//! Measured consequence (tests/real_data.rs, `fedtm_sends_one_global_machine_every_round`): from
//! that common start the clients' clause j learn unrelated patterns in round 1, so the OR of two clients' include bits joins
//! contradictory literals and round 1's global machine barely fires (chance on the shared test
//! set with K = 2, 31 % with K = 1 on the same run); rebuilt from it every round, the clients'
//! machines align and it learns.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::contract::{Facts, Strategy, StrategyParams};
use super::fedtmos::{
    BitsBy, FedTmosHyper, FedTmosSpec, LocalMachine, ModelPlan, ONE_SHOT_TM, TableDefaults,
    average, tm_uploads,
};
use super::model_spec::ModelSpec;
use super::report::Tagged;
use super::sections::{Checked, Sections};
use super::{Aggregate, ClientStrategy, Downloads, ModelKind, RoundReport, ServerStrategy};
use crate::data::DataShape;
use crate::data::images::BitShard;
use crate::metrics::ConfusionMatrix;
use crate::model::tm::TmHyper;
use crate::model::tm::parts::TmParts;
use crate::params::ParamResult;
use crate::rng::FlintRng;
use crate::strategy::decoder::{TmDecoder, UpdateDecoder};
use crate::strategy::robust::RobustHyper;
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, CompositeDownload, TmShape, Update};
use crate::{ClientId, Result, Round};

/// FedTM's record of a round: per class, the clients whose weights the global machine averages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FedTmRound {
    pub contributors: BTreeMap<u32, Vec<ClientId>>,
}

impl Tagged for FedTmRound {
    const TAG: &'static str = "fedtm";
}

/// The global machine of one round's uploads.
pub fn global_machine(
    uploads: &BTreeMap<ClientId, &crate::model::tm::parts::TmUpload>,
    top_k: usize,
    robust: &RobustHyper,
) -> Result<(TmParts, ModelPlan)> {
    let mut plan = ModelPlan::default();
    let mut weights = BTreeMap::new();
    for (&client, u) in uploads {
        for (&class, c) in &u.parts.classes {
            plan.contributors.entry(class).or_default().push(client);
            weights.insert((client, class), c.weights.clone());
        }
    }
    let models = average(
        std::slice::from_ref(&plan),
        uploads,
        &weights,
        top_k,
        BitsBy::Samples,
        robust,
    )?;
    let model = models.into_iter().next().unwrap_or_default();
    Ok((model, plan))
}

pub struct FedTmServer {
    shape: TmShape,
    top_k: usize,
    robust: RobustHyper,
}

impl FedTmServer {
    pub fn new(hyper: FedTmosHyper, tm: &TmHyper, classes: usize) -> FedTmServer {
        FedTmServer {
            shape: hyper.shape(tm, classes),
            top_k: hyper.server.top_k,
            robust: RobustHyper::default(),
        }
    }

    /// The global machine's classes combined by `robust` instead of their mean.
    pub fn with_robust(mut self, robust: RobustHyper) -> Self {
        self.robust = robust;
        self
    }
}

impl ServerStrategy for FedTmServer {
    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        Arc::new(TmDecoder { shape: self.shape })
    }

    fn aggregate(
        &mut self,
        _round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let uploads = tm_uploads(updates)?;
        let (model, plan) = global_machine(&uploads, self.top_k, &self.robust)?;
        let download = CompositeDownload {
            models: vec![model],
            ensemble: Vec::new(),
        };
        let n = updates.len() as f64;
        Ok(Aggregate {
            downloads: Downloads::Broadcast(wire::encode_tm_composite(&download, self.shape)),
            weights: updates.keys().map(|&id| (id, 1.0 / n)).collect(),
            report: RoundReport::of(&FedTmRound {
                contributors: plan.contributors,
            }),
            local: BTreeMap::new(),
            privacy: None,
        })
    }
}

/// A FedTM client: its machine is replaced by the global one every round, then trains on.
pub struct FedTmClient {
    machine: LocalMachine,
    hyper: FedTmosHyper,
}

impl FedTmClient {
    pub fn new(
        tm: TmHyper,
        hyper: FedTmosHyper,
        classes: usize,
        seed: u64,
        client: ClientId,
    ) -> Result<FedTmClient> {
        Ok(FedTmClient {
            machine: LocalMachine::new(tm, &hyper, classes, seed, client)?,
            hyper,
        })
    }
}

impl ClientStrategy<BitShard> for FedTmClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let d = wire::decode_tm_composite(download, self.machine.shape, 1, 0)?;
        self.machine.tm = self.machine.rebuild.machine(&d.models[0])?;
        Ok(())
    }

    fn train(&mut self, shard: &BitShard, _round: Round, rng: &mut FlintRng) -> Result<Payload> {
        self.machine.train_and_upload(&self.hyper, shard, rng)
    }

    fn evaluate(&self, shard: &BitShard) -> ConfusionMatrix {
        let p = self.machine.tm.predict_batch(&shard.test);
        ConfusionMatrix::from_predictions(self.machine.shape.classes, &shard.test.labels, &p)
    }

    /// The machine as the client ends the run with it, as a composite of one: per-sample
    /// normalization without clamping ranks its class sums as the machine's own argmax does.
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        use crate::model::tm::composite::{CompositeOptions, Normalization};
        let one = CompositeOptions {
            normalization: Normalization::PerSample,
            clamp: false,
        };
        crate::model::kept::KeptModel::composite(std::slice::from_ref(&self.machine.tm), one)
    }

    /// The feedback masks: the next download replaces the machine itself.
    fn checkpoint(&self) -> Option<Vec<u8>> {
        Some(super::resume::json(self.machine.masks()))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        self.machine.set_masks(super::resume::from_json(state)?)
    }
}

/// FedTM as the framework runs it: FedTMOS's machines, averaged every round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FedTmSpec(pub FedTmosSpec);

impl Strategy for FedTmSpec {
    const FACTS: Facts = Facts {
        one_shot: false,
        ..ONE_SHOT_TM
    };

    fn check(_: ModelKind, c: &Checked, s: &Sections, shape: &DataShape) -> ParamResult<Self> {
        let defaults = TableDefaults {
            top_k: true,
            weight_resolution: false,
        };
        Ok(FedTmSpec(FedTmosSpec::for_data(c, s, shape, defaults)))
    }
}

impl StrategyParams for FedTmSpec {
    fn why_not_secagg(&self) -> &'static str {
        "its truncated mean needs each client's weights, and it takes the include bits of the \
         clients with the most samples of a class as they are"
    }

    fn model(&self) -> ModelSpec {
        ModelSpec::ConvTm(self.0)
    }

    fn server(&self, classes: usize, _: u64, robust: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(FedTmServer::new(self.0.fedtmos, &self.0.tm, classes).with_robust(robust))
    }

    fn bits_client(
        &self,
        _features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        _clients: usize,
    ) -> Result<Box<dyn ClientStrategy<BitShard>>> {
        let client = FedTmClient::new(self.0.tm, self.0.fedtmos, classes, seed, client)?;
        Ok(Box::new(client))
    }

    fn model_is_the_download(&self) -> bool {
        true
    }

    fn resolve(&self, _: &Sections, out: &mut Sections) {
        if let Some(section) = out.fedtmos.as_mut() {
            section.top_k = self.0.top_k_written(section.preset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The round's record reads back from a report as results.json holds it (class keys are
    /// JSON strings there).
    #[test]
    fn the_round_record_reads_back_from_its_report() {
        let round = FedTmRound {
            contributors: BTreeMap::from([(3, vec![1, 2]), (10, vec![4])]),
        };
        let report = crate::strategy::RoundReport::of(&round);
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(text, r#"{"fedtm":{"contributors":{"10":[4],"3":[1,2]}}}"#);
        let back: crate::strategy::RoundReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.details::<FedTmRound>(), Some(round));
    }
    use crate::metrics::gini_index;
    use crate::model::tm::parts::{ClassParts, IncludeBits, TmUpload};

    fn upload(classes: &[(u32, Vec<u32>, u8, u64)]) -> TmUpload {
        let counts: Vec<u64> = classes.iter().map(|c| c.3).collect();
        TmUpload {
            parts: TmParts {
                classes: classes
                    .iter()
                    .map(|(c, w, bits, n)| {
                        let parts = ClassParts {
                            weights: w.clone(),
                            include: IncludeBits(vec![*bits]),
                            samples: *n,
                        };
                        (*c, parts)
                    })
                    .collect(),
            },
            gini_index: gini_index(&counts),
        }
    }

    /// FedTMOS §2.2: per class the mean of every holder's weights (unscaled) and the OR of the
    /// include bits of the two holders with the most samples of it.
    #[test]
    fn the_global_machine_averages_every_holder_and_ors_the_top_two_by_samples() {
        let ups = [
            upload(&[(0, vec![4, 9], 0b0001, 10), (1, vec![2, 2], 0b1000, 90)]),
            upload(&[(0, vec![6, 1], 0b0010, 50)]),
            upload(&[(0, vec![2, 2], 0b0100, 30), (2, vec![7, 7], 0b0001, 5)]),
        ];
        let uploads: BTreeMap<ClientId, &TmUpload> = ups
            .iter()
            .enumerate()
            .map(|(i, u)| (i as u32 + 1, u))
            .collect();
        let (model, plan) = global_machine(&uploads, 2, &RobustHyper::default()).unwrap();
        assert_eq!(plan.contributors[&0], vec![1, 2, 3]);
        assert_eq!(plan.contributors[&1], vec![1]);
        // (4 + 6 + 2) / 3 = 4; (9 + 1 + 2) / 3 = 4. No scaling: FedTM has no Gini step.
        assert_eq!(model.classes[&0].weights, vec![4, 4]);
        // The most samples of class 0: clients 2 (50) and 3 (30).
        assert_eq!(model.classes[&0].include, IncludeBits(vec![0b0110]));
        assert_eq!(model.classes[&1].weights, vec![2, 2]);
        assert_eq!(model.classes[&2].include, IncludeBits(vec![0b0001]));
        assert_eq!(
            model.classes.len(),
            3,
            "a class no client holds is left out"
        );
    }
}
