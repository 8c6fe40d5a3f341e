//! Clause weights as an adaptive arithmetic code. A TPFL update carries one
//! class's weights, a few hundred integers spread over a few hundred values (order-0 entropy
//! about 8 bits per weight, 7 with `tpfl.delta`), which zig-zag varints write in about 12.
//!
//! Each weight is written as its magnitude class (zero, one, or its bit length with the bit
//! below the top one), coded with counts that adapt as the vector goes by, then its sign (when
//! not zero; adaptive as well) and its remaining low bits as they are. Both sides start from
//! the same counts, so only the code travels: a table of frequencies would cost more than the
//! adaptation does over 300 values. How many weights to read is the run's, never the sender's.
//!
//! The arithmetic coder is the `arithmetic-coding` crate's; the model (what is counted) is ours.

use std::ops::Range;

use arithmetic_coding::{Decoder, Encoder, Model};
use bitstream_io::{BigEndian, BitReader, BitWrite, BitWriter};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How clause weights are written on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WeightCoding {
    /// Adaptive arithmetic coding: within a few percent of the values' order-0 entropy.
    #[default]
    Arithmetic,
    /// Zig-zag varints (`repeated sint32`): a byte or two per weight.
    Varint,
}

/// Magnitude classes: 0, 1, then two per bit length 2..=32 (the bit below the top one).
const CLASSES: usize = 64;
/// A seen symbol's count grows by this against its initial count of 1, so the first
/// occurrences teach the model fast. An initial count of 1/16 of a step lies between the 1/10
/// and 1/50 simulated on TPFL's updates (8.35 and 8.36 bits per weight; 1/2: 8.54;
/// `scripts/wire-bytes.py simulate`); the code as built spends 8.36 there, flush included.
const STEP: u32 = 16;
/// Counts are halved past this total: the denominator stays within the coder's precision.
const MAX_TOTAL: u32 = 1 << 16;
/// Low bits travel in uniform chunks of at most this many.
const CHUNK: u32 = 16;

/// The weights as an arithmetic code.
pub fn encode(weights: &[i32]) -> Vec<u8> {
    encode_symbols(WeightModel::new(), weights.iter().flat_map(|&w| symbols(w)))
}

/// `symbols` coded under `model`, the last byte padded with zeros. The callers' symbols are
/// inside their model's alphabet and a Vec takes every write: nothing here can fail.
pub(super) fn encode_symbols<M>(model: M, symbols: impl Iterator<Item = u32>) -> Vec<u8>
where
    M: Model<Symbol = u32, B = u64>,
{
    let mut bits = BitWriter::endian(Vec::new(), BigEndian);
    let mut encoder = Encoder::new(model, &mut bits);
    for symbol in symbols {
        encoder
            .encode(Some(&symbol))
            .expect("symbols are in their model's alphabet");
    }
    encoder.flush().expect("a Vec takes every write");
    bits.byte_align().expect("a Vec takes every write");
    bits.into_writer()
}

/// `count` weights read from `code`; refused unless `code` is exactly what `encode` writes for
/// them (no trailing or altered bytes), or a weight is outside `i32`. An arithmetic code does
/// not end itself: read as more weights than it was written with, it may decode to them (the
/// zero bits past its end are a valid tail), which is why the count must be the run's.
pub fn decode(code: &[u8], count: usize) -> Result<Vec<i32>, String> {
    let mut decoder = Decoder::new(WeightModel::new(), BitReader::endian(code, BigEndian));
    let mut next = || match decoder.decode() {
        Ok(Some(symbol)) => Ok(symbol),
        _ => Err("the weight code ends early".to_string()),
    };
    let mut weights = Vec::with_capacity(count);
    for _ in 0..count {
        let class = next()?;
        if class == 0 {
            weights.push(0);
            continue;
        }
        let negative = next()? == 1;
        let mut low = 0u32;
        let mut left = low_bits(class);
        while left > 0 {
            let chunk = left.min(CHUNK);
            low = (low << chunk) | next()?;
            left -= chunk;
        }
        weights.push(signed(magnitude(class, low), negative)?);
    }
    if encode(&weights) != code {
        return Err(format!(
            "the weight code is not the one its {count} weights have (trailing or altered bytes)"
        ));
    }
    Ok(weights)
}

/// One weight's symbols: its magnitude class, then (unless zero) its sign and its low bits.
fn symbols(w: i32) -> impl Iterator<Item = u32> {
    let m = w.unsigned_abs();
    let class = class_of(m);
    let extra = low_bits(class);
    let low = m & ((1u32 << extra) - 1);
    let chunks = extra.div_ceil(CHUNK);
    let sign = (class != 0).then_some(u32::from(w < 0));
    let low_chunks = (0..chunks).map(move |i| {
        let done = i * CHUNK;
        let width = (extra - done).min(CHUNK);
        (low >> (extra - done - width)) & ((1u32 << width) - 1)
    });
    std::iter::once(class).chain(sign).chain(low_chunks)
}

