//! A class's include bits as an adaptive arithmetic code (beside the weights'
//! `weight_code`). FedTMOS's machines include about a quarter of their literals, clause after
//! clause, and a bit says much about its neighbours: each bit is coded with counts of its own
//! context, (literal, the bit before it in the clause, the bit of its complement when that came
//! first: `x` before `¬x`). On Fashion-MNIST's uploads that is 0.624 bits per include bit
//! (`scripts/wire-bytes.py include`).
//! How many bits to read is the run's (clauses × literals), never the sender's.

use std::ops::Range;

use arithmetic_coding::{Decoder, Model};
use bitstream_io::{BigEndian, BitReader};

use super::weight_code::encode_symbols;

use crate::model::tm::parts::IncludeBits;

/// Counts are halved past this total, so the denominator stays within the coder's precision.
const MAX_TOTAL: u32 = 1 << 16;

/// The bits of `clauses` clauses of `literals` literals as an arithmetic code (padding bits
/// beyond them are not coded, and read back as 0).
pub fn encode(bits: &IncludeBits, clauses: usize, literals: usize) -> Vec<u8> {
    let bit = |i: usize| u32::from(bits.0.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1));
    encode_symbols(
        IncludeModel::new(literals),
        (0..clauses * literals).map(bit),
    )
}

/// The include bits read from `code`; refused unless `code` is exactly what [`encode`] writes
/// for them (no trailing or altered bytes).
pub fn decode(code: &[u8], clauses: usize, literals: usize) -> Result<IncludeBits, String> {
    let mut decoder = Decoder::new(
        IncludeModel::new(literals),
        BitReader::endian(code, BigEndian),
    );
    let mut bits = vec![0u8; IncludeBits::bytes_for(clauses, literals)];
    for i in 0..clauses * literals {
        match decoder.decode() {
            Ok(Some(1)) => bits[i / 8] |= 1 << (i % 8),
            Ok(Some(_)) => {}
            _ => return Err("the include code ends early".to_string()),
        }
    }
    let bits = IncludeBits(bits);
    if encode(&bits, clauses, literals) != code {
        return Err(
            "the include code is not the one its bits have (trailing or altered bytes)".into(),
        );
    }
    Ok(bits)
}

#[derive(Debug, Clone)]
struct IncludeModel {
    literals: usize,
    /// Per context, the counts of 0 and of 1 (KT: each starts at 1 and grows by 2).
    counts: Vec<[u32; 2]>,
    /// The clause being read, so far.
    row: Vec<u8>,
    /// The literal the next bit belongs to.
    at: usize,
}

impl IncludeModel {
    fn new(literals: usize) -> Self {
        IncludeModel {
            literals,
            counts: vec![[1, 1]; 9 * literals],
            row: vec![0; literals],
            at: 0,
        }
    }

    /// (literal, previous bit or none, complement's bit or none).
    fn context(&self) -> usize {
        let l = self.at;
        let prev = if l == 0 { 2 } else { self.row[l - 1] as usize };
        let half = self.literals / 2;
        let comp = if l >= half && half > 0 {
            self.row[l - half] as usize
        } else {
            2
        };
        9 * l + 3 * prev + comp
    }
}

#[derive(Debug, thiserror::Error)]
#[error("an include bit is 0 or 1")]
struct NotABit;

impl Model for IncludeModel {
    type Symbol = u32;
    type ValueError = NotABit;
    type B = u64;

    fn probability(&self, symbol: Option<&u32>) -> Result<Range<u64>, NotABit> {
        let [zeros, ones] = self.counts[self.context()];
        match symbol {
            Some(0) => Ok(0..u64::from(zeros)),
            Some(1) => Ok(u64::from(zeros)..u64::from(zeros + ones)),
            _ => Err(NotABit),
        }
    }

    fn denominator(&self) -> u64 {
        let [zeros, ones] = self.counts[self.context()];
        u64::from(zeros + ones)
    }

    fn max_denominator(&self) -> u64 {
        u64::from(MAX_TOTAL)
    }

    fn symbol(&self, value: u64) -> Option<u32> {
        Some(u32::from(
            value >= u64::from(self.counts[self.context()][0]),
        ))
    }

    fn update(&mut self, symbol: Option<&u32>) {
        let Some(&bit) = symbol else { return };
        let c = self.context();
        let counts = &mut self.counts[c];
        counts[bit as usize] += 2;
        if counts[0] + counts[1] > MAX_TOTAL {
            counts.iter_mut().for_each(|n| *n = n.div_ceil(2));
        }
        self.row[self.at] = bit as u8;
        self.at = (self.at + 1) % self.literals.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn random_bits(clauses: usize, literals: usize, p: f64, seed: u64) -> IncludeBits {
        let mut rng = crate::rng::FlintRng::seed_from_u64(seed);
        let mut bits = vec![0u8; IncludeBits::bytes_for(clauses, literals)];
        for i in 0..clauses * literals {
            if rng.random_bool(p) {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        IncludeBits(bits)
    }

    /// The wire's bytes, pinned: both ends must write the same code (the crate is pinned too).
    #[test]
    fn known_bits_have_their_known_code() {
        let bits = IncludeBits(vec![0b1010_0110, 0b0000_0001, 0b1111_0000]);
        assert_eq!(crate::hex::encode(&encode(&bits, 4, 6)), "65502c00");
    }

    #[test]
    fn bits_round_trip_and_sparse_ones_cost_near_their_entropy() {
        for (clauses, literals, p) in [(1, 2, 0.5), (3, 10, 0.0), (7, 13, 1.0), (200, 142, 0.1)] {
            let bits = random_bits(clauses, literals, p, 9);
            let code = encode(&bits, clauses, literals);
            assert_eq!(decode(&code, clauses, literals).unwrap(), bits);
        }
        let bits = random_bits(200, 142, 0.1, 4);
        let code = encode(&bits, 200, 142);
        // H(0.1) = 0.469 bits a bit: 1,665 B for 28,400 bits, against 3,550 B plain.
        assert!(code.len() < 1_900, "{} B", code.len());
    }

    #[test]
    fn padding_bits_are_not_coded_and_altered_codes_are_refused() {
        let mut bits = random_bits(3, 5, 0.5, 1);
        let code = encode(&bits, 3, 5);
        bits.0[1] |= 0x80; // bit 15: beyond 3 × 5
        assert_eq!(encode(&bits, 3, 5), code);
        let mut longer = code.clone();
        longer.push(0);
        assert!(
            decode(&longer, 3, 5)
                .unwrap_err()
                .contains("trailing or altered")
        );
        let mut rng = crate::rng::FlintRng::seed_from_u64(2);
        let good = random_bits(50, 20, 0.3, 2);
        let good_code = encode(&good, 50, 20);
        for _ in 0..500 {
            let mut bad = good_code.clone();
            let bit = rng.random_range(0..8 * bad.len());
            bad[bit / 8] ^= 1 << (bit % 8);
            if let Ok(b) = decode(&bad, 50, 20) {
                assert_ne!(b, good);
                assert_eq!(encode(&b, 50, 20), bad);
            }
        }
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let _ = decode(&junk, 10, 6);
        }
    }
}
