//! One image's patches, literal-major: for each literal of a clause bank's layout (features,
//! then their negations), one word per block of 64 patches. A clause's firing patches are then
//! the AND of its included literals' rows, each row a few contiguous words that the compiler
//! keeps in vector registers; most clauses reach zero after a few literals.
//!
//! Built straight from the image where its rows fit a word (a pixel literal's row is the image
//! rows it covers, shifted), so that the patches are never transposed bit by bit.

use crate::data::booleanize::{BitRows, words_for};

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PatchLiterals {
    /// Feature words of a patch (the bank's `fw`): literal `l·64 + k` is bit k of literal word l.
    fw: usize,
    /// Blocks of 64 patches.
    blocks: usize,
    patches: usize,
    /// `words[lit · blocks + b]`: literal `lit` of patches `64b..64b + 63`.
    words: Vec<u64>,
    /// Per block: which patches exist.
    valid: Vec<u64>,
}

impl PatchLiterals {
    /// Room for `patches` patches of `features` features; every literal false.
    pub(crate) fn new(features: usize, patches: usize) -> PatchLiterals {
        let (fw, blocks) = (words_for(features), patches.div_ceil(64));
        let valid = (0..blocks)
            .map(|b| match patches - b * 64 {
                n if n >= 64 => u64::MAX,
                n => (1u64 << n) - 1,
            })
            .collect();
        PatchLiterals {
            fw,
            blocks,
            patches,
            words: vec![0; 2 * fw * 64 * blocks],
            valid,
        }
    }

    pub(crate) fn blocks(&self) -> usize {
        self.blocks
    }

    /// The row of feature `f` (its negation when `negated`): a word per block of patches.
    pub(crate) fn row(&self, f: usize, negated: bool) -> &[u64] {
        let lit = self.literal(f, negated);
        &self.words[lit * self.blocks..(lit + 1) * self.blocks]
    }

    /// Feature `f`'s row, to be written (the negations follow from [`Self::negate`]).
    pub(crate) fn feature_mut(&mut self, f: usize) -> &mut [u64] {
        &mut self.words[f * self.blocks..(f + 1) * self.blocks]
    }

    /// Every feature from the patches' rows (any image shape), then the negations.
    pub(crate) fn fill_from_rows(&mut self, rows: &BitRows) {
        debug_assert_eq!(rows.len(), self.patches);
        let features = self.fw * 64 * self.blocks;
        self.words[..features].fill(0);
        for i in 0..rows.len() {
            let (b, bit) = (i / 64, i % 64);
            for (w, &word) in rows.row(i).iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let f = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    self.words[f * self.blocks + b] |= 1 << bit;
                }
            }
        }
        self.negate();
    }

    /// Writes every negation row as its feature row's complement over the existing patches.
    pub(crate) fn negate(&mut self) {
        let half = self.fw * 64 * self.blocks;
        let (features, negations) = self.words.split_at_mut(half);
        for (pos, neg) in features
            .chunks_exact(self.blocks)
            .zip(negations.chunks_exact_mut(self.blocks))
        {
            for ((n, p), v) in neg.iter_mut().zip(pos).zip(&self.valid) {
                *n = !p & v;
            }
        }
    }

    /// Where a clause with these include words (the bank's layout) fires, into `out` (a word
    /// per block); false, with `out` left undefined, when it fires on no patch. An empty clause
    /// fires everywhere.
    #[inline]
    pub(crate) fn fires(&self, include: &[u64], out: &mut [u64]) -> bool {
        self.fires_on(Included::new(include), out)
    }

    /// [`Self::fires`] for a clause given as literal indices ([`Self::literal`]).
    #[inline]
    pub(crate) fn fires_on(&self, literals: impl Iterator<Item = usize>, out: &mut [u64]) -> bool {
        // A row of up to 16 words is held in registers for the whole clause (a loop of known
        // length); longer rows (over 1,024 patches) loop over memory.
        macro_rules! by_blocks {
            ($($n:literal)*) => {
                match self.blocks {
                    $($n => self.and_rows::<$n>(literals, out),)*
                    _ => self.and_rows_any_length(literals, out),
                }
            };
        }
        by_blocks!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
    }

    #[inline(always)]
    fn and_rows<const B: usize>(
        &self,
        literals: impl Iterator<Item = usize>,
        out: &mut [u64],
    ) -> bool {
        let mut acc: [u64; B] = self.valid[..].try_into().expect("B blocks");
        let (rows, _) = self.words.as_chunks::<B>();
        let mut literals = literals.fuse();
        // Two literals between tests for an empty set: the test is the loop's critical path.
        while let Some(first) = literals.next() {
            let second = literals.next();
            for (a, w) in acc.iter_mut().zip(&rows[first]) {
                *a &= w;
            }
            if let Some(second) = second {
                for (a, w) in acc.iter_mut().zip(&rows[second]) {
                    *a &= w;
                }
            }
            if acc.iter().fold(0, |any, a| any | a) == 0 {
                return false;
            }
        }
        out.copy_from_slice(&acc);
        true
    }

    fn and_rows_any_length(&self, literals: impl Iterator<Item = usize>, out: &mut [u64]) -> bool {
        out.copy_from_slice(&self.valid);
        for lit in literals {
            let row = &self.words[lit * self.blocks..(lit + 1) * self.blocks];
            let mut any = 0;
            for (o, w) in out.iter_mut().zip(row) {
                *o &= w;
                any |= *o;
            }
            if any == 0 {
                return false;
            }
        }
        true
    }

    /// The literal index of feature `f`, or of its negation.
    pub(crate) fn literal(&self, f: usize, negated: bool) -> usize {
        f + usize::from(negated) * self.fw * 64
    }
}

