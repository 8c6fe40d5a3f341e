//! Boolean inputs for Tsetlin Machines: packed rows and the booleanizers that make them.

use serde::{Deserialize, Serialize};

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

    /// The rows at `indices`, in that order (an index may repeat).
    pub fn select(&self, indices: &[usize]) -> BitRows {
        let mut out = self.clone_empty();
        out.bits.reserve(indices.len() * self.fw);
        out.labels.reserve(indices.len());
        for &i in indices {
            out.bits.extend_from_slice(self.row(i));
            out.labels.push(self.labels[i]);
        }
        out
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

/// `data.binarize`: which way byte images become bits.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum BinarizeKind {
    /// A pixel above `data.threshold` is 1 (TPFL's).
    #[default]
    Threshold,
    /// OpenCV's adaptive Gaussian threshold (FedTMOS's on Fashion-MNIST).
    AdaptiveGaussian,
}

/// `data.booleanize`: the code a table's values become bits by.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum TableCode {
    /// The thermometer code, the only one.
    #[default]
    Thermometer,
}

/// How byte images become bits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Binarize {
    Threshold(Threshold),
    /// OpenCV's adaptive Gaussian threshold ([`adaptive_gaussian`]).
    AdaptiveGaussian {
        block: usize,
        c: f64,
    },
}

impl From<Threshold> for Binarize {
    fn from(t: Threshold) -> Binarize {
        Binarize::Threshold(t)
    }
}

