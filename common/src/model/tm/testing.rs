//! Shared test data for the machines' unit tests.

use rand::RngExt;

use super::TmHyper;
use crate::data::booleanize::BitRows;
use crate::rng::FlintRng;

/// A machine's hyper-parameters with the given clauses, T and s, the rest at their defaults.
pub(crate) fn hyper(clauses: usize, t: i32, s: f64) -> TmHyper {
    TmHyper {
        clauses,
        t,
        s,
        ..Default::default()
    }
    .check()
    .expect("valid test hyper-parameters")
}

/// Granmo 2018 §5.1: noisy XOR. The label is x0 XOR x1; the other ten bits are distractors; a
/// `noise` fraction of the labels is flipped.
pub(crate) fn noisy_xor(n: usize, noise: f64, rng: &mut FlintRng) -> BitRows {
    let mut rows = BitRows::new(12, 2);
    for _ in 0..n {
        let bits: Vec<bool> = (0..12).map(|_| rng.random::<bool>()).collect();
        let mut y = u32::from(bits[0] ^ bits[1]);
        if rng.random::<f64>() < noise {
            y ^= 1;
        }
        rows.push(&bits, y);
    }
    rows
}

/// Rows of `features` bits where class c sets its own block of features more often than
/// not: clauses include many literals early (taking feedback at once) and settle to a few.
pub(crate) fn blocks(rows: usize, features: usize, classes: u32, rng: &mut FlintRng) -> BitRows {
    let mut data = BitRows::new(features, classes as usize);
    let width = features / classes as usize;
    for _ in 0..rows {
        let y = rng.random_range(0..classes);
        let bits: Vec<bool> = (0..features)
            .map(|f| {
                let own = f / width == y as usize;
                rng.random::<f64>() < if own { 0.8 } else { 0.15 }
            })
            .collect();
        data.push(&bits, y);
    }
    data
}
