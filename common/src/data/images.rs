//! Image datasets (MNIST, Fashion-MNIST), loaded once per process into an [`ImagePool`], from
//! which each client's [`ImageShard`] takes its rows: booleanized for Tsetlin Machines
//! ([`BitShard`]), as bytes for the neural baselines ([`PixelShard`]). Both draw the same rows
//! for the same seed.
//!
//! TPFL §6.3 gives every client a training, a test and a confidence set drawn with the client's
//! own Dirichlet class proportions. Two ways to draw the last two ([`Holdout`]):
//! - `disjoint` (default): training rows come from the official training images; test and
//!   confidence rows from the official test images, split once (per class, seeded) into two
//!   halves, so a client's test, confidence and training rows never overlap. A class with fewer
//!   held-out rows than a client asks for is drawn with replacement.
//! - `paper-code`: test and confidence rows are random subsets of the client's own training
//!   rows, as the published code does (docs/papers/tpfl.md §8); accuracy is then measured on
//!   training data.

use std::path::Path;

use rand::seq::SliceRandom;

use super::booleanize::{Binarize, BitRows};
use super::mnist::{self, Split};
use super::partition::{ClassPools, dirichlet_proportions};
use super::pixels::PixelRows;
use crate::rng::derive_rng;
use crate::{ClientId, FlintError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSet {
    Mnist,
    FashionMnist,
}

impl ImageSet {
    /// Pixels per image: both sets are 28 × 28.
    pub fn pixels(self) -> usize {
        28 * 28
    }

    /// Pixel `k`'s name in rules: `pixel(row,column)`, from the top left.
    pub fn pixel_name(self, k: usize) -> String {
        format!("pixel({},{})", k / 28, k % 28)
    }

    /// Folder below the data directory.
    pub fn dir(self) -> &'static str {
        match self {
            ImageSet::Mnist => "mnist",
            ImageSet::FashionMnist => "fashion-mnist",
        }
    }

    pub fn classes(self) -> Vec<String> {
        match self {
            ImageSet::Mnist => (0..10).map(|d| d.to_string()).collect(),
            ImageSet::FashionMnist => [
                "t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
                "bag", "boot",
            ]
            .iter()
            .map(|c| c.to_string())
            .collect(),
        }
    }
}

/// Labelled rows a shard takes a selection of: booleanized images or their bytes.
pub trait ImageRows: Sized + Send + Sync {
    fn select(&self, rows: &[usize]) -> Self;
    /// Inputs per row: bits, or pixels.
    fn features(&self) -> usize;
    fn labels(&self) -> &[u32];
    fn classes(&self) -> usize;
}

impl ImageRows for BitRows {
    fn select(&self, rows: &[usize]) -> Self {
        BitRows::select(self, rows)
    }

    fn features(&self) -> usize {
        BitRows::features(self)
    }

    fn labels(&self) -> &[u32] {
        &self.labels
    }

    fn classes(&self) -> usize {
        self.classes
    }
}

impl ImageRows for PixelRows {
    fn select(&self, rows: &[usize]) -> Self {
        let mut pixels = Vec::with_capacity(rows.len() * self.per);
        for &r in rows {
            pixels.extend_from_slice(&self.pixels[r * self.per..][..self.per]);
        }
        PixelRows {
            per: self.per,
            pixels,
            labels: rows.iter().map(|&r| self.labels[r]).collect(),
            classes: self.classes,
        }
    }

    fn features(&self) -> usize {
        self.per
    }

    fn labels(&self) -> &[u32] {
        &self.labels
    }

    fn classes(&self) -> usize {
        self.classes
    }
}

/// Both official splits.
#[derive(Debug, Clone)]
pub struct ImagePool<R = BitRows> {
    pub train: R,
    pub test: R,
}

impl<R: ImageRows> ImagePool<R> {
    /// The run's shared test set: the official test images at `rows` (those that exist), as
    /// the test split of a shard with no training rows.
    pub fn shared_test(&self, rows: std::ops::Range<usize>) -> ImageShard<R> {
        let rows: Vec<usize> = rows.filter(|&i| i < self.test.labels().len()).collect();
        ImageShard {
            train: self.train.select(&[]),
            test: self.test.select(&rows),
            confidence: None,
            prefit: None,
        }
    }
}

impl ImagePool<PixelRows> {
    /// Both splits as bytes.
    pub fn load_pixels(data_dir: &Path, set: ImageSet) -> Result<Self> {
        let dir = data_dir.join(set.dir());
        Ok(ImagePool {
            train: mnist::load_pixels(&dir, Split::Train)?,
            test: mnist::load_pixels(&dir, Split::Test)?,
        })
    }
}

impl ImagePool {
    pub fn load(
        data_dir: &Path,
        set: ImageSet,
        how: impl Into<Binarize> + Copy,
    ) -> Result<ImagePool> {
        let dir = data_dir.join(set.dir());
        Ok(ImagePool {
            train: mnist::load(&dir, Split::Train, how)?,
            test: mnist::load(&dir, Split::Test, how)?,
        })
    }
}

