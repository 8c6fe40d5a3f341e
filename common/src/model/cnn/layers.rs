//! Each layer's forward and backward pass over a batch. A spatial activation is held channel
//! first across the batch (`[c][n][h][w]`), so that a convolution is one matrix product over
//! the whole batch (im2col); a flat one sample by sample (`[n][len]`).

use super::gemm::{View, gemm};

/// A batch's spatial extent: samples, height, width.
#[derive(Debug, Clone, Copy)]
pub struct Planes {
    pub n: usize,
    pub h: usize,
    pub w: usize,
}

/// `v` at `len` values, to be overwritten whole: unlike `clear` then `resize`, a buffer kept from
/// the last batch at the same size is not zeroed first.
fn overwritten<T: Copy + Default>(v: &mut Vec<T>, len: usize) {
    v.resize(len, T::default());
}

/// The kernel windows of `x` (`[c][n][h][w]`) as columns: row (ci, ky, kx), column (s, oy, ox).
pub fn im2col(x: &[f32], c: usize, p: Planes, k: usize, col: &mut Vec<f32>) {
    let (oh, ow) = (p.h - k + 1, p.w - k + 1);
    let cols = p.n * oh * ow;
    overwritten(col, c * k * k * cols);
    for ci in 0..c {
        for ky in 0..k {
            for kx in 0..k {
                let row = &mut col[((ci * k + ky) * k + kx) * cols..][..cols];
                for s in 0..p.n {
                    for oy in 0..oh {
                        let src = ((ci * p.n + s) * p.h + oy + ky) * p.w + kx;
                        row[(s * oh + oy) * ow..][..ow].copy_from_slice(&x[src..src + ow]);
                    }
                }
            }
        }
    }
}

/// Each of `planes` h×w planes inside zeros `by` wide.
pub fn pad_forward(x: &[f32], planes: usize, (h, w): (usize, usize), by: usize, y: &mut Vec<f32>) {
    let (ph, pw) = (h + 2 * by, w + 2 * by);
    y.clear();
    y.resize(planes * ph * pw, 0.0);
    for p in 0..planes {
        for r in 0..h {
            let dst = (p * ph + r + by) * pw + by;
            y[dst..dst + w].copy_from_slice(&x[(p * h + r) * w..][..w]);
        }
    }
}

/// The gradient of [`pad_forward`]'s input: each padded plane's interior.
pub fn pad_backward(
    d: &[f32],
    planes: usize,
    (h, w): (usize, usize),
    by: usize,
    dx: &mut Vec<f32>,
) {
    let (ph, pw) = (h + 2 * by, w + 2 * by);
    overwritten(dx, planes * h * w);
    for p in 0..planes {
        for r in 0..h {
            let src = (p * ph + r + by) * pw + by;
            dx[(p * h + r) * w..][..w].copy_from_slice(&d[src..src + w]);
        }
    }
}

/// The inverse of [`im2col`]'s gather: adds each column entry back where it was read.
fn col2im(col: &[f32], c: usize, p: Planes, k: usize, dx: &mut [f32]) {
    let (oh, ow) = (p.h - k + 1, p.w - k + 1);
    let cols = p.n * oh * ow;
    dx.fill(0.0);
    for ci in 0..c {
        for ky in 0..k {
            for kx in 0..k {
                let row = &col[((ci * k + ky) * k + kx) * cols..][..cols];
                for s in 0..p.n {
                    for oy in 0..oh {
                        let dst = ((ci * p.n + s) * p.h + oy + ky) * p.w + kx;
                        let src = &row[(s * oh + oy) * ow..][..ow];
                        for (d, v) in dx[dst..dst + ow].iter_mut().zip(src) {
                            *d += v;
                        }
                    }
                }
            }
        }
    }
}

/// y (`[out][cols]`) = W·col + b, W `[out][rows]`; `b` empty for a layer without biases.
pub fn conv_forward(params: (&[f32], &[f32]), out: usize, col: &[f32], y: &mut Vec<f32>) {
    let (w, b) = params;
    let rows = w.len() / out;
    let cols = col.len() / rows;
    // The product overwrites it (β = 0: matrixmultiply reads nothing of it).
    overwritten(y, out * cols);
    gemm(
        View::rows(w, out, rows),
        View::rows(col, rows, cols),
        0.0,
        y,
    );
    for (row, bias) in y.chunks_exact_mut(cols).zip(b) {
        row.iter_mut().for_each(|v| *v += bias);
    }
}

/// The gradients of a convolution: into `grads` (weights then biases), and into `dx` the
/// input's, unless it is the network's input.
pub struct ConvBackward<'a> {
    pub w: &'a [f32],
    pub col: &'a [f32],
    pub c: usize,
    pub planes: Planes,
    pub k: usize,
}

impl ConvBackward<'_> {
    pub fn run(
        &self,
        dy: &[f32],
        grads: Option<&mut [f32]>,
        scratch: &mut Vec<f32>,
        dx: Option<&mut Vec<f32>>,
    ) {
        let rows = self.c * self.k * self.k;
        let out = self.w.len() / rows;
        let cols = dy.len() / out;
        if let Some(grads) = grads {
            let (dw, db) = grads.split_at_mut(self.w.len());
            gemm(
                View::rows(dy, out, cols),
                View::rows(self.col, rows, cols).t(),
                0.0,
                dw,
            );
            for (g, row) in db.iter_mut().zip(dy.chunks_exact(cols)) {
                *g = row.iter().sum();
            }
        }
        let Some(dx) = dx else { return };
        overwritten(scratch, rows * cols);
        gemm(
            View::rows(self.w, out, rows).t(),
            View::rows(dy, out, cols),
            0.0,
            scratch,
        );
        // Zeroed by col2im, which adds into it.
        overwritten(dx, self.c * self.planes.n * self.planes.h * self.planes.w);
        col2im(scratch, self.c, self.planes, self.k, dx);
    }
}