/// The literal indices of a clause's include words: bit k of word l is literal `l·64 + k`.
struct Included<'a> {
    words: &'a [u64],
    word: usize,
    bits: u64,
}

impl<'a> Included<'a> {
    fn new(words: &'a [u64]) -> Included<'a> {
        Included {
            words,
            word: 0,
            bits: words.first().copied().unwrap_or(0),
        }
    }
}

impl Iterator for Included<'_> {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            self.word += 1;
            self.bits = *self.words.get(self.word)?;
        }
        let k = self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(self.word * 64 + k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::booleanize::BitRows;

    /// A clause's firing patches, read patch by patch.
    fn fires_by_rows(rows: &BitRows, include: &[u64], fw: usize) -> Vec<bool> {
        (0..rows.len())
            .map(|i| {
                let x = rows.row(i);
                (0..fw).all(|w| include[w] & !x[w] == 0 && include[fw + w] & x[w] == 0)
            })
            .collect()
    }

    #[test]
    fn a_clause_fires_where_every_included_literal_holds() {
        use rand::{RngExt, SeedableRng};
        let mut rng = crate::rng::FlintRng::seed_from_u64(3);
        for (features, patches) in [(5, 3), (70, 130), (136, 361), (64, 64), (3, 1100)] {
            let mut rows = BitRows::new(features, 2);
            for _ in 0..patches {
                let bits: Vec<bool> = (0..features).map(|_| rng.random::<f64>() < 0.7).collect();
                rows.push(&bits, 0);
            }
            let mut lits = PatchLiterals::new(features, patches);
            lits.fill_from_rows(&rows);
            let fw = words_for(features);
            let mut out = vec![0; lits.blocks()];
            for _ in 0..200 {
                // Two or three literals, so that some clauses fire somewhere and some nowhere.
                let mut include = vec![0u64; 2 * fw];
                for _ in 0..rng.random_range(0..4) {
                    let f = rng.random_range(0..features);
                    let half = usize::from(rng.random::<bool>());
                    include[half * fw + f / 64] |= 1 << (f % 64);
                }
                let expected = fires_by_rows(&rows, &include, fw);
                let fired = lits.fires(&include, &mut out);
                assert_eq!(fired, expected.iter().any(|&f| f));
                if fired {
                    let got: Vec<bool> = (0..patches)
                        .map(|i| out[i / 64] >> (i % 64) & 1 == 1)
                        .collect();
                    assert_eq!(got, expected);
                }
            }
        }
    }
}
