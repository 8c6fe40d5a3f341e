//! One client's data: a stratified train/test split of its part, encoded and scaled without
//! looking at any other client's data.
//!
//! Categorical columns (category codes, e.g. Adult's) are target-encoded first: a category
//! becomes the rate of the positive class (class 1) among the client's training rows of that
//! category, smoothed toward the client's overall rate with 10 pseudo-rows; a category its
//! training split never saw gets the overall rate. Only the training split informs it.
//!
//! `local-minmax` maps each feature to [0, 1] with the minimum and maximum of the client's
//! training split (what an FCM's concepts expect); test values outside that range are clipped
//! to it, and a constant column becomes 0.
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

/// How a client scales its features (see the module doc).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Scaling {
    /// Each client standardises with its own training statistics.
    #[serde(rename = "local-zscore")]
    LocalZScore,
    /// Each client scales to [0, 1] with its own training range.
    #[serde(rename = "local-minmax")]
    LocalMinMax,
    None,
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
        let (train_rows, test_rows) = split(data, rows, test_fraction, seed, client);
        Shard::from_split(data, &train_rows, &test_rows, scaling)
    }

    /// The shard of these training and test rows: missing values, categories and scaling
    /// from the training rows alone, applied to both.
    pub fn from_split(
        data: &Dataset,
        train_rows: &[usize],
        test_rows: &[usize],
        scaling: Scaling,
    ) -> Shard {
        let mut shard = Shard {
            train: data.select(train_rows),
            test: data.select(test_rows),
        };
        // Missing values (NaN, `data.on_missing = "impute"`) take the training split's mean.
        if shard
            .train
            .x
            .iter()
            .chain(&shard.test.x)
            .any(|v| v.is_nan())
        {
            let means = training_means(&shard.train);
            impute(&mut shard.train, &means);
            impute(&mut shard.test, &means);
        }
        for &column in &data.categorical {
            let rates = target_rates(&shard.train, column);
            rates.encode(&mut shard.train, column);
            rates.encode(&mut shard.test, column);
        }
        match scaling {
            Scaling::LocalZScore => {
                let (mean, std) = column_stats(&shard.train);
                standardise(&mut shard.train, &mean, &std);
                standardise(&mut shard.test, &mean, &std);
            }
            Scaling::LocalMinMax => {
                let (low, high) = column_range(&shard.train);
                min_max(&mut shard.train, &low, &high);
                min_max(&mut shard.test, &low, &high);
            }
            Scaling::None => {}
        }
        shard
    }
}

/// The whole table split into (the rows the clients share out, the shared test set):
/// `fraction` of each class, from the run's seed. An empty side is an error: the holder of the
/// shared test set would have nothing to report on.
pub fn held_out(
    data: &Dataset,
    fraction: f64,
    seed: u64,
) -> crate::Result<(Vec<usize>, Vec<usize>)> {
    let all: Vec<usize> = (0..data.len()).collect();
    let (rest, held) = split(data, &all, fraction, seed, 0);
    if held.is_empty() || rest.is_empty() {
        return Err(crate::FlintError::Partition(format!(
            "data.global_test_fraction = {fraction} holds out {} of the {} rows: the shared test set and the clients' rows each need at least one",
            held.len(),
            data.len()
        )));
    }
    Ok((rest, held))
}

/// A client's rows split per class into (train, test) by its own generator: `test_fraction`
/// of each class, rounded, to test.
pub fn split(
    data: &Dataset,
    rows: &[usize],
    test_fraction: f64,
    seed: u64,
    client: ClientId,
) -> (Vec<usize>, Vec<usize>) {
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
    (train_rows, test_rows)
}

/// Each column's mean over the values present; 0 for a column with none (the client has
/// nothing to go on, and every row then holds the same value).
fn training_means(d: &Dataset) -> Vec<f64> {
    let mut sums = vec![(0.0, 0usize); d.features];
    for row in d.x.chunks(d.features) {
        for (s, &v) in sums.iter_mut().zip(row) {
            if !v.is_nan() {
                *s = (s.0 + v, s.1 + 1);
            }
        }
    }
    sums.into_iter()
        .map(|(sum, n)| if n == 0 { 0.0 } else { sum / n as f64 })
        .collect()
}

fn impute(d: &mut Dataset, means: &[f64]) {
    for row in d.x.chunks_mut(d.features) {
        for (v, &m) in row.iter_mut().zip(means) {
            if v.is_nan() {
                *v = m;
            }
        }
    }
}

/// Pseudo-rows at the client's overall positive rate that every category starts with.
const SMOOTHING: f64 = 10.0;

struct TargetRates {
    by_code: std::collections::BTreeMap<u64, f64>,
    prior: f64,
}

fn target_rates(train: &Dataset, column: usize) -> TargetRates {
    let mut counts: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
    let mut positives = 0.0;
    for i in 0..train.len() {
        let positive = f64::from(u8::from(train.y[i] == 1));
        let e = counts.entry(train.row(i)[column] as u64).or_default();
        e.0 += positive;
        e.1 += 1.0;
        positives += positive;
    }
    let prior = if train.is_empty() {
        0.0
    } else {
        positives / train.len() as f64
    };
    let by_code = counts
        .into_iter()
        .map(|(code, (pos, n))| (code, (pos + SMOOTHING * prior) / (n + SMOOTHING)))
        .collect();
    TargetRates { by_code, prior }
}

