//! Whole machines as compact, versioned bytes, for checkpoints: every automaton state, every
//! weight, the class counts and the hyper-parameters. Little-endian throughout.
//!
//! Layout: `b"FLTM"`, format version (u32), kind (u8: 1 multi-class, 2 coalesced), then the
//! hyper-parameters, features, classes, and per bank its planes, then weights and counts.

use super::bank::ClauseBank;
use super::coalesced::CoalescedTm;
use super::multiclass::MultiClassTm;
use super::{NegativeSampling, TmHyper};

const MAGIC: &[u8; 4] = b"FLTM";
const VERSION: u32 = 1;
const MULTICLASS: u8 = 1;
const COALESCED: u8 = 2;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn words(&mut self, w: &[u64]) {
        self.u64(w.len() as u64);
        w.iter().for_each(|&x| self.u64(x));
    }
    fn header(&mut self, kind: u8, h: &TmHyper, features: usize, classes: usize) {
        self.0.extend_from_slice(MAGIC);
        self.u32(VERSION);
        self.u8(kind);
        self.u64(h.clauses as u64);
        self.u32(h.t as u32);
        self.f64(h.s);
        self.u8(h.state_bits as u8);
        self.u8(u8::from(h.weighted));
        self.u8(u8::from(h.boost_true_positive));
        self.u8(match h.negative_sampling {
            NegativeSampling::Uniform => 0,
            NegativeSampling::Focused => 1,
            NegativeSampling::All => 2,
        });
        self.u64(features as u64);
        self.u64(classes as u64);
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("checkpoint is cut short".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn len(&mut self, limit: usize) -> Result<usize, String> {
        let n = self.u64()? as usize;
        if n > limit {
            return Err(format!(
                "checkpoint claims {n} entries, more than the {limit} bytes left"
            ));
        }
        Ok(n)
    }
    fn words(&mut self) -> Result<Vec<u64>, String> {
        let n = self.len(self.0.len() / 8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn header(&mut self, kind: u8) -> Result<(TmHyper, usize, usize), String> {
        if self.take(4)? != MAGIC {
            return Err("not a Flint Tsetlin Machine checkpoint".into());
        }
        let version = self.u32()?;
        if version != VERSION {
            return Err(format!(
                "checkpoint format version {version}, this build reads {VERSION}"
            ));
        }
        let k = self.u8()?;
        if k != kind {
            return Err(format!(
                "checkpoint holds machine kind {k}, expected {kind}"
            ));
        }
        let h = TmHyper {
            clauses: self.u64()? as usize,
            t: self.u32()? as i32,
            s: self.f64()?,
            state_bits: usize::from(self.u8()?),
            weighted: self.u8()? == 1,
            boost_true_positive: self.u8()? == 1,
            negative_sampling: match self.u8()? {
                0 => NegativeSampling::Uniform,
                1 => NegativeSampling::Focused,
                2 => NegativeSampling::All,
                other => return Err(format!("unknown negative sampling {other}")),
            },
        };
        let (features, classes) = (self.u64()? as usize, self.u64()? as usize);
        if !(2..=16).contains(&h.state_bits) || h.clauses == 0 || classes < 2 || features == 0 {
            return Err("checkpoint header is out of range".into());
        }
        Ok((h, features, classes))
    }
    fn end(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} bytes after the end of the checkpoint",
                self.0.len()
            ))
        }
    }
}

impl MultiClassTm {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.header(MULTICLASS, self.hyper(), self.features(), self.classes());
        for c in 0..self.classes() {
            w.words(&self.bank(c).cell_major_planes());
            w.words(
                &self
                    .class_weights(c)
                    .iter()
                    .map(|&x| u64::from(x))
                    .collect::<Vec<_>>(),
            );
        }
        w.words(self.class_counts());
        w.0
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<MultiClassTm, String> {
        let mut r = Reader(bytes);
        let (h, features, classes) = r.header(MULTICLASS)?;
        let mut banks = Vec::with_capacity(classes);
        let mut weights = Vec::with_capacity(classes);
        for _ in 0..classes {
            banks.push(ClauseBank::from_cell_major_planes(
                h.clauses,
                features,
                h.state_bits,
                r.words()?,
            )?);
            let w: Vec<u32> = r.words()?.into_iter().map(|x| x as u32).collect();
            weights.push(w);
        }
        let counts = r.words()?;
        r.end()?;
        MultiClassTm::from_parts(h, banks, weights, counts)
    }
}