fn class_of(m: u32) -> u32 {
    if m < 2 {
        return m;
    }
    let k = u32::BITS - m.leading_zeros();
    2 + 2 * (k - 2) + ((m >> (k - 2)) & 1)
}

/// Bits of a magnitude below its class's two top bits.
fn low_bits(class: u32) -> u32 {
    if class < 2 { 0 } else { (class - 2) / 2 }
}

fn magnitude(class: u32, low: u32) -> u64 {
    if class < 2 {
        return u64::from(class);
    }
    let extra = low_bits(class);
    let half = u64::from((class - 2) % 2);
    (1u64 << (extra + 1)) | (half << extra) | u64::from(low)
}

fn signed(m: u64, negative: bool) -> Result<i32, String> {
    let v = if negative { -(m as i64) } else { m as i64 };
    i32::try_from(v).map_err(|_| format!("weight {v} is outside the 32-bit range"))
}

/// Adaptive counts over `N` symbols, each starting at 1.
#[derive(Debug, Clone)]
struct Counts<const N: usize> {
    counts: [u32; N],
    total: u32,
}

impl<const N: usize> Counts<N> {
    fn new() -> Self {
        Counts {
            counts: [1; N],
            total: N as u32,
        }
    }

    fn range(&self, symbol: u32) -> Option<Range<u32>> {
        let s = symbol as usize;
        let count = *self.counts.get(s)?;
        let low: u32 = self.counts[..s].iter().sum();
        Some(low..low + count)
    }

    fn symbol_at(&self, value: u32) -> u32 {
        let mut end = 0;
        for (s, &c) in self.counts.iter().enumerate() {
            end += c;
            if value < end {
                return s as u32;
            }
        }
        N as u32 - 1
    }

    fn add(&mut self, symbol: u32) {
        self.counts[symbol as usize] += STEP;
        self.total += STEP;
        if self.total > MAX_TOTAL {
            self.counts.iter_mut().for_each(|c| *c = c.div_ceil(2));
            self.total = self.counts.iter().sum();
        }
    }
}

/// What the next symbol is.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Class,
    Sign { low_bits: u32 },
    Low { left: u32 },
}

#[derive(Debug, Clone)]
struct WeightModel {
    classes: Counts<CLASSES>,
    signs: Counts<2>,
    phase: Phase,
}

