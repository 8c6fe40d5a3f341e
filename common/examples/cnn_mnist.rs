//! Flint's CNN engine on MNIST, for bench/cnn-bench.sh: FLIS's LeNet, SGD, the batch order of
//! bench/cnn/common.rs (SplitMix64 Fisher–Yates per epoch, the same in every engine), one
//! report line per epoch in the format the script parses. Settings from the environment:
//! EPOCHS, SEED, MAX_BATCHES, FLINT_DATA_DIR (DROPOUT is not supported: FLIS's LeNet has none).
//!
//!   FLINT_DATA_DIR=../shared/data cargo run --release -p flint-common --example cnn_mnist

use std::path::Path;
use std::time::Instant;

use flint_common::data::idx;
use flint_common::model::cnn::{ArchName, Architecture, Cnn, CnnHyper, Samples, Trainer};
use flint_common::rng::derive_rng;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

fn load(dir: &Path, prefix: &str) -> (Vec<u8>, Vec<u32>) {
    let images = idx::load(&dir.join(format!("{prefix}-images-idx3-ubyte.gz"))).unwrap();
    let labels = idx::load(&dir.join(format!("{prefix}-labels-idx1-ubyte.gz"))).unwrap();
    (
        images.data,
        labels.data.iter().map(|&l| u32::from(l)).collect(),
    )
}

/// bench/cnn/common.rs's SplitMix64 and its per-epoch Fisher–Yates order.
fn epoch_order(seed: u64, epoch: u64, n: usize) -> Vec<usize> {
    let mut s = seed ^ 0x5851_F42D_4C95_7F2D_u64.wrapping_mul(epoch + 1);
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order
}

fn main() {
    let (epochs, seed, max_batches) = (env("EPOCHS", 2), env("SEED", 1), env("MAX_BATCHES", 0));
    let data = std::env::var("FLINT_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let dir = Path::new(&data).join("mnist");
    let (train_x, train_y) = load(&dir, "train");
    let (test_x, test_y) = load(&dir, "t10k");
    let train = Samples {
        pixels: &train_x,
        labels: &train_y,
        per: 784,
    };
    let test = Samples {
        pixels: &test_x,
        labels: &test_y,
        per: 784,
    };
    let arch = Architecture::new(ArchName::Lenet, 1, 28, 10).unwrap();
    let mut cnn = Cnn::init(arch, &mut derive_rng(seed, "cnn-init", 0));
    let hyper = CnnHyper {
        batch_size: 32,
        learning_rate: 0.01,
        ..CnnHyper::default()
    };
    println!(
        "flint cnn (matrixmultiply) LeNet params {} batch 32 lr 0.01 seed {seed}",
        cnn.params.len()
    );
    let mut trainer = Trainer::default();
    for epoch in 1..=epochs {
        let order = epoch_order(seed, epoch, train.len());
        let start = Instant::now();
        let (mut total, mut seen, mut batches, mut last) = (0.0f64, 0, 0, 0.0f32);
        for (bi, batch) in order.chunks(32).enumerate() {
            if max_batches > 0 && bi as u64 == max_batches {
                break;
            }
            last = trainer.step(&mut cnn, &train, batch, &hyper, None);
            total += f64::from(last);
            seen += batch.len();
            batches += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let hits = cnn
            .predict(&test)
            .iter()
            .zip(&test_y)
            .filter(|(p, y)| p == y)
            .count();
        println!(
            "epoch {epoch} train {secs:.2} s  {:.1} samples/s  test accuracy {:.2} %  mean loss {:.6}  last loss {last:.9} bits {:#010x}",
            seen as f64 / secs,
            hits as f64 / test_y.len() as f64 * 100.0,
            total / f64::from(batches),
            last.to_bits()
        );
    }
}
