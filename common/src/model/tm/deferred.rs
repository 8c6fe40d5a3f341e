//! Type I feedback to clauses that do not fire, applied when the clause is next updated (the
//! coalesced machine's epoch).
//!
//! Such feedback steps every automaton of the clause toward exclude with probability 1/s. On
//! MNIST it is most of an example's feedback (about 100 of 120 clause updates), and applied at
//! once it reads and writes every state plane of the clause. Yet it rarely changes an action: an
//! excluded automaton stepping down stays excluded, and an included one at least `2^KEPT_Q`
//! steps above the include boundary stays included through `2^KEPT_Q` such feedbacks. So a clause
//! only counts the feedbacks it is given; in the pass of its next update (or after [`LIMIT`] of
//! them, or at the end of the epoch) each automaton not tracked steps down by how many of the n
//! feedbacks draw it, a Binomial(n, 1/s) count read, bit-sliced, from a pool of such counts
//! ([`CountPools`]), instead of drawing and counting n masks. The few included automata closer
//! to the boundary are tracked aside, state by state, and take each feedback's own mask at once;
//! one that crosses the boundary is excluded in the include mirror at once and stays tracked,
//! below the boundary, until the update writes its state, so clause outputs are always exact.
//!
//! Steps down saturating at 0 add up (max(0, max(0, x − a) − b) = max(0, x − a − b)), and a
//! sum of independent draws of probability 1/s is Binomial, so each automaton ends in the state
//! applying every feedback at once gives it, in distribution; the random stream differs.

use rand::RngExt;

use super::bank::{COUNT_PLANES, ClauseBank, FeedbackMasks, KEPT_BITS, KEPT_Q, Kept};
use crate::rng::FlintRng;

/// Feedbacks a clause may keep.
const LIMIT: usize = 1 << KEPT_Q;
/// Automata a clause may track, so that what it holds fills one cache line; a clause with
/// more fragile ones (a young one, with hundreds of included literals) takes its feedback at
/// once.
const TRACKED: usize = 23;
/// `tracked` of a clause that takes its feedback at once.
const AT_ONCE: u8 = u8::MAX;
/// A tracked automaton: its literal slot (word · 64 + bit) above, in the low [`KEPT_Q`] bits its
/// steps above the include boundary, or, once it crossed, below the last exclude state.
const STEPS: u16 = (1 << KEPT_Q) - 1;

/// The first include state.
const BOUNDARY: u8 = 1 << (KEPT_BITS - 1);

/// What one clause holds back, in one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Held {
    /// Feedbacks kept.
    kept: u8,
    tracked: u8,
    /// The tracked automata that crossed to exclude since the clause's last update, a bit each.
    below: u32,
    /// The tracked automata: slot << KEPT_Q | steps.
    automata: [u16; TRACKED],
}

const NOTHING: Held = Held {
    kept: 0,
    tracked: 0,
    below: 0,
    automata: [0; TRACKED],
};

/// Words of a count pool: a count is read at a random place, as masks are.
const COUNT_POOL: usize = 1 << 10;

/// Per number of feedbacks n (1 to [`LIMIT`]), a pool of bit-sliced counts, each automaton's
/// count the sum of n words of the masks' pool: Binomial(n, 1/s) per automaton. Count pool n's
/// word w adds mask word (2k + 1)·w + k for k < n (modulo the pool): the n words are distinct, and
/// other words of the pool share them at no fixed distance. Rebuilt whenever the masks' pool is
/// redrawn; no random draws of its own.
#[derive(Debug, Clone)]
struct CountPools {
    /// `[n − 1][plane][word]`.
    planes: Vec<u64>,
}

impl CountPools {
    fn new(pool: &[u64]) -> CountPools {
        let mut c = CountPools {
            planes: vec![0; LIMIT * COUNT_PLANES * COUNT_POOL],
        };
        c.build(pool);
        c
    }

    fn build(&mut self, pool: &[u64]) {
        assert!(pool.len().is_power_of_two() && pool.len() >= COUNT_POOL);
        let wrap = pool.len() - 1;
        let mut sum = vec![0u64; COUNT_PLANES * COUNT_POOL];
        for (k, out) in self
            .planes
            .chunks_mut(COUNT_PLANES * COUNT_POOL)
            .enumerate()
        {
            for w in 0..COUNT_POOL {
                let mut carry = pool[((2 * k + 1) * w + k) & wrap];
                for b in 0..COUNT_PLANES {
                    let p = &mut sum[b * COUNT_POOL + w];
                    let next = *p & carry;
                    *p ^= carry;
                    carry = next;
                }
            }
            out.copy_from_slice(&sum);
        }
    }

