use super::initial_network;
use crate::data::images::PixelShard;
use crate::data::pixels::PixelRows;
use crate::metrics::ConfusionMatrix;
use crate::model::cnn::{Cnn, CnnHyper, Samples, Trainer};
use crate::rng::FlintRng;
use crate::strategy::ClientStrategy;
use crate::strategy::privacy::{ClientNoise, DpHyper, Mechanism, privatize_locally};
use crate::strategy::resume;
use crate::wire::network::{decode_params, encode_params};
use crate::wire::proto::Payload;
use crate::{FlintError, Result, Round};

/// A client of a network federation: its network, replaced by each download, trained by SGD;
/// under FedProx held near the download by the proximal term (μ).
pub struct CnnClient {
    cnn: Cnn,
    hyper: CnnHyper,
    trainer: Trainer,
    /// FedProx's μ; `None` for FedAvg.
    mu: Option<f32>,
    /// The last download: FedProx's w_global.
    global: Vec<f32>,
    /// No download replaces the model (`local`, `central`): a restart needs it back.
    keeps_model: bool,
    /// `dp.mechanism = "local"`: the change from the last download is clipped and noised here.
    local_dp: Option<DpHyper>,
    /// A secret key's stream for the local noise; without one, the training stream.
    noise: Option<ClientNoise>,
}

impl CnnClient {
    /// Starts from the run's initial network, the one the server sends first.
    pub fn new(hyper: CnnHyper, features: usize, classes: usize, seed: u64) -> Result<Self> {
        let cnn = initial_network(hyper.architecture, features, classes, seed)?;
        Ok(CnnClient {
            global: cnn.params.clone(),
            cnn,
            hyper,
            trainer: Trainer::default(),
            mu: None,
            keeps_model: false,
            local_dp: None,
            noise: None,
        })
    }

    /// A client that clips and noises its own change under `dp.mechanism = "local"` (nothing
    /// changes otherwise).
    pub fn with_dp(self, dp: DpHyper) -> Self {
        CnnClient {
            local_dp: (dp.mechanism == Mechanism::Local).then_some(dp),
            ..self
        }
    }

    /// FedProx (Li et al. 2020, Eq. 2): local training minimises F_k(w) + μ/2 ‖w − w_global‖².
    pub fn with_proximal(self, mu: f64) -> Self {
        CnnClient {
            mu: Some(mu as f32),
            ..self
        }
    }

    /// A client whose model no download replaces (the `local` and `central` baselines).
    pub fn keeping_its_model(self) -> Self {
        CnnClient {
            keeps_model: true,
            ..self
        }
    }

    pub fn network(&self) -> &Cnn {
        &self.cnn
    }

    /// Takes `params` (of this network's size, checked by the caller) as its network and as
    /// FedProx's w_global.
    pub fn set_network(&mut self, params: Vec<f32>) {
        self.global.clone_from(&params);
        self.cnn.params = params;
    }
}

/// `params` becomes `base` plus its change clipped and noised under local `dp`, in f64 as the
/// server's mechanism, sent as float32; the noise from `noise`'s key, else the training stream.
pub fn privatize_network(
    dp: &DpHyper,
    base: &[f32],
    params: &mut Vec<f32>,
    noise: Option<&ClientNoise>,
    round: Round,
    rng: &mut FlintRng,
) -> Result<()> {
    let (base, mut trained) = (super::widen(base), super::widen(params));
    match noise {
        Some(noise) => privatize_locally(dp, &base, &mut trained, &mut noise.rng(round))?,
        None => privatize_locally(dp, &base, &mut trained, rng)?,
    }
    *params = trained.into_iter().map(|x| x as f32).collect();
    Ok(())
}

/// The rows as a network reads them.
pub fn samples(rows: &PixelRows) -> Samples<'_> {
    Samples {
        pixels: &rows.pixels,
        labels: &rows.labels,
        per: rows.per,
    }
}

/// A round of local training on the shard's training split, refused where the loss is not
/// finite at its end (a network that diverged).
pub fn train_checked(
    trainer: &mut Trainer,
    cnn: &mut Cnn,
    shard: &PixelShard,
    hyper: &CnnHyper,
    anchor: Option<(&[f32], f32)>,
    rng: &mut FlintRng,
    round: Round,
) -> Result<()> {
    let stats = trainer.train(cnn, &samples(&shard.train), hyper, anchor, rng);
    if stats.batches > 0 && !stats.last_epoch_loss.is_finite() {
        return Err(FlintError::Model(format!(
            "round {round}: the network's training loss is {} (it diverged); lower cnn.learning_rate, or under [dp] the noise",
            stats.last_epoch_loss
        )));
    }
    Ok(())
}

impl ClientStrategy<PixelShard> for CnnClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let params = decode_params(download, self.cnn.arch.params)?;
        self.set_network(params);
        Ok(())
    }

    fn train(&mut self, shard: &PixelShard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        let anchor = self.mu.map(|mu| (self.global.as_slice(), mu));
        let (trainer, cnn) = (&mut self.trainer, &mut self.cnn);
        train_checked(trainer, cnn, shard, &self.hyper, anchor, rng, round)?;
        if let Some(dp) = self.local_dp {
            let noise = self.noise.as_ref();
            privatize_network(&dp, &self.global, &mut self.cnn.params, noise, round, rng)?;
        }
        Ok(encode_params(&self.cnn.params))
    }

    fn set_noise_key(&mut self, noise: ClientNoise) -> bool {
        self.noise = Some(noise);
        self.local_dp.is_some()
    }

    fn evaluate(&self, shard: &PixelShard) -> ConfusionMatrix {
        let predicted = self.cnn.predict(&samples(&shard.test));
        ConfusionMatrix::from_predictions(self.cnn.arch.classes(), &shard.test.labels, &predicted)
    }

    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        Some(crate::model::kept::KeptModel::network(&self.cnn))
    }

    /// The network, where no download replaces it; under FedAvg and FedProx the client
    /// carries nothing (its batch order comes from the run's generator).
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let bits: Vec<f64> = self.cnn.params.iter().map(|&w| f64::from(w)).collect();
        self.keeps_model
            .then(|| resume::frame(&[&resume::floats(&bits)]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [params] = resume::unframe(state, 1)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        let params = resume::floats_from(params)?;
        if params.len() != self.cnn.params.len() {
            return Err(resume::bad("the network is not this run's"));
        }
        self.cnn.params = params.into_iter().map(|w| w as f32).collect();
        Ok(())
    }
}
