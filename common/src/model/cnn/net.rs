//! A network's parameters and one pass over a batch: forward, loss, backward. The buffers of a
//! pass ([`Tape`]) are kept from batch to batch so that training allocates once.

use super::arch::{Architecture, Layer, Placed, Shape};
use super::layers::{self, ConvBackward, Planes};

/// What a forward pass keeps for the backward one, per layer: its input (a dense layer's
/// flattened), a convolution's columns and a pooling's maxima.
#[derive(Default)]
pub struct Tape {
    /// `acts[i]`: layer i's input as it reads it; the last, the logits.
    acts: Vec<Vec<f32>>,
    cols: Vec<Vec<f32>>,
    at: Vec<Vec<u32>>,
    grad: Vec<f32>,
    d: Vec<f32>,
    d_next: Vec<f32>,
    scratch: Vec<f32>,
    n: usize,
}

impl Tape {
    fn sized(&mut self, arch: &Architecture) {
        let layers = arch.layers.len();
        self.acts.resize_with(layers + 1, Vec::new);
        self.cols.resize_with(layers, Vec::new);
        self.at.resize_with(layers, Vec::new);
        self.grad.resize(arch.params, 0.0);
    }

    /// The logits of the last forward pass, `[n][classes]`.
    pub fn logits(&self) -> &[f32] {
        self.acts.last().map_or(&[], Vec::as_slice)
    }

    /// Layer `i`'s input in the last forward pass, as it read it (a dense layer's flattened).
    pub fn input(&self, i: usize) -> &[f32] {
        self.acts.get(i).map_or(&[], Vec::as_slice)
    }

    /// The gradient of the last backward pass, laid out as the parameters.
    pub fn grad(&self) -> &[f32] {
        &self.grad
    }
}

fn weights<'a>(params: &'a [f32], l: &Placed) -> (&'a [f32], &'a [f32]) {
    let (w, b) = l.split();
    params[l.offset..l.offset + w + b].split_at(w)
}

fn planes(shape: Shape, n: usize) -> (usize, Planes) {
    match shape {
        Shape::Spatial { c, h, w } => (c, Planes { n, h, w }),
        Shape::Flat(len) => (1, Planes { n, h: 1, w: len }),
    }
}

/// Forward pass over `n` samples `x` (`[n][c][h][w]` per sample, as images are stored).
pub fn forward(arch: &Architecture, params: &[f32], x: &[f32], n: usize, tape: &mut Tape) {
    tape.sized(arch);
    tape.n = n;
    let (c, p) = planes(arch.input, n);
    layers::unflatten(x, c, n, p.h * p.w, &mut tape.acts[0]);
    for (i, l) in arch.layers.iter().enumerate() {
        let (done, rest) = tape.acts.split_at_mut(i + 1);
        let (input, output) = (&mut done[i], &mut rest[0]);
        let (c, p) = planes(l.input, n);
        match l.layer {
            Layer::Pad { by } => layers::pad_forward(input, c * n, (p.h, p.w), by, output),
            Layer::Conv { kernel, .. } => {
                layers::im2col(input, c, p, kernel, &mut tape.cols[i]);
                layers::conv_forward(weights(params, l), l.neurons(), &tape.cols[i], output);
            }
            Layer::MaxPool { size } => {
                layers::pool_forward(input, c * n, p.h, p.w, size, output, &mut tape.at[i]);
            }
            Layer::Relu => {
                layers::relu_forward(input, output);
            }
            Layer::Dense { .. } => {
                if let Shape::Spatial { .. } = l.input {
                    layers::flatten(input, c, n, p.h * p.w, &mut tape.scratch);
                    std::mem::swap(input, &mut tape.scratch);
                }
                layers::dense_forward(weights(params, l), l.neurons(), input, n, output);
            }
        }
    }
}

