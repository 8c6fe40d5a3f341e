//! Fuzzy Cognitive Map classifier (Blind FL, "Fuzzy Cognitive Maps" eq. 1–3 and "Pattern
//! recognition with FCMs"), trained by PSO (eq. 5–7).
//!
//! Concepts: one per feature, then one per class (n = features + classes). The adjacency matrix
//! is n × n, row = source concept j, column = target concept i, so `w[j·n + i]` is `ϖ_ji` of
//! eq. 1: `c_i(t) = f(Σ_j ϖ_ji c_j(t−1))`, with f the sigmoid `1/(1+e^{−λx})` (eq. 2) or `tanh(λx)`
//! (eq. 3). Weights lie in [−1, 1]. The class concepts start at 0 and the map is iterated until
//! `‖c(t) − c(t−1)‖₂ < tolerance` (the paper's 1e−5) or `max_iterations`; the prediction is the
//! class concept with the largest state (the lowest class on a tie).
//!
//! Which links are learnable, and why:
//! - feature → class and class → class (no self-loops) are learned; that is
//!   `classes · (features + classes − 1)` weights.
//! - Feature concepts are clamped to the (min-max scaled) sample at every iteration: they are the
//!   evidence, not hidden state. If eq. 1 updated them too, a converging map would forget its
//!   initial state and settle on the same fixed point for every sample, leaving nothing to
//!   classify. With them clamped, links into a feature concept have no effect, so they are not
//!   learned and stay 0, as do self-loops (the FCM convention). The wire still carries the whole
//!   n × n matrix, as the paper's participants share their adjacency matrices; received matrices
//!   must hold 0 where nothing is learned.
//!
//! Fitness (eq. 7): 1 − Jaccard, in one of two readings (`fcm.fitness`):
//! - `jaccard` (default): Jaccard of the positive class (class 1), TP / (TP + FP + FN), for two
//!   classes; for more, the mean over the classes that occur in the truth or the predictions
//!   (sklearn's `average="macro"` restricted to present labels). An empty union counts as a
//!   perfect match.
//! - `sample-jaccard`: eq. 7 as the paper writes it, per sample i between the label sets {y_i}
//!   and {ŷ_i}, averaged over the samples. With one label per sample that is 1 if the prediction
//!   is right and 0 if not, so the fitness is the error rate.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::metrics::ConfusionMatrix;
use crate::model::pso::{self, PsoHyper};
use crate::params::{ParamResult, positive, require};
use crate::rng::FlintRng;
use crate::{FlintError, Result};

mod block;

use block::{Settler, Transposed};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// Unipolar, states in (0, 1) (eq. 2).
    Sigmoid,
    /// Bipolar, states in (−1, 1) (eq. 3).
    Tanh,
}

/// What PSO minimises (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Fitness {
    Jaccard,
    SampleJaccard,
}

/// Checked FCM hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FcmHyper {
    pub activation: Activation,
    pub fitness: Fitness,
    /// λ (paper: 2 for tanh, 5 for the sigmoid; those are the defaults).
    pub slope: f64,
    pub tolerance: f64,
    pub max_iterations: usize,
}

impl Activation {
    /// λ of the paper's two models: 2 for tanh, 5 for the sigmoid.
    pub fn paper_slope(self) -> f64 {
        match self {
            Activation::Tanh => 2.0,
            Activation::Sigmoid => 5.0,
        }
    }
}

impl FcmHyper {
    /// The settings, refused where a value is out of its range.
    pub fn check(self) -> ParamResult<FcmHyper> {
        positive("fcm.slope", self.slope)?;
        positive("fcm.tolerance", self.tolerance)?;
        require(
            "fcm.max_iterations",
            "at least 1",
            self.max_iterations,
            self.max_iterations > 0,
        )?;
        Ok(self)
    }
}

/// A map's learnable weights. Stored per target class k, contiguous:
/// `[ϖ(feature f → k) for f] ++ [ϖ(class l → k) for l ≠ k]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fcm {
    features: usize,
    classes: usize,
    params: Vec<f64>,
}

