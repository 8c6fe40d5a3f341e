//! The baselines every paper compares against: `local` (each client trains alone) and `central`
//! (one client holding all the data). The server checks and records updates with the model's own
//! strategy, but sends nothing back, so every client keeps training its own model.

use std::collections::BTreeMap;

use super::{Aggregate, Downloads, ServerStrategy};
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

    fn check_update(&self, client: ClientId, features: usize, update: &Payload) -> Result<()> {
        self.model.check_update(client, features, update)
    }

    fn aggregate(
        &mut self,
        round: Round,
        clients: &BTreeMap<ClientId, DataSummary>,
        updates: &BTreeMap<ClientId, Payload>,
    ) -> Result<Aggregate> {
        let recorded = self.model.aggregate(round, clients, updates)?;
        Ok(Aggregate {
            downloads: Downloads::PerClient(BTreeMap::new()),
            weights: BTreeMap::new(),
            details: serde_json::json!({ "federation": "none" }),
            local: recorded.local,
        })
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "federation": "none", "model": self.model.describe() })
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
        let p = wire::adjacency_payload(&Fcm::zeros(1, 2), Some(local));
        s.check_update(1, 1, &p).unwrap();
        assert!(s.check_update(1, 3, &p).is_err());
        let clients = BTreeMap::from([(
            1,
            DataSummary {
                train_class_counts: vec![1, 1],
                test_samples: 1,
                features: 1,
                compute_ghz: 1.0,
            },
        )]);
        let agg = s.aggregate(1, &clients, &BTreeMap::from([(1, p)])).unwrap();
        assert_eq!(agg.downloads.for_client(1), None);
        assert_eq!(agg.local[&1], local);
    }
}