/// What a backward pass computes.
#[derive(Clone, Copy)]
struct Wants {
    /// The gradient in the parameters, into `tape.grad`.
    weights: bool,
    /// The gradient in the network's input, left in `tape.d` (in the layout of `tape.acts[0]`).
    input: bool,
}

impl Wants {
    const WEIGHTS: Wants = Wants {
        weights: true,
        input: false,
    };
    const BOTH: Wants = Wants {
        weights: true,
        input: true,
    };
    const INPUT: Wants = Wants {
        weights: false,
        input: true,
    };
}

/// Backward pass from the gradient of the loss in the logits (`tape.d`), after [`forward`].
fn backward(arch: &Architecture, params: &[f32], tape: &mut Tape, wants: Wants) {
    let n = tape.n;
    for (i, l) in arch.layers.iter().enumerate().rev() {
        let Tape {
            acts,
            cols,
            at,
            grad,
            d,
            d_next,
            scratch,
            ..
        } = tape;
        let grads = wants
            .weights
            .then(|| &mut grad[l.offset..l.offset + l.params]);
        let wants_dx = i > 0 || wants.input;
        let (c, p) = planes(l.input, n);
        match l.layer {
            Layer::Pad { by } => {
                if wants_dx {
                    layers::pad_backward(d, c * n, (p.h, p.w), by, d_next);
                }
            }
            Layer::Conv { kernel, .. } => {
                let conv = ConvBackward {
                    w: weights(params, l).0,
                    col: &cols[i],
                    c,
                    planes: p,
                    k: kernel,
                };
                conv.run(d, grads, scratch, wants_dx.then_some(&mut *d_next));
            }
            Layer::MaxPool { .. } => {
                layers::pool_backward(d, &at[i], p.h * p.w, d_next, c * n);
            }
            Layer::Relu => {
                // Its input, not its output: a dense layer after it holds its output flattened.
                layers::relu_backward(&acts[i], d);
                std::mem::swap(d, d_next);
            }
            Layer::Dense { .. } => {
                let w = weights(params, l).0;
                layers::dense_backward(w, &acts[i], d, n, grads, wants_dx.then_some(&mut *d_next));
                if wants_dx && matches!(l.input, Shape::Spatial { .. }) {
                    layers::unflatten(d_next, c, n, p.h * p.w, scratch);
                    std::mem::swap(d_next, scratch);
                }
            }
        }
        std::mem::swap(d, d_next);
    }
}

/// The backward pass of the last [`forward`] from a gradient `dlogits` (`[n][classes]`) of
/// some function of the logits: its gradient in `tape.grad()`.
pub fn backward_from(arch: &Architecture, params: &[f32], dlogits: &[f32], tape: &mut Tape) {
    tape.d.clear();
    tape.d.extend_from_slice(dlogits);
    backward(arch, params, tape, Wants::WEIGHTS);
}

/// [`backward_from`], on to the input: the gradient in each input value, `[n][input]` as
/// [`forward`] read `x`, written into `dx`.
pub fn backward_to_input(
    arch: &Architecture,
    params: &[f32],
    dlogits: &[f32],
    tape: &mut Tape,
    dx: &mut Vec<f32>,
) {
    backward_into(arch, params, dlogits, tape, Wants::BOTH, dx);
}

/// [`backward_to_input`] without the gradient in the parameters (`tape.grad()` is left as it
/// was): a fixed network a generator trains against needs its input's alone, for half the work.
pub fn input_gradient(
    arch: &Architecture,
    params: &[f32],
    dlogits: &[f32],
    tape: &mut Tape,
    dx: &mut Vec<f32>,
) {
    backward_into(arch, params, dlogits, tape, Wants::INPUT, dx);
}

fn backward_into(
    arch: &Architecture,
    params: &[f32],
    dlogits: &[f32],
    tape: &mut Tape,
    wants: Wants,
    dx: &mut Vec<f32>,
) {
    tape.d.clear();
    tape.d.extend_from_slice(dlogits);
    backward(arch, params, tape, wants);
    let (c, p) = planes(arch.input, tape.n);
    layers::flatten(&tape.d, c, tape.n, p.h * p.w, dx);
}

