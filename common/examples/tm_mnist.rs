//! Trains a multi-class Tsetlin Machine on binarized MNIST (pixel > 75) and prints, per epoch,
//! the training time and test accuracy. Used by `scripts/tm-bench.sh` beside the peers.
//!
//! cargo run --release -p flint-common --example tm_mnist -- CLAUSES T S EPOCHS [WEIGHTED] [TRAIN_ROWS]

use std::path::Path;
use std::time::Instant;

use flint_common::data::booleanize::{BitRows, Threshold, threshold_images};
use flint_common::data::{default_data_dir, idx};
use flint_common::model::tm::{FeedbackMasks, MultiClassTm, TmHyper, TmParams};
use flint_common::rng::derive_rng;

fn load(dir: &Path, images: &str, labels: &str) -> BitRows {
    let img = idx::load(&dir.join(images)).expect("images");
    let lab = idx::load(&dir.join(labels)).expect("labels");
    let labels: Vec<u32> = lab.data.iter().map(|&l| u32::from(l)).collect();
    threshold_images(
        &img.data,
        img.dims[1] * img.dims[2],
        &labels,
        10,
        Threshold::Above(75.0),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let clauses: usize = arg(0, "100").parse().expect("clauses");
    let t: i32 = arg(1, "1000").parse().expect("T");
    let s: f64 = arg(2, "10").parse().expect("s");
    let epochs: usize = arg(3, "10").parse().expect("epochs");
    let weighted: bool = arg(4, "false").parse().expect("weighted");
    let rows: usize = arg(5, "60000").parse().expect("train rows");
    let dir = default_data_dir().join("mnist");
    let train = load(
        &dir,
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
    )
    .head(rows);
    let test = load(
        &dir,
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    );
    let hyper = TmHyper::from_params(&TmParams {
        clauses: Some(clauses),
        t: Some(t),
        s: Some(s),
        weighted: Some(weighted),
        ..Default::default()
    })
    .expect("hyper-parameters");
    let mut rng = derive_rng(1, "tm-mnist", 0);
    let mut masks = FeedbackMasks::new(s, &mut rng);
    let mut tm = MultiClassTm::new(hyper, train.features(), 10);
    println!(
        "flint multiclass clauses={clauses} T={t} s={s} weighted={weighted} train={}",
        train.len()
    );
    for epoch in 1..=epochs {
        let start = Instant::now();
        tm.fit_epoch(&train, &mut masks, &mut rng);
        let train_secs = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let acc = tm.accuracy(&test);
        let test_secs = start.elapsed().as_secs_f64();
        println!(
            "epoch {epoch} train {train_secs:.2} s  test accuracy {:.2} %  inference {:.0} samples/s",
            100.0 * acc,
            test.len() as f64 / test_secs
        );
    }
}
