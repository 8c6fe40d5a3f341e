//! TM composite inference (FedTMOS §4, eq. 3): several models vote together, each model's class
//! sums divided by its spread (max − min), so that no model outvotes the others by scale alone.
//! FedTMOS's server models and the ensemble baseline both predict this way.
//!
//! Two readings of the spread ([`Normalization`]): eq. 3 takes it per input (one row of class
//! sums); the published code takes one constant per model over the whole evaluated batch
//! (docs/papers/fedtmos.md §12). The code also clamps every class sum to [−T, T] first, as
//! training does ([`CompositeOptions::clamp`]).

use serde::{Deserialize, Serialize};

use super::{CoalescedTm, MultiClassTm, conv::ConvTm};
use crate::data::booleanize::BitRows;

/// Where a model's spread is taken.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Normalization {
    /// Eq. 3: per input, max − min over its classes; a model whose sums are all equal for an
    /// input abstains on it.
    PerSample,
    /// The code: per model, max − min over every class sum of the batch (0 counts as 1).
    PerBatch,
}

/// How a composite predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CompositeOptions {
    pub normalization: Normalization,
    /// Clamp each model's class sums to [−T, T] (its own T) before normalizing.
    pub clamp: bool,
}

impl CompositeOptions {
    /// The published code's reading: one spread per model over the batch, sums clamped.
    pub const CODE: CompositeOptions = CompositeOptions {
        normalization: Normalization::PerBatch,
        clamp: true,
    };

    /// The other of the two readings FedTMOS results are compared under: eq. 3 if this is
    /// not eq. 3 as written (per sample, no clamp), else the code's.
    pub fn other_reading(self) -> CompositeOptions {
        if self == CompositeOptions::default() {
            CompositeOptions::CODE
        } else {
            CompositeOptions::default()
        }
    }

    /// `per-sample`, `per-batch+clamp`, …
    pub fn name(self) -> String {
        let n = crate::params::name_of(&self.normalization);
        if self.clamp { format!("{n}+clamp") } else { n }
    }

    pub fn parse(name: &str) -> Option<CompositeOptions> {
        let (n, clamp) = match name.strip_suffix("+clamp") {
            Some(n) => (n, true),
            None => (name, false),
        };
        let normalization = match n {
            "per-sample" => Normalization::PerSample,
            "per-batch" => Normalization::PerBatch,
            _ => return None,
        };
        Some(CompositeOptions {
            normalization,
            clamp,
        })
    }
}

impl Default for CompositeOptions {
    fn default() -> Self {
        CompositeOptions {
            normalization: Normalization::PerSample,
            clamp: false,
        }
    }
}

/// A machine that gives row-major class sums for a batch: what a composite is made of.
pub trait ClassSums: Send + Sync {
    fn classes(&self) -> usize;
    /// The voting margin T of its training.
    fn margin(&self) -> i32;
    /// `rows × classes` unclamped sums.
    fn class_sums_batch(&self, data: &BitRows) -> Vec<i32>;
}

impl ClassSums for MultiClassTm {
    fn classes(&self) -> usize {
        MultiClassTm::classes(self)
    }
    fn margin(&self) -> i32 {
        self.hyper().t
    }
    fn class_sums_batch(&self, data: &BitRows) -> Vec<i32> {
        MultiClassTm::class_sums_batch(self, data)
    }
}

impl ClassSums for CoalescedTm {
    fn classes(&self) -> usize {
        CoalescedTm::classes(self)
    }
    fn margin(&self) -> i32 {
        self.hyper().t
    }
    fn class_sums_batch(&self, data: &BitRows) -> Vec<i32> {
        CoalescedTm::class_sums_batch(self, data)
    }
}

impl ClassSums for ConvTm {
    fn classes(&self) -> usize {
        ConvTm::classes(self)
    }
    fn margin(&self) -> i32 {
        self.hyper().t
    }
    fn class_sums_batch(&self, data: &BitRows) -> Vec<i32> {
        ConvTm::class_sums_batch(self, data)
    }
}

