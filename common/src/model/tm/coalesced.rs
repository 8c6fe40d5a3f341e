//! The coalesced Tsetlin Machine (Glimsdal & Granmo 2021), as TPFL's tmu
//! `TMCoalescedClassifier` runs it (docs/papers/tpfl.md §1): one clause bank shared by every class,
//! a signed integer weight per (class, clause) starting at random ±1 and free to cross zero.

use rand::RngExt;

use super::bank::{ClauseBank, FeedbackMasks, LiteralRows, select_for_feedback};
use super::block_outputs::{BLOCK, BlockOutputs};
use super::deferred::DeferredTypeIb;
use super::infer::argmax;
use super::infer::{CompiledClauses, Transposed, accuracy, predictions};
use super::{NegativeSampling, TmHyper};
use crate::data::booleanize::BitRows;
use crate::rng::FlintRng;

#[derive(Debug, Clone, PartialEq)]
pub struct CoalescedTm {
    hyper: TmHyper,
    classes: usize,
    bank: ClauseBank,
    weights: Vec<Vec<i32>>,
    class_counts: Vec<u64>,
}

/// Reused buffers of the training loop.
#[derive(Debug, Default)]
pub struct Scratch {
    fired: Vec<bool>,
    lits: Vec<u64>,
    learn: LearnBuffers,
}

/// Reused buffers of [`CoalescedTm::learn`].
#[derive(Debug, Default)]
pub(crate) struct LearnBuffers {
    /// The clauses that get feedback from one class.
    selected: Vec<u32>,
    /// The firing clauses, ascending.
    firing: Vec<u32>,
    /// The clauses whose include bits the update changed (a clause may appear twice).
    changed: Vec<u32>,
    /// Per class, T + its clamped sum (focused negative sampling).
    sums: Vec<i32>,
}

/// What one example's feedback reads: clause outputs, as flags and as a list, and the literal
/// rows clauses learn from.
struct Feedback<'a> {
    fired: &'a [bool],
    firing: &'a [u32],
    rows: LiteralRows<'a>,
}

/// What feedback draws from, and where Type I feedback to clauses that do not fire waits (with
/// `deferred`; otherwise it is applied at once).
struct Draws<'a, 'd> {
    masks: &'a mut FeedbackMasks,
    rng: &'a mut FlintRng,
    deferred: Option<&'d mut DeferredTypeIb>,
}

/// One class's feedback from an example: toward it (the target class) or against it, each clause
/// and each firing clause's weight updated with probability `p` = (T ∓ clamp(v)) / 2T.
#[derive(Debug, Clone, Copy)]
struct FeedbackStep {
    class: usize,
    target: bool,
    p: f64,
}

/// The indices of the firing clauses, ascending.
fn firing_clauses(fired: &[bool], out: &mut Vec<u32>) {
    out.clear();
    out.resize(fired.len(), 0);
    let mut n = 0;
    for (j, &f) in fired.iter().enumerate() {
        out[n] = j as u32;
        n += usize::from(f);
    }
    out.truncate(n);
}

impl CoalescedTm {
    /// `rng` draws the initial ±1 weights.
    pub fn new(hyper: TmHyper, features: usize, classes: usize, rng: &mut FlintRng) -> CoalescedTm {
        assert!(classes >= 2, "a classifier needs two classes");
        let weights = (0..classes)
            .map(|_| {
                (0..hyper.clauses)
                    .map(|_| if rng.random::<bool>() { 1 } else { -1 })
                    .collect()
            })
            .collect();
        CoalescedTm {
            bank: ClauseBank::new(hyper.clauses, features, hyper.state_bits),
            weights,
            class_counts: vec![0; classes],
            hyper,
            classes,
        }
    }

