//! Type I feedback to clauses that do not fire, applied when the clause is next updated (the
//! coalesced machine's epoch).
//!
//! Such feedback steps every automaton of the clause toward exclude with probability 1/s. On
//! MNIST it is most of an example's feedback (about 100 of 120 clause updates), and applied at
//! once it reads and writes every state plane of the clause. Yet it rarely changes an action: an
//! excluded automaton stepping down stays excluded, and an included one at least `2^KEPT_Q`
//! steps above the include boundary stays included through `2^KEPT_Q` such feedbacks. So each
//! feedback is kept as its mask's place in the pool; the masks kept are counted per automaton and
//! subtracted in the pass of the clause's next update, or after [`LIMIT`] of them, at the end of
//! the epoch, or before the pool is redrawn. The few included automata closer to the boundary
//! are tracked aside, state by state, and stepped at each feedback; one that crosses the
//! boundary is excluded in the include mirror at once, so clause outputs are always exact.
//!
//! Steps down saturating at 0 add up (max(0, max(0, x − a) − b) = max(0, x − a − b)), so the
//! machine is the one that applying every feedback at once trains, bit for bit.

use super::bank::{ClauseBank, FeedbackMasks, KEPT_BITS, KEPT_Q, Kept};
use crate::rng::FlintRng;

/// Feedbacks a clause may keep.
const LIMIT: usize = 1 << KEPT_Q;
/// Automata a clause may track, so that what it holds fills one cache line; a clause with
/// more fragile ones (a young one, with hundreds of included literals) takes its feedback at
/// once.
const TRACKED: usize = 23;
/// `tracked` of a clause that takes its feedback at once.
const AT_ONCE: u8 = u8::MAX;
/// A tracked automaton: its literal slot (word · 64 + bit) above, its steps above the include
/// boundary in the low [`KEPT_Q`] bits.
const EXCESS: u16 = (1 << KEPT_Q) - 1;

/// The first include state.
const BOUNDARY: u8 = 1 << (KEPT_BITS - 1);

/// What one clause holds back, in one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Held {
    kept: u8,
    tracked: u8,
    /// The places in the mask pool of the kept feedbacks.
    at: [u16; LIMIT],
    /// The tracked automata: slot << KEPT_Q | excess.
    automata: [u16; TRACKED],
}

const NOTHING: Held = Held {
    kept: 0,
    tracked: 0,
    at: [0; LIMIT],
    automata: [0; TRACKED],
};

#[derive(Debug)]
pub(crate) struct DeferredTypeIb {
    lw: usize,
    held: Vec<Held>,
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
    pub fn new(bank: &mut ClauseBank) -> Option<DeferredTypeIb> {
        let lw = bank.lw();
        if bank.state_bits() != KEPT_BITS || lw * 64 > usize::from(u16::MAX >> KEPT_Q) + 1 {
            return None;
        }
        let mut d = DeferredTypeIb {
            lw,
            held: vec![NOTHING; bank.clauses()],
            tracked: vec![0; lw],
            fragile: vec![0; lw],
            words: vec![0; lw],
        };
        for j in 0..bank.clauses() {
            d.settle(bank, j, &[]);
        }
        Some(d)
    }

    /// A mask's place in the pool, for Type I feedback; everything kept is applied first if the
    /// pool is about to be redrawn.
    pub fn draw(
        &mut self,
        bank: &mut ClauseBank,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
    ) -> usize {
        if masks.redraws_next() {
            self.settle_all(bank, masks);
        }
        masks.draw_at(self.lw, rng)
    }

