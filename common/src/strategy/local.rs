//! The baselines every paper compares against: `local` (each client trains alone) and `central`
//! (one client holding all the data). The server checks and records updates with the model's own
//! strategy, but sends nothing back, so every client keeps training its own model.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::StrategyState;
use super::contract::{Facts, Strategy, StrategyParams};
use super::fedavg::FedAvgClient;
use super::fedavg_cnn::CnnClient;
use super::model_spec::ModelSpec;
use super::robust::RobustHyper;
use super::sections::{Checked, Sections};
use super::{Aggregate, ClientStrategy, Downloads, ModelKind, RoundReport, ServerStrategy};
use crate::data::images::PixelShard;
use crate::data::{DataShape, Shard};
use crate::model::tm::ClauseBanks;
use crate::params::ParamResult;
use crate::strategy::decoder::UpdateDecoder;
use crate::wire::Update;
use crate::wire::proto::{DataSummary, Payload};
use crate::{ClientId, Result, Round};

pub struct LocalServer {
    model: Box<dyn ServerStrategy>,
}

impl LocalServer {
    /// `model`: the federated strategy of the same model, used for checks and what is recorded.
    pub fn new(model: Box<dyn ServerStrategy>) -> Self {
        LocalServer { model }
    }
}

impl ServerStrategy for LocalServer {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        // The starting point is the model's own (e.g. zeros for logistic regression), so local
        // and federated runs begin alike; after that nothing is sent.
        self.model.initial_download(features)
    }

    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        self.model.decoder()
    }

    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        let recorded = self.model.aggregate(round, clients, updates)?;
        Ok(Aggregate {
            downloads: Downloads::PerClient(BTreeMap::new()),
            weights: BTreeMap::new(),
            report: RoundReport::plain("local"),
            local: recorded.local,
            privacy: None,
        })
    }

    fn snapshot(&self) -> StrategyState {
        self.model.snapshot()
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        self.model.restore(state)
    }
}

/// The baselines' spec: the model they train; `CENTRAL` tells `central` (one client holding all
/// the data, one model measured like a federation's global one) from `local` (every client
/// trains alone).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineSpec<const CENTRAL: bool>(pub ModelSpec);

/// Baseline: every client trains alone; nothing is sent back.
pub type LocalSpec = BaselineSpec<false>;
/// Baseline: one client holding all the data.
pub type CentralSpec = BaselineSpec<true>;

impl<const CENTRAL: bool> Strategy for BaselineSpec<CENTRAL> {
    const FACTS: Facts = Facts {
        model: None,
        averages: false,
        declared_weights: false,
        one_shot: false,
        one_model: CENTRAL,
        banks: ClauseBanks::Shared,
    };

    fn check(model: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(BaselineSpec(ModelSpec::of(model, c)))
    }
}

impl<const CENTRAL: bool> StrategyParams for BaselineSpec<CENTRAL> {
    fn model(&self) -> ModelSpec {
        self.0.clone()
    }

    /// The model's own federated strategy checks and records; nothing goes back.
    fn server(&self, classes: usize, seed: u64, _: RobustHyper) -> Box<dyn ServerStrategy> {
        Box::new(LocalServer::new(self.0.server(classes, seed)))
    }

    /// No download replaces a baseline's model, so a restarted client needs its own back.
    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        match &self.0 {
            ModelSpec::LogReg(h) => {
                let client = FedAvgClient::new(features, classes, *h).keeping_its_model();
                Ok(Box::new(client))
            }
            other => other.table_client(features, classes),
        }
    }

    /// A network no download replaces, kept by the client for a restart.
    fn pixels_client(
        &self,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
        _clients: usize,
    ) -> Result<Box<dyn ClientStrategy<PixelShard>>> {
        match &self.0 {
            ModelSpec::Cnn(h) => {
                let client = CnnClient::new(*h, features, classes, seed)?.keeping_its_model();
                Ok(Box::new(client))
            }
            other => other.pixels_client(features, classes, seed, client),
        }
    }

    /// No download.
    fn model_is_the_download(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fcm::Fcm;
    use crate::strategy::LocalMetrics;
    use crate::strategy::fcm::{Aggregation, FcmServer};
    use crate::wire;

    #[test]
    fn nothing_is_sent_back_but_updates_are_checked_and_recorded() {
        let mut s = LocalServer::new(Box::new(FcmServer::new(2, Aggregation::Mean)));
        assert_eq!(s.initial_download(1), None);
        let local = LocalMetrics {
            accuracy: 0.5,
            precision: 0.25,
        };
        let p = wire::encode_map(&Fcm::zeros(1, 2), Some(local));
        let u = s.decode(1, 1, &p).unwrap();
        assert!(s.decode(1, 3, &p).is_err());
        let clients = BTreeMap::from([(
            1,
            DataSummary {
                train_class_counts: vec![1, 1],
                test_samples: 1,
                features: 1,
                compute_ghz: 1.0,
            },
        )]);
        let agg = s.aggregate(1, &clients, &BTreeMap::from([(1, u)])).unwrap();
        assert_eq!(agg.downloads.for_client(1), None);
        assert_eq!(agg.local[&1], local);
    }
}