impl WeightModel {
    fn new() -> Self {
        WeightModel {
            classes: Counts::new(),
            signs: Counts::new(),
            phase: Phase::Class,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("symbol {0} is outside its alphabet")]
struct OutsideAlphabet(u32);

impl Model for WeightModel {
    type Symbol = u32;
    type ValueError = OutsideAlphabet;
    type B = u64;

    fn probability(&self, symbol: Option<&u32>) -> Result<Range<u64>, OutsideAlphabet> {
        // No end-of-stream symbol: the run says how many weights there are.
        let &s = symbol.ok_or(OutsideAlphabet(u32::MAX))?;
        let range = match self.phase {
            Phase::Class => self.classes.range(s),
            Phase::Sign { .. } => self.signs.range(s),
            Phase::Low { left } => (s < 1 << left.min(CHUNK)).then_some(s..s + 1),
        };
        let range = range.ok_or(OutsideAlphabet(s))?;
        Ok(u64::from(range.start)..u64::from(range.end))
    }

    fn denominator(&self) -> u64 {
        u64::from(match self.phase {
            Phase::Class => self.classes.total,
            Phase::Sign { .. } => self.signs.total,
            Phase::Low { left } => 1 << left.min(CHUNK),
        })
    }

    fn max_denominator(&self) -> u64 {
        u64::from(MAX_TOTAL.max(1 << CHUNK))
    }

    fn symbol(&self, value: u64) -> Option<u32> {
        let value = u32::try_from(value).unwrap_or(u32::MAX);
        Some(match self.phase {
            Phase::Class => self.classes.symbol_at(value),
            Phase::Sign { .. } => self.signs.symbol_at(value),
            Phase::Low { left } => value.min((1 << left.min(CHUNK)) - 1),
        })
    }

    fn update(&mut self, symbol: Option<&u32>) {
        let Some(&s) = symbol else { return };
        self.phase = match self.phase {
            Phase::Class => {
                self.classes.add(s);
                match low_bits(s) {
                    _ if s == 0 => Phase::Class,
                    low_bits => Phase::Sign { low_bits },
                }
            }
            Phase::Sign { low_bits } => {
                self.signs.add(s);
                if low_bits == 0 {
                    Phase::Class
                } else {
                    Phase::Low { left: low_bits }
                }
            }
            Phase::Low { left } if left > CHUNK => Phase::Low { left: left - CHUNK },
            Phase::Low { .. } => Phase::Class,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn round_trip(weights: &[i32]) -> Vec<u8> {
        let code = encode(weights);
        assert_eq!(decode(&code, weights.len()).unwrap(), weights);
        code
    }

    /// The wire's bytes, pinned: both ends must write the same code (the crate is pinned too).
    #[test]
    fn a_known_vector_has_its_known_code() {
        let code = encode(&[0, 1, -1, 5, 300, -70_000, 5, 5]);
        assert_eq!(crate::hex::encode(&code), "00dbd54a4f904f0a7300");
    }

    #[test]
    fn every_magnitude_class_round_trips() {
        let mut edges = vec![0, 1, -1, 2, -2, 3, i32::MAX, i32::MIN, i32::MIN + 1];
        for k in 1..31 {
            let p = 1i32 << k;
            edges.extend([p - 1, p, p + 1, -(p - 1), -p, -(p + 1), p + (p >> 1)]);
        }
        round_trip(&edges);
        round_trip(&[]);
        round_trip(&[0; 1000]);
    }

    #[test]
    fn weights_spread_like_tpfls_cost_near_their_entropy() {
        // A TPFL-like update: 300 magnitudes around 60, signs 60/40.
        let mut rng = crate::rng::FlintRng::seed_from_u64(7);
        let weights: Vec<i32> = (0..300)
            .map(|_| {
                let m: i32 =
                    rng.random_range(0..40) + rng.random_range(0..40) + rng.random_range(0..40);
                if rng.random_bool(0.4) { -m } else { m }
            })
            .collect();
        let code = round_trip(&weights);
        let varint: usize = weights
            .iter()
            .map(|&w| {
                let z = ((w << 1) ^ (w >> 31)) as u32;
                (u32::BITS - z.leading_zeros()).max(1).div_ceil(7) as usize
            })
            .sum();
        let mut counts = std::collections::BTreeMap::new();
        weights
            .iter()
            .for_each(|w| *counts.entry(w).or_insert(0usize) += 1);
        let n = weights.len() as f64;
        let entropy_bytes: f64 = counts
            .values()
            .map(|&c| -(c as f64) * (c as f64 / n).log2())
            .sum::<f64>()
            / 8.0;
        // The empirical entropy of 300 draws from ~120 values is below the source's; the code
        // must still beat varints by a wide margin and stay near the source's entropy.
        assert!(
            code.len() < varint * 3 / 4,
            "{} B against {varint} B",
            code.len()
        );
        assert!(
            (code.len() as f64) < 1.25 * entropy_bytes,
            "{} B against {entropy_bytes:.0} B",
            code.len()
        );
    }

    #[test]
    fn a_code_with_bytes_added_removed_or_changed_is_refused() {
        let weights: Vec<i32> = (0..300).map(|i| (i * 37 % 200) - 80).collect();
        let code = encode(&weights);
        let mut longer = code.clone();
        longer.push(0);
        assert!(
            decode(&longer, 300)
                .unwrap_err()
                .contains("trailing or altered")
        );
        assert!(decode(&code[..code.len() - 1], 300).is_err());
        let mut changed = code.clone();
        changed[code.len() / 2] ^= 0x10;
        assert_ne!(decode(&changed, 300).ok(), Some(weights.clone()));
        // Read as more weights than it holds, a code is refused or is those weights' own code:
        // the count is the run's, and every count has one code per vector.
        for count in 301..310 {
            if let Ok(more) = decode(&code, count) {
                assert_eq!((&more[..300], encode(&more)), (&weights[..], code.clone()));
            }
        }
    }

    #[test]
    fn flipped_bits_in_a_valid_code_never_panic_the_decoder() {
        let mut rng = crate::rng::FlintRng::seed_from_u64(5);
        let weights: Vec<i32> = (0..300).map(|_| rng.random_range(-300..300)).collect();
        let code = encode(&weights);
        for _ in 0..2_000 {
            let mut bad = code.clone();
            for _ in 0..rng.random_range(1..4) {
                let bit = rng.random_range(0..8 * bad.len());
                bad[bit / 8] ^= 1 << (bit % 8);
            }
            if let Ok(w) = decode(&bad, 300) {
                assert_eq!(encode(&w), bad);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic_the_decoder() {
        let mut rng = crate::rng::FlintRng::seed_from_u64(3);
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            for count in [0, 1, 10, 300] {
                if let Ok(w) = decode(&bytes, count) {
                    assert_eq!(w.len(), count);
                    assert_eq!(encode(&w), bytes);
                }
            }
        }
    }
}
