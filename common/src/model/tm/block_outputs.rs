//! Clause outputs of a block of up to 64 training examples, computed together and kept exact
//! while the block trains.
//!
//! A trained clause includes a few dozen of its 2·features literals, and feedback changes the
//! include bits of a few clauses per example. So rather than reading every clause's include words
//! for every example, the block's examples are transposed (one word per literal, a bit per
//! example), each clause's outputs for the whole block are the AND of its included literals'
//! words, and a clause whose include bits change is evaluated again for the block. Outputs read
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
}

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
        self.by_example.clear();
        for j in 0..clauses {
            self.set(bank, j, self.valid);
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
            self.set(bank, clause, self.valid & !(u64::MAX >> (BLOCK - 1 - e)));
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

    /// Evaluates clause `j` on the examples `of`, or leaves it to be evaluated by example.
    fn set(&mut self, bank: &ClauseBank, j: usize, of: u64) {
        match Self::evaluate(&self.literals, bank.include(j), of, &mut self.budget[j]) {
            Some(fires) => self.fires[j] = fires,
            None => {
                self.fires[j] = 0;
                self.is_by_example[j] = true;
                self.by_example.push(j as u32);
            }
        }
    }

    /// Which of the examples `of` a clause with these include words fires on; `None` once
    /// `budget` literal reads are spent.
    fn evaluate(literals: &[u64], include: &[u64], of: u64, budget: &mut u32) -> Option<u64> {
        if of == 0 {
            return Some(0);
        }
        let mut out = of;
        for (l, &word) in include.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                out &= literals[l * BLOCK + b];
                *budget = budget.checked_sub(1)?;
            }
            if out == 0 {
                return Some(0);
            }
        }
        Some(out)
    }
}
