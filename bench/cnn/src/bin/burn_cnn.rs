//! FLIS's LeNet for MNIST (see docs/results/cnn-engine.md) trained with burn on one CPU thread.
//! Backend from BURN_BACKEND: `ndarray` (burn-ndarray, the default) or `flex` (needs the
//! burn-flex feature). Everything random comes from the backend seeded once with SEED.

#![allow(deprecated)] // Device::ndarray: burn 0.22 deprecates burn-ndarray in favour of flex

#[path = "../common.rs"]
mod common;

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use common::*;
use std::time::Instant;

#[derive(Module, Debug)]
struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    dropout: Dropout,
    fc2: Linear,
}

impl LeNet {
    fn new(device: &Device, dropout: f64) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 20], [5, 5]).init(device),
            conv2: Conv2dConfig::new([20, 50], [5, 5]).init(device),
            pool: MaxPoolConfig::new(),
            fc1: LinearConfig::new(800, 500).init(device),
            dropout: DropoutConfig::new(dropout).init(),
            fc2: LinearConfig::new(500, 10).init(device),
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let x = relu(self.pool.forward(self.conv1.forward(x)));
        let x = relu(self.pool.forward(self.conv2.forward(x)));
        let x: Tensor<2> = x.flatten(1, 3);
        let x = relu(self.fc1.forward(x));
        self.fc2.forward(self.dropout.forward(x))
    }
}

struct MaxPoolConfig;
impl MaxPoolConfig {
    fn new() -> MaxPool2d {
        MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init()
    }
}

fn batch_tensors(data: &Mnist, idx: &[usize], device: &Device) -> (Tensor<4>, Tensor<1, Int>, Vec<u8>) {
    let (x, y) = gather(data, idx);
    let b = idx.len();
    let xt = Tensor::<4>::from_data(TensorData::new(x, [b, 1, 28, 28]), device);
    let yt = Tensor::<1, Int>::from_data(
        TensorData::new(y.iter().map(|&l| l as i64).collect::<Vec<_>>(), [b]),
        device,
    );
    (xt, yt, y)
}

fn main() {
    let s = Settings::from_env();
    let backend = std::env::var("BURN_BACKEND").unwrap_or_else(|_| "ndarray".into());
    let plain = match backend.as_str() {
        "ndarray" => Device::ndarray(),
        #[cfg(feature = "burn-flex")]
        "flex" => Device::flex(),
        other => panic!("BURN_BACKEND={other}: ndarray, or flex with the burn-flex feature"),
    };
    let device = plain.clone().autodiff();
    device.seed(s.seed);
    plain.seed(s.seed);

    let train = load(&s.data_dir, "train");
    let test = load(&s.data_dir, "t10k");
    let mut model = LeNet::new(&device, s.dropout);
    let params: usize = model.num_params();
    println!(
        "burn 0.22.1 backend {backend}  LeNet params {params} ({:.4} MB = {:.4} MiB f32)  batch {BATCH} lr {LR} seed {} dropout {}",
        params as f64 * 4.0 / 1e6,
        params as f64 * 4.0 / (1 << 20) as f64,
        s.seed,
        s.dropout
    );
    let mut optim = SgdConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);

    for epoch in 1..=s.epochs {
        let order = epoch_order(s.seed, epoch, train.len());
        let start = Instant::now();
        let (mut sum, mut seen, mut last) = (0f64, 0usize, 0f32);
        for (bi, idx) in order.chunks(BATCH).enumerate() {
            if s.max_batches > 0 && bi == s.max_batches {
                break;
            }
            let (x, y, _) = batch_tensors(&train, idx, &device);
            let loss = loss_fn.forward(model.forward(x), y);
            last = loss.clone().into_scalar::<f32>();
            sum += last as f64;
            seen += idx.len();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(LR, model, grads);
        }
        let secs = start.elapsed().as_secs_f64();

        let eval = model.valid();
        let mut hits = 0;
        for idx in (0..test.len()).collect::<Vec<_>>().chunks(1000) {
            let (x, _, y) = batch_tensors(&test, idx, &plain);
            let logits = eval.forward(x).into_data().to_vec::<f32>().unwrap();
            hits += argmax_hits(&logits, &y);
        }
        let batches = seen.div_ceil(BATCH);
        report(epoch, secs, seen, hits as f64 / test.len() as f64, sum / batches as f64, last);
    }
}
