//! Clause outputs of a block of up to 64 training examples, computed together and kept exact
//! while the block trains.
//!
//! A trained clause includes a few dozen of its 2·features literals, and feedback changes the
//! include bits of a few clauses per example. So rather than reading every clause's include words
//! for every example, the block's examples are transposed (one word per literal, a bit per
//! example), each clause's outputs for the whole block are the AND of its included literals'
//! words, and a clause whose include bits change is evaluated again for the block. A clause's
//! included literals are read from its include words into a list once per change, not once per
//! block, so a block's evaluation is a run of reads without a branch per include word. Outputs read
//! for an example are those of the clauses as they stand when it is reached, as when each example
//! is evaluated on its own.
//!
//! A young clause includes hundreds of literals and changes at nearly every example. Each clause
//! has a budget of literal reads per block, about what reading its include words for every
//! example would cost; a clause that spends it is evaluated on each example from its include
//! words, as without blocks, until the next block.

use super::bank::ClauseBank;
use super::infer::transpose_into;
use crate::data::booleanize::BitRows;

/// Examples per block: one bit each in a machine word.
pub(crate) const BLOCK: usize = 64;

/// Literal reads a clause may spend per block before it is evaluated example by example.
const BUDGET: u32 = BLOCK as u32;

#[derive(Debug, Default)]
pub(crate) struct BlockOutputs {
    /// Per literal slot `l·64 + b` (literal word l, bit b, in the bank's order): the examples of
    /// the block where that literal is true.
    literals: Vec<u64>,
    /// The examples the block holds.
    valid: u64,
    /// Per clause: the examples of the block it fires on (training: an empty clause fires); 0
    /// for a clause evaluated example by example.
    fires: Vec<u64>,
    /// Per clause: literal reads left in this block's budget.
    budget: Vec<u32>,
    /// The clauses past their budget, and a flag per clause.
    by_example: Vec<u32>,
    is_by_example: Vec<bool>,
    /// Per clause, [`PLACES`] places: its included literals' slots as of its last evaluation,
    /// kept from block to block (a clause's include bits change only where it is refreshed).
    slots: Vec<u16>,
    /// Per clause: how many of its places hold slots, or [`STALE`].
    included: Vec<u8>,
}

/// Slots a clause holds: a clause with more included literals would spend its budget on one
/// evaluation.
const PLACES: usize = BUDGET as usize;

/// `included` of a clause whose slots must be read again from its include words: before its
/// first evaluation, and after it was evaluated by example.
const STALE: u8 = u8::MAX;

impl BlockOutputs {
    /// Transposes `rows` of `data` (at most [`BLOCK`]) and evaluates every clause on them.
    pub fn load(&mut self, data: &BitRows, rows: &[usize], bank: &ClauseBank) {
        assert!(
            rows.len() <= BLOCK,
            "a block holds at most {BLOCK} examples"
        );
        self.transpose(data, rows, bank.feature_words());
        let clauses = bank.clauses();
        self.fires.clear();
        self.fires.resize(clauses, 0);
        self.budget.clear();
        self.budget.resize(clauses, BUDGET);
        self.is_by_example.clear();
        self.is_by_example.resize(clauses, false);
        if self.included.len() != clauses {
            self.included = vec![STALE; clauses];
            self.slots = vec![0; clauses * PLACES];
        }
        for &j in &self.by_example {
            self.included[j as usize] = STALE;
        }
        self.by_example.clear();
        for j in 0..clauses {
            if self.included[j] == STALE {
                self.read_slots(bank, j);
            }
            self.set(j, self.valid);
        }
    }

    fn transpose(&mut self, data: &BitRows, rows: &[usize], fw: usize) {
        self.valid = u64::MAX >> (BLOCK - rows.len());
        self.literals.clear();
        self.literals.resize(2 * fw * BLOCK, 0);
        let (features, negations) = self.literals.split_at_mut(fw * BLOCK);
        transpose_into(rows.iter().map(|&i| &data.row(i)[..fw]), features);
        for (neg, &pos) in negations.iter_mut().zip(features.iter()) {
            *neg = !pos & self.valid;
        }
    }

    /// Evaluates a clause again, after its include bits changed while example `e` trained: for
    /// the examples after `e` only, the others being read already.
    pub fn refresh(&mut self, bank: &ClauseBank, clause: usize, e: usize) {
        if !self.is_by_example[clause] {
            self.read_slots(bank, clause);
            self.set(clause, self.valid & !(u64::MAX >> (BLOCK - 1 - e)));
        }
    }

    /// Example `e` of the block, whose features are `x`: every clause's output.
    pub fn outputs(&self, e: usize, bank: &ClauseBank, x: &[u64], fired: &mut Vec<bool>) {
        fired.clear();
        fired.extend(self.fires.iter().map(|&f| (f >> e) & 1 == 1));
        for &j in &self.by_example {
            fired[j as usize] = bank.fires(j as usize, x, true);
        }
    }

    /// Reads clause `j`'s included literals from its include words into its slots; more than
    /// [`PLACES`] leave it [`STALE`].
    fn read_slots(&mut self, bank: &ClauseBank, j: usize) {
        let slots = &mut self.slots[j * PLACES..][..PLACES];
        let mut n = 0;
        for (l, &word) in bank.include(j).iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                if n == PLACES {
                    self.included[j] = STALE;
                    return;
                }
                slots[n] = (l * BLOCK) as u16 + bits.trailing_zeros() as u16;
                bits &= bits - 1;
                n += 1;
            }
        }
        self.included[j] = n as u8;
    }

    /// Evaluates clause `j` on the examples `of` from its slots, or leaves it to be evaluated by
    /// example once its budget is spent.
    fn set(&mut self, j: usize, of: u64) {
        let n = self.included[j];
        let budget = &mut self.budget[j];
        if n == STALE || u32::from(n) > *budget {
            self.fires[j] = 0;
            self.is_by_example[j] = true;
            self.by_example.push(j as u32);
            return;
        }
        *budget -= u32::from(n);
        let slots = &self.slots[j * PLACES..][..usize::from(n)];
        self.fires[j] = slots
            .iter()
            .fold(of, |out, &s| out & self.literals[usize::from(s)]);
    }
}