/// How one sample's dynamics ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settled {
    pub iterations: usize,
    pub converged: bool,
}

impl Fcm {
    pub fn parameter_count(features: usize, classes: usize) -> usize {
        classes * (features + classes - 1)
    }

    /// A map with every link 0.
    pub fn zeros(features: usize, classes: usize) -> Fcm {
        Fcm {
            features,
            classes,
            params: vec![0.0; Self::parameter_count(features, classes)],
        }
    }

    pub fn from_parameters(features: usize, classes: usize, params: Vec<f64>) -> Result<Fcm> {
        let want = Self::parameter_count(features, classes);
        if params.len() != want {
            return Err(FlintError::Model(format!(
                "an fcm of {features} features and {classes} classes has {want} learnable weights, got {}",
                params.len()
            )));
        }
        if let Some(i) = params.iter().position(|w| !(-1.0..=1.0).contains(w)) {
            return Err(FlintError::Model(format!(
                "fcm weight {i} is {}, outside [-1, 1]",
                params[i]
            )));
        }
        Ok(Fcm {
            features,
            classes,
            params,
        })
    }

    pub fn features(&self) -> usize {
        self.features
    }

    pub fn classes(&self) -> usize {
        self.classes
    }

    pub fn concepts(&self) -> usize {
        self.features + self.classes
    }

    pub fn parameters(&self) -> &[f64] {
        &self.params
    }

    /// The full n × n adjacency matrix, row = source, column = target.
    pub fn matrix(&self) -> Vec<f64> {
        let (f, k, n) = (self.features, self.classes, self.concepts());
        let mut w = vec![0.0; n * n];
        for (target, row) in self.params.chunks(f + k - 1).enumerate() {
            let col = f + target;
            for (j, &v) in row[..f].iter().enumerate() {
                w[j * n + col] = v;
            }
            for (l, &v) in sources(target, k).zip(&row[f..]) {
                w[(f + l) * n + col] = v;
            }
        }
        w
    }

    /// Reads an n × n matrix; links that are not learnable must be 0 and all weights in [−1, 1].
    pub fn from_matrix(features: usize, classes: usize, w: &[f64]) -> Result<Fcm> {
        let n = features + classes;
        if w.len() != n * n {
            return Err(FlintError::Model(format!(
                "adjacency matrix has {} weights, expected {n}×{n} = {} ({features} features + {classes} classes)",
                w.len(),
                n * n
            )));
        }
        let mut params = Vec::with_capacity(Self::parameter_count(features, classes));
        for target in 0..classes {
            let col = features + target;
            params.extend((0..features).map(|j| w[j * n + col]));
            params.extend(sources(target, classes).map(|l| w[(features + l) * n + col]));
        }
        for j in 0..n {
            for i in 0..n {
                let learnable = i >= features && i != j;
                if !learnable && w[j * n + i] != 0.0 {
                    return Err(FlintError::Model(format!(
                        "adjacency matrix has weight {} on link {j}→{i}, which is not learnable and must be 0",
                        w[j * n + i]
                    )));
                }
            }
        }
        Self::from_parameters(features, classes, params)
    }

    /// Element-wise mean of two maps (Blended Blind FL: new local = (global + previous local) / 2).
    pub fn blend(&self, other: &Fcm) -> Result<Fcm> {
        if (self.features, self.classes) != (other.features, other.classes) {
            return Err(FlintError::Model(format!(
                "cannot blend an fcm of {}+{} concepts with one of {}+{}",
                self.features, self.classes, other.features, other.classes
            )));
        }
        let params = self
            .params
            .iter()
            .zip(&other.params)
            .map(|(a, b)| (a + b) / 2.0)
            .collect();
        Ok(Fcm { params, ..*self })
    }

