//! RegMean (Jin et al. 2023): a dense layer's merged weights W minimise Σ_k ‖X_k W − X_k W_k‖²
//! over the clients' layer inputs X_k, whose closed form needs only their Gram matrices
//! G_k = X_kᵀX_k (§3.2, Eq. 2): W = (Σ_k G_k)⁻¹ Σ_k G_k W_k.

use nalgebra::DMatrix;

use crate::model::cnn::Architecture;
use crate::model::cnn::statistics::dense_layers;

/// The merged network: each dense layer's weights from the Gram matrices (`grams[k][j]`: client
/// k's of dense layer j, full, `[d][d]`), scaled by the client's weight n_k / n and their
/// off-diagonal entries by `alpha` (§3.3); every other parameter (convolutions, biases) the
/// plain mean, as the authors' code merges what RegMean does not.
pub fn merge(
    arch: &Architecture,
    nets: &[&[f32]],
    grams: &[Vec<Vec<f64>>],
    weights: &[f64],
    alpha: f64,
) -> Vec<f32> {
    let equal = vec![1.0 / nets.len().max(1) as f64; nets.len()];
    let mut out = crate::strategy::fedavg_cnn::weighted_mean(nets, &equal);
    for (j, &(i, d)) in dense_layers(arch).iter().enumerate() {
        let l = &arch.layers[i];
        let (span, out_n) = (l.split().0, l.neurons());
        let mut sum_g = DMatrix::<f64>::zeros(d, d);
        let mut sum_gw = DMatrix::<f64>::zeros(d, out_n);
        for (k, net) in nets.iter().enumerate() {
            let g = reduced(&grams[k][j], d, alpha) * weights[k];
            let w = &net[l.offset..l.offset + span];
            let wt = DMatrix::from_fn(d, out_n, |r, c| f64::from(w[c * d + r]));
            sum_gw += &g * wt;
            sum_g += g;
        }
        let merged = solve(sum_g, &sum_gw);
        for (c, row) in out[l.offset..l.offset + span]
            .chunks_exact_mut(d)
            .enumerate()
        {
            for (r, v) in row.iter_mut().enumerate() {
                *v = merged[(r, c)] as f32;
            }
        }
    }
    out
}

/// G with its off-diagonal entries scaled by α.
fn reduced(g: &[f64], d: usize, alpha: f64) -> DMatrix<f64> {
    DMatrix::from_fn(d, d, |r, c| match r == c {
        true => g[r * d + c],
        false => alpha * g[r * d + c],
    })
}

/// (Σ G)⁻¹ B as a pseudo-inverse, as the authors' code solves it: a dense input that no client
/// ever saw non-zero (a dead unit) has a zero row and column, and takes no weight.
fn solve(g: DMatrix<f64>, b: &DMatrix<f64>) -> DMatrix<f64> {
    let svd = g.svd(true, true);
    let largest = svd.singular_values.max();
    let eps = (largest * 1e-12).max(f64::MIN_POSITIVE);
    svd.solve(b, eps)
        .unwrap_or_else(|_| DMatrix::zeros(b.nrows(), b.ncols()))
}
