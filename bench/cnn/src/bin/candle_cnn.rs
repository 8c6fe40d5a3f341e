//! FLIS's LeNet for MNIST (see docs/results/cnn-engine.md) trained with candle on one CPU thread.
//! candle's CPU device cannot be seeded (Device::set_seed bails; Tensor::rand/randn and so
//! candle_nn's initializers and ops::dropout draw from rand::rng()), so this binary draws the
//! initial weights (uniform +-1/sqrt(fan_in), PyTorch's and burn's default bound) and the dropout
//! masks itself from SplitMix seeded with SEED.

#[path = "../common.rs"]
mod common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Module, Optimizer, SGD};
use common::*;
use std::time::Instant;

type R<T> = candle_core::Result<T>;

struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    dropout: f64,
}

fn param(rng: &mut SplitMix, shape: &[usize], fan_in: usize, vars: &mut Vec<Var>) -> R<Tensor> {
    let bound = 1.0 / (fan_in as f32).sqrt();
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| (rng.next_f32() * 2.0 - 1.0) * bound).collect();
    let var = Var::from_vec(data, shape, &Device::Cpu)?;
    let t = var.as_tensor().clone();
    vars.push(var);
    Ok(t)
}

impl LeNet {
    fn new(rng: &mut SplitMix, dropout: f64, vars: &mut Vec<Var>) -> R<Self> {
        let cfg = Conv2dConfig::default();
        Ok(Self {
            conv1: Conv2d::new(
                param(rng, &[20, 1, 5, 5], 25, vars)?,
                Some(param(rng, &[20], 25, vars)?),
                cfg,
            ),
            conv2: Conv2d::new(
                param(rng, &[50, 20, 5, 5], 500, vars)?,
                Some(param(rng, &[50], 500, vars)?),
                cfg,
            ),
            fc1: Linear::new(param(rng, &[500, 800], 800, vars)?, Some(param(rng, &[500], 800, vars)?)),
            fc2: Linear::new(param(rng, &[10, 500], 500, vars)?, Some(param(rng, &[10], 500, vars)?)),
            dropout,
        })
    }

    /// `mask_rng`: Some while training (dropout applied), None for evaluation.
    fn forward(&self, x: &Tensor, mask_rng: Option<&mut SplitMix>) -> R<Tensor> {
        let x = self.conv1.forward(x)?.max_pool2d(2)?.relu()?;
        let x = self.conv2.forward(&x)?.max_pool2d(2)?.relu()?;
        let mut x = self.fc1.forward(&x.flatten_from(1)?)?.relu()?;
        if let (Some(rng), true) = (mask_rng, self.dropout > 0.0) {
            let keep = 1.0 - self.dropout as f32;
            let n = x.elem_count();
            let mask: Vec<f32> =
                (0..n).map(|_| if rng.next_f32() < keep { 1.0 / keep } else { 0.0 }).collect();
            x = x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?)?;
        }
        self.fc2.forward(&x)
    }
}

fn batch(data: &Mnist, idx: &[usize]) -> R<(Tensor, Tensor, Vec<u8>)> {
    let (x, y) = gather(data, idx);
    let b = idx.len();
    let xt = Tensor::from_vec(x, (b, 1, 28, 28), &Device::Cpu)?;
    let yt = Tensor::from_vec(y.iter().map(|&l| l as u32).collect::<Vec<_>>(), b, &Device::Cpu)?;
    Ok((xt, yt, y))
}

fn main() -> R<()> {
    let s = Settings::from_env();
    let train = load(&s.data_dir, "train");
    let test = load(&s.data_dir, "t10k");
    let mut rng = SplitMix(s.seed);
    let mut vars = Vec::new();
    let model = LeNet::new(&mut rng, s.dropout, &mut vars)?;
    let params: usize = vars.iter().map(|v| v.elem_count()).sum();
    println!(
        "candle 0.11.1 cpu  LeNet params {params} ({:.4} MB = {:.4} MiB f32)  batch {BATCH} lr {LR} seed {} dropout {}  threads {}",
        params as f64 * 4.0 / 1e6,
        params as f64 * 4.0 / (1 << 20) as f64,
        s.seed,
        s.dropout,
        candle_core::utils::get_num_threads()
    );
    let mut optim = SGD::new(vars, LR)?;

    for epoch in 1..=s.epochs {
        let order = epoch_order(s.seed, epoch, train.len());
        let start = Instant::now();
        let (mut sum, mut seen, mut last) = (0f64, 0usize, 0f32);
        for (bi, idx) in order.chunks(BATCH).enumerate() {
            if s.max_batches > 0 && bi == s.max_batches {
                break;
            }
            let (x, y, _) = batch(&train, idx)?;
            let logits = model.forward(&x, Some(&mut rng))?;
            let loss = candle_nn::loss::cross_entropy(&logits, &y)?;
            last = loss.to_scalar::<f32>()?;
            sum += last as f64;
            seen += idx.len();
            optim.backward_step(&loss)?;
        }
        let secs = start.elapsed().as_secs_f64();

        let mut hits = 0;
        for idx in (0..test.len()).collect::<Vec<_>>().chunks(1000) {
            let (x, _, y) = batch(&test, idx)?;
            let logits = model.forward(&x, None)?.detach().to_dtype(DType::F32)?;
            hits += argmax_hits(&logits.flatten_all()?.to_vec1::<f32>()?, &y);
        }
        let batches = seen.div_ceil(BATCH);
        report(epoch, secs, seen, hits as f64 / test.len() as f64, sum / batches as f64, last);
    }
    Ok(())
}