    /// The class concepts' final states for one sample, and how the dynamics ended.
    pub fn settle(&self, hyper: &FcmHyper, x: &[f64]) -> (Vec<f64>, Settled) {
        let settled = self.settle_one(hyper, x);
        let state = (0..self.classes).map(|c| settled.state(c, 0)).collect();
        (state, settled.settled[0])
    }

    pub fn predict(&self, hyper: &FcmHyper, x: &[f64]) -> u32 {
        self.settle_one(hyper, x).predicted(0)
    }

    fn settle_one(&self, hyper: &FcmHyper, x: &[f64]) -> Settler {
        assert!(
            x.len() >= self.features,
            "a row of {} values for a map of {} features",
            x.len(),
            self.features
        );
        let rows = Transposed::new(x, self.features, 1);
        let mut settler = Settler::new(self.classes, 1);
        settler.settle(&self.params, hyper, &rows);
        settler
    }

    pub fn evaluate(&self, hyper: &FcmHyper, data: &Dataset) -> ConfusionMatrix {
        let mut eval = Evaluator::new(data, self.classes);
        eval.confusion(&self.params, hyper).clone()
    }
}

/// The class concepts that feed class `target`, in parameter order.
fn sources(target: usize, classes: usize) -> impl Iterator<Item = usize> {
    (0..classes).filter(move |&l| l != target)
}

/// Scores parameter vectors on one dataset without allocating: the PSO fitness loop.
pub struct Evaluator<'a> {
    data: &'a Dataset,
    rows: Transposed,
    settler: Settler,
    confusion: ConfusionMatrix,
}

impl<'a> Evaluator<'a> {
    pub fn new(data: &'a Dataset, classes: usize) -> Evaluator<'a> {
        Evaluator {
            data,
            rows: Transposed::new(&data.x, data.features, data.len()),
            settler: Settler::new(classes, data.len()),
            confusion: ConfusionMatrix::new(classes),
        }
    }

    /// The confusion matrix of the map with these learnable weights on the whole dataset.
    pub fn confusion(&mut self, params: &[f64], hyper: &FcmHyper) -> &ConfusionMatrix {
        self.confusion.clear();
        self.settler.settle(params, hyper, &self.rows);
        for (r, &y) in self.data.y.iter().enumerate() {
            let p = self.settler.predicted(r);
            self.confusion.add(y as usize, p as usize);
        }
        &self.confusion
    }

    /// Eq. 7: 1 − Jaccard, as `hyper.fitness` reads it (see the module doc).
    pub fn fitness(&mut self, params: &[f64], hyper: &FcmHyper) -> f64 {
        let cm = self.confusion(params, hyper);
        match hyper.fitness {
            Fitness::Jaccard => 1.0 - cm.jaccard(),
            Fitness::SampleJaccard => 1.0 - cm.metrics().accuracy,
        }
    }
}

/// What one PSO training run found.
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    pub model: Fcm,
    pub fitness: f64,
    pub evaluations: usize,
}

