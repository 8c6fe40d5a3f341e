//! The weighted multi-class Tsetlin Machine (Granmo 2018; weighted clauses: Phoulady et al.
//! 2020), as the FedTMOS code uses: one clause bank per class, clauses alternating positive
//! (even index) and negative (odd index) polarity, integer clause weights starting at 1.

use rand::RngExt;

use super::bank::{ClauseBank, ExcludedAt, FeedbackMasks, LiteralRows, select_for_feedback};
use super::handoff::Handoff;
use super::infer::{CompiledClauses, Transposed, accuracy, argmax, predictions};
use super::{NegativeSampling, TmHyper};
use crate::data::booleanize::BitRows;
use crate::rng::FlintRng;

#[derive(Debug, Clone, PartialEq)]
pub struct MultiClassTm {
    hyper: TmHyper,
    classes: usize,
    banks: Vec<ClauseBank>,
    weights: Vec<Vec<u32>>,
    class_counts: Vec<u64>,
}

/// Reused buffers of the training loop, so no example allocates.
#[derive(Debug, Default)]
pub struct Scratch {
    fired: Vec<bool>,
    sums: Vec<i32>,
    lits: Vec<u64>,
    selected: Vec<u32>,
}

impl MultiClassTm {
    pub fn new(hyper: TmHyper, features: usize, classes: usize) -> MultiClassTm {
        assert!(classes >= 2, "a classifier needs two classes");
        MultiClassTm {
            banks: (0..classes)
                .map(|_| ClauseBank::new(hyper.clauses, features, hyper.state_bits))
                .collect(),
            weights: vec![vec![1; hyper.clauses]; classes],
            class_counts: vec![0; classes],
            hyper,
            classes,
        }
    }

    /// A machine built from per-class weights and include bits (the layout of
    /// [`Self::include_bits`]), as FedTMOS's server models and FedTM's global model are: it
    /// predicts exactly as its include bits say. A class not given has zero weights and no
    /// literal, so it votes 0. Weights may be 0 (a truncated mean).
    pub fn rebuild(
        hyper: TmHyper,
        features: usize,
        classes: usize,
        given: &[(u32, &[u32], &[u8])],
        excluded: ExcludedAt,
    ) -> Result<MultiClassTm, String> {
        if classes < 2 {
            return Err("a classifier needs two classes".into());
        }
        let mut tm = MultiClassTm::new(hyper, features, classes);
        tm.weights.iter_mut().for_each(|w| w.fill(0));
        for class in 0..classes {
            tm.set_include_bits_at(class, &vec![0; tm.include_bytes()], excluded)?;
        }
        for &(class, weights, bits) in given {
            let c = class as usize;
            if c >= classes {
                return Err(format!("class {class} of a {classes}-class machine"));
            }
            if weights.len() != hyper.clauses {
                return Err(format!(
                    "{} weights for class {class}, expected {}",
                    weights.len(),
                    hyper.clauses
                ));
            }
            // Class sums are i32: weights past them would wrap at inference.
            if weights.iter().map(|&w| u64::from(w)).sum::<u64>() > i32::MAX as u64 {
                return Err(format!(
                    "class {class}'s weights add up past what a class sum can hold"
                ));
            }
            tm.weights[c].copy_from_slice(weights);
            tm.set_include_bits_at(c, bits, excluded)?;
        }
        Ok(tm)
    }

    /// Bytes of one class's include bits.
    fn include_bytes(&self) -> usize {
        (self.hyper.clauses * self.banks[0].literals()).div_ceil(8)
    }

    /// Reassembles a machine (checkpoints); checks that the parts agree.
    pub(crate) fn from_parts(
        hyper: TmHyper,
        banks: Vec<ClauseBank>,
        weights: Vec<Vec<u32>>,
        class_counts: Vec<u64>,
    ) -> Result<MultiClassTm, String> {
        let classes = banks.len();
        if weights.len() != classes || class_counts.len() != classes {
            return Err("banks, weights and class counts disagree on the number of classes".into());
        }
        if weights
            .iter()
            .any(|w| w.len() != hyper.clauses || w.contains(&0))
        {
            return Err(format!(
                "weights must be {} positive integers per class",
                hyper.clauses
            ));
        }
        Ok(MultiClassTm {
            hyper,
            classes,
            banks,
            weights,
            class_counts,
        })
    }

