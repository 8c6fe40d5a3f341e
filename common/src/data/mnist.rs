//! MNIST-format datasets (MNIST, Fashion-MNIST): IDX images and labels, booleanized.

use std::path::Path;

use super::booleanize::{Binarize, BitRows, binarize_images};
use super::idx;
use super::pixels::PixelRows;
use crate::{FlintError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

impl Split {
    /// The split's images and labels files.
    pub fn files(self) -> [&'static str; 2] {
        match self {
            Split::Train => ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"],
            Split::Test => ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"],
        }
    }
}

/// Loads `dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` and booleanizes every image
/// (a fixed [`super::booleanize::Threshold`] or the adaptive Gaussian one).
pub fn load(dir: &Path, split: Split, how: impl Into<Binarize>) -> Result<BitRows> {
    let (images, y, height, width) = read(dir, split)?;
    Ok(binarize_images(&images, width, height, &y, 10, how.into()))
}

/// Loads a split's images as their bytes (the neural baselines').
pub fn load_pixels(dir: &Path, split: Split) -> Result<PixelRows> {
    let (pixels, labels, height, width) = read(dir, split)?;
    Ok(PixelRows {
        per: height * width,
        pixels,
        labels,
        classes: 10,
    })
}

/// A split's image bytes, labels, height and width, every label a digit class.
fn read(dir: &Path, split: Split) -> Result<(Vec<u8>, Vec<u32>, usize, usize)> {
    let [images_file, labels_file] = split.files();
    let images_path = dir.join(images_file);
    let labels_path = dir.join(labels_file);
    let images = idx::load(&images_path)?;
    let labels = idx::load(&labels_path)?;
    if images.dims.len() != 3 {
        return Err(FlintError::data(
            &images_path,
            format!("expected 3 dimensions, got {:?}", images.dims),
        ));
    }
    if labels.dims.len() != 1 || labels.dims[0] != images.dims[0] {
        return Err(FlintError::data(
            &labels_path,
            format!("{:?} labels for {} images", labels.dims, images.dims[0]),
        ));
    }
    if let Some(bad) = labels.data.iter().find(|&&l| l > 9) {
        return Err(FlintError::data(
            &labels_path,
            format!("label {bad} is not a digit class 0-9"),
        ));
    }
    let y: Vec<u32> = labels.data.iter().map(|&l| u32::from(l)).collect();
    Ok((images.data, y, images.dims[1], images.dims[2]))
}