    /// Reassembles a machine (checkpoints); checks that the parts agree.
    pub(crate) fn from_parts(
        hyper: TmHyper,
        bank: ClauseBank,
        weights: Vec<Vec<i32>>,
        class_counts: Vec<u64>,
    ) -> Result<CoalescedTm, String> {
        let classes = weights.len();
        if classes < 2 || class_counts.len() != classes {
            return Err("weights and class counts disagree on the number of classes".into());
        }
        if weights.iter().any(|w| w.len() != hyper.clauses) || bank.clauses() != hyper.clauses {
            return Err(format!(
                "every class needs {} clause weights",
                hyper.clauses
            ));
        }
        Ok(CoalescedTm {
            hyper,
            classes,
            bank,
            weights,
            class_counts,
        })
    }

    pub fn hyper(&self) -> &TmHyper {
        &self.hyper
    }

    /// Clauses of the shared bank, and so weights per class.
    pub fn clauses(&self) -> usize {
        self.hyper.clauses
    }

    pub fn classes(&self) -> usize {
        self.classes
    }

    pub fn bank(&self) -> &ClauseBank {
        &self.bank
    }

    pub fn class_counts(&self) -> &[u64] {
        &self.class_counts
    }

    /// One class's weight vector: what a TPFL client uploads for its confidence winner.
    pub fn class_weights(&self, class: usize) -> &[i32] {
        &self.weights[class]
    }

    /// Replaces one class's weight vector (a TPFL client applying its cluster's average).
    pub fn set_class_weights(&mut self, class: usize, weights: &[i32]) -> Result<(), String> {
        if class >= self.classes {
            return Err(format!("class {class} of a {}-class machine", self.classes));
        }
        if weights.len() != self.hyper.clauses {
            return Err(format!(
                "{} weights for class {class}, expected {}",
                weights.len(),
                self.hyper.clauses
            ));
        }
        self.weights[class].copy_from_slice(weights);
        Ok(())
    }

    fn outputs(&self, x: &[u64], training: bool, fired: &mut Vec<bool>) {
        fired.clear();
        for j in 0..self.bank.clauses() {
            self.bank.prefetch_include(j + 4);
            fired.push(self.bank.fires(j, x, training));
        }
    }

    fn sum(weights: &[i32], firing: &[u32]) -> i32 {
        firing.iter().map(|&j| weights[j as usize]).sum()
    }

    /// Class sums of one example at inference (unclamped, empty clauses silent).
    pub fn class_sums(&self, x: &[u64]) -> Vec<i32> {
        let mut fired = Vec::new();
        self.outputs(x, false, &mut fired);
        let mut firing = Vec::new();
        firing_clauses(&fired, &mut firing);
        self.weights.iter().map(|w| Self::sum(w, &firing)).collect()
    }

    pub fn predict(&self, x: &[u64]) -> u32 {
        argmax(&self.class_sums(x))
    }

    /// One example (tmu's coalesced update): the target class's clauses with non-negative weight
    /// get Type I, the others Type II, and its firing clauses +1; one other class the opposite,
    /// with −1. Clause outputs are computed once, before either update.
    pub fn update(
        &mut self,
        x: &[u64],
        y: u32,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        s: &mut Scratch,
    ) {
        self.outputs(x, true, &mut s.fired);
        self.learn_example(x, y, masks, rng, s, None);
    }

    /// The update of one example whose clause outputs are in `s.fired`.
    fn learn_example(
        &mut self,
        x: &[u64],
        y: u32,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        s: &mut Scratch,
        deferred: Option<&mut DeferredTypeIb>,
    ) {
        self.bank.literals_of(x, &mut s.lits);
        let rows = LiteralRows::one(&s.lits);
        self.learn(y, &s.fired, rows, masks, rng, &mut s.learn, deferred);
    }

