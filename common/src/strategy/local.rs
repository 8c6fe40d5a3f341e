//! The baselines every paper compares against: `local` (each client trains alone) and `central`
//! (one client holding all the data). The server checks and records updates with the model's own
//! strategy, but sends nothing back, so every client keeps training its own model.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Aggregate, Downloads, RoundReport, ServerStrategy, StrategyState};
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
            report: RoundReport::Local,
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