    /// The counts of `n` feedbacks for `lw` literal words, at a random place.
    fn draw(&self, n: usize, lw: usize, rng: &mut FlintRng) -> [&[u64]; COUNT_PLANES] {
        let at = rng.random_range(0..=COUNT_POOL - lw);
        let pool = &self.planes[(n - 1) * COUNT_PLANES * COUNT_POOL..][..COUNT_PLANES * COUNT_POOL];
        std::array::from_fn(|b| &pool[b * COUNT_POOL + at..][..lw])
    }
}

#[derive(Debug, Clone)]
pub(crate) struct DeferredTypeIb {
    lw: usize,
    held: Vec<Held>,
    counts: CountPools,
    /// Scratch: the tracked automata of a clause as bits, and its fragile ones after an update.
    tracked: Vec<u64>,
    fragile: Vec<u64>,
    /// Scratch: the literal words holding fragile automata.
    words: Vec<u16>,
}

impl DeferredTypeIb {
    /// Nothing kept; every clause's fragile automata read from the bank. `None` unless the
    /// bank's automata have [`KEPT_BITS`] bits (the width the kernel is written for) and its
    /// literals fit a slot (4,096 features at most); such a bank takes its feedback at once.
    pub fn new(bank: &mut ClauseBank, masks: &FeedbackMasks) -> Option<DeferredTypeIb> {
        let lw = bank.lw();
        if bank.state_bits() != KEPT_BITS || lw * 64 > usize::from(u16::MAX >> KEPT_Q) + 1 {
            return None;
        }
        let mut d = DeferredTypeIb {
            lw,
            held: vec![NOTHING; bank.clauses()],
            counts: CountPools::new(masks.pool()),
            tracked: vec![0; lw],
            fragile: vec![0; lw],
            words: vec![0; lw],
        };
        for j in 0..bank.clauses() {
            d.track_from_bank(bank, j);
        }
        Some(d)
    }

    /// A mask's place in the pool, for Type I feedback; the count pools follow the masks' pool
    /// when it is redrawn.
    pub fn draw(&mut self, masks: &mut FeedbackMasks, rng: &mut FlintRng) -> usize {
        let redraws = masks.redraws_next();
        let at = masks.draw_at(self.lw, rng);
        if redraws {
            self.counts.build(masks.pool());
        }
        at
    }

    /// Type I feedback to clause `j`, which did not fire; whether an action changed.
    pub fn type_ib(
        &mut self,
        bank: &mut ClauseBank,
        j: usize,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        lits: &[u64],
    ) -> bool {
        if usize::from(self.held[j].kept) == LIMIT {
            self.settle(bank, j, rng);
        }
        match self.held[j].tracked {
            AT_ONCE => {
                // Nothing is kept for such a clause, so the plain step serves; whether it may
                // track again is asked at its next update.
                let at = self.draw(masks, rng);
                let mask = masks.words(at, self.lw);
                return bank.type_i_moved(j, lits, false, false, mask);
            }
            0 => {
                self.held[j].kept += 1;
                return false;
            }
            _ => {}
        }
        let at = self.draw(masks, rng);
        let mask = masks.words(at, self.lw);
        let held = &mut self.held[j];
        held.kept += 1;
        let mut moved = false;
        for i in 0..usize::from(held.tracked) {
            let a = held.automata[i];
            let (l, bit) = slot(a);
            if (mask[l] >> bit) & 1 == 0 {
                continue;
            }
            if (held.below >> i) & 1 == 1 {
                held.automata[i] = a + 1;
            } else if a & STEPS > 0 {
                held.automata[i] = a - 1;
            } else {
                // Crossing to exclude, at the last exclude state: no steps below it yet.
                held.below |= 1 << i;
                bank.exclude_in_mirror(j, l, bit);
                moved = true;
            }
        }
        moved
    }