/// Trains a map on `data` by PSO; `start`, when given (a client's current model), seeds one
/// particle, so the result is never worse on `data` than the map it started from.
pub fn train(
    data: &Dataset,
    classes: usize,
    hyper: &FcmHyper,
    pso: &PsoHyper,
    start: Option<&Fcm>,
    rng: &mut FlintRng,
) -> Result<Trained> {
    if data.is_empty() {
        return Err(FlintError::Model("cannot train an fcm on no rows".into()));
    }
    let features = data.features;
    if let Some(s) = start
        && (s.features, s.classes) != (features, classes)
    {
        return Err(FlintError::Model(format!(
            "the starting fcm has {}+{} concepts but the data has {features} features and {classes} classes",
            s.features, s.classes
        )));
    }
    let dim = Fcm::parameter_count(features, classes);
    let mut eval = Evaluator::new(data, classes);
    let seeds: Vec<&[f64]> = start.map(|s| s.params.as_slice()).into_iter().collect();
    let out = pso::minimise(dim, pso, &seeds, rng, |w| eval.fitness(w, hyper));
    Ok(Trained {
        model: Fcm::from_parameters(features, classes, out.best)?,
        fitness: out.fitness,
        evaluations: out.evaluations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    fn hyper(activation: Activation, slope: f64) -> FcmHyper {
        FcmHyper {
            activation,
            fitness: Fitness::Jaccard,
            slope,
            tolerance: 1e-5,
            max_iterations: 100,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// Eq. 1 for one row as written, with the C library's `exp`: what the blocks must match.
    fn settle_by_the_book(m: &Fcm, h: &FcmHyper, x: &[f64]) -> (Vec<f64>, Settled) {
        let (f, k) = (m.features, m.classes);
        let weights: Vec<&[f64]> = m.params.chunks_exact(f + k - 1).collect();
        let base: Vec<f64> = weights
            .iter()
            .map(|w| w[..f].iter().zip(x).map(|(w, v)| w * v).sum())
            .collect();
        let f_of = |x: f64| match h.activation {
            Activation::Sigmoid => 1.0 / (1.0 + (-h.slope * x).exp()),
            Activation::Tanh => 1.0 - 2.0 / ((2.0 * h.slope * x).exp() + 1.0),
        };
        let mut state = vec![0.0; k];
        for t in 1..=h.max_iterations {
            let next: Vec<f64> = (0..k)
                .map(|c| {
                    let links = sources(c, k).zip(&weights[c][f..]);
                    f_of(links.fold(base[c], |s, (m, w)| s + w * state[m]))
                })
                .collect();
            let moved: f64 = next
                .iter()
                .zip(&state)
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            state = next;
            if moved < h.tolerance * h.tolerance {
                let done = Settled {
                    iterations: t,
                    converged: true,
                };
                return (state, done);
            }
        }
        let capped = Settled {
            iterations: h.max_iterations,
            converged: false,
        };
        (state, capped)
    }

    #[test]
    fn blocks_settle_as_the_book_within_1e_12() {
        // Random maps over 5 classes (many never settle): the same iterations and
        // predictions, the states within 1e-12 (the only difference is `exp`'s last bits).
        let mut rng = derive_rng(5, "book", 0);
        use rand::RngExt;
        for activation in [Activation::Tanh, Activation::Sigmoid] {
            let h = hyper(activation, 2.0);
            for _ in 0..50 {
                let params = (0..Fcm::parameter_count(6, 5)).map(|_| rng.random_range(-1.0..=1.0));
                let m = Fcm::from_parameters(6, 5, params.collect()).unwrap();
                let x: Vec<f64> = (0..6).map(|_| rng.random::<f64>()).collect();
                let (want, want_settled) = settle_by_the_book(&m, &h, &x);
                let (got, settled) = m.settle(&h, &x);
                assert_eq!(settled, want_settled);
                assert!(
                    got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12),
                    "{got:?} {want:?}"
                );
            }
        }
    }

    #[test]
    fn tanh_map_settles_as_computed_by_hand() {
        // One feature, two classes. ϖ(f→c0) = 0.5, ϖ(f→c1) = −0.5, ϖ(c1→c0) = 0.5, ϖ(c0→c1) = 0.
        // x = 1, λ = 2: t1: c0 = tanh(1), c1 = tanh(−1); t2: c0 = tanh(2(0.5 + 0.5·tanh(−1))),
        // c1 unchanged; t3: nothing moves, so the dynamics stop after 3 iterations.
        let m = Fcm::from_parameters(1, 2, vec![0.5, 0.5, -0.5, 0.0]).unwrap();
        let (state, settled) = m.settle(&hyper(Activation::Tanh, 2.0), &[1.0]);
        let c1 = (-1.0f64).tanh();
        let c0 = (2.0 * (0.5 + 0.5 * c1)).tanh();
        assert!(close(state[0], c0) && close(state[1], c1), "{state:?}");
        assert_eq!(
            settled,
            Settled {
                iterations: 3,
                converged: true
            }
        );
        assert_eq!(m.predict(&hyper(Activation::Tanh, 2.0), &[1.0]), 0);
    }

    #[test]
    fn sigmoid_map_settles_as_computed_by_hand() {
        // ϖ(f→c0) = 0.2, ϖ(f→c1) = −0.2, no class links, x = 0.5, λ = 5: σ(±0.5).
        let m = Fcm::from_parameters(1, 2, vec![0.2, 0.0, -0.2, 0.0]).unwrap();
        let h = hyper(Activation::Sigmoid, 5.0);
        let (state, settled) = m.settle(&h, &[0.5]);
        assert!(close(state[0], 0.622_459_331_201_854_6), "{state:?}");
        assert!(close(state[1], 0.377_540_668_798_145_4), "{state:?}");
        assert_eq!(
            settled,
            Settled {
                iterations: 2,
                converged: true
            }
        );
    }

    #[test]
    fn the_iteration_cap_stops_a_map_that_does_not_settle() {
        // c0 ← tanh(5·(−c1)), c1 ← tanh(5·c0): a rotation with gain, which cycles for ever.
        let m = Fcm::from_parameters(1, 2, vec![0.1, -1.0, 0.1, 1.0]).unwrap();
        let mut h = hyper(Activation::Tanh, 5.0);
        let (_, settled) = m.settle(&h, &[1.0]);
        assert_eq!(
            settled,
            Settled {
                iterations: 100,
                converged: false
            }
        );
        h.max_iterations = 1;
        let (state, settled) = m.settle(&h, &[1.0]);
        assert_eq!(settled.iterations, 1);
        assert!(close(state[0], (0.5f64).tanh()) && close(state[1], (0.5f64).tanh()));
    }

    #[test]
    fn rows_settled_side_by_side_predict_as_rows_settled_alone() {
        // Random maps (many of which never settle) over 3 classes and 150 rows: two full
        // blocks and a partial one, rows leaving their block at different steps.
        let mut rng = derive_rng(3, "maps", 0);
        use rand::RngExt;
        let data = Dataset {
            features: 4,
            x: (0..150 * 4).map(|_| rng.random::<f64>()).collect(),
            y: (0..150).map(|i| i % 3).collect(),
            classes: vec!["a".into(), "b".into(), "c".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        };
        for activation in [Activation::Tanh, Activation::Sigmoid] {
            let h = hyper(activation, 3.0);
            for _ in 0..20 {
                let params: Vec<f64> = (0..Fcm::parameter_count(4, 3))
                    .map(|_| rng.random_range(-1.0..=1.0))
                    .collect();
                let m = Fcm::from_parameters(4, 3, params.clone()).unwrap();
                let alone: Vec<u32> = (0..150).map(|i| m.predict(&h, data.row(i))).collect();
                let want = ConfusionMatrix::from_predictions(3, &data.y, &alone);
                assert_eq!(Evaluator::new(&data, 3).confusion(&params, &h), &want);
            }
        }
    }

    #[test]
    fn matrix_round_trip_keeps_learnable_links_and_refuses_the_others() {
        let params: Vec<f64> = (0..Fcm::parameter_count(3, 3))
            .map(|i| i as f64 / 20.0 - 0.5)
            .collect();
        let m = Fcm::from_parameters(3, 3, params).unwrap();
        let w = m.matrix();
        assert_eq!(w.len(), 36);
        // Feature 2 → class 1 is row 2, column 3 + 1.
        assert_eq!(w[2 * 6 + 4], m.parameters()[(3 + 2) + 2]);
        // Class 2 → class 0 is the second class source of target 0.
        assert_eq!(w[5 * 6 + 3], m.parameters()[3 + 1]);
        assert_eq!(Fcm::from_matrix(3, 3, &w).unwrap(), m);
        let mut bad = w.clone();
        bad[6 + 2] = 0.5; // feature 1 → feature 2
        let e = Fcm::from_matrix(3, 3, &bad).unwrap_err().to_string();
        assert!(e.contains("link 1→2") && e.contains("not learnable"), "{e}");
        let mut bad = w.clone();
        bad[4 * 6 + 4] = 0.1; // a self-loop
        assert!(Fcm::from_matrix(3, 3, &bad).is_err());
        let mut bad = w;
        bad[3] = 1.5;
        let e = Fcm::from_matrix(3, 3, &bad).unwrap_err().to_string();
        assert!(e.contains("outside [-1, 1]"), "{e}");
        assert!(Fcm::from_matrix(3, 3, &[0.0; 35]).is_err());
    }

    #[test]
    fn blend_is_the_element_wise_mean() {
        let a = Fcm::from_parameters(1, 2, vec![1.0, 0.5, -1.0, 0.0]).unwrap();
        let b = Fcm::from_parameters(1, 2, vec![0.0, -0.5, 0.0, 1.0]).unwrap();
        let m = a.blend(&b).unwrap();
        assert_eq!(m.parameters(), &[0.5, 0.0, -0.5, 0.5]);
        assert!(a.blend(&Fcm::zeros(2, 2)).is_err());
    }

    fn separable(rows: usize) -> Dataset {
        // Class 1 iff x0 > x1: a map with ϖ(x0→c1) > 0 > ϖ(x1→c1) separates it.
        let mut rng = derive_rng(9, "data", 0);
        let mut x = Vec::new();
        let mut y = Vec::new();
        use rand::RngExt;
        for _ in 0..rows {
            let a: f64 = rng.random();
            let b: f64 = rng.random();
            x.extend([a, b, rng.random()]);
            y.push(u32::from(a > b));
        }
        Dataset {
            features: 3,
            x,
            y,
            classes: vec!["0".into(), "1".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        }
    }

    #[test]
    fn pso_training_learns_a_separable_problem_and_is_seeded() {
        let data = separable(400);
        let h = hyper(Activation::Tanh, 2.0);
        let pso = PsoHyper::default();
        let t = train(&data, 2, &h, &pso, None, &mut derive_rng(1, "train", 1)).unwrap();
        let acc = t.model.evaluate(&h, &data).metrics().accuracy;
        assert!(acc > 0.9, "accuracy {acc}");
        assert_eq!(t.evaluations, pso.evaluations());
        let again = train(&data, 2, &h, &pso, None, &mut derive_rng(1, "train", 1)).unwrap();
        assert_eq!(t, again);
        // Seeded with its own result, training never gets worse on the same data.
        let next = train(
            &data,
            2,
            &h,
            &pso,
            Some(&t.model),
            &mut derive_rng(2, "train", 1),
        )
        .unwrap();
        assert!(next.fitness <= t.fitness);
    }

    #[test]
    fn fitness_is_one_minus_the_jaccard_of_the_positive_class() {
        // The map predicts class 1 iff x0 > x1 (c1 fed x0 − x1, c0 fed x1 − x0).
        let data = Dataset {
            features: 2,
            x: vec![0.9, 0.1, 0.2, 0.8, 0.6, 0.4, 0.3, 0.5, 0.7, 0.2],
            y: vec![1, 1, 0, 0, 1],
            classes: vec!["0".into(), "1".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        };
        let params = vec![-1.0, 1.0, 0.0, 1.0, -1.0, 0.0];
        let h = hyper(Activation::Tanh, 2.0);
        // Predicted 1, 0, 1, 0, 1: TP 2 (rows 0, 4), FP 1 (row 2), FN 1 (row 1), J = 2/4.
        let mut e = Evaluator::new(&data, 2);
        assert!(close(e.fitness(&params, &h), 0.5));
        assert_eq!(e.confusion(&params, &h).counts(), &[1, 1, 1, 2]);
        // Per sample, eq. 7 is 0 for the three right predictions and 1 for the two wrong ones.
        let per_sample = FcmHyper {
            fitness: Fitness::SampleJaccard,
            ..h
        };
        assert!(close(e.fitness(&params, &per_sample), 2.0 / 5.0));
    }
}
