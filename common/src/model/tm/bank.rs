//! A bank of clauses: the Tsetlin automata of every (clause, literal), their feedback, and clause
//! evaluation. Shared by the multi-class and coalesced machines.
//!
//! Layout, for speed:
//! - An example is its features as bits in 64-bit words (`fw` words); the negated literals are
//!   `!x & valid` and never stored.
//! - A clause has `lw = 2·fw` literal words: `fw` for the features, then `fw` for their negations.
//! - Automaton states are bit-sliced: for each (clause, literal word), `bits` planes of 64 bits,
//!   least significant first, so one increment moves 64 automata. The top plane is the action
//!   (include), mirrored into a dense `include` array that clause evaluation reads.

use rand::RngExt;

use crate::rng::FlintRng;

#[derive(Debug, Clone, PartialEq)]
pub struct ClauseBank {
    clauses: usize,
    features: usize,
    fw: usize,
    bits: usize,
    planes: Vec<u64>,
    include: Vec<u64>,
    /// Per (clause, literal word): which automata are above state 0. Decrements skip a cell
    /// whose drawn automata are all at 0, so they read 8 bytes instead of the cell's planes.
    live: Vec<u64>,
    valid: Vec<u64>,
}

/// Asks the CPU to start loading the cache line at `p`; never faults, changes nothing.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it does not dereference or fault on any address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T1)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Words needed for `features` bits.
pub fn words_for(features: usize) -> usize {
    features.div_ceil(64)
}

impl ClauseBank {
    /// Every automaton starts at the last exclude state (N), as in Granmo's reference code.
    pub fn new(clauses: usize, features: usize, bits: usize) -> ClauseBank {
        assert!((2..=16).contains(&bits), "state bits must be 2..=16");
        let fw = words_for(features);
        let lw = 2 * fw;
        let mut planes = vec![0u64; clauses * lw * bits];
        let mut valid = vec![u64::MAX; fw];
        if !features.is_multiple_of(64) {
            valid[fw - 1] = (1u64 << (features % 64)) - 1;
        }
        // All low planes one, top plane zero: state 2^(bits-1) - 1.
        for cell in planes.chunks_mut(bits) {
            for p in &mut cell[..bits - 1] {
                *p = u64::MAX;
            }
        }
        // Padding bits beyond the last feature stay at state 0 in every plane.
        let mut bank = ClauseBank {
            clauses,
            features,
            fw,
            bits,
            planes,
            include: vec![0; clauses * lw],
            live: vec![0; clauses * lw],
            valid,
        };
        for j in 0..clauses {
            for l in 0..lw {
                let v = bank.valid[l % fw];
                let cell = bank.cell_mut(j, l);
                for p in cell.iter_mut() {
                    *p &= v;
                }
                bank.live[j * lw + l] = v;
            }
        }
        bank
    }

    pub fn clauses(&self) -> usize {
        self.clauses
    }

    /// Every automaton state, bit-sliced (what a checkpoint stores).
    pub fn planes(&self) -> &[u64] {
        &self.planes
    }

    /// A bank from stored planes; the include and live summaries are derived from them.
    pub fn from_planes(
        clauses: usize,
        features: usize,
        bits: usize,
        planes: Vec<u64>,
    ) -> Result<ClauseBank, String> {
        let mut bank = ClauseBank::new(clauses, features, bits);
        if planes.len() != bank.planes.len() {
            return Err(format!(
                "{} automaton words for {clauses} clauses of {features} features at {bits} bits, expected {}",
                planes.len(),
                bank.planes.len()
            ));
        }
        bank.planes = planes;
        let lw = bank.lw();
        for j in 0..clauses {
            for l in 0..lw {
                let v = bank.valid[l % bank.fw];
                let cell = bank.cell_mut(j, l);
                if cell.iter().any(|p| p & !v != 0) {
                    return Err(format!("clause {j} has automata beyond the last feature"));
                }
                let (live, top) = (cell.iter().fold(0, |a, p| a | p), cell[bits - 1]);
                bank.include[j * lw + l] = top;
                bank.live[j * lw + l] = live;
            }
        }
        Ok(bank)
    }