impl CoalescedTm {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.header(
            COALESCED,
            self.hyper(),
            self.bank().features(),
            self.classes(),
        );
        w.words(&self.bank().cell_major_planes());
        for c in 0..self.classes() {
            // Signed weights as their two's-complement bits.
            w.words(
                &self
                    .class_weights(c)
                    .iter()
                    .map(|&x| x as u32 as u64)
                    .collect::<Vec<_>>(),
            );
        }
        w.words(self.class_counts());
        w.0
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<CoalescedTm, String> {
        let mut r = Reader(bytes);
        let (h, features, classes) = r.header(COALESCED)?;
        let bank =
            ClauseBank::from_cell_major_planes(h.clauses, features, h.state_bits, r.words()?)?;
        let weights: Vec<Vec<i32>> = (0..classes)
            .map(|_| Ok(r.words()?.into_iter().map(|x| x as u32 as i32).collect()))
            .collect::<Result<_, String>>()?;
        let counts = r.words()?;
        r.end()?;
        CoalescedTm::from_parts(h, bank, weights, counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::booleanize::BitRows;
    use crate::model::tm::FeedbackMasks;
    use crate::rng::derive_rng;
    use rand::RngExt;

    fn data() -> BitRows {
        let mut rng = derive_rng(1, "ckpt", 0);
        let mut rows = BitRows::new(70, 3);
        for _ in 0..300 {
            let bits: Vec<bool> = (0..70).map(|_| rng.random::<bool>()).collect();
            let y = u32::from(bits[0]) + u32::from(bits[1] && bits[2]);
            rows.push(&bits, y);
        }
        rows
    }

    fn hyper() -> TmHyper {
        TmHyper {
            weighted: true,
            ..crate::model::tm::testing::hyper(10, 10, 3.0)
        }
    }

    #[test]
    fn multiclass_round_trips_and_keeps_training_identically() {
        let d = data();
        let mut rng = derive_rng(2, "ckpt", 0);
        let mut masks = FeedbackMasks::new(3.0, &mut rng);
        let mut tm = MultiClassTm::new(hyper(), 70, 3);
        tm.fit_epoch(&d, &mut masks, &mut rng);
        let mut back = MultiClassTm::from_bytes(&tm.to_bytes()).unwrap();
        assert_eq!(back, tm);
        // Same automata, same random streams: the next epoch is identical too.
        let (mut r1, mut m1) = (rng.clone(), masks.clone());
        tm.fit_epoch(&d, &mut masks, &mut rng);
        back.fit_epoch(&d, &mut m1, &mut r1);
        assert_eq!(back, tm);
    }

    #[test]
    fn every_negative_sampling_survives_the_round_trip() {
        for negative_sampling in [
            NegativeSampling::Uniform,
            NegativeSampling::Focused,
            NegativeSampling::All,
        ] {
            let h = TmHyper {
                negative_sampling,
                ..hyper()
            };
            let tm = MultiClassTm::new(h, 70, 3);
            let back = MultiClassTm::from_bytes(&tm.to_bytes()).unwrap();
            assert_eq!(back.hyper().negative_sampling, negative_sampling);
        }
    }

    #[test]
    fn coalesced_round_trips_with_negative_weights() {
        let d = data();
        let mut rng = derive_rng(3, "ckpt", 0);
        let mut masks = FeedbackMasks::new(3.0, &mut rng);
        let mut tm = CoalescedTm::new(hyper(), 70, 3, &mut rng);
        tm.fit_epoch(&d, &mut masks, &mut rng);
        assert!((0..3).any(|c| tm.class_weights(c).iter().any(|&w| w < 0)));
        assert_eq!(CoalescedTm::from_bytes(&tm.to_bytes()).unwrap(), tm);
    }

    #[test]
    fn damaged_checkpoints_are_refused_with_the_reason() {
        let tm = MultiClassTm::new(hyper(), 70, 3);
        let bytes = tm.to_bytes();
        assert!(
            MultiClassTm::from_bytes(&bytes[..bytes.len() - 3])
                .unwrap_err()
                .contains("cut short")
        );
        assert!(
            MultiClassTm::from_bytes(b"nope")
                .unwrap_err()
                .contains("not a Flint")
        );
        let mut v2 = bytes.clone();
        v2[4] = 2;
        assert!(
            MultiClassTm::from_bytes(&v2)
                .unwrap_err()
                .contains("version 2")
        );
        assert!(
            CoalescedTm::from_bytes(&bytes)
                .unwrap_err()
                .contains("expected 2")
        );
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(
            MultiClassTm::from_bytes(&extra)
                .unwrap_err()
                .contains("after the end")
        );
    }
}
