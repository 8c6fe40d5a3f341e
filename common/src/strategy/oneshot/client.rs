use super::{Needs, ensemble_predict};
use crate::data::images::PixelShard;
use crate::metrics::ConfusionMatrix;
use crate::model::cnn::statistics::{dense_grams, fisher_diag};
use crate::model::cnn::{Cnn, CnnHyper};
use crate::rng::FlintRng;
use crate::strategy::ClientStrategy;
use crate::strategy::fedavg_cnn::{CnnClient, samples};
use crate::wire::network::{NetworkStatistics, decode_networks, encode_statistics};
use crate::wire::proto::Payload;
use crate::{Result, Round};

/// A one-shot client: trains the run's initial network once and uploads it with the statistics
/// the rule needs; its model is then the download, one network or the ensemble of every
/// client's.
pub struct OneShotClient {
    inner: CnnClient,
    needs: Needs,
    /// The ensemble's networks, once downloaded; empty while the model is one network.
    ensemble: Vec<Cnn>,
    /// The most networks a download may hold: the run's clients.
    clients: usize,
}

impl OneShotClient {
    pub fn new(
        hyper: CnnHyper,
        needs: Needs,
        (features, classes): (usize, usize),
        seed: u64,
        clients: usize,
    ) -> Result<Self> {
        Ok(OneShotClient {
            inner: CnnClient::new(hyper, features, classes, seed)?,
            needs,
            ensemble: Vec::new(),
            clients,
        })
    }

    /// What the client measures of its trained network on its training rows.
    fn statistics(&self, shard: &PixelShard) -> NetworkStatistics {
        let (cnn, rows) = (self.inner.network(), samples(&shard.train));
        NetworkStatistics {
            params: cnn.params.clone(),
            gram: match self.needs.gram {
                true => dense_grams(cnn, &rows),
                false => Vec::new(),
            },
            fisher: match self.needs.fisher {
                true => fisher_diag(cnn, &rows),
                false => Vec::new(),
            },
        }
    }
}

impl ClientStrategy<PixelShard> for OneShotClient {
    /// The first download is the run's initial network; the last the rule's result: one
    /// network, or (the ensemble) every client's.
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let per = self.inner.network().arch.params;
        let mut nets = decode_networks(download, per, self.clients.max(1))?;
        if nets.len() == 1 {
            self.ensemble.clear();
            self.inner.set_network(nets.remove(0));
            return Ok(());
        }
        let arch = self.inner.network().arch.clone();
        self.ensemble = nets
            .into_iter()
            .map(|params| Cnn {
                arch: arch.clone(),
                params,
            })
            .collect();
        Ok(())
    }

    fn train(&mut self, shard: &PixelShard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        self.inner.train(shard, round, rng)?;
        Ok(encode_statistics(&self.statistics(shard)))
    }

    fn evaluate(&self, shard: &PixelShard) -> ConfusionMatrix {
        if self.ensemble.is_empty() {
            return self.inner.evaluate(shard);
        }
        let predicted = ensemble_predict(&self.ensemble, &samples(&shard.test));
        let classes = self.inner.network().arch.classes();
        ConfusionMatrix::from_predictions(classes, &shard.test.labels, &predicted)
    }

    /// One network: itself; an ensemble has no one network to show.
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        match self.ensemble.is_empty() {
            true => self.inner.export(),
            false => None,
        }
    }
}
