//! A Tsetlin Machine's classes as federations exchange them (FedTMOS, FedTM): per class its
//! clause weights, include bits and samples; a machine is rebuilt from them with
//! `MultiClassTm::rebuild`.

use std::collections::BTreeMap;

/// A class's include bits: per clause, one bit per literal (features, then negations),
/// little-endian, clause after clause (the layout of `MultiClassTm::include_bits`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IncludeBits(pub Vec<u8>);

impl IncludeBits {
    /// The literals included by either.
    pub fn or(&mut self, other: &IncludeBits) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        self.0.iter_mut().zip(&other.0).for_each(|(a, b)| *a |= b);
    }

    /// Bytes of one class's bits for `clauses` clauses of `literals` literals.
    pub fn bytes_for(clauses: usize, literals: usize) -> usize {
        (clauses * literals).div_ceil(8)
    }
}

/// One class of a machine: clause weights θ_c, include bits, and the samples n_c it learned
/// from (0 in a server model).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassParts {
    pub weights: Vec<u32>,
    pub include: IncludeBits,
    pub samples: u64,
}

/// The classes of a machine that are exchanged; a class left out votes 0.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TmParts {
    pub classes: BTreeMap<u32, ClassParts>,
}

impl TmParts {
    /// n_j: the samples over all its classes (saturating: counts come from clients).
    pub fn samples(&self) -> u64 {
        self.classes
            .values()
            .fold(0u64, |n, c| n.saturating_add(c.samples))
    }
}

/// FedTMOS's upload (§4.2.1): the classes a client holds and its `GiniIndex` (Σ p²).
#[derive(Debug, Clone, PartialEq)]
pub struct TmUpload {
    pub parts: TmParts,
    pub gini_index: f64,
}
