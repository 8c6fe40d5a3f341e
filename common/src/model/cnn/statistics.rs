//! What a client measures of its trained network on its own rows, for the one-shot server rules
//! that need more than the weights: RegMean's Gram matrices of each dense layer's inputs (Jin et
//! al. 2023) and FedFisher's diagonal Fisher information (Jhunjhunwala et al.).

use super::arch::{Architecture, Layer};
use super::net::{self, Tape};
use super::{Cnn, Samples, softmax};

/// The dense layers' places in the architecture, with their input widths.
pub fn dense_layers(arch: &Architecture) -> Vec<(usize, usize)> {
    let dense = |(i, l): (usize, &super::arch::Placed)| {
        matches!(l.layer, Layer::Dense { .. }).then(|| (i, l.input.len()))
    };
    arch.layers.iter().enumerate().filter_map(dense).collect()
}

/// Floats of every dense layer's Gram matrix as it travels: each upper triangle, row by row.
pub fn gram_len(arch: &Architecture) -> usize {
    dense_layers(arch)
        .iter()
        .map(|&(_, d)| d * (d + 1) / 2)
        .sum()
}

/// RegMean's statistics (Jin et al. 2023, §3.2): for each dense layer, the mean over the rows of
/// xᵀx of its input x, as [`gram_len`] lays them out. The mean, not the sum, as the authors'
/// code keeps it; the server weighs clients by n_k. Accumulated in f64.
pub fn dense_grams(cnn: &Cnn, samples: &Samples) -> Vec<f32> {
    let layers = dense_layers(&cnn.arch);
    let mut sums: Vec<Vec<f64>> = layers.iter().map(|&(_, d)| vec![0.0; d * d]).collect();
    let (mut tape, mut x) = (Tape::default(), Vec::new());
    let all: Vec<usize> = (0..samples.len()).collect();
    for batch in all.chunks(256) {
        samples.gather(batch, &mut x);
        net::forward(&cnn.arch, &cnn.params, &x, batch.len(), &mut tape);
        for (sum, &(i, d)) in sums.iter_mut().zip(&layers) {
            add_outer(sum, tape.input(i), d);
        }
    }
    let n = samples.len().max(1) as f64;
    let mut out = Vec::with_capacity(gram_len(&cnn.arch));
    for (sum, &(_, d)) in sums.iter().zip(&layers) {
        for r in 0..d {
            out.extend(sum[r * d + r..(r + 1) * d].iter().map(|v| (v / n) as f32));
        }
    }
    out
}

/// Adds Σ_rows xᵀx (upper triangle only) of `rows` (`[n][d]`) into `sum` (`[d][d]`).
fn add_outer(sum: &mut [f64], rows: &[f32], d: usize) {
    for row in rows.chunks_exact(d) {
        for (r, &a) in row.iter().enumerate() {
            if a == 0.0 {
                continue; // after a ReLU, most inputs are
            }
            let a = f64::from(a);
            let line = &mut sum[r * d..(r + 1) * d];
            for (s, &b) in line[r..].iter_mut().zip(&row[r..]) {
                *s += a * f64::from(b);
            }
        }
    }
}

/// Every dense layer's full symmetric Gram matrix from the travelling upper triangles.
pub fn unpack_grams(arch: &Architecture, packed: &[f32]) -> Vec<Vec<f64>> {
    let mut at = 0;
    let mut out = Vec::new();
    for (_, d) in dense_layers(arch) {
        let mut g = vec![0.0; d * d];
        for r in 0..d {
            for c in r..d {
                let v = f64::from(packed[at]);
                at += 1;
                g[r * d + c] = v;
                g[c * d + r] = v;
            }
        }
        out.push(g);
    }
    out
}