    pub fn hyper(&self) -> &TmHyper {
        &self.hyper
    }

    pub fn classes(&self) -> usize {
        self.classes
    }

    pub fn features(&self) -> usize {
        self.banks[0].features()
    }

    pub fn bank(&self, class: usize) -> &ClauseBank {
        &self.banks[class]
    }

    /// Counts one training example of `class`.
    pub(crate) fn count(&mut self, class: u32) {
        self.class_counts[class as usize] += 1;
    }

    /// Samples of each class this model has been trained on.
    pub fn class_counts(&self) -> &[u64] {
        &self.class_counts
    }

    pub fn class_weights(&self, class: usize) -> &[u32] {
        &self.weights[class]
    }

    pub(crate) fn polarity(clause: usize) -> i32 {
        if clause.is_multiple_of(2) { 1 } else { -1 }
    }

    /// The class sum Σ polarity·weight over firing clauses, unclamped; fills `fired`.
    fn class_sum_into(
        &self,
        class: usize,
        x: &[u64],
        training: bool,
        fired: &mut Vec<bool>,
    ) -> i32 {
        class_sum(&self.banks[class], &self.weights[class], x, training, fired)
    }

    /// Class sums of one example at inference (empty clauses do not fire).
    pub fn class_sums(&self, x: &[u64]) -> Vec<i32> {
        let mut fired = Vec::new();
        (0..self.classes)
            .map(|c| self.class_sum_into(c, x, false, &mut fired))
            .collect()
    }

    /// The class with the largest sum; ties go to the lowest class index.
    pub fn predict(&self, x: &[u64]) -> u32 {
        argmax(&self.class_sums(x))
    }

    /// One example: the target class gets feedback toward voting for it, one other class toward
    /// voting against it (Granmo 2018, Algorithm 1).
    pub fn update(
        &mut self,
        x: &[u64],
        y: u32,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        scratch: &mut Scratch,
    ) {
        let y = y as usize;
        self.class_counts[y] += 1;
        self.feedback(y, x, true, masks, rng, scratch);
        let negative = match self.hyper.negative_sampling {
            NegativeSampling::Uniform => {
                let r = rng.random_range(0..self.classes - 1);
                if r >= y { r + 1 } else { r }
            }
            NegativeSampling::Focused => self.focused_negative(y, x, rng, scratch),
            NegativeSampling::All => {
                for c in (0..self.classes).filter(|&c| c != y) {
                    self.feedback(c, x, false, masks, rng, scratch);
                }
                return;
            }
        };
        self.feedback(negative, x, false, masks, rng, scratch);
    }

    /// A negative class drawn with probability ∝ T + clamp(v_c) among the other classes.
    fn focused_negative(
        &self,
        y: usize,
        x: &[u64],
        rng: &mut FlintRng,
        scratch: &mut Scratch,
    ) -> usize {
        let t = self.hyper.t;
        scratch.sums.clear();
        let mut fired = std::mem::take(&mut scratch.fired);
        for c in 0..self.classes {
            let v = if c == y {
                -t
            } else {
                self.class_sum_into(c, x, true, &mut fired).clamp(-t, t)
            };
            scratch.sums.push(v + t);
        }
        scratch.fired = fired;
        let total: i64 = scratch.sums.iter().map(|&v| i64::from(v)).sum();
        if total == 0 {
            let r = rng.random_range(0..self.classes - 1);
            return if r >= y { r + 1 } else { r };
        }
        let mut pick = rng.random_range(0..total);
        for (c, &v) in scratch.sums.iter().enumerate() {
            if pick < i64::from(v) {
                return c;
            }
            pick -= i64::from(v);
        }
        unreachable!("pick is below the total")
    }

    fn feedback(
        &mut self,
        class: usize,
        x: &[u64],
        target: bool,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        scratch: &mut Scratch,
    ) {
        let t = self.hyper.t;
        let mut fired = std::mem::take(&mut scratch.fired);
        let v = self.class_sum_into(class, x, true, &mut fired).clamp(-t, t);
        self.banks[class].literals_of(x, &mut scratch.lits);
        let at = ClassFeedback {
            target,
            v,
            fired: &fired,
            rows: LiteralRows::one(&scratch.lits),
        };
        self.apply_feedback(class, at, masks, rng, &mut scratch.selected);
        scratch.fired = fired;
    }

