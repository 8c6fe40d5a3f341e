//! A bank of clauses: the Tsetlin automata of every (clause, literal), their feedback, and clause
//! evaluation. Shared by the multi-class and coalesced machines.
//!
//! Layout, for speed:
//! - An example is its features as bits in 64-bit words (`fw` words); the negated literals are
//!   `!x & valid` and never stored.
//! - A clause has `lw = 2·fw` literal words: `fw` for the features, then `fw` for their negations.
//! - Automaton states are bit-sliced and plane-major: a clause is `bits` planes of `lw` words,
//!   least significant plane first, so one word operation moves 64 automata and one plane
//!   operation a whole clause. The top plane is the action (include), mirrored into a dense
//!   `include` array that clause evaluation reads.
//! - Feedback updates a clause without branching on the data, eight literal words at a time, so
//!   the compiler keeps them in vector registers.

use rand::RngExt;

use crate::data::booleanize::words_for;
use crate::rng::FlintRng;

#[derive(Debug, Clone, PartialEq)]
pub struct ClauseBank {
    clauses: usize,
    features: usize,
    fw: usize,
    bits: usize,
    planes: Vec<u64>,
    /// Every clause's top plane, contiguous, so that evaluating clause after clause streams.
    include: Vec<u64>,
    /// Per literal word: which bits are real literals (the features', then the negations').
    valid: Vec<u64>,
}

/// Literal words one chunk of a clause update holds in registers.
const CHUNK: usize = 8;

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

impl ClauseBank {
    /// Every automaton starts at the last exclude state (N), as in Granmo's reference code.
    pub fn new(clauses: usize, features: usize, bits: usize) -> ClauseBank {
        assert!((2..=16).contains(&bits), "state bits must be 2..=16");
        let fw = words_for(features);
        let mut valid = vec![u64::MAX; fw];
        if !features.is_multiple_of(64) {
            valid[fw - 1] = (1u64 << (features % 64)) - 1;
        }
        let valid: Vec<u64> = valid.iter().chain(&valid).copied().collect();
        let lw = 2 * fw;
        // All low planes one, top plane zero: state 2^(bits-1) - 1. Padding bits beyond the
        // last feature stay at state 0 in every plane.
        let mut planes = vec![0u64; clauses * lw * bits];
        for clause in planes.chunks_mut(lw * bits) {
            for plane in clause[..(bits - 1) * lw].chunks_mut(lw) {
                plane.copy_from_slice(&valid);
            }
        }
        ClauseBank {
            clauses,
            features,
            fw,
            bits,
            planes,
            include: vec![0; clauses * lw],
            valid,
        }
    }

    pub fn clauses(&self) -> usize {
        self.clauses
    }

    /// Every automaton state, bit-sliced, cell by cell: for each (clause, literal word), its
    /// `bits` planes. The checkpoint format; the bank itself keeps planes whole.
    pub fn cell_major_planes(&self) -> Vec<u64> {
        let (lw, bits) = (self.lw(), self.bits);
        let mut out = Vec::with_capacity(self.planes.len());
        for clause in self.planes.chunks(lw * bits) {
            for l in 0..lw {
                out.extend((0..bits).map(|b| clause[b * lw + l]));
            }
        }
        out
    }