    /// An update of clause `j` (`step`: the bank's call, given what is kept) in the pass that
    /// applies what the clause keeps; whether an action changed.
    pub fn update(
        &mut self,
        bank: &mut ClauseBank,
        j: usize,
        rng: &mut FlintRng,
        step: impl FnOnce(&mut ClauseBank, &Kept<'_>, &mut [u64]) -> bool,
    ) -> bool {
        let held = self.held[j];
        let counts = match held.kept {
            0 => None,
            n => Some(self.counts.draw(usize::from(n), self.lw, rng)),
        };
        let n = match held.tracked {
            AT_ONCE => 0,
            n => usize::from(n),
        };
        self.tracked.fill(0);
        for (i, &a) in held.automata[..n].iter().enumerate() {
            let (l, bit) = slot(a);
            self.tracked[l] |= 1 << bit;
            let steps = (a & STEPS) as u8;
            if (held.below >> i) & 1 == 1 {
                bank.write_state(j, l, bit, BOUNDARY - 1 - steps);
            } else {
                bank.write_excess(j, l, bit, steps);
            }
        }
        let kept = Kept {
            counts,
            tracked: &self.tracked,
        };
        let moved = step(bank, &kept, &mut self.fragile);
        self.track_fragile(bank, j);
        moved
    }

    /// Applies what clause `j` keeps.
    fn settle(&mut self, bank: &mut ClauseBank, j: usize, rng: &mut FlintRng) {
        self.update(bank, j, rng, |bank, kept, fragile| {
            bank.settle_kept(j, kept, fragile);
            false
        });
    }

    /// Reads clause `j`'s fragile automata from the bank, which holds nothing back for it.
    fn track_from_bank(&mut self, bank: &mut ClauseBank, j: usize) {
        self.tracked.fill(0);
        let kept = Kept {
            counts: None,
            tracked: &self.tracked,
        };
        bank.settle_kept(j, &kept, &mut self.fragile);
        self.track_fragile(bank, j);
    }

    /// Applies everything kept: the bank is exact again.
    pub fn settle_all(&mut self, bank: &mut ClauseBank, rng: &mut FlintRng) {
        for j in 0..bank.clauses() {
            if self.held[j].kept > 0 {
                self.settle(bank, j, rng);
            }
        }
    }

    /// Tracks clause `j`'s fragile automata, from the bits its last update left in `fragile`,
    /// or marks it [`AT_ONCE`] if there are more than [`TRACKED`]; nothing is kept.
    fn track_fragile(&mut self, bank: &ClauseBank, j: usize) {
        let held = &mut self.held[j];
        held.kept = 0;
        held.below = 0;
        // The words holding fragile automata first, without a branch per word (most hold none).
        let mut words = 0;
        for (l, &w) in self.fragile.iter().enumerate() {
            self.words[words] = l as u16;
            words += usize::from(w != 0);
        }
        let mut n = 0;
        for &l in &self.words[..words] {
            let l = usize::from(l);
            let excess = bank.excess_planes(j, l);
            let mut w = self.fragile[l];
            while w != 0 {
                if n == TRACKED {
                    held.tracked = AT_ONCE;
                    return;
                }
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                let e = (0..KEPT_Q).fold(0, |e, b| e | ((excess[b] >> bit) & 1) << b) as u16;
                held.automata[n] = ((l * 64 + bit) as u16) << KEPT_Q | e;
                n += 1;
            }
        }
        held.tracked = n as u8;
    }
}

/// A tracked automaton's literal word and bit.
fn slot(a: u16) -> (usize, usize) {
    let s = usize::from(a >> KEPT_Q);
    (s >> 6, s & 63)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    /// P(Binomial(n, p) = k); 0 for k > n.
    fn binomial(n: usize, k: usize, p: f64) -> f64 {
        if k > n {
            return 0.0;
        }
        let choose = (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64);
        choose * p.powi(k as i32) * (1.0 - p).powi((n - k) as i32)
    }

    /// `got` of `total` draws within five standard deviations of frequency `q`.
    fn within_five_sd(got: u32, total: f64, q: f64, what: &str) {
        let sd = (total * q * (1.0 - q)).sqrt();
        let off = (f64::from(got) - total * q).abs();
        assert!(
            off <= 5.0 * sd + 1.0,
            "{what}: {got} of {total}, want {}",
            total * q
        );
    }

    const STARTS: [u32; 16] = [
        0, 1, 3, 60, 126, 127, 128, 129, 130, 132, 134, 135, 136, 137, 150, 255,
    ];
    const FEEDBACKS: usize = 13;

    /// Literals of clauses 1–3 at the `STARTS` states: 18 of them fragile, so tracked.
    const SET: usize = 48;

    /// A bank of 8-bit automata: clause 0 with every literal fragile (it takes its feedback at
    /// once), the others' first `SET` literals at the `STARTS` states in turn.
    fn bank() -> ClauseBank {
        let mut bank = ClauseBank::new(4, 100, KEPT_BITS);
        for k in 0..200 {
            bank.set_state(0, k, 129);
        }
        for j in 1..4 {
            for k in 0..SET {
                bank.set_state(j, k, STARTS[(k + j) % STARTS.len()]);
            }
        }
        bank
    }

    /// `FEEDBACKS` Type I feedbacks to every clause of `bank()`, none firing, kept and then
    /// settled; with `check_mirror`, after each round the include mirror is what settling would
    /// leave.
    fn kept_feedback(seed: u64, check_mirror: bool) -> ClauseBank {
        let mut rng = derive_rng(seed, "kept", 0);
        let mut bank = bank();
        let mut masks = FeedbackMasks::new(10.0, &mut rng);
        let mut d = DeferredTypeIb::new(&mut bank, &masks).expect("8-bit automata");
        for _ in 0..FEEDBACKS {
            for j in 0..4 {
                d.type_ib(&mut bank, j, &mut masks, &mut rng, &[0; 4]);
            }
            if check_mirror {
                // Settling writes planes, not the mirror: the mirror rebuilt from the settled
                // planes is what the actions are.
                let (mut b, mut dd, mut r) = (bank.clone(), d.clone(), rng.clone());
                dd.settle_all(&mut b, &mut r);
                let b =
                    ClauseBank::from_cell_major_planes(4, 100, KEPT_BITS, b.cell_major_planes())
                        .expect("the bank's own planes");
                for j in 0..4 {
                    assert_eq!(
                        bank.include(j),
                        b.include(j),
                        "clause {j}: the mirror is exact"
                    );
                }
            }
        }
        d.settle_all(&mut bank, &mut rng);
        bank
    }

    /// Each automaton ends at max(0, x − B) with B ~ Binomial(FEEDBACKS, p), p the masks'
    /// density: what applying each feedback at once gives it (Granmo 2018, Table 2, Type Ib).
    /// Every final state's frequency, per start, within five standard deviations of it.
    #[test]
    fn kept_feedback_leaves_the_states_immediate_feedback_does() {
        let p = f64::from(((0.1 * f64::from(u32::MAX)) as u32) >> 16) / 65536.0;
        let mut seen = vec![[0u32; 256]; STARTS.len()];
        let mut at_once = [0u32; 256];
        let trials = 300;
        for seed in 0..trials {
            let bank = kept_feedback(seed, seed < 5);
            for k in 0..200 {
                at_once[bank.state(0, k) as usize] += 1;
            }
            for (j, k) in (1..4).flat_map(|j| (0..SET).map(move |k| (j, k))) {
                seen[(k + j) % STARTS.len()][bank.state(j, k) as usize] += 1;
            }
        }
        let mut starts: Vec<(u32, &[u32; 256])> = STARTS.iter().copied().zip(&seen).collect();
        starts.push((129, &at_once));
        for (x, finals) in starts {
            let n = f64::from(finals.iter().sum::<u32>());
            let mut want = [0.0; 256];
            for b in 0..=FEEDBACKS {
                want[(x as usize).saturating_sub(b)] += binomial(FEEDBACKS, b, p);
            }
            for (v, (&got, &q)) in finals.iter().zip(&want).enumerate() {
                within_five_sd(got, n, q, &format!("from {x} to {v}"));
            }
        }
    }

    /// Type I (firing and not) and Type II feedback in a fixed random order, to the clauses of
    /// `bank()`: kept, or each applied at once (`at_once`). The final states.
    fn mixed_feedback(seed: u64, at_once: bool) -> Vec<u32> {
        let mut order = derive_rng(99, "order", 0);
        let mut rng = derive_rng(seed, "mixed", 0);
        let mut bank = bank();
        let mut masks = FeedbackMasks::new(10.0, &mut rng);
        let mut d = DeferredTypeIb::new(&mut bank, &masks).expect("8-bit automata");
        // Features alternately true and false, as literal words: features, then negations.
        let f = 0x5555_5555_5555_5555u64;
        let lits = [f, f & 0xf_ffff_ffff, !f, !f & 0xf_ffff_ffff];
        for _ in 0..40 {
            for j in 0..4 {
                let kind: u32 = order.random_range(0..10);
                match (kind, at_once) {
                    (0..7, false) => {
                        d.type_ib(&mut bank, j, &mut masks, &mut rng, &lits);
                    }
                    (0..7, true) => bank.type_i(j, &lits, false, false, masks.draw(4, &mut rng)),
                    (7 | 8, false) => {
                        let at = d.draw(&mut masks, &mut rng);
                        let mask = masks.words(at, 4);
                        d.update(&mut bank, j, &mut rng, |b, kept, after| {
                            b.type_i_kept(j, &lits, true, false, mask, kept, after)
                        });
                    }
                    (7 | 8, true) => bank.type_i(j, &lits, true, false, masks.draw(4, &mut rng)),
                    (_, false) => {
                        d.update(&mut bank, j, &mut rng, |b, kept, after| {
                            b.type_ii_kept(j, &lits, kept, after)
                        });
                    }
                    (_, true) => bank.type_ii(j, &lits),
                }
            }
        }
        d.settle_all(&mut bank, &mut rng);
        (0..4)
            .flat_map(|j| (0..200).map(move |k| (j, k)))
            .map(|(j, k)| bank.state(j, k))
            .collect()
    }

    /// Between passes of firing clauses and Type II, every automaton's mean final state over
    /// 2,000 runs is the one applying each feedback at once gives, within five standard errors.
    #[test]
    fn kept_feedback_between_updates_leaves_the_states_immediate_feedback_does() {
        let runs = 2000;
        let moments = |at_once: bool| {
            let mut sum = vec![(0.0, 0.0); 800];
            for seed in 0..runs {
                for (m, s) in sum.iter_mut().zip(mixed_feedback(seed, at_once)) {
                    let s = f64::from(s);
                    *m = (m.0 + s, m.1 + s * s);
                }
            }
            sum.iter()
                .map(|&(a, b)| {
                    let mean = a / runs as f64;
                    (mean, b / runs as f64 - mean * mean)
                })
                .collect::<Vec<_>>()
        };
        let (kept, at_once) = (moments(false), moments(true));
        for (i, (k, a)) in kept.iter().zip(&at_once).enumerate() {
            let se = ((k.1 + a.1) / runs as f64).sqrt();
            assert!(
                (k.0 - a.0).abs() <= 5.0 * se + 0.05,
                "clause {}, literal {}: {} kept against {} at once",
                i / 200,
                i % 200,
                k.0,
                a.0
            );
        }
    }

    /// Count pool n holds Binomial(n, p) counts, p the masks' density: each count's frequency
    /// over the pool within five standard deviations of it (a mask word added twice would
    /// spread them).
    #[test]
    fn count_pools_hold_binomial_counts() {
        let mut rng = derive_rng(4, "counts", 0);
        let masks = FeedbackMasks::new(10.0, &mut rng);
        let pools = CountPools::new(masks.pool());
        let ones: u32 = masks.pool().iter().map(|w| w.count_ones()).sum();
        let p = f64::from(ones) / (64.0 * masks.pool().len() as f64);
        for n in 1..=LIMIT {
            let counts = pools.draw(n, COUNT_POOL, &mut rng);
            let mut seen = [0u32; 1 << COUNT_PLANES];
            for (w, bit) in (0..COUNT_POOL).flat_map(|w| (0..64).map(move |bit| (w, bit))) {
                let c = (0..COUNT_PLANES).fold(0, |c, b| c | ((counts[b][w] >> bit) & 1) << b);
                seen[c as usize] += 1;
            }
            let total = (64 * COUNT_POOL) as f64;
            for (c, &got) in seen.iter().enumerate() {
                within_five_sd(
                    got,
                    total,
                    binomial(n, c, p),
                    &format!("n = {n}, count {c}"),
                );
            }
        }
    }
}