impl TargetRates {
    fn encode(&self, d: &mut Dataset, column: usize) {
        for row in d.x.chunks_mut(d.features) {
            let code = row[column] as u64;
            row[column] = self.by_code.get(&code).copied().unwrap_or(self.prior);
        }
    }
}

fn column_range(d: &Dataset) -> (Vec<f64>, Vec<f64>) {
    let mut low = vec![f64::INFINITY; d.features];
    let mut high = vec![f64::NEG_INFINITY; d.features];
    for row in d.x.chunks(d.features) {
        for ((l, h), v) in low.iter_mut().zip(high.iter_mut()).zip(row) {
            *l = l.min(*v);
            *h = h.max(*v);
        }
    }
    (low, high)
}

fn min_max(d: &mut Dataset, low: &[f64], high: &[f64]) {
    for row in d.x.chunks_mut(d.features) {
        for ((v, l), h) in row.iter_mut().zip(low).zip(high) {
            *v = if h > l {
                ((*v - l) / (h - l)).clamp(0.0, 1.0)
            } else {
                0.0
            };
        }
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
            categorical: Vec::new(),
            feature_names: Vec::new(),
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
    fn minmax_maps_training_to_unit_range_and_clips_test() {
        let d = data();
        let rows: Vec<usize> = (0..20).collect();
        let s = Shard::new(&d, &rows, 0.25, Scaling::LocalMinMax, 3, 1);
        for j in 0..2 {
            let col: Vec<f64> = (0..s.train.len()).map(|i| s.train.row(i)[j]).collect();
            let lo = col.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = col.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!((lo, hi), (0.0, 1.0));
        }
        assert!(s.test.x.iter().all(|v| (0.0..=1.0).contains(v)));
    }

    #[test]
    fn categories_become_the_training_rate_of_the_positive_class() {
        // Column 1 is a category: code 0 on rows 0..10 (positives at 0, 4, 8), code 1 on 10..20.
        let mut d = data();
        for i in 0..20 {
            d.x[2 * i + 1] = f64::from(u8::from(i >= 10));
        }
        d.categorical = vec![1];
        let rows: Vec<usize> = (0..20).collect();
        let s = Shard::new(&d, &rows, 0.25, Scaling::None, 3, 1);
        let (mut pos, mut n, mut all_pos) = ([0.0; 2], [0.0; 2], 0.0);
        let raw = Shard::new(&data(), &rows, 0.25, Scaling::None, 3, 1);
        for i in 0..raw.train.len() {
            let code = usize::from(raw.train.row(i)[0] >= 20.0);
            let p = f64::from(u8::from(raw.train.y[i] == 1));
            pos[code] += p;
            n[code] += 1.0;
            all_pos += p;
        }
        let prior = all_pos / raw.train.len() as f64;
        for i in 0..s.train.len() {
            let code = usize::from(raw.train.row(i)[0] >= 20.0);
            let want = (pos[code] + 10.0 * prior) / (n[code] + 10.0);
            assert!((s.train.row(i)[1] - want).abs() < 1e-12);
        }
    }

    #[test]
    fn missing_values_take_the_mean_of_the_clients_own_training_split() {
        let mut d = data();
        let nan = f64::NAN;
        for i in [0, 3, 5] {
            d.x[i * d.features] = nan;
        }
        // Row i's first feature is 2i: rows 0, 3 and 5 held 0, 6 and 10.
        let missing = [0.0, 6.0, 10.0];
        let rows: Vec<usize> = (0..d.len()).collect();
        let s = Shard::new(&d, &rows, 0.25, Scaling::None, 3, 1);
        let raw = Shard::new(&data(), &rows, 0.25, Scaling::None, 3, 1);
        let present: Vec<f64> = raw
            .train
            .x
            .chunks(d.features)
            .map(|r| r[0])
            .filter(|v| !missing.contains(v))
            .collect();
        let mean = present.iter().sum::<f64>() / present.len() as f64;
        for (split, raw_split) in [(&s.train, &raw.train), (&s.test, &raw.test)] {
            assert!(split.x.iter().all(|v| v.is_finite()));
            for (row, raw_row) in split
                .x
                .chunks(d.features)
                .zip(raw_split.x.chunks(d.features))
            {
                let was_missing = missing.contains(&raw_row[0]);
                assert_eq!(row[0], if was_missing { mean } else { raw_row[0] });
                assert_eq!(row[1..], raw_row[1..]);
            }
        }
    }

    #[test]
    fn a_shared_test_set_that_holds_out_nothing_is_an_error() {
        let d = data();
        let (rest, held) = held_out(&d, 0.25, 7).unwrap();
        assert_eq!((rest.len(), held.len()), (15, 5));
        assert!(rest.iter().all(|i| !held.contains(i)));
        let err = held_out(&d, 0.01, 7).unwrap_err().to_string();
        assert!(err.contains("holds out 0 of the 20 rows"), "{err}");
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