    /// The update given the clause outputs; each clause learns from its row of `rows` (the
    /// convolutional machine gives each clause the patch it fired on). With `deferred`, Type I
    /// feedback to clauses that do not fire waits there.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn learn(
        &mut self,
        y: u32,
        fired: &[bool],
        rows: LiteralRows<'_>,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        buffers: &mut LearnBuffers,
        deferred: Option<&mut DeferredTypeIb>,
    ) {
        let mut draws = Draws {
            masks,
            rng,
            deferred,
        };
        let y = y as usize;
        self.class_counts[y] += 1;
        let LearnBuffers {
            selected,
            firing,
            changed,
            sums,
        } = buffers;
        changed.clear();
        let t = self.hyper.t;
        firing_clauses(fired, firing);
        let firing = &*firing;
        let v = Self::sum(&self.weights[y], firing).clamp(-t, t);
        let p = (t - v) as f64 / (2 * t) as f64;
        let at = Feedback {
            fired,
            firing,
            rows,
        };
        let step = FeedbackStep {
            class: y,
            target: true,
            p,
        };
        self.feedback(step, &at, &mut draws, selected, changed);
        let negative = match self.hyper.negative_sampling {
            NegativeSampling::Uniform => {
                let r = draws.rng.random_range(0..self.classes - 1);
                let c = if r >= y { r + 1 } else { r };
                Some((c, Self::sum(&self.weights[c], firing).clamp(-t, t)))
            }
            NegativeSampling::All => {
                for c in (0..self.classes).filter(|&c| c != y) {
                    let v = Self::sum(&self.weights[c], firing).clamp(-t, t);
                    let p = (t + v) as f64 / (2 * t) as f64;
                    let step = FeedbackStep {
                        class: c,
                        target: false,
                        p,
                    };
                    self.feedback(step, &at, &mut draws, selected, changed);
                }
                None
            }
            NegativeSampling::Focused => {
                // Each other class drawn with odds T + clamp(v) (the target 0); its clamped sum
                // is then its odds less T.
                sums.clear();
                sums.extend((0..self.classes).map(|c| match c == y {
                    true => 0,
                    false => Self::sum(&self.weights[c], firing).clamp(-t, t) + t,
                }));
                let total: i64 = sums.iter().map(|&p| i64::from(p)).sum();
                (total > 0).then(|| {
                    let mut pick = draws.rng.random_range(0..total);
                    let c = sums
                        .iter()
                        .position(|&p| {
                            let hit = pick < i64::from(p);
                            pick -= i64::from(p);
                            hit
                        })
                        .expect("pick is below the total");
                    (c, sums[c] - t)
                })
            }
        };
        if let Some((c, v)) = negative {
            let p = (t + v) as f64 / (2 * t) as f64;
            let step = FeedbackStep {
                class: c,
                target: false,
                p,
            };
            self.feedback(step, &at, &mut draws, selected, changed);
        }
    }

    fn feedback(
        &mut self,
        step: FeedbackStep,
        at: &Feedback<'_>,
        draws: &mut Draws<'_, '_>,
        selected: &mut Vec<u32>,
        changed: &mut Vec<u32>,
    ) {
        let FeedbackStep { class, target, p } = step;
        select_for_feedback(p, at.fired.len(), draws.rng, selected);
        let threshold = (p.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u32;
        let lw = self.bank.lw();
        // No prefetch: a clause's planes are one contiguous block the hardware streams.
        for &j in selected.iter() {
            let j = j as usize;
            let lits = at.rows.of(j, lw);
            let fired = at.fired[j];
            let positive = self.weights[class][j] >= 0;
            let moved = if positive == target {
                self.type_i(j, lits, fired, draws)
            } else {
                fired && self.type_ii(j, lits, draws)
            };
            if moved {
                changed.push(j as u32);
            }
        }
        // Weights of firing clauses move toward the target, each with the same probability.
        let step = if target { 1 } else { -1 };
        let weights = &mut self.weights[class];
        for &j in at.firing {
            let moves = draws.rng.random::<u32>() < threshold;
            weights[j as usize] += step * i32::from(moves);
        }
    }

    /// Type I feedback to clause `j`; whether an action changed.
    fn type_i(&mut self, j: usize, lits: &[u64], fired: bool, draws: &mut Draws<'_, '_>) -> bool {
        let (lw, boost) = (self.bank.lw(), self.hyper.boost_true_positive);
        let Draws {
            masks,
            rng,
            deferred,
        } = draws;
        let Some(d) = deferred.as_deref_mut() else {
            let mask = masks.draw(lw, rng);
            return self.bank.type_i_moved(j, lits, fired, boost, mask);
        };
        if !fired {
            return d.type_ib(&mut self.bank, j, masks, rng, lits);
        }
        let at = d.draw(masks, rng);
        let mask = masks.words(at, lw);
        d.update(&mut self.bank, j, rng, |bank, kept, after| {
            bank.type_i_kept(j, lits, true, boost, mask, kept, after)
        })
    }

    /// Type II feedback to clause `j`, which fired; whether an action changed.
    fn type_ii(&mut self, j: usize, lits: &[u64], draws: &mut Draws<'_, '_>) -> bool {
        let Some(d) = draws.deferred.as_deref_mut() else {
            return self.bank.type_ii_moved(j, lits);
        };
        d.update(&mut self.bank, j, draws.rng, |bank, kept, after| {
            bank.type_ii_kept(j, lits, kept, after)
        })
    }

    /// One pass over `data` in a random order: [`Self::update`] on each example in turn, with
    /// the clause outputs evaluated a block of examples at a time and Type I feedback to clauses
    /// that do not fire kept (`deferred.rs`; the same machine in distribution).
    pub fn fit_epoch(&mut self, data: &BitRows, masks: &mut FeedbackMasks, rng: &mut FlintRng) {
        self.epoch(data, masks, rng, true);
    }

    /// [`Self::fit_epoch`]; with `defer` false, every feedback applied at once.
    fn epoch(
        &mut self,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        defer: bool,
    ) {
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.shuffle(rng);
        let mut s = Scratch::default();
        let mut block = BlockOutputs::default();
        let mut deferred = defer
            .then(|| DeferredTypeIb::new(&mut self.bank, masks))
            .flatten();
        for rows in order.chunks(BLOCK) {
            block.load(data, rows, &self.bank);
            for (e, &i) in rows.iter().enumerate() {
                let x = data.row(i);
                block.outputs(e, &self.bank, x, &mut s.fired);
                let y = data.labels[i];
                self.learn_example(x, y, masks, rng, &mut s, deferred.as_mut());
                for &j in &s.learn.changed {
                    block.refresh(&self.bank, j as usize, e);
                }
            }
        }
        if let Some(d) = &mut deferred {
            d.settle_all(&mut self.bank, rng);
        }
    }

    pub fn compile(&self) -> CompiledClauses {
        CompiledClauses::compile(
            self.bank.clauses(),
            self.bank.features(),
            |j| self.bank.include(j),
            |_| 1,
        )
    }

    /// Class sums of every row (row-major, `classes` per row), 64 rows at a time.
    pub fn class_sums_batch(&self, data: &BitRows) -> Vec<i32> {
        Transposed::new(data).shared_class_sums(&self.compile(), &self.weights)
    }

    pub fn predict_batch(&self, data: &BitRows) -> Vec<u32> {
        predictions(&self.class_sums_batch(data), self.classes)
    }

    pub fn accuracy(&self, data: &BitRows) -> f64 {
        accuracy(&self.predict_batch(data), &data.labels)
    }

    /// TPFL's confidence per class: the weighted class sums summed over `data` (the code's
    /// definition; docs/papers/tpfl.md §2).
    pub fn confidence(&self, data: &BitRows) -> Vec<i64> {
        let sums = Transposed::new(data).shared_class_sums(&self.compile(), &self.weights);
        self.sum_over_rows(&sums)
    }

    /// TPFL §5's confidence as printed, without weights: each firing clause votes the sign of
    /// its weight for a class; the votes are summed over `data`.
    pub fn vote_confidence(&self, data: &BitRows) -> Vec<i64> {
        let signs: Vec<Vec<i32>> = self
            .weights
            .iter()
            .map(|w| w.iter().map(|v| v.signum()).collect())
            .collect();
        let sums = Transposed::new(data).shared_class_sums(&self.compile(), &signs);
        self.sum_over_rows(&sums)
    }

    fn sum_over_rows(&self, sums: &[i32]) -> Vec<i64> {
        let mut conf = vec![0i64; self.classes];
        for row in sums.chunks(self.classes) {
            for (c, &v) in conf.iter_mut().zip(row) {
                *c += i64::from(v);
            }
        }
        conf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tm::testing::{self, blocks, noisy_xor};
    use crate::rng::{FlintRng, derive_rng};

    fn hyper(clauses: usize, t: i32, s: f64) -> TmHyper {
        TmHyper {
            boost_true_positive: false,
            ..testing::hyper(clauses, t, s)
        }
    }

    #[test]
    fn learns_noisy_xor() {
        let mut rng = derive_rng(21, "cxor", 0);
        let train = noisy_xor(5000, 0.1, &mut rng);
        let test = noisy_xor(2000, 0.0, &mut rng);
        let mut tm = CoalescedTm::new(hyper(20, 15, 3.9), 12, 2, &mut rng);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        for _ in 0..100 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
            if tm.accuracy(&test) == 1.0 {
                break;
            }
        }
        assert_eq!(tm.accuracy(&test), 1.0);
    }

    /// An epoch evaluates clauses a block of examples at a time; with every feedback applied at
    /// once, the machine it trains is the one example-by-example updates train, bit for bit,
    /// from young clauses (hundreds of literals, changing at every example) to trained ones.
    /// [`CoalescedTm::fit_epoch`]'s shuffle, then [`CoalescedTm::update`] on each example in
    /// turn: every feedback applied at once, clause outputs evaluated example by example.
    fn epoch_one_at_a_time(
        tm: &mut CoalescedTm,
        train: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
    ) {
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..train.len()).collect();
        order.shuffle(rng);
        let mut s = Scratch::default();
        for i in order {
            tm.update(train.row(i), train.labels[i], masks, rng, &mut s);
        }
    }

    #[test]
    fn an_epoch_in_blocks_equals_updates_one_at_a_time() {
        let mut rng = derive_rng(9, "blocks", 0);
        let train = noisy_xor(700, 0.1, &mut rng);
        let mut blocked = CoalescedTm::new(hyper(40, 15, 3.9), 12, 2, &mut rng);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        let (mut single, mut single_masks, mut single_rng) =
            (blocked.clone(), masks.clone(), rng.clone());
        for epoch in 0..4 {
            blocked.epoch(&train, &mut masks, &mut rng, false);
            epoch_one_at_a_time(&mut single, &train, &mut single_masks, &mut single_rng);
            assert_eq!(blocked, single, "epoch {epoch}");
        }
        assert!(blocked.accuracy(&train) > 0.8, "it learned");
    }

    /// Type I feedback to clauses that do not fire waits in `deferred.rs` during an epoch (its
    /// tests check the states it leaves against the exact distribution); the machine learns as
    /// the one applying every feedback at once does, through young clauses, tracked automata
    /// crossing to exclude, the limit of kept feedbacks and the pool redrawn mid-epoch, and
    /// ends with its include mirror matching its planes.
    #[test]
    fn deferred_feedback_learns_as_immediate_feedback_does() {
        let mut rng = derive_rng(12, "deferred", 0);
        let train = blocks(600, 300, 3, &mut rng);
        let test = blocks(600, 300, 3, &mut rng);
        let mut deferred = CoalescedTm::new(hyper(60, 40, 5.0), 300, 3, &mut rng);
        let mut masks = FeedbackMasks::new(5.0, &mut rng);
        let (mut at_once, mut at_once_masks, mut at_once_rng) =
            (deferred.clone(), masks.clone(), rng.clone());
        for _ in 0..6 {
            // The pool is redrawn a third into the epoch.
            masks.redraw_after(10_000);
            deferred.fit_epoch(&train, &mut masks, &mut rng);
            at_once.epoch(&train, &mut at_once_masks, &mut at_once_rng, false);
        }
        let (got, want) = (deferred.accuracy(&test), at_once.accuracy(&test));
        assert!(got > 0.9 && want > 0.9, "{got} and {want}");
        assert!((got - want).abs() < 0.03, "{got} against {want}");
        assert_ne!(deferred, at_once, "a different random stream");
        let bank = deferred.bank();
        let stored = ClauseBank::from_cell_major_planes(60, 300, 8, bank.cell_major_planes());
        assert_eq!(
            stored.as_ref(),
            Ok(bank),
            "the include mirror matches the planes"
        );
    }

    #[test]
    fn initial_weights_are_plus_or_minus_one_and_seeded() {
        let a = CoalescedTm::new(hyper(100, 15, 3.9), 4, 3, &mut derive_rng(1, "w", 0));
        let b = CoalescedTm::new(hyper(100, 15, 3.9), 4, 3, &mut derive_rng(1, "w", 0));
        assert_eq!(a, b);
        let all: Vec<i32> = (0..3).flat_map(|c| a.class_weights(c).to_vec()).collect();
        assert!(all.iter().all(|w| *w == 1 || *w == -1));
        assert!(all.contains(&1) && all.contains(&-1));
    }

    /// An empty clause fires while training: its weight for the target class rises, for the
    /// other class falls, and may cross zero.
    #[test]
    fn firing_clauses_move_weights_toward_the_target() {
        let mut rng = derive_rng(2, "w", 0);
        let mut tm = CoalescedTm::new(hyper(2, 1000, 10.0), 1, 2, &mut rng);
        tm.set_class_weights(0, &[1, -1]).unwrap();
        tm.set_class_weights(1, &[1, -1]).unwrap();
        let mut masks = FeedbackMasks::new(10.0, &mut rng);
        let mut s = Scratch::default();
        // An input that no literal state change can stop from firing within a few updates is
        // not needed: Type II needs many steps to include a literal (states start at N).
        for _ in 0..40 {
            tm.update(&[0], 0, &mut masks, &mut rng, &mut s);
        }
        assert!(
            tm.class_weights(0).iter().all(|&w| w > 1),
            "{:?}",
            tm.class_weights(0)
        );
        assert!(
            tm.class_weights(1).iter().all(|&w| w < -1),
            "{:?}",
            tm.class_weights(1)
        );
    }

    #[test]
    fn batched_sums_and_confidence_match_one_at_a_time() {
        let mut rng = derive_rng(5, "cxor", 0);
        let train = noisy_xor(2000, 0.1, &mut rng);
        let mut tm = CoalescedTm::new(hyper(30, 15, 3.9), 12, 2, &mut rng);
        let mut masks = FeedbackMasks::new(3.9, &mut rng);
        for _ in 0..3 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
        }
        let test = noisy_xor(100, 0.0, &mut rng);
        let batched = tm.class_sums_batch(&test);
        let mut conf = [0i64; 2];
        for i in 0..test.len() {
            let one = tm.class_sums(test.row(i));
            assert_eq!(&batched[2 * i..2 * i + 2], &one[..], "row {i}");
            conf[0] += i64::from(one[0]);
            conf[1] += i64::from(one[1]);
        }
        assert_eq!(tm.confidence(&test), conf.to_vec());
        // TPFL §5 as printed: each firing clause votes the sign of its weight.
        let mut votes = [0i64; 2];
        for i in 0..test.len() {
            for j in 0..30 {
                if tm.bank().fires(j, test.row(i), false) {
                    for (c, v) in votes.iter_mut().enumerate() {
                        *v += i64::from(tm.class_weights(c)[j].signum());
                    }
                }
            }
        }
        assert_eq!(tm.vote_confidence(&test), votes.to_vec());
        assert_ne!(votes.to_vec(), conf.to_vec(), "the weights matter");
    }

    #[test]
    fn class_weights_round_trip_and_are_checked() {
        let mut rng = derive_rng(6, "w", 0);
        let mut tm = CoalescedTm::new(hyper(4, 15, 3.9), 3, 2, &mut rng);
        tm.set_class_weights(1, &[5, -3, 0, 2]).unwrap();
        assert_eq!(tm.class_weights(1), &[5, -3, 0, 2]);
        assert!(
            tm.set_class_weights(1, &[1])
                .unwrap_err()
                .contains("expected 4")
        );
        assert!(
            tm.set_class_weights(2, &[1, 1, 1, 1])
                .unwrap_err()
                .contains("class 2")
        );
    }
}