    pub fn features(&self) -> usize {
        self.features
    }

    /// Literals per clause: each feature and its negation.
    pub fn literals(&self) -> usize {
        2 * self.features
    }

    pub fn feature_words(&self) -> usize {
        self.fw
    }

    pub fn state_bits(&self) -> usize {
        self.bits
    }

    fn lw(&self) -> usize {
        2 * self.fw
    }

    fn cell_mut(&mut self, clause: usize, word: usize) -> &mut [u64] {
        let at = (clause * self.lw() + word) * self.bits;
        &mut self.planes[at..at + self.bits]
    }

    /// The include words of a clause: features first, then negations.
    pub fn include(&self, clause: usize) -> &[u64] {
        let lw = self.lw();
        &self.include[clause * lw..(clause + 1) * lw]
    }

    /// State of one automaton; literal `k < features` is feature k, else the negation of k − features.
    pub fn state(&self, clause: usize, literal: usize) -> u32 {
        let word = self.literal_word(literal);
        let bit = literal % self.features % 64;
        let at = (clause * self.lw() + word) * self.bits;
        (0..self.bits).fold(0, |s, b| {
            s | ((((self.planes[at + b] >> bit) & 1) as u32) << b)
        })
    }

    fn literal_word(&self, literal: usize) -> usize {
        let (half, f) = (literal / self.features, literal % self.features);
        half * self.fw + f / 64
    }

    /// Sets one automaton's state (tests, and rebuilding from include bits).
    pub fn set_state(&mut self, clause: usize, literal: usize, state: u32) {
        assert!(state < (1 << self.bits), "state beyond {} bits", self.bits);
        let word = self.literal_word(literal);
        let bit = literal % self.features % 64;
        let bits = self.bits;
        let cell = self.cell_mut(clause, word);
        for (b, p) in cell.iter_mut().enumerate() {
            *p = (*p & !(1 << bit)) | ((((state >> b) & 1) as u64) << bit);
        }
        let live = cell.iter().fold(0, |a, p| a | p);
        let at = clause * 2 * self.fw + word;
        self.include[at] = self.cell_mut(clause, word)[bits - 1];
        self.live[at] = live;
    }

    /// Starts loading what feedback to `clause` will touch: its automaton planes and summaries.
    #[inline]
    pub fn prefetch_feedback(&self, clause: usize) {
        let lw = self.lw();
        let planes = &self.planes[clause * lw * self.bits..(clause + 1) * lw * self.bits];
        for line in planes.chunks(8) {
            prefetch(line.as_ptr());
        }
        for line in self.live[clause * lw..(clause + 1) * lw].chunks(8) {
            prefetch(line.as_ptr());
        }
    }

    /// Starts loading a clause's include words, for evaluation a few clauses ahead.
    #[inline]
    pub fn prefetch_include(&self, clause: usize) {
        if clause < self.clauses {
            for line in self.include(clause).chunks(8) {
                prefetch(line.as_ptr());
            }
        }
    }

    /// Whether the clause fires on `x` (its included literals are all true). An empty clause
    /// fires during training (so it can learn) and not at inference.
    #[inline]
    pub fn fires(&self, clause: usize, x: &[u64], training: bool) -> bool {
        let inc = self.include(clause);
        let (pos, neg) = inc.split_at(self.fw);
        let mut any = 0;
        for k in 0..self.fw {
            if (pos[k] & !x[k]) | (neg[k] & x[k]) != 0 {
                return false;
            }
            any |= pos[k] | neg[k];
        }
        training || any != 0
    }

