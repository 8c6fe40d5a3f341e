use crate::data::Shard;
use crate::metrics::ConfusionMatrix;
use crate::model::logreg::{LogReg, LogRegHyper};
use crate::rng::FlintRng;
use crate::strategy::ClientStrategy;
use crate::strategy::privacy::{ClientNoise, DpHyper, Mechanism, privatize_locally};
use crate::wire::{self, proto::Payload};
use crate::{Result, Round};

/// A client of FedAvg: its local logistic regression, replaced by each download.
pub struct FedAvgClient {
    model: LogReg,
    hyper: LogRegHyper,
    /// No download replaces the model (`local`, `central`): a restart needs it back.
    keeps_model: bool,
    /// `dp.mechanism = "local"`: the change from the last download is clipped and noised here.
    local_dp: Option<DpHyper>,
    /// The last download, flat: what a local change is measured from.
    global: Vec<f64>,
    /// A secret key's stream for the local noise; without one, the training stream.
    noise: Option<ClientNoise>,
}

impl FedAvgClient {
    pub fn new(features: usize, classes: usize, hyper: LogRegHyper) -> Self {
        FedAvgClient {
            model: LogReg::for_classes(features, classes),
            hyper,
            keeps_model: false,
            local_dp: None,
            global: Vec::new(),
            noise: None,
        }
    }

    /// A client that clips and noises its own change under `dp.mechanism = "local"` (nothing
    /// changes otherwise).
    pub fn with_dp(self, dp: DpHyper) -> Self {
        FedAvgClient {
            local_dp: (dp.mechanism == Mechanism::Local).then_some(dp),
            ..self
        }
    }

    /// A client whose model no download replaces (the `local` and `central` baselines).
    pub fn keeping_its_model(self) -> Self {
        FedAvgClient {
            keeps_model: true,
            ..self
        }
    }
}

/// The model's weights then biases: the vector a change is measured on, as the server's.
pub(super) fn flat(model: &LogReg) -> Vec<f64> {
    [&model.weights[..], &model.biases[..]].concat()
}

impl ClientStrategy<Shard> for FedAvgClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        self.model = wire::decode_linear(download, self.model.features(), self.model.classes())?;
        if self.local_dp.is_some() {
            self.global = flat(&self.model);
        }
        Ok(())
    }

    fn set_noise_key(&mut self, noise: ClientNoise) -> bool {
        self.noise = Some(noise);
        self.local_dp.is_some()
    }

    fn train(&mut self, shard: &Shard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        self.model.train(&shard.train, &self.hyper);
        if let Some(dp) = &self.local_dp {
            let mut trained = flat(&self.model);
            match &self.noise {
                Some(noise) => {
                    privatize_locally(dp, &self.global, &mut trained, &mut noise.rng(round))?
                }
                None => privatize_locally(dp, &self.global, &mut trained, rng)?,
            }
            let (w, b) = trained.split_at(self.model.weights.len());
            self.model.weights.copy_from_slice(w);
            self.model.biases.copy_from_slice(b);
        }
        Ok(wire::encode_linear(&self.model))
    }

    fn evaluate(&self, shard: &Shard) -> ConfusionMatrix {
        self.model.evaluate(&shard.test)
    }

    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        Some(crate::model::kept::KeptModel::logreg(&self.model))
    }

    /// The model, where no download replaces it, its weights' bits; under FedAvg the client
    /// carries nothing (its training draws no random numbers).
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let m = &self.model;
        let (weights, biases) = (
            crate::strategy::resume::floats(&m.weights),
            crate::strategy::resume::floats(&m.biases),
        );
        self.keeps_model
            .then(|| crate::strategy::resume::frame(&[&weights, &biases]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [weights, biases] = crate::strategy::resume::unframe(state, 2)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        let (weights, biases) = (
            crate::strategy::resume::floats_from(weights)?,
            crate::strategy::resume::floats_from(biases)?,
        );
        if weights.len() != self.model.weights.len() || biases.len() != self.model.biases.len() {
            return Err(crate::strategy::resume::bad("the model is not this run's"));
        }
        self.model = LogReg { weights, biases };
        Ok(())
    }
}