/// Where a client's test and confidence rows come from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Holdout {
    Disjoint,
    PaperCode,
}

/// How many rows each split of a client holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSizes {
    pub train: usize,
    pub test: usize,
    /// Rows of a confidence split, for strategies that need one (TPFL's); none is drawn for the
    /// others.
    pub confidence: Option<usize>,
}

/// An image client's data: training, test and (if asked for) confidence rows.
#[derive(Debug, Clone)]
pub struct ImageShard<R = BitRows> {
    pub train: R,
    pub test: R,
    pub confidence: Option<R>,
    /// Another client's training rows, fitted for one epoch before the client's own (the
    /// FedTMOS code's data leak, `fedtmos.copy_data_epoch`); `None` everywhere else.
    pub prefit: Option<R>,
}

/// A Tsetlin Machine client's data, packed bits.
pub type BitShard = ImageShard<BitRows>;
/// A neural network client's data, bytes.
pub type PixelShard = ImageShard<PixelRows>;

/// What every client of a process draws its shard from, grouped by class once.
pub struct ShardSource<'a, R = BitRows> {
    pool: &'a ImagePool<R>,
    seed: u64,
    train: ClassPools,
    test_half: ClassPools,
    confidence_half: ClassPools,
}

impl<'a, R: ImageRows> ShardSource<'a, R> {
    pub fn new(pool: &'a ImagePool<R>, seed: u64) -> Result<ShardSource<'a, R>> {
        let (test_half, confidence_half) = held_out_halves(&pool.test, seed)?;
        Ok(ShardSource {
            pool,
            seed,
            train: ClassPools::new(pool.train.labels(), pool.train.classes())?,
            test_half,
            confidence_half,
        })
    }

    /// Client `client`'s shard: class proportions from Dirichlet(alpha), rows drawn as
    /// `holdout` says. Every client process computes the same shard for the same seed.
    pub fn dirichlet(
        &self,
        alpha: f64,
        sizes: ShardSizes,
        holdout: Holdout,
        client: ClientId,
    ) -> Result<ImageShard<R>> {
        let pool = self.pool;
        let k = client as usize;
        // The same stream as `partition::dirichlet`, so a table and an image run of one seed
        // give a client the same class proportions.
        let mut rng = derive_rng(self.seed, "dirichlet", client);
        let p = dirichlet_proportions(self.train.classes(), alpha, &mut rng, k)?;
        let train_rows = self.train.draw(&p, sizes.train, &mut rng, k)?;
        let (test_rows, conf_rows) = match holdout {
            Holdout::Disjoint => {
                let test = self.test_half.draw(&p, sizes.test, &mut rng, k)?;
                let confidence = match sizes.confidence {
                    Some(n) => Some(self.confidence_half.draw(&p, n, &mut rng, k)?),
                    None => None,
                };
                (test, confidence)
            }
            Holdout::PaperCode => {
                let confidence = sizes.confidence.unwrap_or(0);
                if sizes.test > train_rows.len() || confidence > train_rows.len() {
                    return Err(FlintError::Partition(format!(
                        "client {client}: paper-code evaluation takes its {} test and {confidence} confidence rows from its {} training rows; ask for fewer",
                        sizes.test,
                        train_rows.len()
                    )));
                }
                let mut a = train_rows.clone();
                a.shuffle(&mut rng);
                let b = sizes.confidence.map(|n| {
                    let mut b = train_rows.clone();
                    b.shuffle(&mut rng);
                    b[..n].to_vec()
                });
                (a[..sizes.test].to_vec(), b)
            }
        };
        let held_out = match holdout {
            Holdout::Disjoint => &pool.test,
            Holdout::PaperCode => &pool.train,
        };
        let mut train_rows = train_rows;
        train_rows.shuffle(&mut rng);
        Ok(ImageShard {
            train: pool.train.select(&train_rows),
            test: held_out.select(&test_rows),
            confidence: conf_rows.map(|rows| held_out.select(&rows)),
            prefit: None,
        })
    }
}

impl<R: ImageRows> ShardSource<'_, R> {
    /// Client `client`'s shard from its training rows (a split of the whole training set):
    /// its test rows drawn from the test half with the same class proportions.
    pub fn from_rows(
        &self,
        rows: &[usize],
        test: usize,
        client: ClientId,
    ) -> Result<ImageShard<R>> {
        let pool = self.pool;
        let mut counts = vec![0usize; self.train.classes()];
        for &i in rows {
            counts[pool.train.labels()[i] as usize] += 1;
        }
        let p: Vec<f64> = counts.iter().map(|&n| n as f64).collect();
        let mut rng = derive_rng(self.seed, "shard-from-rows", client);
        let test_rows = self.test_half.draw(&p, test, &mut rng, client as usize)?;
        let mut train_rows = rows.to_vec();
        train_rows.shuffle(&mut rng);
        Ok(ImageShard {
            train: pool.train.select(&train_rows),
            test: pool.test.select(&test_rows),
            confidence: None,
            prefit: None,
        })
    }
}