    /// Type I feedback (Granmo 2018, Table 2): a firing clause moves toward including its true
    /// literals (each with probability (s−1)/s, or always when `boost`) and excluding its false
    /// ones (probability 1/s); a clause that does not fire moves every automaton toward exclude
    /// with probability 1/s. `lits` are the example's literal words ([`Self::literals_of`]);
    /// `mask` holds, per literal word, the automata drawn with probability 1/s.
    pub fn type_i(&mut self, clause: usize, lits: &[u64], fired: bool, boost: bool, mask: &[u64]) {
        let fw = self.fw;
        for half in 0..2 {
            for k in 0..fw {
                let l = half * fw + k;
                let (lit, m) = (lits[l], mask[l] & self.valid[k]);
                if fired {
                    let up = if boost { lit } else { lit & !m };
                    self.inc(clause, l, up);
                    self.dec(clause, l, !lit & m);
                } else {
                    self.dec(clause, l, m);
                }
            }
        }
    }

    /// Type II feedback: a firing clause includes (one step) the excluded automata of its false
    /// literals, so that it stops firing on this example.
    pub fn type_ii(&mut self, clause: usize, lits: &[u64]) {
        let fw = self.fw;
        for half in 0..2 {
            for k in 0..fw {
                let l = half * fw + k;
                let excluded = !self.include[clause * 2 * fw + l];
                self.inc(clause, l, !lits[l] & excluded & self.valid[k]);
            }
        }
    }

    /// The literal words of an example: its features, then their negations.
    pub fn literals_of(&self, x: &[u64], out: &mut Vec<u64>) {
        out.clear();
        out.extend_from_slice(&x[..self.fw]);
        out.extend(x[..self.fw].iter().zip(&self.valid).map(|(w, v)| !w & v));
    }

    /// Adds 1 to the automata flagged in `active`, saturating at the top state.
    #[inline]
    fn inc(&mut self, clause: usize, word: usize, active: u64) {
        if active == 0 {
            return;
        }
        let bits = self.bits;
        let cell = self.cell_mut(clause, word);
        let mut carry = active;
        for p in cell.iter_mut() {
            let next = *p & carry;
            *p ^= carry;
            carry = next;
            if carry == 0 {
                break;
            }
        }
        if carry != 0 {
            for p in cell.iter_mut() {
                *p |= carry;
            }
        }
        let top = cell[bits - 1];
        let at = clause * 2 * self.fw + word;
        self.include[at] = top;
        self.live[at] |= active;
    }

    /// Subtracts 1 from the automata flagged in `active`, saturating at state 0.
    #[inline]
    fn dec(&mut self, clause: usize, word: usize, active: u64) {
        let at = clause * 2 * self.fw + word;
        // Automata at state 0 (most excluded ones) stay; the rest cannot underflow.
        let mut borrow = active & self.live[at];
        if borrow == 0 {
            return;
        }
        let bits = self.bits;
        let cell = self.cell_mut(clause, word);
        for p in cell.iter_mut() {
            let next = !*p & borrow;
            *p ^= borrow;
            borrow = next;
            if borrow == 0 {
                break;
            }
        }
        let live = cell.iter().fold(0, |a, p| a | p);
        let top = cell[bits - 1];
        self.include[at] = top;
        self.live[at] = live;
    }

    /// Replaces a clause's actions: included automata at the first include state (N + 1),
    /// excluded ones at the last exclude state (N). Predictions depend only on the actions.
    pub fn set_include(&mut self, clause: usize, include: &[u64]) {
        assert_eq!(include.len(), self.lw());
        let bits = self.bits;
        for (l, &inc) in include.iter().enumerate() {
            let v = self.valid[l % self.fw];
            let inc = inc & v;
            let cell = self.cell_mut(clause, l);
            for p in &mut cell[..bits - 1] {
                *p = !inc & v;
            }
            cell[bits - 1] = inc;
            self.include[clause * 2 * self.fw + l] = inc;
            self.live[clause * 2 * self.fw + l] = v;
        }
    }
}

