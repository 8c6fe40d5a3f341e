//! Eq. 1 settled for a pool of rows at once, class-major so that one class concept of every
//! pooled row is contiguous: each step is an `axpy` per source concept and one vectorized pass
//! that activates and measures the move; a row leaves as it converges and the next row takes
//! its place, so the work follows the rows still moving. Each row's arithmetic keeps the order
//! a row settled alone would use (the feature sum in feature order, then the class sources in
//! class order), so a row's states do not depend on which rows share the pool; only `exp`
//! differs from the C library's (see [`exp`]).

use std::ops::Range;

use super::{Activation, FcmHyper, Settled};

/// Rows per block of the transposed dataset.
pub(super) const BLOCK: usize = 64;

/// A dataset's rows in blocks of [`BLOCK`], each block feature-major (`[f · BLOCK + row]`).
pub(super) struct Transposed {
    features: usize,
    rows: usize,
    xt: Vec<f64>,
}

impl Transposed {
    /// `x` is row-major and holds `rows` rows of `features` values.
    pub(super) fn new(x: &[f64], features: usize, rows: usize) -> Transposed {
        let mut xt = vec![0.0; rows.div_ceil(BLOCK) * BLOCK * features];
        for r in 0..rows {
            let block = &mut xt[(r / BLOCK) * BLOCK * features..];
            for (f, &v) in x[r * features..][..features].iter().enumerate() {
                block[f * BLOCK + r % BLOCK] = v;
            }
        }
        Transposed { features, rows, xt }
    }

    /// Each block's values and how many rows it holds.
    pub(super) fn blocks(&self) -> impl Iterator<Item = (&[f64], usize)> {
        let size = BLOCK * self.features;
        (0..self.rows.div_ceil(BLOCK)).map(move |b| {
            let xt = &self.xt[b * size..][..size];
            (xt, (self.rows - b * BLOCK).min(BLOCK))
        })
    }
}

/// Rows iterated together: a row leaves as it converges and the next row of the dataset takes
/// its place, so every step works on a full pool until the dataset runs out. A multiple of 8.
const POOL: usize = 512;

/// Scratch and results of settling a dataset: after [`Settler::settle`], `state(k, r)` is row
/// `r`'s final state of class `k` and `settled[r]` how its dynamics ended.
pub(super) struct Settler {
    classes: usize,
    rows: usize,
    /// The feature concepts' contribution to each class, every row (`[k · rows + r]`).
    base: Vec<f64>,
    /// The pool, class-major (`[k · POOL + i]`).
    pool_base: Vec<f64>,
    state: Vec<f64>,
    next: Vec<f64>,
    moved: Vec<f64>,
    /// The dataset row each pool place holds, and the step at which it reaches the cap.
    row: Vec<usize>,
    deadline: Vec<i64>,
    /// This step's places whose rows leave.
    leaving: Vec<usize>,
    out: Vec<f64>,
    pub(super) settled: Vec<Settled>,
}

impl Settler {
    pub(super) fn new(classes: usize, rows: usize) -> Settler {
        let pool = || vec![0.0; classes * POOL];
        Settler {
            classes,
            rows,
            base: vec![0.0; classes * rows],
            pool_base: pool(),
            state: pool(),
            next: pool(),
            moved: vec![0.0; POOL],
            row: Vec::with_capacity(POOL),
            deadline: Vec::with_capacity(POOL),
            leaving: Vec::with_capacity(POOL),
            out: vec![0.0; classes * rows],
            settled: vec![Settled::default(); rows],
        }
    }

    pub(super) fn state(&self, class: usize, row: usize) -> f64 {
        self.out[class * self.rows + row]
    }

    /// Row `r`'s predicted class: the largest class state, the lowest class on a tie.
    pub(super) fn predicted(&self, row: usize) -> u32 {
        let mut best = 0;
        for k in 1..self.classes {
            if self.state(k, row) > self.state(best, row) {
                best = k;
            }
        }
        best as u32
    }