/// One machine's class sums over a batch, computed once, so that several composites (and the
/// machine alone) can vote from them.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSums {
    /// `rows × classes`, unclamped.
    pub sums: Vec<i32>,
    /// The machine's T.
    pub margin: i32,
}

impl BatchSums {
    pub fn of(model: &dyn ClassSums, data: &BitRows) -> BatchSums {
        BatchSums {
            sums: model.class_sums_batch(data),
            margin: model.margin(),
        }
    }
}

/// The composite's predictions from its machines' sums (see [`BatchSums`]).
pub fn vote(models: &[&BatchSums], classes: usize, options: CompositeOptions) -> Vec<u32> {
    let sums: Vec<Vec<i32>> = models
        .iter()
        .map(|m| {
            if options.clamp {
                let t = m.margin;
                m.sums.iter().map(|v| (*v).clamp(-t, t)).collect()
            } else {
                m.sums.clone()
            }
        })
        .collect();
    composite_predict(&sums, classes, options.normalization)
}

/// The composite's predictions for `data`; every model must have the same classes.
pub fn predict(
    models: &[&dyn ClassSums],
    data: &BitRows,
    options: CompositeOptions,
) -> Result<Vec<u32>, String> {
    let Some(first) = models.first() else {
        return Err("a composite needs at least one model".into());
    };
    let classes = first.classes();
    if let Some(m) = models.iter().find(|m| m.classes() != classes) {
        return Err(format!(
            "composite models of {classes} and {} classes",
            m.classes()
        ));
    }
    let sums: Vec<BatchSums> = models.iter().map(|m| BatchSums::of(*m, data)).collect();
    Ok(vote(&sums.iter().collect::<Vec<_>>(), classes, options))
}