/// Which of `clauses` clauses get feedback, each with probability `p` (one 64-bit draw decides
/// two), in ascending order: decided before any update so that the next clause's automata can be
/// loaded while the current one is updated.
pub(crate) fn select_for_feedback(p: f64, clauses: usize, rng: &mut FlintRng, out: &mut Vec<u32>) {
    let threshold = (p.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u32;
    out.clear();
    let mut draw = 0u64;
    for j in 0..clauses {
        if j % 2 == 0 {
            draw = rng.random();
        }
        if ((draw >> (32 * (j % 2))) as u32) < threshold {
            out.push(j as u32);
        }
    }
}

/// The literals each clause learns from: `rows[row_of[j]]` (rows of `2·fw` words), or the only
/// row when `row_of` is `None`. The convolutional machine gives each clause its firing patch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiteralRows<'a> {
    pub rows: &'a [u64],
    pub row_of: Option<&'a [u32]>,
}

impl<'a> LiteralRows<'a> {
    pub fn one(lits: &'a [u64]) -> Self {
        LiteralRows {
            rows: lits,
            row_of: None,
        }
    }

    pub fn of(&self, clause: usize, lw: usize) -> &'a [u64] {
        let row = self.row_of.map_or(0, |r| r[clause] as usize);
        &self.rows[row * lw..(row + 1) * lw]
    }
}

/// Words with each bit set independently with probability 1/s, drawn from a seeded pool at a
/// random offset: one random draw per Type I feedback instead of one per automaton.
#[derive(Debug, Clone)]
pub struct FeedbackMasks {
    pool: Vec<u64>,
    threshold: u32,
    used: usize,
}

const POOL_WORDS: usize = 1 << 12;
/// Masks drawn before the pool is redrawn, so masks do not repeat in step with the data.
const REFRESH_AFTER: usize = 1 << 20;

impl FeedbackMasks {
    pub fn new(s: f64, rng: &mut FlintRng) -> FeedbackMasks {
        let p = (1.0 / s).clamp(0.0, 1.0);
        let mut m = FeedbackMasks {
            pool: vec![0; POOL_WORDS],
            threshold: (p * f64::from(u32::MAX)) as u32,
            used: 0,
        };
        m.refill(rng);
        m
    }

    /// Each word: 64 bits each set with probability ≈ threshold / 2^32, by comparing 64
    /// bit-sliced 16-bit random numbers with the threshold's top 16 bits.
    fn refill(&mut self, rng: &mut FlintRng) {
        let t = self.threshold >> 16;
        for w in self.pool.iter_mut() {
            let (mut less, mut equal) = (0u64, u64::MAX);
            for bit in (0..16).rev() {
                let r: u64 = rng.random();
                if (t >> bit) & 1 == 1 {
                    less |= equal & !r;
                    equal &= r;
                } else {
                    equal &= !r;
                }
            }
            *w = less;
        }
        self.used = 0;
    }