    /// Type I feedback to clause `j`, which did not fire, with the mask at `at`; whether an
    /// action changed.
    pub fn type_ib(
        &mut self,
        bank: &mut ClauseBank,
        j: usize,
        at: usize,
        masks: &FeedbackMasks,
        lits: &[u64],
    ) -> bool {
        if usize::from(self.held[j].kept) == LIMIT {
            self.settle(bank, j, masks.pool());
        }
        let mask = masks.words(at, self.lw);
        if self.held[j].tracked == AT_ONCE {
            // Nothing is kept for such a clause, so the plain step serves; whether it may
            // track again is asked at its next update.
            return bank.type_i_moved(j, lits, false, false, mask);
        }
        let held = &mut self.held[j];
        let pool = masks.pool();
        let (mut i, mut moved) = (0, false);
        while i < usize::from(held.tracked) {
            let a = held.automata[i];
            let (l, bit) = (usize::from(a >> KEPT_Q) >> 6, a >> KEPT_Q & 63);
            if (mask[l] >> bit) & 1 == 0 {
                i += 1;
            } else if a & EXCESS > 0 {
                held.automata[i] = a - 1;
                i += 1;
            } else {
                // Crossing to exclude: no longer tracked. Its planes take the first include
                // state plus the kept feedbacks that draw it, which the next update subtracts.
                let drawn = held.at[..usize::from(held.kept)]
                    .iter()
                    .filter(|&&at| (pool[usize::from(at) + l] >> bit) & 1 == 1)
                    .count() as u8;
                bank.write_state(j, l, usize::from(bit), BOUNDARY + drawn);
                bank.exclude_in_mirror(j, l, usize::from(bit));
                held.tracked -= 1;
                held.automata[i] = held.automata[usize::from(held.tracked)];
                moved = true;
            }
        }
        held.at[usize::from(held.kept)] = at as u16;
        held.kept += 1;
        moved
    }

    /// An update of clause `j` (`step`: the bank's call, given what is kept) in the pass that
    /// applies what the clause keeps (`pool`: the masks' pool); whether an action changed.
    pub fn update(
        &mut self,
        bank: &mut ClauseBank,
        j: usize,
        pool: &[u64],
        step: impl FnOnce(&mut ClauseBank, &Kept<'_>, &mut [u64]) -> bool,
    ) -> bool {
        let lw = self.lw;
        let held = &mut self.held[j];
        let mut kept: [&[u64]; LIMIT] = [&[]; LIMIT];
        for (mask, &at) in kept.iter_mut().zip(&held.at[..usize::from(held.kept)]) {
            *mask = &pool[usize::from(at)..][..lw];
        }
        let n = match held.tracked {
            AT_ONCE => 0,
            n => usize::from(n),
        };
        self.tracked.fill(0);
        for &a in &held.automata[..n] {
            let (l, bit) = (usize::from(a >> KEPT_Q) >> 6, usize::from(a >> KEPT_Q & 63));
            self.tracked[l] |= 1 << bit;
            bank.write_excess(j, l, bit, (a & EXCESS) as u8);
        }
        let kept = Kept {
            masks: &kept[..usize::from(held.kept)],
            tracked: &self.tracked,
        };
        let moved = step(bank, &kept, &mut self.fragile);
        self.track_fragile(bank, j);
        moved
    }

    /// Applies what clause `j` keeps (`pool`: the masks' pool).
    fn settle(&mut self, bank: &mut ClauseBank, j: usize, pool: &[u64]) {
        self.update(bank, j, pool, |bank, kept, fragile| {
            bank.settle_kept(j, kept, fragile);
            false
        });
    }

    /// Applies everything kept: the bank is exact again.
    pub fn settle_all(&mut self, bank: &mut ClauseBank, masks: &FeedbackMasks) {
        for j in 0..bank.clauses() {
            if self.held[j].kept > 0 {
                self.settle(bank, j, masks.pool());
            }
        }
    }

    /// Tracks clause `j`'s fragile automata, from the bits its last update left in `fragile`,
    /// or marks it [`AT_ONCE`] if there are more than [`TRACKED`]; nothing is kept.
    fn track_fragile(&mut self, bank: &ClauseBank, j: usize) {
        let held = &mut self.held[j];
        held.kept = 0;
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
