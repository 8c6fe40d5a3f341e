//! The baselines every paper compares against: `local` (each client trains alone) and `central`
//! (one client holding all the data). The server checks and records updates with the model's own
//! strategy, but sends nothing back, so every client keeps training its own model.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::StrategyState;
use super::contract::{Facts, Strategy, StrategyParams};
use super::fedavg::FedAvgClient;
use super::model_spec::ModelSpec;
use super::robust::RobustHyper;
use super::sections::{Checked, Sections};
use super::{Aggregate, ClientStrategy, Downloads, ModelKind, RoundReport, ServerStrategy};
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
        })
    }

    fn snapshot(&self) -> StrategyState {
        self.model.snapshot()
    }

    fn restore(&mut self, state: StrategyState) -> Result<()> {
        self.model.restore(state)
    }
}

/// Baseline: every client trains alone; nothing is sent back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalSpec(pub ModelSpec);

/// Baseline: one client holding all the data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CentralSpec(pub ModelSpec);

const BASELINE: Facts = Facts {
    model: None,
    averages: false,
    one_shot: false,
    one_model: false,
    banks: ClauseBanks::Shared,
};

/// The baselines' server: the model's own federated strategy checks and records, nothing goes
/// back.
fn server(model: &ModelSpec, classes: usize, seed: u64) -> Box<dyn ServerStrategy> {
    Box::new(LocalServer::new(model.server(classes, seed)))
}

/// No download replaces a baseline's model, so a restarted client needs its own back.
fn table_client(
    model: &ModelSpec,
    features: usize,
    classes: usize,
) -> Result<Box<dyn ClientStrategy<Shard>>> {
    match model {
        ModelSpec::LogReg(h) => {
            let client = FedAvgClient::new(features, classes, *h).keeping_its_model();
            Ok(Box::new(client))
        }
        other => other.table_client(features, classes),
    }
}

impl Strategy for LocalSpec {
    const FACTS: Facts = BASELINE;

    fn check(model: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(LocalSpec(ModelSpec::of(model, c)))
    }
}

impl StrategyParams for LocalSpec {
    fn model(&self) -> ModelSpec {
        self.0.clone()
    }

    fn server(&self, classes: usize, seed: u64, _: RobustHyper) -> Box<dyn ServerStrategy> {
        server(&self.0, classes, seed)
    }

    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        table_client(&self.0, features, classes)
    }

    /// No download.
    fn model_is_the_download(&self) -> bool {
        false
    }
}

impl Strategy for CentralSpec {
    /// One model, measured like a federation's global one.
    const FACTS: Facts = Facts {
        one_model: true,
        ..BASELINE
    };

    fn check(model: ModelKind, c: &Checked, _: &Sections, _: &DataShape) -> ParamResult<Self> {
        Ok(CentralSpec(ModelSpec::of(model, c)))
    }
}

impl StrategyParams for CentralSpec {
    fn model(&self) -> ModelSpec {
        self.0.clone()
    }

    fn server(&self, classes: usize, seed: u64, _: RobustHyper) -> Box<dyn ServerStrategy> {
        server(&self.0, classes, seed)
    }

    fn table_client(
        &self,
        features: usize,
        classes: usize,
    ) -> Result<Box<dyn ClientStrategy<Shard>>> {
        table_client(&self.0, features, classes)
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