    /// Settles every row of `x` under the map `params`.
    pub(super) fn settle(&mut self, params: &[f64], hyper: &FcmHyper, x: &Transposed) {
        assert_eq!(
            x.rows, self.rows,
            "a settler is made for its dataset's rows"
        );
        #[cfg(target_arch = "x86_64")]
        if runs_avx512() {
            // SAFETY: the processor has just said it runs AVX-512F and FMA.
            return unsafe { self.settle_avx512(params, hyper, x) };
        }
        #[cfg(target_arch = "x86_64")]
        if runs_avx2() {
            // SAFETY: the processor has just said it runs AVX2 and FMA.
            return unsafe { self.settle_avx2(params, hyper, x) };
        }
        self.settle_any(params, hyper, x)
    }

    /// The same code compiled for AVX-512F and for AVX2, picked at run time (a default build
    /// targets SSE2): the loops then take eight or four rows per instruction. `exp`'s fused
    /// multiply-adds are single instructions there and the C library's `fma` on the portable
    /// path, exactly rounded on both, so the results are the portable path's to the bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,fma")]
    fn settle_avx512(&mut self, params: &[f64], hyper: &FcmHyper, x: &Transposed) {
        self.settle_any(params, hyper, x)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn settle_avx2(&mut self, params: &[f64], hyper: &FcmHyper, x: &Transposed) {
        self.settle_any(params, hyper, x)
    }

    #[inline(always)]
    fn settle_any(&mut self, params: &[f64], hyper: &FcmHyper, x: &Transposed) {
        self.bases(params, x);
        self.row.clear();
        self.deadline.clear();
        // More than 2^32 steps would never end anyway; the cap keeps `step + cap` in an i64.
        let cap = hyper.max_iterations.min(u32::MAX as usize);
        if cap == 0 {
            self.out.fill(0.0);
            self.settled.fill(Settled::default());
            return;
        }
        let tol2 = hyper.tolerance * hyper.tolerance;
        let mut waiting = 0..self.rows;
        while self.row.len() < POOL
            && let Some(r) = waiting.next()
        {
            self.row.push(r);
            self.deadline.push(cap as i64);
            self.enter(self.row.len() - 1, r);
        }
        for step in 1.. {
            if self.row.is_empty() {
                return;
            }
            self.step(params, x.features, hyper);
            std::mem::swap(&mut self.state, &mut self.next);
            self.retire(tol2, step, cap, &mut waiting);
        }
    }

    /// The feature concepts' contribution to each class: clamped, so computed once per row.
    #[inline(always)]
    fn bases(&mut self, params: &[f64], x: &Transposed) {
        let (features, rows) = (x.features, self.rows);
        let stride = features + self.classes - 1;
        for (b, (xt, n)) in x.blocks().enumerate() {
            for (k, w) in params.chunks_exact(stride).enumerate() {
                let base = &mut self.base[k * rows + b * BLOCK..][..n];
                base.fill(-0.0);
                for (f, &w) in w[..features].iter().enumerate() {
                    let x = &xt[f * BLOCK..][..n];
                    for (b, x) in base.iter_mut().zip(x) {
                        *b += w * x;
                    }
                }
            }
        }
    }

    /// Puts row `r` in pool place `i`, its class concepts at 0.
    #[inline(always)]
    fn enter(&mut self, i: usize, r: usize) {
        for k in 0..self.classes {
            self.pool_base[k * POOL + i] = self.base[k * self.rows + r];
            self.state[k * POOL + i] = 0.0;
        }
    }

    /// One step of eq. 1 for every pooled row: `next` from `state`, and how far each row moved.
    #[inline(always)]
    fn step(&mut self, params: &[f64], features: usize, hyper: &FcmHyper) {
        // Whole vectors: the places past the last row hold earlier rows' leftovers (or zeros),
        // computed and ignored (each place is its own lane), so no step ends in a scalar loop.
        let (classes, live) = (self.classes, self.row.len().next_multiple_of(8));
        let stride = features + classes - 1;
        let (act, slope) = (hyper.activation, hyper.slope);
        for (k, w) in params.chunks_exact(stride).enumerate() {
            let source = |j: usize| j + usize::from(j >= k);
            let (next, state) = (&mut self.next[k * POOL..][..live], &self.state);
            let base = &self.pool_base[k * POOL..][..live];
            let old = &state[k * POOL..][..live];
            let moved = &mut self.moved[..live];
            // Σ in the book's order, base first; the last source's pass also activates.
            let Some((&w_last, rest)) = w[features..].split_last() else {
                for (n, b) in next.iter_mut().zip(base) {
                    *n = activate(act, slope, *b);
                }
                accumulate_moved(moved, next, old, k == 0);
                continue;
            };
            let last = &state[source(rest.len()) * POOL..][..live];
            if rest.is_empty() {
                for (n, (b, s)) in next.iter_mut().zip(base.iter().zip(last)) {
                    *n = activate(act, slope, b + w_last * s);
                }
            } else {
                next.copy_from_slice(base);
                for (j, &w) in rest.iter().enumerate() {
                    let s = &state[source(j) * POOL..][..live];
                    for (n, s) in next.iter_mut().zip(s) {
                        *n += w * s;
                    }
                }
                for (n, s) in next.iter_mut().zip(last) {
                    *n = activate(act, slope, *n + w_last * s);
                }
            }
            accumulate_moved(moved, next, old, k == 0);
        }
    }

    /// Rows that converged at this step, or reached the iteration cap, leave with their
    /// states (in `state` once the step is taken); the next waiting row takes each freed
    /// place, or, once none waits, the last pooled row does.
    #[inline(always)]
    fn retire(&mut self, tol2: f64, step: usize, cap: usize, waiting: &mut Range<usize>) {
        self.leaving.clear();
        let live = self.row.len();
        let step = step as i64;
        let places = self.moved[..live].chunks(64).zip(self.deadline.chunks(64));
        // A word of flags per 64 places, built without a branch so that it vectorizes.
        for (c, (moved, deadline)) in places.enumerate() {
            let mut flags = 0u64;
            for (j, (&d, &e)) in moved.iter().zip(deadline).enumerate() {
                flags |= u64::from((d < tol2) | (e <= step)) << j;
            }
            while flags != 0 {
                self.leaving.push(c * 64 + flags.trailing_zeros() as usize);
                flags &= flags - 1;
            }
        }
        // From the last place down, so that a place filled from the end is already done.
        for j in (0..self.leaving.len()).rev() {
            let i = self.leaving[j];
            let (r, iterations) = (self.row[i], (step + cap as i64 - self.deadline[i]) as usize);
            for k in 0..self.classes {
                self.out[k * self.rows + r] = self.state[k * POOL + i];
            }
            let converged = self.moved[i] < tol2;
            self.settled[r] = Settled {
                iterations,
                converged,
            };
            if let Some(next) = waiting.next() {
                (self.row[i], self.deadline[i]) = (next, step + cap as i64);
                self.enter(i, next);
                continue;
            }
            let last = self.row.len() - 1;
            for k in 0..self.classes {
                self.state[k * POOL + i] = self.state[k * POOL + last];
                self.pool_base[k * POOL + i] = self.pool_base[k * POOL + last];
            }
            self.row.swap_remove(i);
            self.deadline.swap_remove(i);
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn runs_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(target_arch = "x86_64")]
fn runs_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Adds each row's squared move of one class (the first class sets it).
#[inline(always)]
fn accumulate_moved(moved: &mut [f64], next: &[f64], old: &[f64], first: bool) {
    let steps = moved.iter_mut().zip(next.iter().zip(old));
    if first {
        for (d, (n, o)) in steps {
            *d = (n - o) * (n - o);
        }
    } else {
        for (d, (n, o)) in steps {
            *d += (n - o) * (n - o);
        }
    }
}

/// Eq. 2 or 3.
#[inline(always)]
fn activate(activation: Activation, slope: f64, x: f64) -> f64 {
    match activation {
        Activation::Sigmoid => 1.0 / (1.0 + exp(-slope * x)),
        // tanh through exp: 1 − 2 / (e^{2λx} + 1).
        Activation::Tanh => 1.0 - 2.0 / (exp(2.0 * slope * x) + 1.0),
    }
}

/// `e^x` within 2 units in the last place of the C library's for x in [−708, 709], and
/// clamped there (so a sigmoid state under 1/(1 + e^709) ≈ 1.2·10⁻³⁰⁸ reads as that, and
/// ±∞ as finite).
/// Written out because the C library's `exp` is a call per value, which the compiler cannot
/// spread over vector lanes; on the AVX paths this has no branch and no call, so a loop over
/// it vectorizes (on the SSE2 path each fused multiply-add is a call to the C library's `fma`,
/// exact but slow: only processors without FMA, made before 2013, take it).
/// Range reduction `x = n·ln 2 + r`, |r| ≤ ln 2 / 2, with ln 2 split in two (fdlibm's
/// constants), then the Taylor series of e^r to r^13 (truncation below 5·10⁻¹⁸ relative) by
/// Horner's rule in fused multiply-adds, and 2^n built in the exponent bits.
#[inline(always)]
pub(super) fn exp(x: f64) -> f64 {
    exp_with(x, f64::mul_add)
}

/// [`exp`] with the fused multiply-add `fma(a, b, c) = a·b + c` given, so that a test can
/// check the bits against a software one.
#[inline(always)]
fn exp_with(x: f64, fma: impl Fn(f64, f64, f64) -> f64) -> f64 {
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5 · 2^52: adding it rounds to an integer
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    // 1 / k!, k = 0..=13.
    const C: [f64; 14] = {
        let mut c = [1.0; 14];
        let mut k = 1;
        while k < 14 {
            c[k] = c[k - 1] / k as f64;
            k += 1;
        }
        c
    };
    let v = x.clamp(-708.0, 709.0);
    let t = fma(v, std::f64::consts::LOG2_E, SHIFT);
    let n = t - SHIFT;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, v));
    // Horner: the lanes are independent, so the loop is bound by throughput, and this is
    // the fewest operations.
    let p = C[..13].iter().rev().fold(C[13], |p, &c| fma(p, r, c));
    let scale = t.to_bits().wrapping_sub(SHIFT.to_bits()).wrapping_add(1023) << 52;
    p * f64::from_bits(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn exp_is_within_2_ulp_of_the_c_library() {
        let mut xs: Vec<f64> = (0..=200_000)
            .map(|i| -708.0 + i as f64 * 0.007_085)
            .collect();
        xs.extend([0.0, -0.0, 1e-300, -1e-300, 0.5, -0.5, 709.0, -708.0]);
        let got: Vec<f64> = xs.iter().map(|&x| exp(x)).collect();
        for (x, e) in xs.iter().zip(&got) {
            assert!(ulps(*e, x.exp()) <= 2, "exp({x}) = {e}, libm {}", x.exp());
        }
        let far: Vec<f64> = [-1e9, 1e9, -745.0, 800.0].map(exp).to_vec();
        assert_eq!(far[1], far[3]);
        assert!(far[0] > 0.0 && far[0] < 1e-300 && far[3].is_finite());
    }

    #[test]
    fn exp_has_the_bits_of_a_software_fused_multiply_add() {
        // A processor without FMA runs the C library's software `fma`; this one's C library
        // uses the instruction, so compare with a software one (the libm crate's, musl's):
        // both are exactly rounded, so every path has the same bits.
        for i in 0..=200_000 {
            let x = -708.0 + i as f64 * 0.007_085;
            assert_eq!(
                exp(x).to_bits(),
                exp_with(x, libm::fma).to_bits(),
                "exp({x})"
            );
        }
    }

    fn hyper(activation: Activation, max_iterations: usize) -> FcmHyper {
        FcmHyper {
            activation,
            fitness: super::super::Fitness::Jaccard,
            slope: 3.0,
            tolerance: 1e-5,
            max_iterations,
        }
    }

    fn random(features: usize, classes: usize, rows: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        use crate::rng::derive_rng;
        use rand::RngExt;
        let mut rng = derive_rng(seed, "pool", 0);
        let x = (0..rows * features).map(|_| rng.random()).collect();
        let params = (0..classes * (features + classes - 1))
            .map(|_| rng.random_range(-1.0..=1.0))
            .collect();
        (x, params)
    }

    #[test]
    fn rows_that_wait_for_a_place_settle_as_rows_settled_alone() {
        // 1,300 rows through a pool of 512: most rows enter a place another row left, at a
        // later step, and must end as they would alone, to the bit.
        let (features, classes, rows) = (5, 3, 1_300);
        let (x, params) = random(features, classes, rows, 11);
        for activation in [Activation::Tanh, Activation::Sigmoid] {
            let h = hyper(activation, 40);
            let mut pooled = Settler::new(classes, rows);
            pooled.settle(&params, &h, &Transposed::new(&x, features, rows));
            let steps: std::collections::BTreeSet<usize> =
                pooled.settled.iter().map(|s| s.iterations).collect();
            assert!(steps.len() > 5, "rows leave at {steps:?}");
            for r in 0..rows {
                let mut alone = Settler::new(classes, 1);
                let row = &x[r * features..][..features];
                alone.settle(&params, &h, &Transposed::new(row, features, 1));
                assert_eq!(alone.settled[0], pooled.settled[r], "row {r}");
                for k in 0..classes {
                    assert_eq!(alone.state(k, 0).to_bits(), pooled.state(k, r).to_bits());
                }
            }
        }
    }

    #[test]
    fn a_cap_of_zero_leaves_every_state_at_zero_and_no_features_still_settle() {
        let (x, params) = random(4, 2, 3, 12);
        let mut s = Settler::new(2, 3);
        s.settle(
            &params,
            &hyper(Activation::Tanh, 0),
            &Transposed::new(&x, 4, 3),
        );
        assert!(s.out.iter().all(|&v| v == 0.0));
        assert!(s.settled.iter().all(|x| *x == Settled::default()));
        // No feature concepts: the class links alone, from states of 0.
        let mut s = Settler::new(2, 3);
        s.settle(
            &[0.5, -0.5],
            &hyper(Activation::Tanh, 10),
            &Transposed::new(&[], 0, 3),
        );
        assert!(s.settled.iter().all(|x| x.converged && x.iterations == 1));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx_paths_are_the_portable_one_to_the_bit() {
        let (features, classes, rows) = (9, 4, 700);
        let (x, params) = random(features, classes, rows, 7);
        let t = Transposed::new(&x, features, rows);
        let bits = |s: &Settler| s.out.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for activation in [Activation::Tanh, Activation::Sigmoid] {
            let h = hyper(activation, 60);
            let mut portable = Settler::new(classes, rows);
            portable.settle_any(&params, &h, &t);
            let mut paths = Vec::new();
            if runs_avx2() {
                let mut s = Settler::new(classes, rows);
                // SAFETY: the processor has just said it runs AVX2 and FMA.
                unsafe { s.settle_avx2(&params, &h, &t) };
                paths.push(("avx2", s));
            }
            if runs_avx512() {
                let mut s = Settler::new(classes, rows);
                // SAFETY: the processor has just said it runs AVX-512F and FMA.
                unsafe { s.settle_avx512(&params, &h, &t) };
                paths.push(("avx512f", s));
            }
            for (name, s) in paths {
                assert_eq!(bits(&s), bits(&portable), "{name}");
                assert_eq!(s.settled, portable.settled, "{name}");
            }
        }
    }
}
