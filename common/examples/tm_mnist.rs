//! Trains a Tsetlin Machine on binarized MNIST (pixel > 75) and prints, per epoch, the training
//! time, test accuracy and inference speed. Run by `bench/tm-bench.sh` beside the peers.
//!
//! cargo run --release -p flint-common --example tm_mnist -- MACHINE CLAUSES T S EPOCHS [WEIGHTED] [TRAIN_ROWS] [BOOST] [NEGATIVE] [THREADS]
//! MACHINE: multiclass (CLAUSES per class), coalesced (CLAUSES shared) or conv (CLAUSES per
//! class over 10×10 patches). THREADS (multiclass only): 0 = one random stream (default),
//! 1 or 2 = a stream per class, with 2 threads updating the target and negative class at once.

use std::time::Instant;

use flint_common::data::booleanize::{BitRows, Threshold};
use flint_common::data::default_data_dir;
use flint_common::data::mnist::{self, Split};
use flint_common::model::tm::conv::{ConvTm, PatchSpec};
use flint_common::model::tm::{CoalescedTm, FeedbackMasks, MultiClassTm, TmHyper};
use flint_common::rng::{FlintRng, derive_rng};

enum Machine {
    MultiClass(MultiClassTm),
    Coalesced(CoalescedTm),
    Conv(ConvTm),
}

impl Machine {
    fn fit_epoch(
        &mut self,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        threads: usize,
    ) {
        match self {
            Machine::MultiClass(tm) if threads > 0 => tm.fit_epoch_threaded(data, rng, threads),
            Machine::MultiClass(tm) => tm.fit_epoch(data, masks, rng),
            Machine::Coalesced(tm) => tm.fit_epoch(data, masks, rng),
            Machine::Conv(tm) => tm.fit_epoch(data, masks, rng),
        }
    }

    /// Included literals per clause, on average, where one bank is shared (what the coalesced
    /// machine's block evaluation reads per clause).
    fn included_per_clause(&self) -> Option<f64> {
        let Machine::Coalesced(tm) = self else {
            return None;
        };
        let bank = tm.bank();
        let included: u32 = (0..bank.clauses())
            .flat_map(|j| bank.include(j).iter().map(|w| w.count_ones()))
            .sum();
        Some(f64::from(included) / bank.clauses() as f64)
    }

    fn accuracy(&self, data: &BitRows) -> f64 {
        match self {
            Machine::MultiClass(tm) => tm.accuracy(data),
            Machine::Coalesced(tm) => tm.accuracy(data),
            Machine::Conv(tm) => tm.accuracy(data),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let machine = arg(0, "multiclass");
    let clauses: usize = arg(1, "100").parse().expect("clauses");
    let t: i32 = arg(2, "1000").parse().expect("T");
    let s: f64 = arg(3, "10").parse().expect("s");
    let epochs: usize = arg(4, "10").parse().expect("epochs");
    let weighted: bool = arg(5, "true").parse().expect("weighted");
    let rows: usize = arg(6, "60000").parse().expect("train rows");
    let boost: bool = arg(7, "true").parse().expect("boost");
    let negative = arg(8, "uniform");
    let threads: usize = arg(9, "0").parse().expect("threads");
    let dir = default_data_dir().join("mnist");
    let threshold = Threshold::Above(75.0);
    let train = mnist::load(&dir, Split::Train, threshold)
        .expect("MNIST train split")
        .head(rows);
    let test = mnist::load(&dir, Split::Test, threshold).expect("MNIST test split");
    let hyper = TmHyper {
        clauses,
        t,
        s,
        weighted,
        boost_true_positive: boost,
        negative_sampling: flint_common::params::parse_name("tm.negative_sampling", &negative)
            .expect("negative sampling"),
        ..Default::default()
    }
    .check()
    .expect("hyper-parameters");
    let mut rng = derive_rng(1, "tm-mnist", 0);
    let mut masks = FeedbackMasks::new(s, &mut rng);
    let mut tm = match machine.as_str() {
        "multiclass" => Machine::MultiClass(MultiClassTm::new(hyper, train.features(), 10)),
        "coalesced" => Machine::Coalesced(CoalescedTm::new(hyper, train.features(), 10, &mut rng)),
        "conv" => {
            let spec = PatchSpec {
                width: 28,
                height: 28,
                channels: 1,
                patch: 10,
            };
            Machine::Conv(ConvTm::new(hyper, spec, 10).expect("patch fits"))
        }
        other => panic!("unknown machine {other:?}; expected multiclass or coalesced"),
    };
    println!(
        "flint {machine} clauses={clauses} T={t} s={s} weighted={weighted} boost={boost} negative={negative} threads={threads} train={}",
        train.len()
    );
    for epoch in 1..=epochs {
        let start = Instant::now();
        tm.fit_epoch(&train, &mut masks, &mut rng, threads);
        let train_secs = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let acc = tm.accuracy(&test);
        let test_secs = start.elapsed().as_secs_f64();
        let included = tm.included_per_clause().map_or(String::new(), |n| {
            format!("  included literals per clause {n:.1}")
        });
        println!(
            "epoch {epoch} train {train_secs:.2} s  test accuracy {:.2} %  inference {:.0} samples/s{included}",
            100.0 * acc,
            test.len() as f64 / test_secs
        );
    }
}
