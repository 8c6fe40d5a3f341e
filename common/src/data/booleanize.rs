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

/// Thermometer encoding: value v becomes `levels` bits, bit i set when v exceeds the i-th of
/// `levels` evenly spaced cut points in (min, max).
pub fn thermometer(v: f64, min: f64, max: f64, levels: usize, out: &mut Vec<bool>) {
    for i in 1..=levels {
        let cut = min + (max - min) * i as f64 / (levels + 1) as f64;
        out.push(v > cut);
    }
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

    /// Reference bits from OpenCV 5.0.0 (`scripts/opencv_adaptive_reference.py`): the same four
    /// 28×28 images, built by the same formulas.
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
    fn thermometer_is_monotone() {
        let mut out = Vec::new();
        thermometer(0.5, 0.0, 1.0, 3, &mut out);
        assert_eq!(out, vec![true, false, false]);
        out.clear();
        thermometer(1.0, 0.0, 1.0, 3, &mut out);
        assert_eq!(out, vec![true, true, true]);
    }
}
