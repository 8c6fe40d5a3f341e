//! Tsetlin Machine kernels: clause evaluation, one training epoch on a fixed subset
//! (multi-class, coalesced, convolutional), batched inference. Data are seeded synthetic 28×28
//! bit images (class-dependent strokes plus noise), so the benchmark needs no files;
//! `examples/tm_mnist.rs` measures on real MNIST.
//!
//! cargo bench -p flint-common --bench tm

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use flint_common::data::booleanize::BitRows;
use flint_common::model::tm::conv::{ConvTm, PatchSpec};
use flint_common::model::tm::{CoalescedTm, FeedbackMasks, MultiClassTm, TmHyper};
use flint_common::rng::{FlintRng, derive_rng};
use rand::RngExt;

/// Ten classes, each a different set of horizontal and vertical strokes, with 5 % pixel noise.
fn images(n: usize, rng: &mut FlintRng) -> BitRows {
    let mut rows = BitRows::new(784, 10);
    for _ in 0..n {
        let class = rng.random_range(0..10u32);
        let bits: Vec<bool> = (0..784)
            .map(|p| {
                let (r, c) = (p / 28, p % 28);
                let stroke = (r as u32 % 10 == class && c > 4 && c < 24)
                    || (c as u32 % 10 == class && r > 4 && r < 24);
                stroke ^ (rng.random::<f64>() < 0.05)
            })
            .collect();
        rows.push(&bits, class);
    }
    rows
}

fn trained(clauses: usize, t: i32, data: &BitRows, rng: &mut FlintRng) -> MultiClassTm {
    let hyper = TmHyper {
        clauses,
        t,
        s: 10.0,
        weighted: true,
        ..Default::default()
    }
    .check()
    .unwrap();
    let mut masks = FeedbackMasks::new(10.0, rng);
    let mut tm = MultiClassTm::new(hyper, 784, 10);
    tm.fit_epoch(data, &mut masks, rng);
    tm
}

/// One training epoch of a copy of `start` per iteration, from the same stream and masks.
fn epoch<M: Clone>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    start: &M,
    fit: impl Fn(&mut M, &mut FeedbackMasks, &mut FlintRng),
) {
    g.bench_function(name, |b| {
        b.iter_batched(
            || (start.clone(), derive_rng(2, "epoch", 0)),
            |(mut tm, mut rng)| {
                let mut masks = FeedbackMasks::new(10.0, &mut rng);
                fit(&mut tm, &mut masks, &mut rng);
                tm
            },
            criterion::BatchSize::LargeInput,
        )
    });
}

fn benches(c: &mut Criterion) {
    let mut rng = derive_rng(1, "bench", 0);
    let train = images(2000, &mut rng);
    let test = images(10_000, &mut rng);
    let small = trained(100, 1000, &train, &mut rng);
    let large = trained(2000, 5000, &train, &mut rng);

    c.bench_function(
        "clause evaluation: class sums of one example, 2000 clauses x 10 classes",
        |b| {
            let x = test.row(0);
            b.iter(|| std::hint::black_box(large.class_sums(std::hint::black_box(x))))
        },
    );
    let mut g = c.benchmark_group("training");
    g.sample_size(10);
    epoch(
        &mut g,
        "one epoch, 2000 examples, 100 clauses x 10 classes",
        &small,
        |tm, masks, rng| tm.fit_epoch(&train, masks, rng),
    );
    // TPFL's machine (the furthest behind 4× its peer): 1000 clauses shared by the classes, focused
    // negative sampling, as `bench/tm-bench.sh` runs it against green-tsetlin.
    let coalesced = {
        let hyper = TmHyper {
            clauses: 1000,
            t: 1000,
            s: 10.0,
            negative_sampling: flint_common::params::parse_name("tm.negative_sampling", "focused")
                .unwrap(),
            ..Default::default()
        }
        .check()
        .unwrap();
        let mut tm = CoalescedTm::new(hyper, 784, 10, &mut rng);
        let mut masks = FeedbackMasks::new(10.0, &mut rng);
        tm.fit_epoch(&train, &mut masks, &mut rng);
        tm
    };
    epoch(
        &mut g,
        "one epoch, 2000 examples, coalesced, 1000 clauses",
        &coalesced,
        |tm, masks, rng| tm.fit_epoch(&train, masks, rng),
    );
    g.finish();
    // FedTMOS's MNIST machine (docs/papers/fedtmos.md §1, §3): one-vs-all trains every class on
    // every example, the one-negative path one other class; the same images, side by side.
    let mut g = c.benchmark_group(
        "conv training, one epoch, 1000 examples, 10x10 patches, 100 clauses x 10 classes",
    );
    g.sample_size(10);
    let conv_images = images(1000, &mut rng);
    for sampling in ["uniform", "all"] {
        let hyper = TmHyper {
            clauses: 100,
            t: 1000,
            s: 5.0,
            weighted: true,
            negative_sampling: flint_common::params::parse_name("tm.negative_sampling", sampling)
                .unwrap(),
            ..Default::default()
        }
        .check()
        .unwrap();
        let spec = PatchSpec {
            width: 28,
            height: 28,
            channels: 1,
            patch: 10,
        };
        let start = ConvTm::new(hyper, spec, 10).unwrap();
        // threads 0: one random stream (fit_epoch); n: a stream per class over n threads.
        let runs: &[usize] = if sampling == "all" { &[0, 1, 2] } else { &[0] };
        for &threads in runs {
            let name = match threads {
                0 => sampling.to_string(),
                n => format!("{sampling}, class streams, {n}t"),
            };
            g.bench_function(name, |b| {
                b.iter_batched(
                    || (start.clone(), derive_rng(3, "conv-epoch", 0)),
                    |(mut tm, mut rng)| {
                        let mut masks = FeedbackMasks::new(5.0, &mut rng);
                        match threads {
                            0 => tm.fit_epoch(&conv_images, &mut masks, &mut rng),
                            n => tm.fit_epoch_threaded(&conv_images, &mut masks, &mut rng, n),
                        }
                        tm
                    },
                    criterion::BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("inference");
    g.sample_size(10);
    g.bench_function("batched, 10000 examples, 2000 clauses x 10 classes", |b| {
        b.iter(|| std::hint::black_box(large.predict_batch(&test)))
    });
    g.finish();
}

criterion_group!(tm, benches);
criterion_main!(tm);
