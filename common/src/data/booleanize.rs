//! Boolean inputs for Tsetlin Machines: packed rows and the booleanizers that make them.

use serde::{Deserialize, Serialize};

use crate::model::tm::bank::words_for;

/// Examples as packed bits (64 features a word), with their class labels.
#[derive(Debug, Clone, PartialEq)]
pub struct BitRows {
    features: usize,
    fw: usize,
    bits: Vec<u64>,
    pub labels: Vec<u32>,
    pub classes: usize,
}

impl BitRows {
    pub fn new(features: usize, classes: usize) -> BitRows {
        BitRows {
            features,
            fw: words_for(features),
            bits: Vec::new(),
            labels: Vec::new(),
            classes,
        }
    }

    pub fn features(&self) -> usize {
        self.features
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn row(&self, i: usize) -> &[u64] {
        &self.bits[i * self.fw..(i + 1) * self.fw]
    }

    pub fn push(&mut self, bits: &[bool], label: u32) {
        assert_eq!(bits.len(), self.features, "row width");
        let start = self.bits.len();
        self.bits.resize(start + self.fw, 0);
        for (i, &b) in bits.iter().enumerate() {
            self.bits[start + i / 64] |= u64::from(b) << (i % 64);
        }
        self.labels.push(label);
    }

    /// Appends a row given as packed words (bits past `features` must be zero).
    pub fn push_words(&mut self, words: &[u64], label: u32) {
        assert_eq!(words.len(), self.fw, "row width in words");
        self.bits.extend_from_slice(words);
        self.labels.push(label);
    }

    pub fn clear(&mut self) {
        self.bits.clear();
        self.labels.clear();
    }

    /// The first `n` rows.
    pub fn head(&self, n: usize) -> BitRows {
        let n = n.min(self.len());
        BitRows {
            bits: self.bits[..n * self.fw].to_vec(),
            labels: self.labels[..n].to_vec(),
            ..self.clone_empty()
        }
    }

    fn clone_empty(&self) -> BitRows {
        BitRows::new(self.features, self.classes)
    }
}

/// A fixed threshold. The papers differ: TPFL uses `pixel > 75`, FedTMOS `pixel ≥ 75`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Threshold {
    Above(f64),
    AtLeast(f64),
}

impl Threshold {
    pub fn apply(&self, v: f64) -> bool {
        match *self {
            Threshold::Above(t) => v > t,
            Threshold::AtLeast(t) => v >= t,
        }
    }
}

/// Booleanizes byte images (row-major, `pixels` per image) with a fixed threshold.
pub fn threshold_images(
    pixels: &[u8],
    per_image: usize,
    labels: &[u32],
    classes: usize,
    t: Threshold,
) -> BitRows {
    let mut rows = BitRows::new(per_image, classes);
    let mut bits = vec![false; per_image];
    for (img, &y) in pixels.chunks_exact(per_image).zip(labels) {
        for (b, &p) in bits.iter_mut().zip(img) {
            *b = t.apply(f64::from(p));
        }
        rows.push(&bits, y);
    }
    rows
}

/// Thermometer encoding: value v becomes `levels` bits, bit i set when v exceeds the i-th of
/// `levels` evenly spaced cut points in (min, max).
pub fn thermometer(v: f64, min: f64, max: f64, levels: usize, out: &mut Vec<bool>) {
    for i in 1..=levels {
        let cut = min + (max - min) * i as f64 / (levels + 1) as f64;
        out.push(v > cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_differ_exactly_at_the_cut() {
        assert!(!Threshold::Above(75.0).apply(75.0));
        assert!(Threshold::AtLeast(75.0).apply(75.0));
        assert!(Threshold::Above(75.0).apply(76.0));
        let rows = threshold_images(&[75, 76, 0, 200], 2, &[1, 0], 2, Threshold::Above(75.0));
        assert_eq!(rows.row(0), &[0b10]);
        assert_eq!(rows.row(1), &[0b10]);
        assert_eq!(rows.labels, vec![1, 0]);
    }

    #[test]
    fn rows_pack_past_one_word() {
        let mut r = BitRows::new(70, 2);
        let mut bits = vec![false; 70];
        bits[0] = true;
        bits[69] = true;
        r.push(&bits, 1);
        assert_eq!(r.row(0), &[1, 1 << 5]);
        assert_eq!(r.head(5).len(), 1);
    }

    #[test]
    fn thermometer_is_monotone() {
        let mut out = Vec::new();
        thermometer(0.5, 0.0, 1.0, 3, &mut out);
        assert_eq!(out, vec![true, false, false]);
        out.clear();
        thermometer(1.0, 0.0, 1.0, 3, &mut out);
        assert_eq!(out, vec![true, true, true]);
    }
}
