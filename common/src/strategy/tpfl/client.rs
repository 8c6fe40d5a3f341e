//! TPFL's client half (Algorithm 1): local training, the confidence winner it uploads (whole
//! or as a delta on what it last received), and the class weights it applies.

use std::collections::BTreeMap;

use super::section::{Confidence, TpflHyper};
use crate::data::images::BitShard;
use crate::metrics::ConfusionMatrix;
use crate::model::tm::{CoalescedTm, FeedbackMasks, TmHyper};
use crate::rng::{FlintRng, derive_rng};
use crate::strategy::ClientStrategy;
use crate::strategy::privacy::{ClientNoise, DpHyper, Mechanism, privatize_locally};
use crate::strategy::resume;
use crate::wire::proto::Payload;
use crate::wire::{self, WinnerUpload};
use crate::{ClientId, FlintError, Result, Round};

/// Algorithm 1, step 6: the class with the largest confidence and that confidence (the lowest
/// class on a tie). `None` for no classes.
pub fn confidence_winner(confidence: &[i64]) -> Option<(u32, i64)> {
    let mut best: Option<(u32, i64)> = None;
    for (c, &v) in confidence.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((c as u32, v));
        }
    }
    best
}

/// Algorithm 1 on a client: its own coalesced TM, trained for `local_epochs` per round.
pub struct TpflClient {
    tm: CoalescedTm,
    masks: FeedbackMasks,
    hyper: TpflHyper,
    /// The last vector received per class and the round it aggregates (delta bases).
    received: BTreeMap<u32, (Round, Vec<i32>)>,
    /// `dp.mechanism = "local"`: the winner's weights are clipped and noised before they leave.
    local_dp: Option<DpHyper>,
    /// Each class's weights as the machine started (from the seed: public), the base of a
    /// local change for a class never received.
    initial: Vec<Vec<i32>>,
    /// A secret key's stream for the local noise; without one, the training stream.
    noise: Option<ClientNoise>,
}

impl TpflClient {
    /// The machine's initial ±1 weights derive from (seed, client).
    pub fn new(
        tm: TmHyper,
        hyper: TpflHyper,
        features: usize,
        classes: usize,
        seed: u64,
        client: ClientId,
    ) -> TpflClient {
        let mut rng = derive_rng(seed, "tm-init", client);
        let tm = CoalescedTm::new(tm, features, classes, &mut rng);
        let initial = (0..classes).map(|c| tm.class_weights(c).to_vec()).collect();
        TpflClient {
            masks: FeedbackMasks::new(tm.hyper().s, &mut rng),
            tm,
            hyper,
            received: BTreeMap::new(),
            local_dp: None,
            initial,
            noise: None,
        }
    }

    /// A client that clips and noises its winner's weights under `dp.mechanism = "local"`
    /// (nothing changes otherwise).
    pub fn with_dp(self, dp: DpHyper) -> Self {
        TpflClient {
            local_dp: (dp.mechanism == Mechanism::Local).then_some(dp),
            ..self
        }
    }

    /// Under local `[dp]`: `own` as it leaves, the base (the class's last download, else its
    /// initial weights, both public) plus the change clipped and noised, rounded to integers
    /// (post-processing).
    pub(super) fn privatized(
        &self,
        class: u32,
        own: &[i32],
        round: Round,
        rng: &mut FlintRng,
    ) -> Result<Vec<i32>> {
        let Some(dp) = &self.local_dp else {
            return Ok(own.to_vec());
        };
        let base = match self.received.get(&class) {
            Some((_, v)) => v,
            None => &self.initial[class as usize],
        };
        let floats = |v: &[i32]| v.iter().map(|&w| f64::from(w)).collect::<Vec<f64>>();
        let mut noisy = floats(own);
        match &self.noise {
            Some(noise) => privatize_locally(dp, &floats(base), &mut noisy, &mut noise.rng(round))?,
            None => privatize_locally(dp, &floats(base), &mut noisy, rng)?,
        }
        Ok(noisy
            .iter()
            .map(|v| v.round().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32)
            .collect())
    }

    pub fn machine(&self) -> &CoalescedTm {
        &self.tm
    }

    /// Algorithm 1, steps 3–6: confidence per class on `data` and the winner.
    pub fn winner(&self, data: &crate::data::booleanize::BitRows) -> Result<(u32, i64)> {
        let conf = match self.hyper.confidence {
            Confidence::Weighted => self.tm.confidence(data),
            Confidence::Votes => self.tm.vote_confidence(data),
        };
        confidence_winner(&conf)
            .ok_or_else(|| FlintError::Model("a machine without classes has no winner".into()))
    }
}