    /// Feedback to one class (see [`ClassMut::apply_feedback`]).
    pub(crate) fn apply_feedback(
        &mut self,
        class: usize,
        at: ClassFeedback<'_>,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        selected: &mut Vec<u32>,
    ) {
        let (hyper, mut class) = self.class_mut(class);
        class.apply_feedback(&hyper, at, masks, rng, selected);
    }

    /// Each class's clause bank and weights, separately borrowable, so that one-vs-all training
    /// can update the classes on different threads.
    pub(crate) fn classes_mut(&mut self) -> (TmHyper, Vec<ClassMut<'_>>) {
        let classes = self
            .banks
            .iter_mut()
            .zip(self.weights.iter_mut())
            .map(|(bank, weights)| ClassMut { bank, weights })
            .collect();
        (self.hyper, classes)
    }

    /// One class's clause bank and weights (one-vs-all's convolutional feedback).
    pub(crate) fn class_mut(&mut self, class: usize) -> (TmHyper, ClassMut<'_>) {
        let class = ClassMut {
            bank: &mut self.banks[class],
            weights: &mut self.weights[class],
        };
        (self.hyper, class)
    }

    /// One pass over `data` in an order shuffled by `rng`.
    pub fn fit_epoch(&mut self, data: &BitRows, masks: &mut FeedbackMasks, rng: &mut FlintRng) {
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.shuffle(rng);
        let mut scratch = Scratch::default();
        for i in order {
            self.update(data.row(i), data.labels[i], masks, rng, &mut scratch);
        }
    }