/// Predictions from per-model class sums: `sums[m]` is model m's row-major matrix of
/// `rows × classes` sums.
pub fn composite_predict(
    sums: &[Vec<i32>],
    classes: usize,
    normalization: Normalization,
) -> Vec<u32> {
    let rows = sums.first().map_or(0, |s| s.len() / classes.max(1));
    let spread = |values: &[i32]| {
        let (min, max) = values
            .iter()
            .fold((i32::MAX, i32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        f64::from(max) - f64::from(min)
    };
    // PerBatch: one constant per model (0 → 1, as the code); PerSample needs none.
    let batch: Vec<f64> = match normalization {
        Normalization::PerBatch => sums
            .iter()
            .map(|s| match spread(s) {
                d if d > 0.0 => d,
                _ => 1.0,
            })
            .collect(),
        Normalization::PerSample => vec![1.0; sums.len()],
    };
    let mut votes = vec![0f64; classes];
    (0..rows)
        .map(|i| {
            votes.iter_mut().for_each(|v| *v = 0.0);
            for (model, &batch_spread) in sums.iter().zip(&batch) {
                let row = &model[i * classes..(i + 1) * classes];
                let d = match normalization {
                    Normalization::PerSample => spread(row),
                    Normalization::PerBatch => batch_spread,
                };
                if d > 0.0 {
                    for (v, &s) in votes.iter_mut().zip(row) {
                        *v += f64::from(s) / d;
                    }
                }
            }
            let mut best = 0;
            for (c, &v) in votes.iter().enumerate() {
                if v > votes[best] {
                    best = c;
                }
            }
            best as u32
        })
        .collect()
}

/// How one machine's sum for a class it holds behaves on labelled rows: on that class's rows
/// and on every other row. A machine trained on one class alone says yes to everything (high
/// sums on the others), and in a composite it then votes for its class on every input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSumProfile {
    pub class: u32,
    /// Mean sum on the rows of `class`, and on the rest.
    pub mean_on_class: f64,
    pub mean_on_others: f64,
    /// Share of the other rows on which the sum is above 0, and at least T/2.
    pub others_positive: f64,
    pub others_above_half_t: f64,
}

/// The profile of every class `sums` holds (a class whose sums are 0 on every row is one the
/// machine lacks) that has rows in `labels`.
pub fn class_sum_profiles(
    sums: &BatchSums,
    labels: &[u32],
    classes: usize,
) -> Vec<ClassSumProfile> {
    let rows = labels.len();
    if classes == 0 || sums.sums.len() != rows * classes {
        return Vec::new();
    }
    let mean = |v: &[i32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64;
    let share = |v: &[i32], above: i32| {
        v.iter().filter(|&&x| x > above).count() as f64 / v.len().max(1) as f64
    };
    (0..classes)
        .filter_map(|c| {
            let column = (0..rows).map(|i| sums.sums[i * classes + c]);
            if column.clone().all(|v| v == 0) {
                return None;
            }
            let (mut own, mut others) = (Vec::new(), Vec::new());
            for (v, &l) in column.zip(labels) {
                match l as usize == c {
                    true => own.push(v),
                    false => others.push(v),
                }
            }
            if own.is_empty() {
                return None;
            }
            Some(ClassSumProfile {
                class: c as u32,
                mean_on_class: mean(&own),
                mean_on_others: mean(&others),
                others_positive: share(&others, 0),
                // At least T/2: above ⌈T/2⌉ − 1.
                others_above_half_t: share(&others, (sums.margin + 1) / 2 - 1),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PER_SAMPLE: Normalization = Normalization::PerSample;

    #[test]
    fn each_model_votes_by_its_normalised_sums() {
        // Model A: sums (100, 0, 50): spread 100 → (1.0, 0.0, 0.5).
        // Model B: sums (0, 4, 1):    spread 4   → (0.0, 1.0, 0.25).
        // Votes (1.0, 1.0, 0.75): class 0 and 1 tie, the lower index wins. Without the
        // normalisation model A's scale would decide alone (100 + 0 against 0 + 4).
        let a = vec![100, 0, 50];
        let b = vec![0, 4, 1];
        assert_eq!(
            composite_predict(&[a.clone(), b.clone()], 3, PER_SAMPLE),
            vec![0]
        );
        // A third model leaning to class 1 breaks the tie.
        assert_eq!(
            composite_predict(&[a, b, vec![0, 2, 1]], 3, PER_SAMPLE),
            vec![1]
        );
    }

    /// A machine that says yes to every row shows it: high sums on the other classes' rows.
    #[test]
    fn class_sum_profiles_show_a_machine_that_fires_on_everything() {
        // 4 rows labelled 0, 0, 1, 2; classes 0 and 1 held, class 2 lacking (all zero).
        // Class 0: (10, 6) on its rows, (8, −4) on the others. Class 1: (−2) on its row, (1, 0, 3)
        // on the others. T = 10, so T/2 = 5.
        let sums = BatchSums {
            sums: vec![10, 1, 0, 6, 0, 0, 8, -2, 0, -4, 3, 0],
            margin: 10,
        };
        let p = class_sum_profiles(&sums, &[0, 0, 1, 2], 3);
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[0],
            ClassSumProfile {
                class: 0,
                mean_on_class: 8.0,
                mean_on_others: 2.0,
                others_positive: 0.5,
                others_above_half_t: 0.5,
            }
        );
        assert_eq!((p[1].class, p[1].mean_on_class), (1, -2.0));
        assert!((p[1].mean_on_others - 4.0 / 3.0).abs() < 1e-12);
        assert!((p[1].others_positive - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(p[1].others_above_half_t, 0.0);
    }

    #[test]
    fn a_model_with_equal_sums_abstains() {
        // Row 0: model A's sums (7, 7, 7) are flat and abstain; model B's (0, 1, 0) → class 1.
        // Row 1: A (3, 0, 9) / 9 = (1/3, 0, 1); B (5, 0, 0) / 5 = (1, 0, 0); total (4/3, 0, 1)
        // → class 0.
        let a = vec![7, 7, 7, 3, 0, 9];
        let b = vec![0, 1, 0, 5, 0, 0];
        assert_eq!(composite_predict(&[a, b], 3, PER_SAMPLE), vec![1, 0]);
    }

    /// The code's normalization: one constant per model over the batch. A model whose sums are
    /// large on one row and small on another keeps that difference, where eq. 3 erases it.
    #[test]
    fn the_batch_normalization_keeps_a_models_confidence_across_rows() {
        // Model A: row 0 (100, 0), row 1 (0, 50). Model B: row 0 (0, 100), row 1 (10, 0).
        // Both spread 100 over the batch.
        let a = vec![100, 0, 0, 50];
        let b = vec![0, 100, 10, 0];
        // Row 1 per batch: (0, 0.5) + (0.1, 0) → class 1. Per sample: (0, 1) + (1, 0), a tie
        // → class 0. Row 0 ties either way → class 0.
        assert_eq!(
            composite_predict(&[a.clone(), b.clone()], 2, Normalization::PerBatch),
            vec![0, 1]
        );
        assert_eq!(
            composite_predict(&[a, b.clone()], 2, PER_SAMPLE),
            vec![0, 0]
        );
        // A flat batch counts as spread 1 and adds nothing: B decides.
        assert_eq!(
            composite_predict(&[vec![0, 0, 0, 0], b], 2, Normalization::PerBatch),
            vec![1, 0]
        );
    }

    #[test]
    fn machines_of_every_kind_compose_through_their_class_sums() {
        use crate::model::tm::FeedbackMasks;
        use crate::model::tm::testing::{hyper, noisy_xor};
        use crate::rng::derive_rng;
        let mut rng = derive_rng(21, "composite", 0);
        let train = noisy_xor(1500, 0.1, &mut rng);
        let test = noisy_xor(200, 0.0, &mut rng);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        let mut a = MultiClassTm::new(hyper(20, 15, 3.9), 12, 2);
        let mut b = CoalescedTm::new(hyper(20, 15, 3.9), 12, 2, &mut rng);
        for _ in 0..5 {
            a.fit_epoch(&train, &mut masks, &mut rng);
            b.fit_epoch(&train, &mut masks, &mut rng);
        }
        let models: [&dyn ClassSums; 2] = [&a, &b];
        for normalization in [Normalization::PerSample, Normalization::PerBatch] {
            let options = CompositeOptions {
                normalization,
                clamp: true,
            };
            let got = predict(&models, &test, options).unwrap();
            let clamped = |s: Vec<i32>| s.into_iter().map(|v| v.clamp(-15, 15)).collect();
            let want = composite_predict(
                &[
                    clamped(a.class_sums_batch(&test)),
                    clamped(b.class_sums_batch(&test)),
                ],
                2,
                normalization,
            );
            assert_eq!(got, want, "{normalization:?}");
            let correct = got.iter().zip(&test.labels).filter(|(p, y)| p == y).count();
            assert!(correct > 180, "{normalization:?}: {correct} of 200");
        }
        let three = MultiClassTm::new(hyper(20, 15, 3.9), 12, 3);
        let e = predict(&[&a, &three], &test, CompositeOptions::default()).unwrap_err();
        assert!(e.contains("2 and 3 classes"), "{e}");
    }

    #[test]
    fn the_two_readings_are_named_and_each_is_the_others_other() {
        let eq3 = CompositeOptions::default();
        assert_eq!(eq3.name(), "per-sample");
        assert_eq!(CompositeOptions::CODE.name(), "per-batch+clamp");
        assert_eq!(eq3.other_reading(), CompositeOptions::CODE);
        assert_eq!(CompositeOptions::CODE.other_reading(), eq3);
        for o in [eq3, CompositeOptions::CODE] {
            assert_eq!(CompositeOptions::parse(&o.name()), Some(o));
        }
        assert_eq!(CompositeOptions::parse("per-row"), None);
    }
}