/// One forward and backward pass: the mean cross-entropy over the batch, its gradient in
/// `tape.grad()`.
pub fn loss_and_grad(
    arch: &Architecture,
    params: &[f32],
    x: &[f32],
    labels: &[u32],
    tape: &mut Tape,
) -> f32 {
    forward(arch, params, x, labels.len(), tape);
    let logits = std::mem::take(&mut tape.acts[arch.layers.len()]);
    let loss = layers::softmax_cross_entropy(&logits, labels, &mut tape.d);
    tape.acts[arch.layers.len()] = logits;
    backward(arch, params, tape, Wants::WEIGHTS);
    loss
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cnn::arch::{ArchName, conv, dense};

    /// A small network with every kind of layer, on 1×8×8 inputs (a padding inside, where its
    /// gradient flows on; layers with and without biases).
    fn small() -> Architecture {
        let layers = [
            conv(3, 3),
            Layer::MaxPool { size: 2 },
            Layer::Relu,
            Layer::Pad { by: 1 },
            Layer::Conv {
                out: 4,
                kernel: 2,
                bias: false,
            },
            Layer::Relu,
            dense(5),
            Layer::Relu,
            Layer::Dense {
                out: 3,
                bias: false,
            },
        ];
        let input = Shape::Spatial { c: 1, h: 8, w: 8 };
        Architecture::place(ArchName::Lenet, input, &layers).unwrap()
    }

    fn values(n: usize, mut z: u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                z = z
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((z >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// The gradient on to the input (a data-free generator trains through it): each input
    /// value's against a central finite difference of the loss.
    #[test]
    fn input_gradients_match_finite_differences() {
        let arch = small();
        let params: Vec<f32> = values(arch.params, 5).iter().map(|v| v + 0.1).collect();
        let x: Vec<f32> = values(3 * 64, 6).iter().map(|v| v + 0.5).collect();
        let labels = [2, 0, 1];
        let loss = |x: &[f32]| {
            f64::from(loss_and_grad(
                &arch,
                &params,
                x,
                &labels,
                &mut Tape::default(),
            ))
        };
        let mut tape = Tape::default();
        forward(&arch, &params, &x, 3, &mut tape);
        let mut d = Vec::new();
        layers::softmax_cross_entropy(tape.logits(), &labels, &mut d);
        let mut dx = Vec::new();
        backward_to_input(&arch, &params, &d, &mut tape, &mut dx);
        assert_eq!(dx.len(), x.len());
        let base = loss(&x);
        let close = |a: f64, b: f64| (a - b).abs() < 0.05 * a.abs().max(b.abs()).max(1e-2);
        let (mut kinks, eps) = (0, 1e-3f32);
        for i in 0..x.len() {
            let shifted = |delta: f32| {
                let mut y = x.clone();
                y[i] += delta;
                loss(&y)
            };
            let (up, down) = (shifted(eps), shifted(-eps));
            let e = f64::from(eps);
            // A ReLU or a maximum that switches inside the step: no derivative to compare.
            if !close((up - base) / e, (base - down) / e) {
                kinks += 1;
                continue;
            }
            let (numeric, analytic) = ((up - down) / (2.0 * e), f64::from(dx[i]));
            assert!(
                close(numeric, analytic),
                "input {i}: analytic {analytic}, numeric {numeric}"
            );
        }
        assert!(kinks < x.len() / 20, "{kinks} inputs sit on a kink");
        // Without the parameters' gradient: the same input gradient to the bit, and the
        // parameter gradient of a fresh pass left at zero.
        let mut alone = Tape::default();
        forward(&arch, &params, &x, 3, &mut alone);
        let mut dx_alone = Vec::new();
        input_gradient(&arch, &params, &d, &mut alone, &mut dx_alone);
        assert_eq!(dx_alone, dx);
        assert!(alone.grad().iter().all(|&g| g == 0.0));
    }

    /// A tape kept from a larger or a smaller batch, every buffer poisoned, gives what a fresh
    /// tape gives: a pass writes whole every buffer it reads (they are not zeroed between
    /// batches).
    #[test]
    fn a_reused_tape_gives_what_a_fresh_one_gives() {
        let arch = small();
        let params: Vec<f32> = values(arch.params, 7).iter().map(|v| v + 0.1).collect();
        let pass = |tape: &mut Tape, n: usize| {
            let x: Vec<f32> = values(n * 64, 8).iter().map(|v| v + 0.5).collect();
            forward(&arch, &params, &x, n, tape);
            let logits = tape.logits().to_vec();
            let mut dx = Vec::new();
            backward_to_input(&arch, &params, &values(logits.len(), 9), tape, &mut dx);
            (logits, tape.grad().to_vec(), dx)
        };
        for (first, then) in [(5, 3), (3, 5)] {
            let mut kept = Tape::default();
            pass(&mut kept, first);
            let Tape {
                acts,
                cols,
                at,
                grad,
                d,
                d_next,
                scratch,
                ..
            } = &mut kept;
            for v in acts.iter_mut().chain(cols.iter_mut()) {
                v.fill(f32::NAN);
            }
            for v in [grad, d, d_next, scratch] {
                v.fill(f32::NAN);
            }
            at.iter_mut().for_each(|v| v.fill(u32::MAX));
            let fresh = pass(&mut Tape::default(), then);
            assert_eq!(pass(&mut kept, then), fresh, "{first} samples, then {then}");
        }
    }

    /// The backward pass is the loss's gradient: each parameter's against a central finite
    /// difference of the loss (in f64 around f32 arithmetic, so to a few per cent).
    #[test]
    fn gradients_match_finite_differences() {
        let arch = small();
        // Weights around +0.1 and inputs in [0, 1): few units are dead at the start.
        let params: Vec<f32> = values(arch.params, 1).iter().map(|v| v + 0.1).collect();
        let x: Vec<f32> = values(6 * 64, 2).iter().map(|v| v + 0.5).collect();
        let labels = [0, 2, 1, 1, 0, 2];
        let mut tape = Tape::default();
        loss_and_grad(&arch, &params, &x, &labels, &mut tape);
        let grad = tape.grad().to_vec();
        let mut checked = 0;
        let base = f64::from(loss_and_grad(
            &arch,
            &params,
            &x,
            &labels,
            &mut Tape::default(),
        ));
        let mut kinks = 0;
        for i in 0..arch.params {
            let at = |delta: f32| {
                let mut p = params.clone();
                p[i] += delta;
                f64::from(loss_and_grad(&arch, &p, &x, &labels, &mut Tape::default()))
            };
            let analytic = f64::from(grad[i]);
            // The loss is f32 (rounding ~1e-6 of it), so a difference over 2e-3 is good to
            // ~5e-4: gradients are compared to 5 % of their size or of 0.01, if larger.
            let close = |a: f64, b: f64| (a - b).abs() < 0.05 * a.abs().max(b.abs()).max(1e-2);
            let eps = 1e-3;
            let (up, down) = (at(eps), at(-eps));
            let eps = f64::from(eps);
            // A ReLU or a maximum that switches inside the step: the slopes on either side
            // differ, and the loss has no derivative there to compare with.
            if !close((up - base) / eps, (base - down) / eps) {
                kinks += 1;
                continue;
            }
            let numeric = (up - down) / (2.0 * eps);
            assert!(
                close(numeric, analytic),
                "parameter {i}: analytic {analytic}, numeric {numeric}"
            );
            checked += usize::from(analytic != 0.0);
        }
        assert!(kinks < arch.params / 20, "{kinks} parameters sit on a kink");
        assert!(
            checked > arch.params / 2,
            "most gradients are not zero: {checked} of {}",
            arch.params
        );
    }
}