impl<R: ImageRows> ImageShard<R> {
    pub fn train_class_counts(&self) -> Vec<u64> {
        let mut n = vec![0u64; self.train.classes()];
        for &c in self.train.labels() {
            n[c as usize] += 1;
        }
        n
    }
}

/// The official test rows split per class into two seeded halves: test and confidence pools.
fn held_out_halves(test: &impl ImageRows, seed: u64) -> Result<(ClassPools, ClassPools)> {
    let (labels, classes) = (test.labels(), test.classes());
    let mut rng = derive_rng(seed, "holdout-halves", 0);
    let mut order: Vec<usize> = (0..labels.len()).collect();
    order.shuffle(&mut rng);
    let mut in_first = vec![false; labels.len()];
    let mut seen = vec![0usize; classes];
    for i in order {
        let c = labels[i] as usize;
        in_first[i] = seen[c].is_multiple_of(2);
        seen[c] += 1;
    }
    let all = ClassPools::new(labels, classes)?;
    Ok((all.filter(|i| in_first[i]), all.filter(|i| !in_first[i])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 classes, `per_class` rows each; a row's first word holds its index so rows can be
    /// traced back.
    fn rows(per_class: usize, offset: u64) -> BitRows {
        let mut b = BitRows::new(64, 10);
        for i in 0..10 * per_class {
            b.push_words(&[offset + i as u64], (i % 10) as u32);
        }
        b
    }

    fn pool() -> ImagePool {
        ImagePool {
            train: rows(100, 0),
            test: rows(40, 1 << 32),
        }
    }

    fn ids(b: &BitRows) -> std::collections::BTreeSet<u64> {
        (0..b.len()).map(|i| b.row(i)[0]).collect()
    }

    const SIZES: ShardSizes = ShardSizes {
        train: 300,
        test: 100,
        confidence: Some(100),
    };

    #[test]
    fn disjoint_holdout_never_shares_a_row_with_training_or_between_its_halves() {
        let s = ShardSource::new(&pool(), 5)
            .unwrap()
            .dirichlet(10_000.0, SIZES, Holdout::Disjoint, 3)
            .unwrap();
        assert_eq!((s.train.len(), s.test.len()), (300, 100));
        let confidence = s.confidence.as_ref().unwrap();
        assert_eq!(confidence.len(), 100);
        let (tr, te, co) = (ids(&s.train), ids(&s.test), ids(confidence));
        assert!(tr.iter().all(|&i| i < 1 << 32));
        assert!(te.iter().chain(&co).all(|&i| i >= 1 << 32));
        assert!(te.is_disjoint(&co));
        // Labels travel with their rows.
        for b in [&s.train, &s.test, confidence] {
            for i in 0..b.len() {
                assert_eq!(b.labels[i] as u64, (b.row(i)[0] & 0xffff_ffff) % 10);
            }
        }
    }

    #[test]
    fn holdout_follows_the_clients_class_proportions() {
        // α small: the client holds few classes, and its test rows are of those classes.
        let s = ShardSource::new(&pool(), 9)
            .unwrap()
            .dirichlet(0.05, SIZES, Holdout::Disjoint, 1)
            .unwrap();
        let train: std::collections::BTreeSet<u32> = s.train.labels.iter().copied().collect();
        let test: std::collections::BTreeSet<u32> = s.test.labels.iter().copied().collect();
        assert!(test.is_subset(&train), "{test:?} ⊄ {train:?}");
        let share = |b: &BitRows, c: u32| {
            b.labels.iter().filter(|&&l| l == c).count() as f64 / b.len() as f64
        };
        for c in 0..10 {
            let (a, b) = (share(&s.train, c), share(&s.test, c));
            assert!(
                (a - b).abs() < 0.02,
                "class {c}: {a} of training, {b} of test"
            );
        }
    }

    #[test]
    fn paper_code_holdout_reuses_training_rows() {
        let s = ShardSource::new(&pool(), 5)
            .unwrap()
            .dirichlet(10_000.0, SIZES, Holdout::PaperCode, 2)
            .unwrap();
        let tr = ids(&s.train);
        assert!(ids(&s.test).is_subset(&tr));
        assert!(ids(s.confidence.as_ref().unwrap()).is_subset(&tr));
        let too_many = ShardSizes { test: 301, ..SIZES };
        let e = ShardSource::new(&pool(), 5)
            .unwrap()
            .dirichlet(1.0, too_many, Holdout::PaperCode, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("from its 300 training rows"), "{e}");
    }

    #[test]
    fn a_clients_shard_depends_only_on_seed_and_id() {
        let a = ShardSource::new(&pool(), 5)
            .unwrap()
            .dirichlet(1.0, SIZES, Holdout::Disjoint, 4)
            .unwrap();
        let b = ShardSource::new(&pool(), 5)
            .unwrap()
            .dirichlet(1.0, SIZES, Holdout::Disjoint, 4)
            .unwrap();
        assert_eq!(a.train, b.train);
        assert_eq!(a.test, b.test);
        let c = ShardSource::new(&pool(), 5)
            .unwrap()
            .dirichlet(1.0, SIZES, Holdout::Disjoint, 5)
            .unwrap();
        assert_ne!(a.train, c.train);
    }
}