/// Booleanizes `width`×`height` byte images (row-major, one after the other).
pub fn binarize_images(
    pixels: &[u8],
    width: usize,
    height: usize,
    labels: &[u32],
    classes: usize,
    how: Binarize,
) -> BitRows {
    match how {
        Binarize::Threshold(t) => threshold_images(pixels, width * height, labels, classes, t),
        Binarize::AdaptiveGaussian { block, c } => {
            let mut rows = BitRows::new(width * height, classes);
            for (img, &y) in pixels.chunks_exact(width * height).zip(labels) {
                rows.push(&adaptive_gaussian(img, width, height, block, c), y);
            }
            rows
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

/// OpenCV's `adaptiveThreshold(ADAPTIVE_THRESH_GAUSSIAN_C, THRESH_BINARY, block, c)` on one
/// row-major byte image: a pixel is set when it exceeds the Gaussian-weighted mean of its
/// `block`×`block` window (border replicated) minus ⌈c⌉. FedTMOS booleanizes Fashion-MNIST this
/// way (window 11, C = 2). The arithmetic follows OpenCV's own exactly (float32 separable blur,
/// mean rounded half to even), so the bits agree with it, as the tests check on OpenCV's output.
pub fn adaptive_gaussian(
    pixels: &[u8],
    width: usize,
    height: usize,
    block: usize,
    c: f64,
) -> Vec<bool> {
    assert!(
        block % 2 == 1 && block >= 3,
        "block must be odd and at least 3"
    );
    assert_eq!(pixels.len(), width * height, "image size");
    let k = gaussian_kernel(block);
    let r = block / 2;
    let clamp = |v: isize, n: usize| v.clamp(0, n as isize - 1) as usize;
    // Rows first, over every row the column pass will read.
    let mut rows = vec![0f32; width * height];
    for y in 0..height {
        for x in 0..width {
            let mut acc = 0f32;
            for (i, &ki) in k.iter().enumerate() {
                let xx = clamp(x as isize + i as isize - r as isize, width);
                acc += ki * f32::from(pixels[y * width + xx]);
            }
            rows[y * width + x] = acc;
        }
    }
    let delta = c.ceil() as i32;
    let mut out = Vec::with_capacity(width * height);
    for y in 0..height {
        for x in 0..width {
            let mut acc = 0f32;
            for (i, &ki) in k.iter().enumerate() {
                let yy = clamp(y as isize + i as isize - r as isize, height);
                acc += ki * rows[yy * width + x];
            }
            let mean = acc.round_ties_even().clamp(0.0, 255.0) as i32;
            out.push(i32::from(pixels[y * width + x]) - mean > -delta);
        }
    }
    out
}

/// OpenCV's `getGaussianKernel(n, 0, CV_32F)`: σ = 0.3·((n − 1)/2 − 1) + 0.8, values computed
/// in double, cast to float, then scaled by 1 / (sum of the floats).
fn gaussian_kernel(n: usize) -> Vec<f32> {
    const SMALL: [&[f32]; 4] = [
        &[1.0],
        &[0.25, 0.5, 0.25],
        &[0.0625, 0.25, 0.375, 0.25, 0.0625],
        &[
            0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125,
        ],
    ];
    if n <= 7 {
        return SMALL[n / 2].to_vec();
    }
    let sigma = ((n as f64 - 1.0) * 0.5 - 1.0) * 0.3 + 0.8;
    let scale = -0.5 / (sigma * sigma);
    let raw: Vec<f32> = (0..n)
        .map(|i| {
            let x = i as f64 - (n as f64 - 1.0) * 0.5;
            (scale * x * x).exp() as f32
        })
        .collect();
    let sum: f64 = raw.iter().map(|&v| f64::from(v)).sum();
    raw.iter()
        .map(|&v| (f64::from(v) * (1.0 / sum)) as f32)
        .collect()
}

/// Thermometer code for a table: feature f becomes one bit per cut c of its
/// list, set when the raw value is above c. The bits of a row are feature 0's cuts in order,
/// then feature 1's, and so on; every bit reads as the condition `x[f] > c`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thermometer {
    pub cuts: Vec<Vec<f64>>,
}

impl Thermometer {
    /// `levels` cuts per feature at the quantiles i/(levels + 1) of `rows` (a client's own
    /// training split: nothing leaves the client), each rounded to 6 significant digits, so
    /// that a rule reads `x > 1.7` and writes to a file and back exactly. A feature with few
    /// distinct values repeats cuts: every client's code has the same width.
    pub fn from_quantiles(rows: &super::Dataset, levels: usize) -> Thermometer {
        let f = rows.features;
        let cuts = (0..f)
            .map(|j| {
                let mut column: Vec<f64> = rows.x.chunks(f).map(|r| r[j]).collect();
                column.sort_by(f64::total_cmp);
                (1..=levels)
                    .map(|i| match column.len() {
                        0 => 0.0,
                        n => round_significant(column[(i * n / (levels + 1)).saturating_sub(1)]),
                    })
                    .collect()
            })
            .collect();
        Thermometer { cuts }
    }

    /// Bits per row.
    pub fn bits(&self) -> usize {
        self.cuts.iter().map(Vec::len).sum()
    }

    /// What each bit means: (feature, cut), in bit order.
    pub fn conditions(&self) -> Vec<(usize, f64)> {
        self.cuts
            .iter()
            .enumerate()
            .flat_map(|(f, cuts)| cuts.iter().map(move |&c| (f, c)))
            .collect()
    }

    /// The rows of `data` as bits, with their labels.
    pub fn encode(&self, data: &super::Dataset) -> BitRows {
        let conditions = self.conditions();
        let mut out = BitRows::new(conditions.len(), data.classes.len());
        let mut bits = Vec::with_capacity(conditions.len());
        for i in 0..data.len() {
            let row = data.row(i);
            bits.clear();
            bits.extend(conditions.iter().map(|&(f, c)| row[f] > c));
            out.push(&bits, data.y[i]);
        }
        out
    }
}

fn round_significant(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    format!("{v:.5e}").parse().unwrap_or(v)
}

/// Words needed for `features` bits.
pub fn words_for(features: usize) -> usize {
    features.div_ceil(64)
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

    /// Reference bits from OpenCV 5.0.0 (`tests/oracles/opencv_adaptive_reference.py`): the
    /// same four 28×28 images, built by the same formulas.
    #[test]
    fn adaptive_gaussian_matches_opencv() {
        const PATTERN: [u64; 13] = [
            0xd9399ccc7e1c3878,
            0x5aa9696969699366,
            0x5a52d6556aaa9ad5,
            0x1cccc66664936c9b,
            0x000f83f83f3cf1c7,
            0xe1e78e07f81f0000,
            0xcdb264d99cce6778,
            0xaab552ab52d2d2d2,
            0x24dba5ad6b55556a,
            0x8e38e38cccccc6d9,
            0x70000000f07e0fe3,
            0x6733c71e3cf03fe0,
            0x0000000000009cce,
        ];
        const GRADIENT: [u64; 13] = [
            0xf8f1222408000000,
            0xfffcffffffcfffff,
            0xfffffeffffffcfff,
            0xeffffffcffffffcf,
            0xffcffffffcffffff,
            0xffffeffffffcffff,
            0xffffffcffffffcff,
            0xfcffffffeffffffc,
            0xfffeffffffcfffff,
            0xfffffcffffffcfff,
            0xeffffffeffffffcf,
            0xfffffffffeffffff,
            0x000000000000ffff,
        ];
        const CHECKER: [u64; 13] = [
            0x0ff0f0f0ff0f0f0f,
            0xf0f0f0f0f0ff0f0f,
            0xf0f0f00f0f0f00f0,
            0xff0f0f0f0f0f0f00,
            0xf0ff0f0f0ff0f0f0,
            0x0f0f00f0f0f0f0f0,
            0x0f0f0f00f0f0f00f,
            0x0ff0f0f0ff0f0f0f,
            0xf0f0f0f0f0ff0f0f,
            0xf0f0f00f0f0f00f0,
            0xff0f0f0f0f0f0f00,
            0xf0ff0f0f0ff0f0f0,
            0x000000000000f0f0,
        ];
        const BLOB: [u64; 13] = [
            0xffffffffffffffff,
            0x00ffffe03fffffff,
            0xc0001ffe0003fff8,
            0x7f03fe07f80700ff,
            0xfc3e0fff83f07ff0,
            0xfffc1c1fffc1e1ff,
            0xc3fffe1c3fffe1c1,
            0xc1c1fffc1c3fffe1,
            0xff83e1fffc3c1fff,
            0x03fe07f07ff07e0f,
            0xffc0001ff80700ff,
            0x3ffff800fffe0003,
            0x000000000000ffe0,
        ];
        let image = |f: &dyn Fn(i64, i64) -> i64| -> Vec<u8> {
            (0..28)
                .flat_map(|y| (0..28).map(move |x| (y, x)))
                .map(|(y, x)| f(x, y) as u8)
                .collect()
        };
        let cases: [(&str, Vec<u8>, [u64; 13]); 4] = [
            ("pattern", image(&|x, y| (x * 37 + y * 101 + (x * y) % 13 * 19) % 256), PATTERN),
            ("gradient", image(&|x, y| (x + y) * 255 / 54), GRADIENT),
            (
                "checker",
                image(&|x, y| if ((x / 4) + (y / 4)) % 2 == 0 { 200 } else { 40 } + (x * 7 + y * 3) % 11),
                CHECKER,
            ),
            ("blob", image(&|x, y| (255 - ((x - 13).pow(2) + (y - 15).pow(2)) * 3).clamp(0, 255)), BLOB),
        ];
        for (name, img, want) in cases {
            let bits = adaptive_gaussian(&img, 28, 28, 11, 2.0);
            let mut words = [0u64; 13];
            for (i, &b) in bits.iter().enumerate() {
                words[i / 64] |= u64::from(b) << (i % 64);
            }
            assert_eq!(words, want, "{name}");
        }
    }

    #[test]
    fn a_thermometer_sets_one_bit_per_cut_below_the_value() {
        let data = super::super::Dataset {
            features: 2,
            x: vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0],
            y: vec![0, 0, 1, 1],
            classes: vec!["a".into(), "b".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        };
        let t = Thermometer::from_quantiles(&data, 3);
        assert_eq!(t.cuts, vec![vec![1.0, 2.0, 3.0], vec![10.0, 20.0, 30.0]]);
        assert_eq!(t.bits(), 6);
        assert_eq!(t.conditions()[4], (1, 20.0));
        let bits = t.encode(&data);
        let row = |i: usize| (0..6).map(|k| bits.row(i)[0] >> k & 1).collect::<Vec<_>>();
        assert_eq!(row(0), vec![0, 0, 0, 0, 0, 0]);
        assert_eq!(row(2), vec![1, 1, 0, 1, 1, 0]);
        assert_eq!(row(3), vec![1, 1, 1, 1, 1, 1]);
        assert_eq!(bits.labels, vec![0, 0, 1, 1]);
        // Cuts are rounded to 6 significant digits, and survive JSON exactly.
        assert_eq!(round_significant(1.234_567_89), 1.234_57);
        assert_eq!(round_significant(-0.000_123_456_7), -0.000_123_457);
        let json = serde_json::to_string(&Thermometer {
            cuts: vec![vec![1.234_57, 6.1]],
        })
        .unwrap();
        assert_eq!(json, r#"{"cuts":[[1.23457,6.1]]}"#);
    }
}
