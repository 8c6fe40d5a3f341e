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
    /// No images, of `per` bytes each.
    pub fn empty(per: usize, classes: usize) -> PixelRows {
        PixelRows {
            per,
            pixels: Vec::new(),
            labels: Vec::new(),
            classes,
        }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The first `n` images of every class in file order (fewer where a class has fewer): a
    /// balanced set drawn the same way by every process.
    pub fn first_per_class(&self, n: usize) -> PixelRows {
        let mut taken = vec![0usize; self.classes];
        let (mut pixels, mut labels) = (Vec::new(), Vec::new());
        for (i, &label) in self.labels.iter().enumerate() {
            let Some(count) = taken.get_mut(label as usize) else {
                continue;
            };
            if *count < n {
                *count += 1;
                pixels.extend_from_slice(&self.pixels[i * self.per..(i + 1) * self.per]);
                labels.push(label);
            }
        }
        PixelRows {
            per: self.per,
            pixels,
            labels,
            classes: self.classes,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_per_class_takes_each_class_in_file_order_up_to_n() {
        let rows = squares(5, 3, 1);
        let held = rows.first_per_class(2);
        assert_eq!(held.labels, vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(held.pixels[..784], rows.pixels[..784]);
        assert_eq!(held.pixels[3 * 784..4 * 784], rows.pixels[3 * 784..4 * 784]);
        assert_eq!(
            rows.first_per_class(9).len(),
            15,
            "fewer where a class has fewer"
        );
    }
}