    /// One pass over `data` with every class on its own random stream and mask pool (drawn from
    /// `rng`), so that the target and the negative class of an example, which are different
    /// banks, can learn at the same time: with `threads = 2` a second thread updates the negative
    /// class. The model is identical for 1 and 2 threads; it differs from [`Self::fit_epoch`]'s,
    /// which draws everything from one stream.
    pub fn fit_epoch_threaded(&mut self, data: &BitRows, rng: &mut FlintRng, threads: usize) {
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.shuffle(rng);
        let (hyper, classes) = (self.hyper, self.classes);
        for &i in &order {
            self.class_counts[data.labels[i] as usize] += 1;
        }
        let states = ClassStreams::of(self, rng);
        if hyper.negative_sampling == NegativeSampling::All {
            states.one_vs_all(&hyper, data, &order, threads);
            return;
        }
        let mut negatives = Negatives::new(hyper, classes);
        match threads < 2 {
            true => {
                for &i in &order {
                    let y = data.labels[i] as usize;
                    let neg = negatives.of(&states, data.row(i), y, rng);
                    states.learn(y, &hyper, data.row(i), true);
                    states.learn(neg, &hyper, data.row(i), false);
                }
            }
            false => {
                // A second thread takes the negative class of each example (see `Handoff`).
                let handoff = Handoff::default();
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        handoff.serve(|(i, c)| states.learn(c, &hyper, data.row(i), false))
                    });
                    for (n, &i) in order.iter().enumerate() {
                        let y = data.labels[i] as usize;
                        let neg = negatives.of(&states, data.row(i), y, rng);
                        let g = n as u64 + 1;
                        handoff.give(g, (i, neg));
                        states.learn(y, &hyper, data.row(i), true);
                        handoff.wait_done(g);
                    }
                    handoff.stop();
                });
            }
        }
    }

    /// Accuracy on `data`.
    pub fn accuracy(&self, data: &BitRows) -> f64 {
        accuracy(&self.predict_batch(data), &data.labels)
    }

    /// Clause lists of every class for batched inference.
    pub fn compile(&self) -> Vec<CompiledClauses> {
        (0..self.classes)
            .map(|c| {
                let (bank, w) = (&self.banks[c], &self.weights[c]);
                CompiledClauses::compile(
                    bank.clauses(),
                    bank.features(),
                    |j| bank.include(j),
                    |j| Self::polarity(j) * w[j] as i32,
                )
            })
            .collect()
    }

    /// Class sums of every row of `data` (row-major, `classes` per row), 64 rows at a time.
    pub fn class_sums_batch(&self, data: &BitRows) -> Vec<i32> {
        Transposed::new(data).class_sums(&self.compile())
    }

    pub fn predict_batch(&self, data: &BitRows) -> Vec<u32> {
        predictions(&self.class_sums_batch(data), self.classes)
    }

    /// Replaces one class's clause weights (what FedTMOS and FedTM exchange).
    pub fn set_class_weights(&mut self, class: usize, weights: &[u32]) -> Result<(), String> {
        if weights.len() != self.hyper.clauses {
            return Err(format!(
                "{} weights for class {class}, expected {}",
                weights.len(),
                self.hyper.clauses
            ));
        }
        if weights.contains(&0) {
            return Err("clause weights start at 1 and never go below".into());
        }
        self.weights[class].copy_from_slice(weights);
        Ok(())
    }

    /// One class's include bits: per clause, one bit per literal (features, then negations),
    /// little-endian, clause after clause.
    pub fn include_bits(&self, class: usize) -> Vec<u8> {
        let bank = &self.banks[class];
        let literals = bank.literals();
        let mut out = vec![0u8; (bank.clauses() * literals).div_ceil(8)];
        for j in 0..bank.clauses() {
            for lit in 0..literals {
                if self.included(class, j, lit) {
                    let at = j * literals + lit;
                    out[at / 8] |= 1 << (at % 8);
                }
            }
        }
        out
    }

    fn included(&self, class: usize, clause: usize, literal: usize) -> bool {
        let bank = &self.banks[class];
        let f = bank.features();
        let (half, k) = (literal / f, literal % f);
        bank.include(clause)[half * bank.feature_words() + k / 64] >> (k % 64) & 1 == 1
    }

    /// ORs other include bits into one class (FedTM/FedTMOS: a literal is included if it is in
    /// any of the merged models).
    pub fn or_include_bits(&mut self, class: usize, bits: &[u8]) -> Result<(), String> {
        let mut merged = self.include_bits(class);
        if bits.len() != merged.len() {
            return Err(format!(
                "{} include bytes for class {class}, expected {}",
                bits.len(),
                merged.len()
            ));
        }
        merged.iter_mut().zip(bits).for_each(|(m, b)| *m |= b);
        self.set_include_bits(class, &merged)
    }

    /// Replaces one class's include bits (the layout of [`Self::include_bits`]).
    pub fn set_include_bits(&mut self, class: usize, bits: &[u8]) -> Result<(), String> {
        self.set_include_bits_at(class, bits, ExcludedAt::LastExclude)
    }

    /// [`Self::set_include_bits`], with the excluded automata where `excluded` says.
    pub fn set_include_bits_at(
        &mut self,
        class: usize,
        bits: &[u8],
        excluded: ExcludedAt,
    ) -> Result<(), String> {
        let bank = &mut self.banks[class];
        let (literals, f, fw) = (bank.literals(), bank.features(), bank.feature_words());
        let want = (bank.clauses() * literals).div_ceil(8);
        if bits.len() != want {
            return Err(format!(
                "{} include bytes for class {class}, expected {want}",
                bits.len()
            ));
        }
        let mut words = vec![0u64; 2 * fw];
        for j in 0..bank.clauses() {
            words.iter_mut().for_each(|w| *w = 0);
            for lit in 0..literals {
                let at = j * literals + lit;
                if bits[at / 8] >> (at % 8) & 1 == 1 {
                    let (half, k) = (lit / f, lit % f);
                    words[half * fw + k / 64] |= 1 << (k % 64);
                }
            }
            bank.set_include_at(j, &words, excluded);
        }
        Ok(())
    }
}

/// One class's bank with its own random stream, mask pool and scratch, as the threaded epoch
/// trains it.
struct ClassStream<'a> {
    bank: &'a mut ClauseBank,
    weights: &'a mut Vec<u32>,
    rng: FlintRng,
    masks: FeedbackMasks,
    scratch: Scratch,
}

/// Every class's stream, each behind its own lock: two threads may train two classes at once.
struct ClassStreams<'a>(Vec<std::sync::Mutex<ClassStream<'a>>>);

