//! Convolutional networks for the neural baselines the papers compare against (TPFL Table 5,
//! FedTMOS Table 1), trained on one thread, bit for bit the same from one seed.
//!
//! Why our own layers: measured on FLIS's LeNet, candle's CPU back end trains at 0.154×
//! PyTorch's samples per second on one thread and burn's ndarray back end at 0.018×
//! (docs/results/cnn-engine.md), and neither seeds per model. The layers here are a few loops
//! around one matrix product (im2col), which is `matrixmultiply`'s, ndarray's GEMM.

pub mod arch;
mod gemm;
mod layers;
pub mod net;
pub mod statistics;
mod train;

pub use arch::{ArchName, Architecture};
pub use train::{CnnHyper, Samples, TrainStats, Trainer};

use rand::RngExt;

use crate::rng::FlintRng;

/// A network: its architecture and its parameters, one flat vector (each layer's weights, in
/// PyTorch's order, then its biases), which is what is averaged and sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Cnn {
    pub arch: Architecture,
    pub params: Vec<f32>,
}

impl Cnn {
    /// PyTorch's default initialization: weights and biases uniform in ±1/√fan_in.
    pub fn init(arch: Architecture, rng: &mut FlintRng) -> Cnn {
        let mut params = Vec::with_capacity(arch.params);
        for l in &arch.layers {
            let bound = 1.0 / (l.fan_in().max(1) as f32).sqrt();
            params.extend((0..l.params).map(|_| rng.random_range(-bound..bound)));
        }
        Cnn { arch, params }
    }

    /// Each sample's predicted class, in batches of 256.
    pub fn predict(&self, samples: &Samples) -> Vec<u32> {
        let mut tape = net::Tape::default();
        let mut x = Vec::new();
        let classes = self.arch.classes();
        let mut out = Vec::with_capacity(samples.len());
        let all: Vec<usize> = (0..samples.len()).collect();
        for batch in all.chunks(256) {
            samples.gather(batch, &mut x);
            net::forward(&self.arch, &self.params, &x, batch.len(), &mut tape);
            out.extend(
                tape.logits()
                    .chunks_exact(classes)
                    .map(|r| argmax(r) as u32),
            );
        }
        out
    }
}

impl Cnn {
    /// The mean cross-entropy over the samples (IFCA's cluster choice), in batches of 256;
    /// infinite where there are none.
    pub fn mean_loss(&self, samples: &Samples) -> f64 {
        let (mut tape, mut x, mut d) = (net::Tape::default(), Vec::new(), Vec::new());
        let all: Vec<usize> = (0..samples.len()).collect();
        let mut sum = 0.0;
        for batch in all.chunks(256) {
            samples.gather(batch, &mut x);
            let labels: Vec<u32> = batch.iter().map(|&r| samples.labels[r]).collect();
            net::forward(&self.arch, &self.params, &x, batch.len(), &mut tape);
            let loss = layers::softmax_cross_entropy(tape.logits(), &labels, &mut d);
            sum += f64::from(loss) * batch.len() as f64;
        }
        match samples.is_empty() {
            true => f64::INFINITY,
            false => sum / samples.len() as f64,
        }
    }
}

/// The index of the largest value, the first of equals.
pub fn argmax<T: PartialOrd>(row: &[T]) -> usize {
    let mut best = 0;
    for (k, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = k;
        }
    }
    best
}

/// The softmax of `logits / temperature`.
pub fn softmax(logits: &[f32], temperature: f32) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits
        .iter()
        .map(|v| ((v - max) / temperature).exp())
        .collect();
    let sum: f32 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}
