//! Images as their bytes, for the neural baselines (which read pixel / 255, not bits).

use super::images::ImageRows;
use crate::model::cnn::Samples;

/// `per` bytes per image, one image after the other, and each image's label.
#[derive(Debug, Clone, PartialEq)]
pub struct PixelRows {
    pub per: usize,
    pub pixels: Vec<u8>,
    pub labels: Vec<u32>,
    pub classes: usize,
}

impl PixelRows {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The rows as a network reads them.
    pub fn samples(&self) -> Samples<'_> {
        Samples {
            pixels: &self.pixels,
            labels: &self.labels,
            per: self.per,
        }
    }
}

impl ImageRows for PixelRows {
    fn select(&self, rows: &[usize]) -> Self {
        let mut pixels = Vec::with_capacity(rows.len() * self.per);
        for &r in rows {
            pixels.extend_from_slice(&self.pixels[r * self.per..][..self.per]);
        }
        PixelRows {
            per: self.per,
            pixels,
            labels: rows.iter().map(|&r| self.labels[r]).collect(),
            classes: self.classes,
        }
    }

    fn features(&self) -> usize {
        self.per
    }

    fn labels(&self) -> &[u32] {
        &self.labels
    }

    fn classes(&self) -> usize {
        self.classes
    }
}
