use crate::data::images::PixelShard;
use crate::metrics::ConfusionMatrix;
use crate::model::cnn::{Cnn, CnnHyper, Trainer};
use crate::rng::FlintRng;
use crate::strategy::ClientStrategy;
use crate::strategy::fedavg_cnn::{architecture, privatize_network, samples, train_checked};
use crate::strategy::privacy::{ClientNoise, DpHyper, Mechanism};
use crate::wire::network::{decode_params, encode_cluster_params};
use crate::wire::proto::Payload;
use crate::{Result, Round};

use super::initial_models;

/// An IFCA client: the k networks of the last download, and the one it trains.
pub struct IfcaClient {
    cnn: Cnn,
    hyper: CnnHyper,
    trainer: Trainer,
    models: Vec<Vec<f32>>,
    /// `dp.mechanism = "local"`: the change from the chosen network is clipped and noised here.
    local_dp: Option<DpHyper>,
    /// A secret key's stream for the local noise; without one, the training stream.
    noise: Option<ClientNoise>,
}

impl IfcaClient {
    pub fn new(
        hyper: CnnHyper,
        k: usize,
        features: usize,
        classes: usize,
        seed: u64,
    ) -> Result<Self> {
        let arch = architecture(hyper.architecture, features, classes)?;
        let models = initial_models(hyper.architecture, k, features, classes, seed)?;
        let cnn = Cnn {
            arch,
            params: models[0].clone(),
        };
        Ok(IfcaClient {
            cnn,
            hyper,
            trainer: Trainer::default(),
            models,
            local_dp: None,
            noise: None,
        })
    }

    /// A client that clips and noises its own change under `dp.mechanism = "local"` (nothing
    /// changes otherwise).
    pub fn with_dp(self, dp: DpHyper) -> Self {
        IfcaClient {
            local_dp: (dp.mechanism == Mechanism::Local).then_some(dp),
            ..self
        }
    }

    /// Ghosh et al. 2020, Algorithm 2, step 4: the cluster whose model has the lowest loss on
    /// the client's training data (the first on a tie), and that model.
    pub fn choose(&self, shard: &PixelShard) -> (u32, Cnn) {
        let samples = samples(&shard.train);
        let mut best = (0, f64::INFINITY);
        for (j, params) in self.models.iter().enumerate() {
            let cnn = Cnn {
                arch: self.cnn.arch.clone(),
                params: params.clone(),
            };
            let loss = cnn.mean_loss(&samples);
            if loss < best.1 {
                best = (j, loss);
            }
        }
        let params = self.models[best.0].clone();
        (
            best.0 as u32,
            Cnn {
                arch: self.cnn.arch.clone(),
                params,
            },
        )
    }
}

impl ClientStrategy<PixelShard> for IfcaClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let (k, p) = (self.models.len(), self.cnn.arch.params);
        let all = decode_params(download, k * p)?;
        self.models = all.chunks_exact(p).map(<[f32]>::to_vec).collect();
        Ok(())
    }

    fn train(&mut self, shard: &PixelShard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        let (cluster, cnn) = self.choose(shard);
        self.cnn = cnn;
        train_checked(
            &mut self.trainer,
            &mut self.cnn,
            shard,
            &self.hyper,
            None,
            rng,
            round,
        )?;
        if let Some(dp) = self.local_dp {
            let base = &self.models[cluster as usize];
            let noise = self.noise.as_ref();
            privatize_network(&dp, base, &mut self.cnn.params, noise, round, rng)?;
        }
        Ok(encode_cluster_params(cluster, &self.cnn.params))
    }

    fn set_noise_key(&mut self, noise: ClientNoise) -> bool {
        self.noise = Some(noise);
        self.local_dp.is_some()
    }

    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        Some(crate::model::kept::KeptModel::network(&self.cnn))
    }

    /// With the model of its cluster (the lowest loss on its training data).
    fn evaluate(&self, shard: &PixelShard) -> ConfusionMatrix {
        let (_, cnn) = self.choose(shard);
        let predicted = cnn.predict(&samples(&shard.test));
        ConfusionMatrix::from_predictions(cnn.arch.classes(), &shard.test.labels, &predicted)
    }
}
