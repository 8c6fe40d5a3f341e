//! FCM fitness evaluations per second on Breast Cancer Wisconsin (Blind FL's hot loop: PSO
//! scores every particle on the client's whole training split), and on a 42-concept map (16
//! features, 26 classes: the shape of UCI's Letter Recognition) over 16,000 seeded rows, the
//! training split of that table held by one client. A round at the defaults is 210
//! evaluations per client (10 particles, 1 + 20 swarm moves). Reads Breast Cancer from
//! `$FLINT_DATA_DIR` (default `../shared/data` beside the repository).
//!
//! cargo bench -p flint-common --bench fcm

use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flint_common::data::{DataSection, Dataset, Scaling, Shard};
use flint_common::model::fcm::{Evaluator, Fcm, FcmHyper};
use flint_common::rng::derive_rng;
use flint_common::strategy::fcm::{FcmSection, settle_steps};
use rand::RngExt;

fn data_dir() -> PathBuf {
    std::env::var_os("FLINT_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"))
}

fn fitness(c: &mut Criterion) {
    let spec = DataSection {
        source: flint_common::data::SourceName::BreastCancer,
        test_fraction: None,
        ..Default::default()
    }
    .check(Scaling::LocalMinMax)
    .unwrap();
    let dir = data_dir();
    let data = spec
        .load(&dir, 1)
        .unwrap_or_else(|e| panic!("{e}; set FLINT_DATA_DIR to the shared data folder"));
    let rows: Vec<usize> = (0..data.len()).collect();
    // The central split: 456 training rows, 30 features, min-max scaled.
    let shard = Shard::new(&data, &rows, 0.2, Scaling::LocalMinMax, 1, 1);
    let particles = particles(30, 2, "bench");
    let mut group = c.benchmark_group("fcm_fitness_breast_cancer_456_rows");
    group.throughput(Throughput::Elements(particles.len() as u64));
    for activation in ["tanh", "sigmoid"] {
        let hyper = FcmSection {
            activation: flint_common::params::parse_name("fcm.activation", activation).unwrap(),
            ..Default::default()
        }
        .check()
        .unwrap()
        .0;
        let mut eval = Evaluator::new(&shard.train, 2);
        group.bench_function(activation, |b| {
            b.iter(|| score(&mut eval, &particles, &hyper))
        });
    }
    group.finish();
}

/// Ten random particles (maps) of this shape, seeded by `label`.
fn particles(features: usize, classes: usize, label: &str) -> Vec<Vec<f64>> {
    let mut rng = derive_rng(1, label, 0);
    (0..10)
        .map(|_| {
            (0..Fcm::parameter_count(features, classes))
                .map(|_| rng.random_range(-1.0..=1.0))
                .collect()
        })
        .collect()
}

/// One fitness evaluation per particle, as a PSO iteration scores its swarm.
fn score(eval: &mut Evaluator<'_>, particles: &[Vec<f64>], hyper: &FcmHyper) -> f64 {
    particles.iter().map(|p| eval.fitness(p, hyper)).sum()
}

/// 16 features in [0, 1], 26 classes, each class a blob around a centre of its own.
fn letter_shaped(rows: usize) -> Dataset {
    let mut rng = derive_rng(2, "letter-shaped", 0);
    let centres: Vec<Vec<f64>> = (0..26)
        .map(|_| (0..16).map(|_| rng.random_range(0.2..0.8)).collect())
        .collect();
    let y: Vec<u32> = (0..rows).map(|_| rng.random_range(0..26)).collect();
    let x = y
        .iter()
        .flat_map(|&c| centres[c as usize].clone())
        .map(|v| (v + rng.random_range(-0.2..0.2)).clamp(0.0, 1.0))
        .collect();
    Dataset {
        features: 16,
        x,
        y,
        classes: (0..26).map(|c| format!("c{c}")).collect(),
        categorical: Vec::new(),
        feature_names: Vec::new(),
    }
}

fn fitness_42_concepts(c: &mut Criterion) {
    let data = letter_shaped(16_000);
    let particles = particles(16, 26, "bench-42");
    // The defaults: tanh, λ = 2, and the cap `[fcm]` gives 26 classes when left out (10).
    let hyper = FcmHyper {
        max_iterations: settle_steps(26),
        ..FcmSection::default().check().unwrap().0
    };
    let mut group = c.benchmark_group("fcm_fitness_42_concepts_16000_rows");
    group.sample_size(10);
    group.throughput(Throughput::Elements(particles.len() as u64));
    let mut eval = Evaluator::new(&data, 26);
    group.bench_function("tanh", |b| b.iter(|| score(&mut eval, &particles, &hyper)));
    group.finish();
}

criterion_group!(benches, fitness, fitness_42_concepts);
criterion_main!(benches);