impl ClientStrategy<BitShard> for TpflClient {
    fn apply(&mut self, round: Round, download: &Payload) -> Result<()> {
        let (class, weights) = wire::decode_class_weights(
            download,
            self.tm.classes(),
            self.tm.clauses(),
        )
        .map_err(|e| match e {
            FlintError::InvalidUpdate(m) => FlintError::InvalidUpdate(format!("download: {m}")),
            other => other,
        })?;
        self.tm
            .set_class_weights(class as usize, &weights)
            .map_err(|e| FlintError::InvalidUpdate(format!("download: {e}")))?;
        self.received.insert(class, (round, weights));
        Ok(())
    }

    fn set_noise_key(&mut self, noise: ClientNoise) -> bool {
        self.noise = Some(noise);
        self.local_dp.is_some()
    }

    fn train(&mut self, shard: &BitShard, round: Round, rng: &mut FlintRng) -> Result<Payload> {
        for _ in 0..self.hyper.local_epochs {
            self.tm.fit_epoch(&shard.train, &mut self.masks, rng);
        }
        let confidence_rows = shard.confidence.as_ref().ok_or_else(|| {
            FlintError::Model("tpfl needs a confidence split, and this shard has none".into())
        })?;
        let (class, confidence) = self.winner(confidence_rows)?;
        let own = self.privatized(class, self.tm.class_weights(class as usize), round, rng)?;
        // Under local noise the confidence, a figure of the client's own rows, stays with it.
        let confidence = match self.local_dp {
            Some(_) => 0,
            None => confidence,
        };
        let (weights, delta_base_round) = match self.received.get(&class) {
            Some((r, base)) if self.hyper.delta => (
                own.iter()
                    .zip(base)
                    .map(|(w, b)| w.wrapping_sub(*b))
                    .collect(),
                *r,
            ),
            _ => (own, 0),
        };
        let upload = WinnerUpload {
            class,
            confidence: confidence as f64,
            weights,
            delta_base_round,
        };
        Ok(wire::encode_winner(&upload, self.hyper.coding))
    }

    fn evaluate(&self, shard: &BitShard) -> ConfusionMatrix {
        ConfusionMatrix::from_predictions(
            self.tm.classes(),
            &shard.test.labels,
            &self.tm.predict_batch(&shard.test),
        )
    }
    fn export(&self) -> Option<crate::model::kept::KeptModel> {
        Some(crate::model::kept::KeptModel::coalesced(&self.tm))
    }

    /// A delta upload as the weights themselves: the delta added back to the base it was
    /// taken from (`None` for an upload that is no delta, or one not taken from what this
    /// client holds).
    fn without_base(&self, update: &Payload) -> Option<Payload> {
        let w = wire::decode_winner(update, self.tm.classes(), self.tm.clauses()).ok()?;
        let (round, base) = self.received.get(&w.class)?;
        if w.delta_base_round == 0 || *round != w.delta_base_round {
            return None;
        }
        let whole = WinnerUpload {
            weights: base
                .iter()
                .zip(&w.weights)
                .map(|(b, d)| b.wrapping_add(*d))
                .collect(),
            delta_base_round: 0,
            ..w
        };
        Some(wire::encode_winner(&whole, self.hyper.coding))
    }

    /// The machine, its feedback masks and the delta bases.
    fn checkpoint(&self) -> Option<Vec<u8>> {
        let (masks, received) = (resume::json(&self.masks), resume::json(&self.received));
        Some(resume::frame(&[&self.tm.to_bytes(), &masks, &received]))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let [tm, masks, received] = resume::unframe(state, 3)?[..] else {
            unreachable!("unframe returns the parts asked for")
        };
        let tm = CoalescedTm::from_bytes(tm).map_err(|e| resume::bad(&e))?;
        let same_shape = tm.hyper() == self.tm.hyper()
            && tm.classes() == self.tm.classes()
            && tm.bank().features() == self.tm.bank().features();
        if !same_shape {
            return Err(resume::bad("the machine is not this run's"));
        }
        let masks: FeedbackMasks = resume::from_json(masks)?;
        if !masks.same_draws(&self.masks) {
            return Err(resume::bad("the feedback masks are not this run's"));
        }
        self.masks = masks;
        self.received = resume::from_json(received)?;
        self.tm = tm;
        Ok(())
    }
}