/// FedFisher's statistic (Jhunjhunwala et al., §4, the diagonal form): the mean over the rows
/// of the Fisher information's diagonal, E_x Σ_y p(y|x) (∂ log p(y|x) / ∂θ)², the expectation
/// over the network's own predictive distribution (the "true" Fisher, as the authors' code
/// computes it with nngeometry's `classif_logits`), laid out as the parameters. One forward
/// and one backward per class for each row, since squares of per-row gradients do not add up
/// over a batch. Accumulated in f64.
pub fn fisher_diag(cnn: &Cnn, samples: &Samples) -> Vec<f32> {
    let classes = cnn.arch.classes();
    let mut sum = vec![0.0f64; cnn.arch.params];
    let (mut tape, mut x, mut d) = (Tape::default(), Vec::new(), vec![0.0f32; classes]);
    for row in 0..samples.len() {
        samples.gather(&[row], &mut x);
        net::forward(&cnn.arch, &cnn.params, &x, 1, &mut tape);
        let p = softmax(tape.logits(), 1.0);
        for (y, &py) in p.iter().enumerate() {
            if py < 1e-6 {
                continue; // its term is below f32's resolution of the others
            }
            // ∂ log p_y / ∂ logits = e_y − p.
            for (k, dk) in d.iter_mut().enumerate() {
                *dk = f32::from(u8::from(k == y)) - p[k];
            }
            net::backward_from(&cnn.arch, &cnn.params, &d, &mut tape);
            let w = f64::from(py);
            for (s, &g) in sum.iter_mut().zip(tape.grad()) {
                *s += w * f64::from(g) * f64::from(g);
            }
        }
    }
    let n = samples.len().max(1) as f64;
    sum.iter().map(|v| (v / n) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cnn::ArchName;
    use crate::rng::derive_rng;

    fn rows(n: usize, per: usize) -> (Vec<u8>, Vec<u32>) {
        let pixels = (0..n * per)
            .map(|i| ((i * 37 + i / 7) % 256) as u8)
            .collect();
        let labels = (0..n).map(|i| (i % 10) as u32).collect();
        (pixels, labels)
    }

    /// The packed triangles unpack to the mean xᵀx of each dense layer's inputs, computed here
    /// row by row from one forward pass per row.
    #[test]
    fn grams_are_the_mean_outer_products_of_dense_inputs() {
        let arch = Architecture::new(ArchName::Cnn2, 1, 28, 10).unwrap();
        let cnn = Cnn::init(arch, &mut derive_rng(3, "cnn-init", 0));
        let (pixels, labels) = rows(5, 784);
        let s = Samples {
            pixels: &pixels,
            labels: &labels,
            per: 784,
        };
        let packed = dense_grams(&cnn, &s);
        assert_eq!(packed.len(), gram_len(&cnn.arch));
        assert_eq!(packed.len(), 256 * 257 / 2 + 120 * 121 / 2 + 84 * 85 / 2);
        let grams = unpack_grams(&cnn.arch, &packed);
        let (mut tape, mut x) = (Tape::default(), Vec::new());
        let layers = dense_layers(&cnn.arch);
        let mut direct: Vec<Vec<f64>> = layers.iter().map(|&(_, d)| vec![0.0; d * d]).collect();
        for r in 0..5 {
            s.gather(&[r], &mut x);
            net::forward(&cnn.arch, &cnn.params, &x, 1, &mut tape);
            for (g, &(i, d)) in direct.iter_mut().zip(&layers) {
                let v = tape.input(i);
                for a in 0..d {
                    for b in 0..d {
                        g[a * d + b] += f64::from(v[a]) * f64::from(v[b]) / 5.0;
                    }
                }
            }
        }
        for (got, want) in grams.iter().zip(&direct) {
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} against {w}");
            }
        }
    }

    /// The diagonal Fisher is E_y~p (∂ log p_y/∂θ)²: on one row, against the squared
    /// gradients of −log p_y from the training loss, weighted by p_y.
    #[test]
    fn fisher_diag_weighs_each_class_gradient_by_its_probability() {
        let arch = Architecture::new(ArchName::Cnn2, 1, 28, 10).unwrap();
        let cnn = Cnn::init(arch, &mut derive_rng(4, "cnn-init", 0));
        let (pixels, labels) = rows(1, 784);
        let s = Samples {
            pixels: &pixels,
            labels: &labels,
            per: 784,
        };
        let fisher = fisher_diag(&cnn, &s);
        let mut tape = Tape::default();
        let mut x = Vec::new();
        s.gather(&[0], &mut x);
        net::forward(&cnn.arch, &cnn.params, &x, 1, &mut tape);
        let p = softmax(tape.logits(), 1.0);
        let mut want = vec![0.0f64; cnn.arch.params];
        for (y, &py) in p.iter().enumerate() {
            // The cross-entropy's gradient is that of −log p_y: the same square.
            net::loss_and_grad(&cnn.arch, &cnn.params, &x, &[y as u32], &mut tape);
            for (w, &g) in want.iter_mut().zip(tape.grad()) {
                *w += f64::from(py) * f64::from(g) * f64::from(g);
            }
        }
        let nonzero = want.iter().filter(|w| **w > 0.0).count();
        // Without biases, about half the units of a fresh network are dead on a given row.
        assert!(nonzero > cnn.arch.params / 4, "{nonzero}");
        for (g, w) in fisher.iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-4 * w.abs().max(1e-6),
                "{g} against {w}"
            );
        }
    }
}
