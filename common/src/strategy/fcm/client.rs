use crate::data::Shard;
use crate::metrics::ConfusionMatrix;
use crate::model::fcm::{self, Fcm, FcmHyper};
use crate::model::pso::PsoHyper;
use crate::rng::FlintRng;
use crate::strategy::privacy::{ClientNoise, DpHyper, Mechanism, privatize_locally};
use crate::strategy::{ClientStrategy, LocalMetrics, resume};
use crate::wire;
use crate::wire::proto::Payload;
use crate::{Result, Round};

/// What a client does with the global map (step 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blend {
    /// Blind FL: the new local map is the global map.
    Replace,
    /// Blended Blind FL: the new local map is the mean of the global and the previous local map.
    Average,
}

pub struct FcmClient {
    features: usize,
    classes: usize,
    hyper: FcmHyper,
    pso: PsoHyper,
    blend: Blend,
    pub(super) model: Option<Fcm>,
    /// `dp.mechanism = "local"`: the upload is the last global map plus the change clipped and
    /// noised (from the zero map before any download).
    local_dp: Option<DpHyper>,
    /// The last download's weights, what a local change is measured from.
    global: Option<Vec<f64>>,
    /// A secret key's stream for the local noise; without one, the training stream.
    noise: Option<ClientNoise>,
}

impl FcmClient {
    pub fn new(
        features: usize,
        classes: usize,
        hyper: FcmHyper,
        pso: PsoHyper,
        blend: Blend,
    ) -> Self {
        FcmClient {
            features,
            classes,
            hyper,
            pso,
            blend,
            model: None,
            local_dp: None,
            global: None,
            noise: None,
        }
    }

    /// A client that clips and noises its map under `dp.mechanism = "local"` (nothing changes
    /// otherwise).
    pub fn with_dp(self, dp: DpHyper) -> Self {
        FcmClient {
            local_dp: (dp.mechanism == Mechanism::Local).then_some(dp),
            ..self
        }
    }

    /// The map to upload in place of `trained` under local `[dp]`: the global map plus the
    /// clipped, noised change, within the weights' range (none otherwise: the trained map goes
    /// as it is). The client keeps its own map unnoised.
    pub(super) fn noised(
        &self,
        trained: &Fcm,
        round: Round,
        rng: &mut FlintRng,
    ) -> Result<Option<Fcm>> {
        let Some(dp) = &self.local_dp else {
            return Ok(None);
        };
        let mut weights = trained.parameters().to_vec();
        let zeros;
        let base = match &self.global {
            Some(g) => g.as_slice(),
            None => {
                zeros = vec![0.0; weights.len()];
                zeros.as_slice()
            }
        };
        match &self.noise {
            Some(noise) => privatize_locally(dp, base, &mut weights, &mut noise.rng(round))?,
            None => privatize_locally(dp, base, &mut weights, rng)?,
        }
        weights.iter_mut().for_each(|w| *w = w.clamp(-1.0, 1.0));
        Fcm::from_parameters(self.features, self.classes, weights).map(Some)
    }

    pub fn model(&self) -> Option<&Fcm> {
        self.model.as_ref()
    }
}

impl ClientStrategy<Shard> for FcmClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let (global, _) = wire::decode_map(download, self.features, self.classes)?;
        if self.local_dp.is_some() {
            self.global = Some(global.parameters().to_vec());
        }
        self.model = Some(match (self.blend, &self.model) {
            (Blend::Average, Some(local)) => global.blend(local)?,
            _ => global,
        });
        Ok(())
    }

    fn train(&mut self, shard: &Shard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        let t = fcm::train(
            &shard.train,
            self.classes,
            &self.hyper,
            &self.pso,
            self.model.as_ref(),
            rng,
        )?;
        let m = t.model.evaluate(&self.hyper, &shard.test).metrics();
        tracing::debug!(
            round,
            fitness = t.fitness,
            evaluations = t.evaluations,
            accuracy = m.accuracy,
            precision = m.precision,
            "fcm trained"
        );
        let payload = wire::encode_map(
            self.noised(&t.model, round, rng)?
                .as_ref()
                .unwrap_or(&t.model),
            Some(LocalMetrics {
                accuracy: m.accuracy,
                precision: m.precision,
            }),
        );
        self.model = Some(t.model);
        Ok(payload)
    }

    fn set_noise_key(&mut self, noise: ClientNoise) -> bool {
        self.noise = Some(noise);
        self.local_dp.is_some()
    }

    fn evaluate(&self, shard: &Shard) -> ConfusionMatrix {
        let test = &shard.test;
        match &self.model {
            Some(m) => m.evaluate(&self.hyper, test),
            None => Fcm::zeros(self.features, self.classes).evaluate(&self.hyper, test),
        }
    }

    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        self.model.as_ref().map(crate::model::kept::KeptModel::fcm)
    }

    /// The local map (blended: what the next download is averaged with; PSO seeds a particle
    /// with it), its weights' bits; none before the first round.
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let map = self.model.as_ref().map(|m| resume::floats(m.parameters()));
        Some(resume::frame(&[&map.unwrap_or_default()]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [map] = resume::unframe(state, 1)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        self.model = match map.is_empty() {
            true => None,
            false => {
                let params = resume::floats_from(map)?;
                let m = Fcm::from_parameters(self.features, self.classes, params);
                Some(m.map_err(|e| resume::bad(&e.to_string()))?)
            }
        };
        Ok(())
    }
}