    /// A bank from stored planes in [`Self::cell_major_planes`] order.
    pub fn from_cell_major_planes(
        clauses: usize,
        features: usize,
        bits: usize,
        cells: Vec<u64>,
    ) -> Result<ClauseBank, String> {
        let mut bank = ClauseBank::new(clauses, features, bits);
        if cells.len() != bank.planes.len() {
            return Err(format!(
                "{} automaton words for {clauses} clauses of {features} features at {bits} bits, expected {}",
                cells.len(),
                bank.planes.len()
            ));
        }
        let lw = bank.lw();
        for (j, (clause, stored)) in bank
            .planes
            .chunks_mut(lw * bits)
            .zip(cells.chunks(lw * bits))
            .enumerate()
        {
            for (l, cell) in stored.chunks(bits).enumerate() {
                if cell.iter().any(|p| p & !bank.valid[l] != 0) {
                    return Err(format!("clause {j} has automata beyond the last feature"));
                }
                for (b, &p) in cell.iter().enumerate() {
                    clause[b * lw + l] = p;
                }
            }
        }
        for j in 0..clauses {
            bank.mirror_include(j);
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

    /// Literal words per clause.
    pub(crate) fn lw(&self) -> usize {
        2 * self.fw
    }

    fn clause_planes(&self, clause: usize) -> &[u64] {
        let size = self.lw() * self.bits;
        &self.planes[clause * size..(clause + 1) * size]
    }

    /// The include words of a clause (its top plane): features first, then negations.
    pub fn include(&self, clause: usize) -> &[u64] {
        let lw = self.lw();
        &self.include[clause * lw..(clause + 1) * lw]
    }

    /// Copies a clause's top plane into the include mirror, after its automata moved.
    fn mirror_include(&mut self, clause: usize) {
        let (lw, bits) = (self.lw(), self.bits);
        let top = (clause * bits + bits - 1) * lw;
        self.include[clause * lw..(clause + 1) * lw].copy_from_slice(&self.planes[top..top + lw]);
    }

    /// [`Self::mirror_include`], comparing as it copies (one pass, no call); whether an action
    /// changed.
    fn mirror_if_moved(&mut self, clause: usize) -> bool {
        let (lw, bits) = (self.lw(), self.bits);
        let top = (clause * bits + bits - 1) * lw;
        let plane = &self.planes[top..top + lw];
        let mirror = &mut self.include[clause * lw..(clause + 1) * lw];
        let mut moved = 0;
        for (m, &p) in mirror.iter_mut().zip(plane) {
            moved |= *m ^ p;
            *m = p;
        }
        moved != 0
    }

    /// State of one automaton; literal `k < features` is feature k, else the negation of k − features.
    pub fn state(&self, clause: usize, literal: usize) -> u32 {
        let (word, bit) = (self.literal_word(literal), literal % self.features % 64);
        let planes = self.clause_planes(clause);
        (0..self.bits).fold(0, |s, b| {
            s | ((((planes[b * self.lw() + word] >> bit) & 1) as u32) << b)
        })
    }

    fn literal_word(&self, literal: usize) -> usize {
        let (half, f) = (literal / self.features, literal % self.features);
        half * self.fw + f / 64
    }

    /// Sets one automaton's state (tests, and rebuilding from include bits).
    pub fn set_state(&mut self, clause: usize, literal: usize, state: u32) {
        assert!(state < (1 << self.bits), "state beyond {} bits", self.bits);
        let (word, bit) = (self.literal_word(literal), literal % self.features % 64);
        self.write_low_planes(clause, word, bit, state, self.bits);
        self.mirror_include(clause);
    }

    /// Writes the `planes` lowest bits of `value` into the planes of the automaton at bit `bit`
    /// of literal word `l`; the include mirror is the caller's.
    fn write_low_planes(&mut self, clause: usize, l: usize, bit: usize, value: u32, planes: usize) {
        let lw = self.lw();
        let (clause_planes, _) = self.clause_planes_mut(clause);
        for b in 0..planes {
            let p = &mut clause_planes[b * lw + l];
            *p = (*p & !(1 << bit)) | (u64::from((value >> b) & 1) << bit);
        }
    }

    /// Starts loading what feedback to `clause` will touch: its automaton planes.
    #[inline]
    pub fn prefetch_feedback(&self, clause: usize) {
        for line in self.clause_planes(clause).chunks(8) {
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
    #[inline(always)]
    pub fn fires(&self, clause: usize, x: &[u64], training: bool) -> bool {
        let (pos, neg) = self.include(clause).split_at(self.fw);
        // No early exit: where a clause fails is unpredictable, and all its words are a few
        // vector operations.
        let mut violated = 0;
        for ((p, n), w) in pos.iter().zip(neg).zip(&x[..self.fw]) {
            violated |= (p & !w) | (n & w);
        }
        // At inference an empty clause is silent; asked only of a clause that would fire.
        violated == 0 && (training || pos.iter().chain(neg).any(|&w| w != 0))
    }

    /// A clause's planes to update, and the valid-literal words that masks are cut to.
    fn clause_planes_mut(&mut self, clause: usize) -> (&mut [u64], &[u64]) {
        let size = self.lw() * self.bits;
        (
            &mut self.planes[clause * size..(clause + 1) * size],
            &self.valid,
        )
    }

    /// Type I feedback (Granmo 2018, Table 2): a firing clause moves toward including its true
    /// literals (each with probability (s−1)/s, or always when `boost`) and excluding its false
    /// ones (probability 1/s); a clause that does not fire moves every automaton toward exclude
    /// with probability 1/s. `lits` are the example's literal words ([`Self::literals_of`]);
    /// `mask` holds, per literal word, the automata drawn with probability 1/s.
    pub fn type_i(&mut self, clause: usize, lits: &[u64], fired: bool, boost: bool, mask: &[u64]) {
        self.step_type_i(clause, lits, fired, boost, mask);
        self.mirror_include(clause);
    }

    /// [`Self::type_i`], and whether an action changed. Only the coalesced machine's block
    /// evaluation asks; returning it from `type_i` slowed the multi-class machine by 4 %.
    pub(crate) fn type_i_moved(
        &mut self,
        clause: usize,
        lits: &[u64],
        fired: bool,
        boost: bool,
        mask: &[u64],
    ) -> bool {
        self.step_type_i(clause, lits, fired, boost, mask);
        self.mirror_if_moved(clause)
    }

    #[inline(always)]
    fn step_type_i(&mut self, clause: usize, lits: &[u64], fired: bool, boost: bool, mask: &[u64]) {
        self.type_i_with(clause, lits, fired, boost, mask, Plain);
    }

    /// The rules of [`Self::type_i`], applied by `stepper`.
    #[inline(always)]
    fn type_i_with(
        &mut self,
        clause: usize,
        lits: &[u64],
        fired: bool,
        boost: bool,
        mask: &[u64],
        stepper: impl Stepper,
    ) {
        let lw = self.lw();
        let (planes, valid) = self.clause_planes_mut(clause);
        let m = |l: usize| mask[l] & valid[l];
        if !fired {
            stepper.step(planes, lw, valid, |_, _| 0, m);
        } else if boost {
            stepper.step(planes, lw, valid, |l, _| lits[l], |l| !lits[l] & m(l));
        } else {
            let up = |l: usize, _| lits[l] & !m(l);
            stepper.step(planes, lw, valid, up, |l| !lits[l] & m(l));
        }
    }

    /// Type II feedback: a firing clause includes (one step) the excluded automata of its false
    /// literals, so that it stops firing on this example.
    pub fn type_ii(&mut self, clause: usize, lits: &[u64]) {
        self.step_type_ii(clause, lits);
        self.mirror_include(clause);
    }

    /// [`Self::type_ii`], and whether an action changed (see [`Self::type_i_moved`]).
    pub(crate) fn type_ii_moved(&mut self, clause: usize, lits: &[u64]) -> bool {
        self.step_type_ii(clause, lits);
        self.mirror_if_moved(clause)
    }

    #[inline(always)]
    fn step_type_ii(&mut self, clause: usize, lits: &[u64]) {
        self.type_ii_with(clause, lits, Plain);
    }

    /// The rule of [`Self::type_ii`], applied by `stepper`.
    #[inline(always)]
    fn type_ii_with(&mut self, clause: usize, lits: &[u64], stepper: impl Stepper) {
        let lw = self.lw();
        let (planes, valid) = self.clause_planes_mut(clause);
        let up = |l: usize, include: u64| !lits[l] & !include & valid[l];
        stepper.step(planes, lw, valid, up, |_| 0);
    }

    /// Of literal word `l`'s included automata fewer than `2^KEPT_Q` steps above the boundary:
    /// how many steps, bit-sliced (the planes below `KEPT_Q`).
    pub(crate) fn excess_planes(&self, clause: usize, l: usize) -> [u64; KEPT_Q] {
        let planes = self.clause_planes(clause);
        std::array::from_fn(|b| planes[b * self.lw() + l])
    }

    /// Writes the steps above the boundary of such an automaton (see [`Self::excess_planes`]).
    pub(crate) fn write_excess(&mut self, clause: usize, l: usize, bit: usize, excess: u8) {
        self.write_low_planes(clause, l, bit, excess.into(), KEPT_Q);
    }

    /// Writes the state of the automaton at bit `bit` of literal word `l`, one whose action the
    /// include mirror already shows.
    pub(crate) fn write_state(&mut self, clause: usize, l: usize, bit: usize, state: u8) {
        self.write_low_planes(clause, l, bit, state.into(), self.bits);
    }

    /// Shows the automaton at bit `bit` of literal word `l` as excluded in the include mirror
    /// (its planes follow at [`Self::write_state`]).
    pub(crate) fn exclude_in_mirror(&mut self, clause: usize, l: usize, bit: usize) {
        let lw = self.lw();
        self.include[clause * lw + l] &= !(1 << bit);
    }

    /// [`Self::type_i_moved`] after applying what `kept` holds back; `fragile` receives the
    /// clause's included automata fewer than `2^KEPT_Q` steps above the boundary.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn type_i_kept(
        &mut self,
        clause: usize,
        lits: &[u64],
        fired: bool,
        boost: bool,
        mask: &[u64],
        kept: &Kept<'_>,
        fragile: &mut [u64],
    ) -> bool {
        let stepper = KeptStep { kept, fragile };
        self.type_i_with(clause, lits, fired, boost, mask, stepper);
        self.mirror_if_moved(clause)
    }

    /// [`Self::type_ii_moved`] after applying what `kept` holds back (see [`Self::type_i_kept`]).
    pub(crate) fn type_ii_kept(
        &mut self,
        clause: usize,
        lits: &[u64],
        kept: &Kept<'_>,
        fragile: &mut [u64],
    ) -> bool {
        self.type_ii_with(clause, lits, KeptStep { kept, fragile });
        self.mirror_if_moved(clause)
    }

    /// Applies what `kept` holds back and nothing else (see [`Self::type_i_kept`]); no action
    /// changes.
    pub(crate) fn settle_kept(&mut self, clause: usize, kept: &Kept<'_>, fragile: &mut [u64]) {
        let lw = self.lw();
        let (planes, valid) = self.clause_planes_mut(clause);
        KeptStep { kept, fragile }.step(planes, lw, valid, |_, _| 0, |_| 0);
    }

    /// The literal words of an example: its features, then their negations.
    pub fn literals_of(&self, x: &[u64], out: &mut Vec<u64>) {
        out.clear();
        out.extend_from_slice(&x[..self.fw]);
        out.extend(x[..self.fw].iter().zip(&self.valid).map(|(w, v)| !w & v));
    }

    /// Adds 1 to the automata flagged in `active` of one literal word, saturating at the top.
    #[cfg(test)]
    fn inc(&mut self, clause: usize, word: usize, active: u64) {
        let lw = self.lw();
        let (planes, _) = self.clause_planes_mut(clause);
        step(planes, lw, |l, _| if l == word { active } else { 0 }, |_| 0);
        self.mirror_include(clause);
    }

    /// Subtracts 1 from the automata flagged in `active` of one literal word, saturating at 0.
    #[cfg(test)]
    fn dec(&mut self, clause: usize, word: usize, active: u64) {
        let lw = self.lw();
        let (planes, _) = self.clause_planes_mut(clause);
        step(planes, lw, |_, _| 0, |l| if l == word { active } else { 0 });
        self.mirror_include(clause);
    }

    /// Replaces a clause's actions: included automata at the first include state (N + 1),
    /// excluded ones at the last exclude state (N). Predictions depend only on the actions.
    pub fn set_include(&mut self, clause: usize, include: &[u64]) {
        self.set_include_at(clause, include, ExcludedAt::LastExclude);
    }

    /// [`Self::set_include`], with the excluded automata where `excluded` says.
    pub fn set_include_at(&mut self, clause: usize, include: &[u64], excluded: ExcludedAt) {
        assert_eq!(include.len(), self.lw());
        let (lw, bits) = (self.lw(), self.bits);
        let planes = &mut self.planes[clause * lw * bits..(clause + 1) * lw * bits];
        for (l, (&inc, &v)) in include.iter().zip(&self.valid).enumerate() {
            let inc = inc & v;
            let low = match excluded {
                ExcludedAt::LastExclude => !inc & v,
                ExcludedAt::Zero => 0,
            };
            for b in 0..bits - 1 {
                planes[b * lw + l] = low;
            }
            planes[(bits - 1) * lw + l] = inc;
        }
        self.mirror_include(clause);
    }
}

/// Where a machine rebuilt from include bits puts its excluded automata (included ones go to
/// the first include state, N + 1, either way).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ExcludedAt {
    /// The last exclude state, N: one reward away from including, as a trained machine's
    /// undecided automata sit (Flint's default).
    LastExclude,
    /// State 0, the deepest exclude: the FedTMOS code's convention (docs/papers/fedtmos.md §13).
    Zero,
}

/// How a clause's feedback moves its automata: the rules (Type I, Type II) say which step up
/// and which step down, a stepper moves them.
trait Stepper {
    fn step(
        self,
        planes: &mut [u64],
        lw: usize,
        valid: &[u64],
        up: impl Fn(usize, u64) -> u64,
        down: impl Fn(usize) -> u64,
    );
}

/// [`step`]: the automata as they stand.
struct Plain;

impl Stepper for Plain {
    #[inline(always)]
    fn step(
        self,
        planes: &mut [u64],
        lw: usize,
        _valid: &[u64],
        up: impl Fn(usize, u64) -> u64,
        down: impl Fn(usize) -> u64,
    ) {
        step(planes, lw, up, down);
    }
}

/// [`step_kept`]: what `kept` holds back first, then the step; the fragile automata after it
/// into `fragile`.
struct KeptStep<'k, 'f> {
    kept: &'k Kept<'k>,
    fragile: &'f mut [u64],
}

impl Stepper for KeptStep<'_, '_> {
    #[inline(always)]
    fn step(
        self,
        planes: &mut [u64],
        lw: usize,
        valid: &[u64],
        up: impl Fn(usize, u64) -> u64,
        down: impl Fn(usize) -> u64,
    ) {
        step_kept(planes, lw, valid, self.kept, up, down, self.fragile);
    }
}

/// Moves one clause's automata (`planes`: its `bits` planes of `lw` words): those flagged by
/// `up(l, include word l)` one state up, by `down(l)` one state down, both saturating. The two
/// must not share a bit.
#[inline(always)]
fn step(
    planes: &mut [u64],
    lw: usize,
    up: impl Fn(usize, u64) -> u64,
    down: impl Fn(usize) -> u64,
) {
    let mut start = 0;
    while start + CHUNK <= lw {
        step_chunk::<CHUNK>(planes, lw, start, &up, &down);
        start += CHUNK;
    }
    while start < lw {
        step_chunk::<1>(planes, lw, start, &up, &down);
        start += 1;
    }
}

/// Literal words `start..start + N` of [`step`]: branch-free bit-sliced counters, a carry for
/// the automata stepping up and a borrow for those stepping down.
#[inline(always)]
fn step_chunk<const N: usize>(
    planes: &mut [u64],
    lw: usize,
    start: usize,
    up: &impl Fn(usize, u64) -> u64,
    down: &impl Fn(usize) -> u64,
) {
    let bits = planes.len() / lw;
    let include: &[u64; N] = planes[(bits - 1) * lw + start..][..N]
        .try_into()
        .expect("a chunk of N words");
    let carry: [u64; N] = std::array::from_fn(|i| up(start + i, include[i]));
    let borrow: [u64; N] = std::array::from_fn(|i| down(start + i));
    if carry.iter().chain(&borrow).all(|&w| w == 0) {
        return;
    }
    step_rows(planes, lw, start, bits, carry, borrow);
}

/// The bit-sliced counters of `rows` rows (row `b`'s words at `b · stride + at`, N of them): those
/// flagged in `carry` one state up, in `borrow` one down, saturating (automata at the top cannot
/// step up, those at state 0 cannot step down).
#[inline(always)]
fn step_rows<const N: usize>(
    planes: &mut [u64],
    stride: usize,
    at: usize,
    rows: usize,
    mut carry: [u64; N],
    mut borrow: [u64; N],
) {
    let (mut full, mut nonzero) = ([u64::MAX; N], [0u64; N]);
    for b in 0..rows {
        let p: &[u64; N] = planes[b * stride + at..][..N]
            .try_into()
            .expect("a chunk of N words");
        for i in 0..N {
            full[i] &= p[i];
            nonzero[i] |= p[i];
        }
    }
    for i in 0..N {
        carry[i] &= !full[i];
        borrow[i] &= nonzero[i];
    }
    for b in 0..rows {
        let p: &mut [u64; N] = (&mut planes[b * stride + at..][..N])
            .try_into()
            .expect("a chunk of N words");
        for i in 0..N {
            let (c, d) = (p[i] & carry[i], !p[i] & borrow[i]);
            p[i] ^= carry[i] | borrow[i];
            carry[i] = c;
            borrow[i] = d;
        }
    }
}

/// Type I feedback held back from a clause that did not fire (`deferred.rs`): per automaton,
/// how many of the feedbacks kept draw it, to be subtracted from every automaton but the tracked
/// ones (which took them one by one). For banks of [`KEPT_BITS`]-bit automata.
pub(crate) struct Kept<'a> {
    /// The counts, bit-sliced: [`COUNT_PLANES`] planes of `lw` words; `None` when nothing is kept.
    pub counts: Option<[&'a [u64]; COUNT_PLANES]>,
    /// Per literal word: the automata the counts skip.
    pub tracked: &'a [u64],
}

/// The automaton width [`Kept`] serves: the default, so its kernel is written for it.
pub(crate) const KEPT_BITS: usize = 8;
/// Fragile: fewer than `2^KEPT_Q` steps above the include boundary.
pub(crate) const KEPT_Q: usize = 3;
/// Planes of the counts of kept feedbacks: up to `2^KEPT_Q`, so `KEPT_Q + 1`.
pub(crate) const COUNT_PLANES: usize = KEPT_Q + 1;
/// Literal words [`step_kept`] holds at once: one vector register per plane.
const KEPT_CHUNK: usize = 2;

/// [`step`] on a clause whose Type I feedback `kept` held back: applies it first (subtracting
/// each automaton's count saturating at 0), then steps;
/// writes the fragile automata after the step into `fragile`. One pass over the planes.
#[inline(always)]
fn step_kept(
    planes: &mut [u64],
    lw: usize,
    valid: &[u64],
    kept: &Kept<'_>,
    up: impl Fn(usize, u64) -> u64,
    down: impl Fn(usize) -> u64,
    fragile: &mut [u64],
) {
    assert_eq!(
        planes.len(),
        KEPT_BITS * lw,
        "kept feedback needs 8-bit automata"
    );
    let mut start = 0;
    while start + KEPT_CHUNK <= lw {
        step_kept_chunk::<KEPT_CHUNK>(planes, lw, start, valid, kept, &up, &down, fragile);
        start += KEPT_CHUNK;
    }
    while start < lw {
        step_kept_chunk::<1>(planes, lw, start, valid, kept, &up, &down, fragile);
        start += 1;
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn step_kept_chunk<const N: usize>(
    planes: &mut [u64],
    lw: usize,
    start: usize,
    valid: &[u64],
    kept: &Kept<'_>,
    up: &impl Fn(usize, u64) -> u64,
    down: &impl Fn(usize) -> u64,
    fragile: &mut [u64],
) {
    const B: usize = KEPT_BITS;
    let words = |v: &[u64], at: usize| -> [u64; N] { v[at..][..N].try_into().expect("N words") };
    let mut p: [[u64; N]; B] = std::array::from_fn(|b| words(planes, b * lw + start));
    // Per automaton, how many kept feedbacks draw it, subtracted saturating at 0.
    if let Some(counts) = kept.counts {
        let (v, f) = (words(valid, start), words(kept.tracked, start));
        let count: [[u64; N]; COUNT_PLANES] = std::array::from_fn(|b| {
            let c = words(counts[b], start);
            std::array::from_fn(|i| c[i] & v[i] & !f[i])
        });
        let mut borrow = [0u64; N];
        for (b, row) in p.iter_mut().enumerate() {
            for i in 0..N {
                let d = if b < COUNT_PLANES { count[b][i] } else { 0 };
                let x = row[i] ^ d;
                let next = (!row[i] & d) | (!x & borrow[i]);
                row[i] = x ^ borrow[i];
                borrow[i] = next;
            }
        }
        // A borrow out of the top plane: more steps than the state had.
        for row in p.iter_mut() {
            for i in 0..N {
                row[i] &= !borrow[i];
            }
        }
    }
    let carry: [u64; N] = std::array::from_fn(|i| up(start + i, p[B - 1][i]));
    let borrow: [u64; N] = std::array::from_fn(|i| down(start + i));
    step_rows(p.as_flattened_mut(), N, 0, B, carry, borrow);
    for (b, row) in p.iter().enumerate() {
        planes[b * lw + start..][..N].copy_from_slice(row);
    }
    for i in 0..N {
        let high = (KEPT_Q..B - 1).fold(0, |acc, b| acc | p[b][i]);
        fragile[start + i] = p[B - 1][i] & !high;
    }
}

/// Which of `clauses` clauses get feedback, each with probability `p` (one 64-bit draw decides
/// two), in ascending order: decided before any update so that the next clause's automata can be
/// loaded while the current one is updated.
pub(crate) fn select_for_feedback(p: f64, clauses: usize, rng: &mut FlintRng, out: &mut Vec<u32>) {
    let threshold = (p.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u32;
    // Written without a branch on the draw: at p near ½ half such branches would mispredict.
    out.clear();
    out.resize(clauses, 0);
    let mut n = 0;
    for pair in 0..clauses.div_ceil(2) {
        let draw: u64 = rng.random();
        for half in 0..2 {
            let j = 2 * pair + half;
            if j == clauses {
                break;
            }
            out[n] = j as u32;
            n += usize::from(((draw >> (32 * half)) as u32) < threshold);
        }
    }
    out.truncate(n);
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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

    /// Whether `other` draws masks of the same probability from a pool of the same size (a
    /// checkpoint's masks, against a fresh machine's).
    pub fn same_draws(&self, other: &FeedbackMasks) -> bool {
        self.threshold == other.threshold && self.pool.len() == other.pool.len()
    }

    /// `len` consecutive mask words starting at a random place in the pool.
    pub fn draw(&mut self, len: usize, rng: &mut FlintRng) -> &[u64] {
        let at = self.draw_at(len, rng);
        self.words(at, len)
    }

    /// [`Self::draw`], as the place in the pool: valid until the pool is redrawn
    /// ([`Self::redraws_next`]).
    pub(crate) fn draw_at(&mut self, len: usize, rng: &mut FlintRng) -> usize {
        if self.redraws_next() {
            self.refill(rng);
        }
        self.used += 1;
        rng.random_range(0..self.pool.len() - len)
    }

    /// Whether the next draw redraws the pool, so that places drawn before mean other masks.
    pub(crate) fn redraws_next(&self) -> bool {
        self.used >= REFRESH_AFTER
    }

    /// Every mask word of the pool.
    pub(crate) fn pool(&self) -> &[u64] {
        &self.pool
    }

    /// The `len` mask words at `at` in the pool.
    pub(crate) fn words(&self, at: usize, len: usize) -> &[u64] {
        &self.pool[at..at + len]
    }

    /// Makes the pool redraw after `draws` more draws (tests of what holds places across a
    /// redraw).
    #[cfg(test)]
    pub(crate) fn redraw_after(&mut self, draws: usize) {
        self.used = REFRESH_AFTER - draws;
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

    /// The bit-sliced, chunked updates against one automaton at a time, on random feedback
    /// over 600 features (two full chunks and a tail of single words).
    #[test]
    fn sliced_feedback_matches_automaton_by_automaton_rules() {
        let (features, bits) = (600, 4);
        let mut bank = ClauseBank::new(3, features, bits);
        let mut states = vec![vec![(1u32 << (bits - 1)) - 1; 2 * features]; 3];
        let mut rng = derive_rng(3, "sliced", 0);
        let (top, fw) = ((1 << bits) - 1, bank.feature_words());
        for round in 0..400 {
            let bools: Vec<bool> = (0..features).map(|_| rng.random()).collect();
            let mut lits = Vec::new();
            bank.literals_of(&x(&bools), &mut lits);
            let mask: Vec<u64> = (0..lits.len())
                .map(|_| rng.random::<u64>() & rng.random::<u64>())
                .collect();
            let (clause, fired, boost) = (round % 3, rng.random::<bool>(), rng.random::<bool>());
            let literal = |k: usize| {
                if k < features {
                    bools[k]
                } else {
                    !bools[k - features]
                }
            };
            let drawn = |k: usize| {
                let (half, f) = (k / features, k % features);
                mask[half * fw + f / 64] >> (f % 64) & 1 == 1
            };
            let s = &mut states[clause];
            if round % 5 == 4 {
                bank.type_ii(clause, &lits);
                for (k, st) in s.iter_mut().enumerate() {
                    if !literal(k) && *st < 1 << (bits - 1) {
                        *st += 1;
                    }
                }
            } else {
                bank.type_i(clause, &lits, fired, boost, &mask);
                for (k, st) in s.iter_mut().enumerate() {
                    let up = fired && literal(k) && (boost || !drawn(k));
                    let down = drawn(k) && !(fired && literal(k));
                    if up {
                        *st = (*st + 1).min(top);
                    } else if down {
                        *st = st.saturating_sub(1);
                    }
                }
            }
            for (k, &st) in states[clause].iter().enumerate() {
                assert_eq!(bank.state(clause, k), st, "round {round}, literal {k}");
            }
        }
        let include_bits: u32 = (0..3)
            .map(|j| bank.include(j).iter().map(|w| w.count_ones()).sum::<u32>())
            .sum();
        assert!(include_bits > 0, "some automata reached include");
        let stored =
            ClauseBank::from_cell_major_planes(3, features, bits, bank.cell_major_planes());
        assert_eq!(stored, Ok(bank), "cell-major storage round-trips");
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
