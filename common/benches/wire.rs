//! The wire's codes: a TPFL update's 300 clause weights (`weight_code`) and a
//! FedTMOS class's 200 × 142 include bits (`include_code`, Fashion-MNIST's machine), encoded and
//! read back (decoding includes the canonical check, a second encoding). Seeded vectors shaped
//! like the real ones: weights around ±60, a quarter of the literals included.
//!
//! cargo bench -p flint-common --bench wire

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flint_common::model::tm::parts::IncludeBits;
use flint_common::rng::derive_rng;
use flint_common::wire::{include_code, weight_code};
use rand::RngExt;

const CLAUSES: usize = 200;
const LITERALS: usize = 142;

fn weights() -> Vec<i32> {
    let mut rng = derive_rng(1, "bench-weights", 0);
    (0..300)
        .map(|_| {
            let m: i32 = (0..3).map(|_| rng.random_range(0..40)).sum();
            if rng.random_bool(0.4) { -m } else { m }
        })
        .collect()
}

fn include_bits() -> IncludeBits {
    let mut rng = derive_rng(1, "bench-include", 0);
    let mut bits = vec![0u8; IncludeBits::bytes_for(CLAUSES, LITERALS)];
    for i in 0..CLAUSES * LITERALS {
        if rng.random_bool(0.27) {
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    IncludeBits(bits)
}

fn codes(c: &mut Criterion) {
    let w = weights();
    let code = weight_code::encode(&w);
    let mut g = c.benchmark_group("weight code, 300 weights");
    g.throughput(Throughput::Elements(w.len() as u64));
    g.bench_function("encode", |b| b.iter(|| weight_code::encode(&w)));
    g.bench_function("decode and check", |b| {
        b.iter(|| weight_code::decode(&code, w.len()).unwrap())
    });
    g.finish();

    let bits = include_bits();
    let code = include_code::encode(&bits, CLAUSES, LITERALS);
    let mut g = c.benchmark_group("include code, 200 x 142 bits");
    g.throughput(Throughput::Elements((CLAUSES * LITERALS) as u64));
    g.bench_function("encode", |b| {
        b.iter(|| include_code::encode(&bits, CLAUSES, LITERALS))
    });
    g.bench_function("decode and check", |b| {
        b.iter(|| include_code::decode(&code, CLAUSES, LITERALS).unwrap())
    });
    g.finish();
}

criterion_group!(benches, codes);
criterion_main!(benches);
