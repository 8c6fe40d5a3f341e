use crate::data::Shard;
use crate::metrics::ConfusionMatrix;
use crate::model::fcm::{self, Fcm, FcmHyper};
use crate::model::pso::PsoHyper;
use crate::rng::FlintRng;
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
        }
    }

    pub fn model(&self) -> Option<&Fcm> {
        self.model.as_ref()
    }
}

impl ClientStrategy<Shard> for FcmClient {
    fn apply(&mut self, _round: Round, download: &Payload) -> Result<()> {
        let (global, _) = wire::decode_map(download, self.features, self.classes)?;
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
            &t.model,
            Some(LocalMetrics {
                accuracy: m.accuracy,
                precision: m.precision,
            }),
        );
        self.model = Some(t.model);
        Ok(payload)
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