/// Max over `size`×`size` windows of each plane; `at` keeps each maximum's place in its plane.
pub fn pool_forward(
    x: &[f32],
    planes: usize,
    h: usize,
    w: usize,
    size: usize,
    y: &mut Vec<f32>,
    at: &mut Vec<u32>,
) {
    let (oh, ow) = (h / size, w / size);
    overwritten(y, planes * oh * ow);
    overwritten(at, planes * oh * ow);
    let outputs = y
        .chunks_exact_mut(oh * ow)
        .zip(at.chunks_exact_mut(oh * ow));
    for (p, (y, at)) in outputs.enumerate() {
        let plane = &x[p * h * w..][..h * w];
        for oy in 0..oh {
            for ox in 0..ow {
                // The first maximum in reading order (a later equal value does not replace it).
                let mut best = (oy * size) * w + ox * size;
                for dy in 0..size {
                    for dx in 0..size {
                        let i = (oy * size + dy) * w + ox * size + dx;
                        best = if plane[i] > plane[best] { i } else { best };
                    }
                }
                y[oy * ow + ox] = plane[best];
                at[oy * ow + ox] = best as u32;
            }
        }
    }
}

/// Sends each output's gradient to the input its maximum came from.
pub fn pool_backward(dy: &[f32], at: &[u32], plane_in: usize, dx: &mut Vec<f32>, planes: usize) {
    let plane_out = dy.len() / planes.max(1);
    dx.clear();
    dx.resize(planes * plane_in, 0.0);
    for p in 0..planes {
        let (dst, src) = (&mut dx[p * plane_in..][..plane_in], p * plane_out);
        for (d, &i) in dy[src..src + plane_out]
            .iter()
            .zip(&at[src..src + plane_out])
        {
            dst[i as usize] += d;
        }
    }
}

pub fn relu_forward(x: &[f32], y: &mut Vec<f32>) {
    overwritten(y, x.len());
    y.iter_mut().zip(x).for_each(|(y, v)| *y = v.max(0.0));
}

/// Passes the gradient where the input (so the output) was positive.
pub fn relu_backward(x: &[f32], dy: &mut [f32]) {
    for (d, &v) in dy.iter_mut().zip(x) {
        if v <= 0.0 {
            *d = 0.0;
        }
    }
}

/// `[c][n][hw]` to `[n][c·hw]` (PyTorch's `flatten(1)` order per sample).
pub fn flatten(x: &[f32], c: usize, n: usize, hw: usize, y: &mut Vec<f32>) {
    overwritten(y, x.len());
    for ci in 0..c {
        for s in 0..n {
            y[(s * c + ci) * hw..][..hw].copy_from_slice(&x[(ci * n + s) * hw..][..hw]);
        }
    }
}

pub fn unflatten(dy: &[f32], c: usize, n: usize, hw: usize, dx: &mut Vec<f32>) {
    overwritten(dx, dy.len());
    for ci in 0..c {
        for s in 0..n {
            dx[(ci * n + s) * hw..][..hw].copy_from_slice(&dy[(s * c + ci) * hw..][..hw]);
        }
    }
}

/// y (`[n][out]`) = x·Wᵀ + b, W `[out][in]`; `b` empty for a layer without biases.
pub fn dense_forward(params: (&[f32], &[f32]), out: usize, x: &[f32], n: usize, y: &mut Vec<f32>) {
    let (w, b) = params;
    let input = w.len() / out;
    overwritten(y, n * out);
    gemm(
        View::rows(x, n, input),
        View::rows(w, out, input).t(),
        0.0,
        y,
    );
    for row in y.chunks_exact_mut(out) {
        row.iter_mut().zip(b).for_each(|(v, bias)| *v += bias);
    }
}

/// Gradients of a dense layer into `grads` (weights then biases) and, if asked, `dx`.
pub fn dense_backward(
    w: &[f32],
    x: &[f32],
    dy: &[f32],
    n: usize,
    grads: Option<&mut [f32]>,
    dx: Option<&mut Vec<f32>>,
) {
    let out = dy.len() / n;
    let input = w.len() / out;
    if let Some(grads) = grads {
        let (dw, db) = grads.split_at_mut(w.len());
        gemm(View::rows(dy, n, out).t(), View::rows(x, n, input), 0.0, dw);
        db.fill(0.0);
        for row in dy.chunks_exact(out) {
            db.iter_mut().zip(row).for_each(|(g, d)| *g += d);
        }
    }
    let Some(dx) = dx else { return };
    overwritten(dx, n * input);
    gemm(View::rows(dy, n, out), View::rows(w, out, input), 0.0, dx);
}

/// Mean cross-entropy of the logits (`[n][classes]`) against `labels`, and its gradient.
pub fn softmax_cross_entropy(logits: &[f32], labels: &[u32], dlogits: &mut Vec<f32>) -> f32 {
    let classes = logits.len() / labels.len().max(1);
    let n = labels.len() as f32;
    dlogits.clear();
    let mut loss = 0.0f64;
    for (row, &label) in logits.chunks_exact(classes).zip(labels) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
        loss += f64::from(sum.ln() + max - row[label as usize]);
        for (k, v) in row.iter().enumerate() {
            let p = (v - max).exp() / sum;
            dlogits.push((p - f32::from(u8::from(k == label as usize))) / n);
        }
    }
    (loss / f64::from(n)) as f32
}
