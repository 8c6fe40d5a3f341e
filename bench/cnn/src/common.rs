//! What both binaries share: MNIST loading, the seeded batch order, the settings from the
//! environment and the per-epoch report line that bench/cnn-bench.sh parses.

use std::io::Read;
use std::path::PathBuf;

pub const BATCH: usize = 32;
pub const LR: f64 = 0.01;

/// Settings read from the environment (bench/cnn-bench.sh sets them).
pub struct Settings {
    pub epochs: usize,
    pub seed: u64,
    /// Dropout before the last layer; 0 for the timed runs (FLIS's LeNet has none), 0.5 for the
    /// reproducibility runs so that the dropout stream is exercised too.
    pub dropout: f64,
    /// Stop an epoch after this many batches (0: the whole epoch); the reproducibility runs use it.
    pub max_batches: usize,
    pub data_dir: PathBuf,
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v} does not parse")),
        Err(_) => default,
    }
}

impl Settings {
    pub fn from_env() -> Self {
        let data: String = env("FLINT_DATA_DIR", "../shared/data".to_string());
        Self {
            epochs: env("EPOCHS", 2),
            seed: env("SEED", 1),
            dropout: env("DROPOUT", 0.0),
            max_batches: env("MAX_BATCHES", 0),
            data_dir: PathBuf::from(data).join("mnist"),
        }
    }
}

pub struct Mnist {
    /// Pixels scaled to [0, 1], row-major 28 x 28 per image.
    pub images: Vec<f32>,
    pub labels: Vec<u8>,
}

impl Mnist {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
}

fn gunzip(path: &PathBuf) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file).read_to_end(&mut out).unwrap();
    out
}

pub fn load(dir: &PathBuf, prefix: &str) -> Mnist {
    let img = gunzip(&dir.join(format!("{prefix}-images-idx3-ubyte.gz")));
    let lab = gunzip(&dir.join(format!("{prefix}-labels-idx1-ubyte.gz")));
    let n = u32::from_be_bytes(img[4..8].try_into().unwrap()) as usize;
    assert_eq!(img.len(), 16 + n * 784);
    assert_eq!(lab.len(), 8 + n);
    Mnist {
        images: img[16..].iter().map(|&p| p as f32 / 255.0).collect(),
        labels: lab[8..].to_vec(),
    }
}

/// SplitMix64: the one generator behind the batch order (and, in candle, the initialization and
/// dropout masks). torch_cnn.py carries the same few lines, so all three see the same batches.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 24 random bits (candle_cnn's initialization and dropout masks).
    #[allow(dead_code)]
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Fisher-Yates shuffle of 0..n for one epoch.
pub fn epoch_order(seed: u64, epoch: usize, n: usize) -> Vec<usize> {
    let mut rng = SplitMix(seed ^ (0x5851_F42D_4C95_7F2D_u64.wrapping_mul(epoch as u64 + 1)));
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// Gathers one batch: images flattened [b * 784] and labels.
pub fn gather(data: &Mnist, idx: &[usize]) -> (Vec<f32>, Vec<u8>) {
    let mut x = Vec::with_capacity(idx.len() * 784);
    let mut y = Vec::with_capacity(idx.len());
    for &i in idx {
        x.extend_from_slice(&data.images[i * 784..(i + 1) * 784]);
        y.push(data.labels[i]);
    }
    (x, y)
}

pub fn argmax_hits(logits: &[f32], labels: &[u8]) -> usize {
    logits
        .chunks(10)
        .zip(labels)
        .filter(|(row, &l)| {
            let mut best = 0;
            for k in 1..10 {
                if row[k] > row[best] {
                    best = k;
                }
            }
            best == l as usize
        })
        .count()
}

/// One line per epoch, the same format as torch_cnn.py.
pub fn report(epoch: usize, secs: f64, samples: usize, acc: f64, mean_loss: f64, last_loss: f32) {
    println!(
        "epoch {epoch} train {secs:.2} s  {:.1} samples/s  test accuracy {:.2} %  mean loss {mean_loss:.6}  last loss {last_loss:.9} bits {:#010x}",
        samples as f64 / secs,
        acc * 100.0,
        last_loss.to_bits()
    );
}
