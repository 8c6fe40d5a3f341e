//! A built-in two-class dataset, so a run needs no files: two Gaussian clouds whose means sit
//! `separation` apart along a random direction, with features on deliberately different scales
//! (so that scaling matters as it does on real data).

use rand::RngExt;

use super::Dataset;
use crate::rng::{FlintRng, derive_rng};

pub fn generate(samples: usize, features: usize, separation: f64, seed: u64) -> Dataset {
    let mut rng = derive_rng(seed, "synthetic", 0);
    let mut direction: Vec<f64> = (0..features).map(|_| normal(&mut rng)).collect();
    let norm = direction
        .iter()
        .map(|v| v * v)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    direction.iter_mut().for_each(|v| *v /= norm);
    let scale: Vec<f64> = (0..features).map(|_| (normal(&mut rng)).exp()).collect();
    let offset: Vec<f64> = (0..features).map(|_| 5.0 * normal(&mut rng)).collect();
    let mut x = Vec::with_capacity(samples * features);
    let mut y = Vec::with_capacity(samples);
    for _ in 0..samples {
        // Class 1 is the minority (35 %), like MAGIC's hadrons.
        let class = u32::from(rng.random::<f64>() < 0.35);
        let shift = if class == 1 {
            separation / 2.0
        } else {
            -separation / 2.0
        };
        for j in 0..features {
            x.push(offset[j] + scale[j] * (normal(&mut rng) + shift * direction[j]));
        }
        y.push(class);
    }
    Dataset {
        features,
        x,
        y,
        classes: vec!["0".into(), "1".into()],
        categorical: Vec::new(),
        feature_names: Vec::new(),
    }
}

/// Box–Muller: one standard normal draw.
fn normal(rng: &mut FlintRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_data_and_both_classes_present() {
        let a = generate(500, 3, 2.0, 9);
        assert_eq!(a, generate(500, 3, 2.0, 9));
        assert_ne!(a, generate(500, 3, 2.0, 10));
        let counts = a.class_counts();
        assert!(counts[0] > 250 && counts[1] > 100, "{counts:?}");
        assert_eq!(a.x.len(), 1500);
    }
}