    /// `len` consecutive mask words starting at a random place in the pool.
    pub fn draw(&mut self, len: usize, rng: &mut FlintRng) -> &[u64] {
        if self.used >= REFRESH_AFTER {
            self.refill(rng);
        }
        self.used += 1;
        let start = rng.random_range(0..self.pool.len() - len);
        &self.pool[start..start + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    /// Packs booleans into feature words.
    fn x(bits: &[bool]) -> Vec<u64> {
        let mut w = vec![0u64; words_for(bits.len())];
        for (i, &b) in bits.iter().enumerate() {
            w[i / 64] |= u64::from(b) << (i % 64);
        }
        w
    }

    #[test]
    fn automata_start_at_the_last_exclude_state() {
        let b = ClauseBank::new(2, 70, 8);
        for lit in [0, 69, 70, 139] {
            assert_eq!(b.state(1, lit), 127);
        }
        assert!(b.include(0).iter().all(|&w| w == 0));
        // An empty clause fires while training and not at inference.
        assert!(b.fires(0, &x(&[true; 70]), true));
        assert!(!b.fires(0, &x(&[true; 70]), false));
    }

    #[test]
    fn increments_and_decrements_saturate() {
        let mut b = ClauseBank::new(1, 3, 3);
        assert_eq!(b.state(0, 0), 3);
        for _ in 0..10 {
            b.inc(0, 0, 1);
        }
        assert_eq!(b.state(0, 0), 7);
        assert_eq!(b.include(0)[0] & 1, 1);
        for _ in 0..10 {
            b.dec(0, 0, 1);
        }
        assert_eq!(b.state(0, 0), 0);
        assert_eq!(b.include(0)[0] & 1, 0);
        assert_eq!(b.state(0, 1), 3, "other automata untouched");
    }

    /// Granmo 2018 Table 2, s → ∞ (mask empty) with boost: a firing clause's true literals
    /// step toward include, its false literals stay.
    #[test]
    fn type_i_on_a_firing_clause_reinforces_true_literals() {
        let mut b = ClauseBank::new(1, 2, 8);
        let mut ex = Vec::new();
        b.literals_of(&x(&[true, false]), &mut ex);
        let none = vec![0u64; 2];
        b.type_i(0, &ex, true, true, &none);
        assert_eq!(b.state(0, 0), 128, "x0 = 1 included");
        assert_eq!(b.state(0, 3), 128, "¬x1 = 1 included");
        assert_eq!(b.state(0, 1), 127, "x1 = 0 untouched");
        assert_eq!(b.state(0, 2), 127, "¬x0 = 0 untouched");
        // With every automaton drawn (probability 1/s = 1) and no boost: true literals stay,
        // false literals step toward exclude.
        let all = vec![u64::MAX; 2];
        b.type_i(0, &ex, true, false, &all);
        assert_eq!((b.state(0, 0), b.state(0, 1)), (128, 126));
        // A clause that does not fire: every drawn automaton steps toward exclude.
        b.type_i(0, &ex, false, false, &all);
        assert_eq!(
            (b.state(0, 0), b.state(0, 1), b.state(0, 3)),
            (127, 125, 127)
        );
    }

    #[test]
    fn type_ii_includes_excluded_false_literals_only() {
        let mut b = ClauseBank::new(1, 2, 8);
        b.set_state(0, 3, 200); // ¬x1 included
        let mut ex = Vec::new();
        b.literals_of(&x(&[true, true]), &mut ex);
        assert!(!b.fires(0, &x(&[true, true]), true), "¬x1 is false");
        b.type_ii(0, &ex);
        assert_eq!(
            b.state(0, 2),
            128,
            "¬x0 (false, excluded) stepped to include"
        );
        assert_eq!(b.state(0, 3), 200, "already included: unchanged");
        assert_eq!(
            (b.state(0, 0), b.state(0, 1)),
            (127, 127),
            "true literals untouched"
        );
    }

    #[test]
    fn padding_automata_never_move() {
        let mut b = ClauseBank::new(1, 3, 8);
        let mut ex = Vec::new();
        b.literals_of(&x(&[false, false, false]), &mut ex);
        for _ in 0..300 {
            b.type_ii(0, &ex);
        }
        assert_eq!(b.include(0)[0], 0b111, "the three features are included");
        assert_eq!(b.include(0)[1], 0, "negations were true: untouched");
    }

    #[test]
    fn set_include_gives_the_same_actions() {
        let mut b = ClauseBank::new(1, 65, 8);
        let inc = vec![1 | (1 << 63), 1, 0, 1];
        b.set_include(0, &inc);
        assert_eq!(b.include(0), &inc[..]);
        assert_eq!((b.state(0, 0), b.state(0, 1)), (128, 127));
        assert_eq!(b.state(0, 64), 128);
        assert_eq!(b.state(0, 129), 128, "¬x64");
    }

    #[test]
    fn masks_have_the_requested_density() {
        let mut rng = derive_rng(1, "masks", 0);
        let mut m = FeedbackMasks::new(10.0, &mut rng);
        let ones: u32 = (0..200)
            .map(|_| {
                m.draw(25, &mut rng)
                    .iter()
                    .map(|w| w.count_ones())
                    .sum::<u32>()
            })
            .sum();
        let density = f64::from(ones) / (200.0 * 25.0 * 64.0);
        assert!((density - 0.1).abs() < 0.005, "{density}");
    }
}
