//! One client's data: a stratified train/test split of its part, scaled without looking at any
//! other client's data.
//!
//! Scaling choice (no leakage between clients): with `local-zscore` each client standardises its
//! features with the mean and standard deviation of *its own training split*, and applies the same
//! transform to its test split. No statistic leaves the client and the test split never informs
//! the transform. The price is that clients with different feature distributions see the global
//! linear model in slightly different coordinates; `none` leaves raw features.

use rand::seq::SliceRandom;

use super::Dataset;
use crate::ClientId;
use crate::rng::derive_rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaling {
    LocalZScore,
    None,
}

impl Scaling {
    pub fn parse(s: Option<&str>) -> std::result::Result<Scaling, String> {
        match s.unwrap_or("local-zscore") {
            "local-zscore" => Ok(Scaling::LocalZScore),
            "none" => Ok(Scaling::None),
            other => Err(format!(
                "unknown data.scaling {other:?}; expected local-zscore or none"
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Shard {
    pub train: Dataset,
    pub test: Dataset,
}

impl Shard {
    /// Splits the client's rows per class (so both splits keep its class balance), then scales.
    pub fn new(
        data: &Dataset,
        rows: &[usize],
        test_fraction: f64,
        scaling: Scaling,
        seed: u64,
        client: ClientId,
    ) -> Shard {
        let mut rng = derive_rng(seed, "split", client);
        let mut train_rows = Vec::new();
        let mut test_rows = Vec::new();
        for class in 0..data.classes.len() as u32 {
            let mut of_class: Vec<usize> = rows
                .iter()
                .copied()
                .filter(|&i| data.y[i] == class)
                .collect();
            of_class.shuffle(&mut rng);
            let n_test = (of_class.len() as f64 * test_fraction).round() as usize;
            test_rows.extend_from_slice(&of_class[..n_test]);
            train_rows.extend_from_slice(&of_class[n_test..]);
        }
        train_rows.shuffle(&mut rng);
        let mut shard = Shard {
            train: data.select(&train_rows),
            test: data.select(&test_rows),
        };
        if scaling == Scaling::LocalZScore {
            let (mean, std) = column_stats(&shard.train);
            standardise(&mut shard.train, &mean, &std);
            standardise(&mut shard.test, &mean, &std);
        }
        shard
    }
}

fn column_stats(d: &Dataset) -> (Vec<f64>, Vec<f64>) {
    let n = d.len().max(1) as f64;
    let mut mean = vec![0.0; d.features];
    for i in 0..d.len() {
        for (m, v) in mean.iter_mut().zip(d.row(i)) {
            *m += v / n;
        }
    }
    let mut var = vec![0.0; d.features];
    for i in 0..d.len() {
        for ((s, v), m) in var.iter_mut().zip(d.row(i)).zip(&mean) {
            *s += (v - m) * (v - m) / n;
        }
    }
    // A constant column is only centred.
    let std = var
        .iter()
        .map(|v| if *v > 0.0 { v.sqrt() } else { 1.0 })
        .collect();
    (mean, std)
}

fn standardise(d: &mut Dataset, mean: &[f64], std: &[f64]) {
    for row in d.x.chunks_mut(d.features) {
        for ((v, m), s) in row.iter_mut().zip(mean).zip(std) {
            *v = (*v - m) / s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Dataset {
        Dataset {
            features: 2,
            x: (0..40).map(f64::from).collect(),
            y: (0..20).map(|i| u32::from(i % 4 == 0)).collect(),
            classes: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn split_is_stratified_disjoint_and_seeded() {
        let d = data();
        let rows: Vec<usize> = (0..20).collect();
        let s = Shard::new(&d, &rows, 0.2, Scaling::None, 1, 1);
        assert_eq!(s.test.class_counts(), vec![3, 1]);
        assert_eq!(s.train.class_counts(), vec![12, 4]);
        let again = Shard::new(&d, &rows, 0.2, Scaling::None, 1, 1);
        assert_eq!(s.test, again.test);
        let other_client = Shard::new(&d, &rows, 0.2, Scaling::None, 1, 2);
        assert_ne!(s.test, other_client.test);
    }

    #[test]
    fn zscore_uses_training_statistics_only() {
        let d = data();
        let rows: Vec<usize> = (0..20).collect();
        let s = Shard::new(&d, &rows, 0.25, Scaling::LocalZScore, 3, 1);
        for j in 0..2 {
            let col: Vec<f64> = (0..s.train.len()).map(|i| s.train.row(i)[j]).collect();
            let mean = col.iter().sum::<f64>() / col.len() as f64;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / col.len() as f64;
            assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-12);
        }
        // The test split went through the same transform, so it is not itself centred.
        let test_mean: f64 =
            (0..s.test.len()).map(|i| s.test.row(i)[0]).sum::<f64>() / s.test.len() as f64;
        assert!(test_mean.abs() > 1e-9);
    }
}
