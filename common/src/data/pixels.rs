//! Images as their bytes, for the neural baselines (which read pixel / 255, not bits).

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
}

/// Synthetic 28×28 images: class c lights a 6×6 square at a place of its own.
#[cfg(test)]
pub fn squares(per_class: usize, classes: usize, seed: u64) -> PixelRows {
    use rand::RngExt;
    let mut rng = crate::rng::derive_rng(seed, "squares", 0);
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for i in 0..per_class * classes {
        let c = i % classes;
        let (top, left) = (2 + (c / 3) * 8, 2 + (c % 3) * 8);
        for y in 0..28 {
            for x in 0..28 {
                let inside = (top..top + 6).contains(&y) && (left..left + 6).contains(&x);
                let noise: u8 = rng.random_range(0..40);
                pixels.push(if inside { 200 + noise } else { noise });
            }
        }
        labels.push(c as u32);
    }
    PixelRows {
        per: 784,
        pixels,
        labels,
        classes,
    }
}
