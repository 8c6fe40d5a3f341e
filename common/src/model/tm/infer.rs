//! Batched inference: 64 samples per machine word, over the included literals only.
//!
//! The samples are transposed so that one word holds one feature of 64 samples; a clause's
//! output for 64 samples is then the AND of its included literals' words, which usually reaches
//! zero after a few literals. Clause lists are compiled once from the include bits.

use super::patch_literals::PatchLiterals;
use crate::data::booleanize::BitRows;

/// Predictions from row-major class sums: the class with the largest sum, ties to the lowest.
pub fn predictions(sums: &[i32], classes: usize) -> Vec<u32> {
    sums.chunks(classes).map(argmax).collect()
}

/// The class with the largest sum, ties to the lowest.
pub fn argmax(sums: &[i32]) -> u32 {
    let mut best = 0;
    for (c, &v) in sums.iter().enumerate() {
        if v > sums[best] {
            best = c;
        }
    }
    best as u32
}

/// The fraction of `predicted` equal to `labels`.
pub fn accuracy(predicted: &[u32], labels: &[u32]) -> f64 {
    let correct = predicted.iter().zip(labels).filter(|(p, y)| p == y).count();
    correct as f64 / labels.len().max(1) as f64
}

/// A literal of a compiled clause: feature index, and whether it is negated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Literal {
    feature: u32,
    negated: bool,
}

/// One class's non-empty clauses: their literals and signed weights.
#[derive(Debug, Clone, Default)]
pub struct CompiledClauses {
    literals: Vec<Literal>,
    /// Clause k uses `literals[starts[k]..starts[k + 1]]`.
    starts: Vec<usize>,
    weights: Vec<i32>,
    /// Index in the bank of compiled clause k.
    ids: Vec<u32>,
}

impl CompiledClauses {
    /// `include(j)` gives clause j's include words (features, then negations, `fw` each).
    pub fn compile<'a>(
        clauses: usize,
        features: usize,
        include: impl Fn(usize) -> &'a [u64],
        weight: impl Fn(usize) -> i32,
    ) -> CompiledClauses {
        let fw = features.div_ceil(64);
        let mut c = CompiledClauses {
            starts: vec![0],
            ..Default::default()
        };
        for j in 0..clauses {
            let w = weight(j);
            let inc = include(j);
            let before = c.literals.len();
            for (l, &word) in inc.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    c.literals.push(Literal {
                        feature: ((l % fw) * 64 + b) as u32,
                        negated: l >= fw,
                    });
                }
            }
            // Empty clauses and zero weights cannot change a class sum at inference.
            if c.literals.len() == before || w == 0 {
                c.literals.truncate(before);
                continue;
            }
            c.weights.push(w);
            c.ids.push(j as u32);
            c.starts.push(c.literals.len());
        }
        c
    }

    /// Which of up to 64 samples of `block` compiled clause k fires on.
    #[inline]
    fn output(&self, k: usize, block: &[u64], valid: u64) -> u64 {
        let mut out = valid;
        for lit in &self.literals[self.starts[k]..self.starts[k + 1]] {
            let f = block[lit.feature as usize];
            out &= if lit.negated { !f } else { f };
            if out == 0 {
                break;
            }
        }
        out
    }

    /// The summed weights of the clauses that fire on at least one patch of `p`: the class sum
    /// of a convolutional machine (`out`: scratch, a word per block of patches).
    pub(crate) fn sum_on_patches(&self, p: &PatchLiterals, out: &mut [u64]) -> i32 {
        let fired = |k: &usize| self.fires_on_a_patch(*k, p, out);
        (0..self.weights.len())
            .filter(fired)
            .map(|k| self.weights[k])
            .sum()
    }

    /// Whether compiled clause k fires on at least one patch of `p`.
    pub(crate) fn fires_on_a_patch(&self, k: usize, p: &PatchLiterals, out: &mut [u64]) -> bool {
        let literals = self.literals[self.starts[k]..self.starts[k + 1]]
            .iter()
            .map(|l| p.literal(l.feature as usize, l.negated));
        p.fires_on(literals, out)
    }

    /// Bank index of each compiled clause.
    pub(crate) fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Adds this class's sum for each of up to 64 samples of `block` into `sums[i]`.
    fn add_sums(&self, block: &[u64], valid: u64, sums: &mut [i32], class: usize, classes: usize) {
        for (k, &w) in self.weights.iter().enumerate() {
            let mut out = self.output(k, block, valid);
            while out != 0 {
                let i = out.trailing_zeros() as usize;
                out &= out - 1;
                sums[i * classes + class] += w;
            }
        }
    }
}

/// Sets bit e of `block[f]` where feature f of the e-th of (at most 64) `rows` is true: one
/// word per feature, a bit per row.
pub(crate) fn transpose_into<'a>(rows: impl Iterator<Item = &'a [u64]>, block: &mut [u64]) {
    for (e, row) in rows.enumerate() {
        for (w, &word) in row.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let f = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                block[f] |= 1 << e;
            }
        }
    }
}

/// Samples transposed: block b holds, per feature, one word of samples 64b..64b+63.
pub struct Transposed {
    features: usize,
    blocks: Vec<u64>,
    len: usize,
}

impl Transposed {
    pub fn new(data: &BitRows) -> Transposed {
        let features = data.features();
        let n_blocks = data.len().div_ceil(64);
        let mut blocks = vec![0u64; n_blocks * features];
        for (b, block) in blocks.chunks_mut(features.max(1)).enumerate() {
            let end = (64 * (b + 1)).min(data.len());
            transpose_into((64 * b..end).map(|i| data.row(i)), block);
        }
        Transposed {
            features,
            blocks,
            len: data.len(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Class sums of every sample (row-major, `classes` per sample) over compiled classes.
    pub fn class_sums(&self, classes: &[CompiledClauses]) -> Vec<i32> {
        let n = classes.len();
        let mut sums = vec![0i32; self.len * n];
        for (start, valid, block) in self.blocks() {
            let out = &mut sums[start * n..];
            for (c, compiled) in classes.iter().enumerate() {
                compiled.add_sums(block, valid, out, c, n);
            }
        }
        sums
    }

    /// Blocks of 64 samples: (first sample, mask of valid samples, feature words).
    fn blocks(&self) -> impl Iterator<Item = (usize, u64, &[u64])> {
        self.blocks
            .chunks(self.features.max(1))
            .enumerate()
            .map(|(b, block)| {
                let start = b * 64;
                let count = (self.len - start).min(64);
                let valid = if count == 64 {
                    u64::MAX
                } else {
                    (1u64 << count) - 1
                };
                (start, valid, block)
            })
    }

    /// Class sums of a shared clause bank: each clause is evaluated once and adds its weight of
    /// every class (`weights[c][id]`) to the samples it fires on.
    pub fn shared_class_sums(&self, clauses: &CompiledClauses, weights: &[Vec<i32>]) -> Vec<i32> {
        let n = weights.len();
        let mut sums = vec![0i32; self.len * n];
        for (start, valid, block) in self.blocks() {
            let out = &mut sums[start * n..];
            for (k, &id) in clauses.ids.iter().enumerate() {
                let mut fired = clauses.output(k, block, valid);
                while fired != 0 {
                    let i = fired.trailing_zeros() as usize;
                    fired &= fired - 1;
                    for (c, w) in weights.iter().enumerate() {
                        out[i * n + c] += w[id as usize];
                    }
                }
            }
        }
        sums
    }
}
