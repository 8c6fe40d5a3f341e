use crate::data::Shard;
use crate::metrics::ConfusionMatrix;
use crate::model::logreg::{LogReg, LogRegHyper};
use crate::rng::FlintRng;
use crate::strategy::ClientStrategy;
use crate::wire::{self, proto::Payload};
use crate::{Result, Round};

/// A client of FedAvg: its local logistic regression, replaced by each download.
pub struct FedAvgClient {
    model: LogReg,
    hyper: LogRegHyper,
    /// No download replaces the model (`local`, `central`): a restart needs it back.
    keeps_model: bool,
}

impl FedAvgClient {
    pub fn new(features: usize, classes: usize, hyper: LogRegHyper) -> Self {
        FedAvgClient {
            model: LogReg::for_classes(features, classes),
            hyper,
            keeps_model: false,
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

impl ClientStrategy<Shard> for FedAvgClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        self.model = wire::decode_linear(download, self.model.features(), self.model.classes())?;
        Ok(())
    }

    fn train(&mut self, shard: &Shard, _round: Round, _rng: &mut FlintRng) -> Result<Payload> {
        self.model.train(&shard.train, &self.hyper);
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