impl<'a> ClassStreams<'a> {
    /// One stream per class, seeded in class order from `rng`.
    fn of(tm: &'a mut MultiClassTm, rng: &mut FlintRng) -> ClassStreams<'a> {
        use rand::SeedableRng;
        let s = tm.hyper.s;
        let seeds: Vec<u64> = (0..tm.classes).map(|_| rng.random()).collect();
        let streams = tm
            .banks
            .iter_mut()
            .zip(tm.weights.iter_mut())
            .zip(seeds)
            .map(|((bank, weights), seed)| {
                let mut rng = FlintRng::seed_from_u64(seed);
                let masks = FeedbackMasks::new(s, &mut rng);
                std::sync::Mutex::new(ClassStream {
                    bank,
                    weights,
                    rng,
                    masks,
                    scratch: Scratch::default(),
                })
            })
            .collect();
        ClassStreams(streams)
    }

    fn lock(&self, class: usize) -> std::sync::MutexGuard<'_, ClassStream<'a>> {
        self.0[class].lock().expect("class lock")
    }

    /// Class `class` learns example `x`, as its target or against it.
    fn learn(&self, class: usize, hyper: &TmHyper, x: &[u64], target: bool) {
        let c = &mut *self.lock(class);
        let t = hyper.t;
        let v = class_sum(c.bank, c.weights, x, true, &mut c.scratch.fired).clamp(-t, t);
        c.bank.literals_of(x, &mut c.scratch.lits);
        let at = ClassFeedback {
            target,
            v,
            fired: &c.scratch.fired,
            rows: LiteralRows::one(&c.scratch.lits),
        };
        let mut class = ClassMut {
            bank: &mut *c.bank,
            weights: &mut *c.weights,
        };
        class.apply_feedback(hyper, at, &mut c.masks, &mut c.rng, &mut c.scratch.selected);
    }

    /// One-vs-all: each class learns from every example on its own stream, independently of the
    /// others, so the classes are split over the threads whole.
    fn one_vs_all(&self, hyper: &TmHyper, data: &BitRows, order: &[usize], threads: usize) {
        let classes = self.0.len();
        let workers = threads.clamp(1, classes);
        let train = |w: usize| {
            for c in (w..classes).step_by(workers) {
                for &i in order {
                    self.learn(c, hyper, data.row(i), data.labels[i] as usize == c);
                }
            }
        };
        std::thread::scope(|scope| {
            for w in 1..workers {
                scope.spawn(move || train(w));
            }
            train(0);
        });
    }
}

/// The negative class of each example, drawn on the leading thread before either update.
struct Negatives {
    hyper: TmHyper,
    classes: usize,
    scratch: Scratch,
}

impl Negatives {
    fn new(hyper: TmHyper, classes: usize) -> Negatives {
        Negatives {
            hyper,
            classes,
            scratch: Scratch::default(),
        }
    }

    /// Uniform among the other classes, or (focused) in proportion to how strongly each votes
    /// for `x`: T + its clamped sum.
    fn of(&mut self, streams: &ClassStreams, x: &[u64], y: usize, rng: &mut FlintRng) -> usize {
        let uniform = |rng: &mut FlintRng| {
            let r = rng.random_range(0..self.classes - 1);
            if r >= y { r + 1 } else { r }
        };
        if self.hyper.negative_sampling != NegativeSampling::Focused {
            return uniform(rng);
        }
        let t = self.hyper.t;
        let weights: Vec<i64> = (0..self.classes)
            .map(|c| {
                if c == y {
                    return 0;
                }
                let st = streams.lock(c);
                let v = class_sum(st.bank, st.weights, x, true, &mut self.scratch.fired);
                i64::from(v.clamp(-t, t) + t)
            })
            .collect();
        let total: i64 = weights.iter().sum();
        if total == 0 {
            return uniform(rng);
        }
        let mut pick = rng.random_range(0..total);
        weights
            .iter()
            .position(|&w| {
                let hit = pick < w;
                pick -= w;
                hit
            })
            .expect("pick is below the total")
    }
}

/// The class sum Σ polarity·weight over firing clauses of one class, unclamped; fills `fired`.
fn class_sum(
    bank: &ClauseBank,
    weights: &[u32],
    x: &[u64],
    training: bool,
    fired: &mut Vec<bool>,
) -> i32 {
    fired.clear();
    fired.resize(weights.len(), false);
    let mut sum = 0i32;
    // No branch on the output: which clauses fire is unpredictable.
    for (j, (&wj, out)) in weights.iter().zip(fired.iter_mut()).enumerate() {
        let f = bank.fires(j, x, training);
        *out = f;
        sum += i32::from(f) * MultiClassTm::polarity(j) * wj as i32;
    }
    sum
}

/// One class of a machine, borrowed on its own (see [`MultiClassTm::classes_mut`]).
pub(crate) struct ClassMut<'a> {
    pub bank: &'a mut ClauseBank,
    pub weights: &'a mut Vec<u32>,
}

