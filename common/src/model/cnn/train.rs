//! Local training: mini-batch SGD on the client's samples, with FedProx's proximal term where
//! asked (Li et al. 2020, Eq. 2: the gradient of μ‖w − w_global‖²/2 is μ(w − w_global)).

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::net::{self, Tape};
use super::{ArchName, Cnn};
use crate::params::{ParamResult, at_least, positive, require};
use crate::rng::FlintRng;

/// `[cnn]`: the network and its local training, every setting decided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CnnHyper {
    /// The network: FLIS's LeNet (TPFL Table 5), LeNet-5 (FedTMOS §5) or CNN2 (FedTMOS
    /// Table 7).
    pub architecture: ArchName,
    /// Passes over the client's training split per round (TPFL §6.5: 10).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub local_epochs: u32,
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub batch_size: u32,
    pub learning_rate: f64,
    /// SGD momentum, 0 for none; the velocity starts at 0 every round.
    pub momentum: f64,
    /// Each client's test rows, drawn from the official test images with its own class
    /// proportions (as TPFL's clients' are).
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub test_samples: u32,
    /// Also measure the model on FedTMOS's global test set (the official test images
    /// 4992–9999, FedTMOS §5; client 1 holds them), where one global model is trained.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub global_test: bool,
}

impl Default for CnnHyper {
    fn default() -> Self {
        CnnHyper {
            architecture: ArchName::Lenet,
            local_epochs: 10,
            batch_size: 32,
            learning_rate: 0.01,
            momentum: 0.0,
            test_samples: 1_000,
            global_test: false,
        }
    }
}

impl CnnHyper {
    pub fn check(self) -> ParamResult<CnnHyper> {
        positive("cnn.learning_rate", self.learning_rate)?;
        require(
            "cnn.momentum",
            "in [0, 1)",
            self.momentum,
            (0.0..1.0).contains(&self.momentum),
        )?;
        require(
            "cnn.local_epochs",
            "at least 1",
            self.local_epochs,
            self.local_epochs > 0,
        )?;
        require(
            "cnn.batch_size",
            "at least 1",
            self.batch_size,
            self.batch_size > 0,
        )?;
        Ok(self)
    }
}

/// Images as bytes (`per` per sample, channel-major), read as pixel / 255, and their labels.
#[derive(Debug, Clone, Copy)]
pub struct Samples<'a> {
    pub pixels: &'a [u8],
    pub labels: &'a [u32],
    pub per: usize,
}

impl Samples<'_> {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The samples at `rows`, as the network reads them.
    pub fn gather(&self, rows: &[usize], x: &mut Vec<f32>) {
        x.clear();
        for &r in rows {
            let image = &self.pixels[r * self.per..][..self.per];
            x.extend(image.iter().map(|&p| f32::from(p) / 255.0));
        }
    }
}

/// What a round of local training saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainStats {
    /// Mean loss over the last epoch's batches.
    pub last_epoch_loss: f32,
    pub batches: usize,
}

/// A round's training state: the pass's buffers and the momentum's velocity, allocated once a round.
#[derive(Default)]
pub struct Trainer {
    tape: Tape,
    velocity: Vec<f32>,
    x: Vec<f32>,
    y: Vec<u32>,
}

impl Trainer {
    /// `hyper.local_epochs` epochs of SGD, each over the samples in an order drawn from `rng`;
    /// `anchor`: FedProx's global model and μ.
    pub fn train(
        &mut self,
        cnn: &mut Cnn,
        samples: &Samples,
        hyper: &CnnHyper,
        anchor: Option<(&[f32], f32)>,
        rng: &mut FlintRng,
    ) -> TrainStats {
        self.velocity.clear();
        self.velocity.resize(cnn.params.len(), 0.0);
        let mut order: Vec<usize> = (0..samples.len()).collect();
        let mut stats = TrainStats {
            last_epoch_loss: f32::NAN,
            batches: 0,
        };
        for _ in 0..hyper.local_epochs {
            order.shuffle(rng);
            let (mut sum, mut batches) = (0.0f64, 0);
            for batch in order.chunks(hyper.batch_size as usize) {
                sum += f64::from(self.step(cnn, samples, batch, hyper, anchor));
                batches += 1;
            }
            stats.last_epoch_loss = (sum / f64::from(batches.max(1) as u32)) as f32;
            stats.batches += batches;
        }
        // A process may hold a hundred clients between rounds: the pass's buffers (~20 MB for
        // LeNet at batch 32) are not kept past the round.
        *self = Trainer::default();
        stats
    }

    /// One SGD step on the samples at `rows`; returns the batch's loss.
    pub fn step(
        &mut self,
        cnn: &mut Cnn,
        samples: &Samples,
        rows: &[usize],
        hyper: &CnnHyper,
        anchor: Option<(&[f32], f32)>,
    ) -> f32 {
        samples.gather(rows, &mut self.x);
        self.y.clear();
        self.y.extend(rows.iter().map(|&r| samples.labels[r]));
        let loss = net::loss_and_grad(&cnn.arch, &cnn.params, &self.x, &self.y, &mut self.tape);
        let (lr, momentum) = (hyper.learning_rate as f32, hyper.momentum as f32);
        if self.velocity.len() != cnn.params.len() {
            self.velocity = vec![0.0; cnn.params.len()];
        }
        let grad = self.tape.grad();
        for (i, (w, v)) in cnn.params.iter_mut().zip(&mut self.velocity).enumerate() {
            let mut g = grad[i];
            if let Some((global, mu)) = anchor {
                g += mu * (*w - global[i]);
            }
            *v = momentum * *v + g;
            *w -= lr * *v;
        }
        loss
    }
}