/// What one class's feedback reads (Granmo 2018, Algorithm 1): whether the class is the example's
/// target, its clamped class sum `v`, its clause outputs, and the literals each clause learns from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClassFeedback<'a> {
    pub target: bool,
    pub v: i32,
    pub fired: &'a [bool],
    pub rows: LiteralRows<'a>,
}

impl ClassMut<'_> {
    /// Feedback to this class alone, given its clause outputs and clamped class sum in `at`.
    pub fn apply_feedback(
        &mut self,
        hyper: &TmHyper,
        at: ClassFeedback<'_>,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        selected: &mut Vec<u32>,
    ) {
        // Fields into locals once, so the loop holds them in registers as the plain arguments were.
        let ClassFeedback {
            target,
            v,
            fired,
            rows,
        } = at;
        let (bank, weights) = (&mut *self.bank, self.weights.as_mut_slice());
        let t = hyper.t;
        let p = if target {
            (t - v) as f32 / (2 * t) as f32
        } else {
            (t + v) as f32 / (2 * t) as f32
        };
        let lw = 2 * bank.feature_words();
        let (boost, weighted) = (hyper.boost_true_positive, hyper.weighted);
        select_for_feedback(f64::from(p), fired.len(), rng, selected);
        // Type II to a clause that does not fire changes nothing: only the others' automata
        // are loaded ahead, the next one's while this one learns.
        let touches = |j: u32| j.is_multiple_of(2) == target || fired[j as usize];
        for (n, &j) in selected.iter().enumerate() {
            if touches(j)
                && let Some(&next) = selected[n + 1..].iter().find(|&&k| touches(k))
            {
                bank.prefetch_feedback(next as usize);
            }
            let (j, f) = (j as usize, fired[j as usize]);
            let lits = rows.of(j, lw);
            // Positive clauses of the target class and negative clauses of the other class learn to
            // fire (Type I); the rest learn not to (Type II).
            if (j % 2 == 0) == target {
                bank.type_i(j, lits, f, boost, masks.draw(lw, rng));
                if weighted && f {
                    weights[j] += 1;
                }
            } else if f {
                bank.type_ii(j, lits);
                if weighted && weights[j] > 1 {
                    weights[j] -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tm::TmHyper;
    use crate::model::tm::testing::{hyper, noisy_xor};
    use crate::rng::derive_rng;

    /// Granmo 2018 §5.1: noisy XOR, 40 % of the training labels flipped; the clean test set must
    /// be learned perfectly. The paper's machine has unweighted clauses and no true-positive
    /// boost (both hurt at this noise level).
    #[test]
    fn learns_noisy_xor_perfectly() {
        let mut rng = derive_rng(3, "xor", 0);
        let train = noisy_xor(5000, 0.4, &mut rng);
        let test = noisy_xor(5000, 0.0, &mut rng);
        let mut h = hyper(10, 15, 3.9);
        (h.weighted, h.boost_true_positive) = (false, false);
        let mut tm = MultiClassTm::new(h, 12, 2);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        for _ in 0..200 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
            if tm.accuracy(&test) == 1.0 {
                break;
            }
        }
        assert_eq!(tm.accuracy(&test), 1.0);
    }

    #[test]
    fn same_seed_same_model() {
        let train = noisy_xor(500, 0.1, &mut derive_rng(1, "d", 0));
        let fit = |seed| {
            let mut rng = derive_rng(seed, "tm", 0);
            let mut tm = MultiClassTm::new(hyper(10, 15, 3.9), 12, 2);
            let mut masks = FeedbackMasks::new(3.9, &mut rng);
            tm.fit_epoch(&train, &mut masks, &mut rng);
            tm
        };
        assert_eq!(fit(5), fit(5));
        assert_ne!(fit(5), fit(6));
    }

    #[test]
    fn exported_weights_and_include_bits_rebuild_identical_predictions() {
        let mut rng = derive_rng(2, "xor", 0);
        let train = noisy_xor(2000, 0.1, &mut rng);
        let mut tm = MultiClassTm::new(hyper(20, 15, 3.9), 12, 2);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        for _ in 0..5 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
        }
        let mut rebuilt = MultiClassTm::new(*tm.hyper(), 12, 2);
        for c in 0..2 {
            rebuilt.set_class_weights(c, tm.class_weights(c)).unwrap();
            rebuilt.set_include_bits(c, &tm.include_bits(c)).unwrap();
            assert_eq!(rebuilt.include_bits(c), tm.include_bits(c));
        }
        for i in 0..train.len() {
            assert_eq!(
                rebuilt.class_sums(train.row(i)),
                tm.class_sums(train.row(i))
            );
        }
        assert!(rebuilt.set_class_weights(0, &[1, 2]).is_err());
        assert!(rebuilt.set_include_bits(0, &[0]).is_err());
    }

    #[test]
    fn batched_class_sums_equal_one_at_a_time() {
        let mut rng = derive_rng(8, "xor", 0);
        let train = noisy_xor(3000, 0.2, &mut rng);
        let mut h = hyper(40, 15, 3.9);
        h.weighted = true;
        let mut tm = MultiClassTm::new(h, 12, 2);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        for _ in 0..3 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
        }
        // 130 rows: two full blocks of 64 and a partial one.
        let test = noisy_xor(130, 0.0, &mut rng);
        let batched = tm.class_sums_batch(&test);
        for i in 0..test.len() {
            assert_eq!(
                &batched[2 * i..2 * i + 2],
                &tm.class_sums(test.row(i))[..],
                "row {i}"
            );
        }
        assert!(batched.iter().any(|&v| v != 0), "a trained machine votes");
    }

    /// Two threads give exactly the one-thread model: each class learns from its own stream.
    #[test]
    fn threaded_training_equals_one_thread() {
        let mut rng = derive_rng(10, "xor", 0);
        let train = noisy_xor(2000, 0.1, &mut rng);
        for sampling in ["uniform", "focused", "all"] {
            let h = TmHyper {
                clauses: 10,
                t: 15,
                s: 3.9,
                weighted: true,
                negative_sampling: crate::params::parse_name("tm.negative_sampling", sampling)
                    .unwrap(),
                ..Default::default()
            }
            .check()
            .unwrap();
            let fit = |threads| {
                let mut tm = MultiClassTm::new(h, 12, 2);
                let mut r = derive_rng(11, "threads", 0);
                for _ in 0..3 {
                    tm.fit_epoch_threaded(&train, &mut r, threads);
                }
                tm
            };
            let one = fit(1);
            assert_eq!(one, fit(2), "{sampling}");
            assert_eq!(one.class_counts().iter().sum::<u64>(), 6000);
            assert!(one.accuracy(&train) > 0.8, "{sampling}: it learns");
        }
    }

    /// One-vs-all (the FedTMOS code's `mc_tm_update`): an example trains its class toward it and
    /// every other class against it; one negative class is trained otherwise.
    #[test]
    fn one_vs_all_trains_every_other_class_on_each_example() {
        let x: Vec<bool> = (0..12).map(|i| i % 3 == 0).collect();
        let mut rows = BitRows::new(12, 3);
        rows.push(&x, 0);
        for (sampling, changed) in [("uniform", 1), ("all", 2)] {
            let h = TmHyper {
                clauses: 4,
                t: 15,
                s: 3.9,
                negative_sampling: crate::params::parse_name("tm.negative_sampling", sampling)
                    .unwrap(),
                ..Default::default()
            }
            .check()
            .unwrap();
            let fresh = MultiClassTm::new(h, 12, 3);
            let mut tm = fresh.clone();
            let mut rng = derive_rng(12, "one-vs-all", 0);
            let mut masks = FeedbackMasks::new(3.9, &mut rng);
            tm.update(
                rows.row(0),
                0,
                &mut masks,
                &mut rng,
                &mut Scratch::default(),
            );
            // Every clause of a fresh machine fires in training, so Type II feedback moves the
            // automata of the literals that are 0 into their include half.
            let moved = (1..3)
                .filter(|&c| tm.include_bits(c) != fresh.include_bits(c))
                .count();
            assert_eq!(moved, changed, "{sampling}");
            assert_eq!(tm.class_counts(), &[1, 0, 0]);
        }
    }

    /// FedTMOS's download: a machine rebuilt from weights and include bits predicts exactly as
    /// the trained one, with either convention for the excluded automata; a class left out votes
    /// 0.
    #[test]
    fn a_machine_rebuilt_from_weights_and_include_bits_predicts_as_the_original() {
        let mut rng = derive_rng(30, "rebuild", 0);
        let train = noisy_xor(1500, 0.1, &mut rng);
        let mut h = hyper(20, 15, 3.9);
        h.weighted = true;
        let mut tm = MultiClassTm::new(h, 12, 2);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        for _ in 0..4 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
        }
        let bits: Vec<Vec<u8>> = (0..2).map(|c| tm.include_bits(c)).collect();
        let given: Vec<(u32, &[u32], &[u8])> = (0..2)
            .map(|c| (c as u32, tm.class_weights(c), &bits[c][..]))
            .collect();
        let test = noisy_xor(300, 0.0, &mut rng);
        for excluded in [ExcludedAt::LastExclude, ExcludedAt::Zero] {
            let back = MultiClassTm::rebuild(h, 12, 2, &given, excluded).unwrap();
            assert_eq!(back.class_sums_batch(&test), tm.class_sums_batch(&test));
            assert_eq!(back.include_bits(1), bits[1]);
            // Included automata sit at the first include state; excluded ones where asked.
            let bank = back.bank(0);
            let lit = (0..bank.literals())
                .find(|&l| bits[0][l / 8] >> (l % 8) & 1 == 0)
                .unwrap();
            let want = match excluded {
                ExcludedAt::LastExclude => 127,
                ExcludedAt::Zero => 0,
            };
            assert_eq!(bank.state(0, lit), want, "{excluded:?}");
        }
        let only_1 = MultiClassTm::rebuild(h, 12, 2, &given[1..], ExcludedAt::Zero).unwrap();
        let sums = only_1.class_sums_batch(&test);
        assert!(sums.chunks(2).all(|s| s[0] == 0), "class 0 was not given");
        let e = MultiClassTm::rebuild(h, 12, 2, &[(2, given[0].1, given[0].2)], ExcludedAt::Zero)
            .unwrap_err();
        assert!(e.contains("class 2 of a 2-class machine"), "{e}");
    }

    #[test]
    fn or_merge_includes_the_union_of_both_models() {
        let mut rng = derive_rng(9, "xor", 0);
        let train = noisy_xor(1000, 0.1, &mut rng);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        let mut a = MultiClassTm::new(hyper(10, 15, 3.9), 12, 2);
        let mut b = a.clone();
        a.fit_epoch(&train, &mut masks, &mut rng);
        b.fit_epoch(&train, &mut masks, &mut rng);
        let (ia, ib) = (a.include_bits(1), b.include_bits(1));
        assert_ne!(ia, ib);
        a.or_include_bits(1, &ib).unwrap();
        let want: Vec<u8> = ia.iter().zip(&ib).map(|(x, y)| x | y).collect();
        assert_eq!(a.include_bits(1), want);
        assert!(a.or_include_bits(1, &[0]).is_err());
    }

    /// Weighted clauses: Type I on a firing clause adds 1; Type II subtracts 1 while above 1.
    #[test]
    fn weights_follow_the_feedback_type() {
        let mut rng = derive_rng(4, "w", 0);
        // T large against the sums: feedback probability ≈ ½ for both classes.
        let mut h = hyper(2, 1000, 10.0);
        h.weighted = true;
        let mut tm = MultiClassTm::new(h, 2, 2);
        let mut masks = FeedbackMasks::new(10.0, &mut rng);
        let mut scratch = Scratch::default();
        let x = [0b01u64];
        // Empty clauses fire while training: the target's positive clause (0) gets Type I and
        // +1; the other class's positive clause (0) gets Type II, but its weight stays at 1.
        for _ in 0..50 {
            tm.update(&x, 0, &mut masks, &mut rng, &mut scratch);
        }
        assert!(tm.class_weights(0)[0] > 1, "{:?}", tm.class_weights(0));
        assert!(tm.class_weights(1).iter().all(|&w| w >= 1));
        assert_eq!(tm.class_counts(), &[50, 0]);
    }
}
