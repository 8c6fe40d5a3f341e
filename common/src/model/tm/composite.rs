//! TM composite inference (FedTMOS §4, eq. 3): several models vote together, each model's class
//! sums divided by its spread (max − min over classes), so that no model outvotes the others by
//! scale alone. FedTMOS's server models and the ensemble baseline both predict this way.

/// Predictions from per-model class sums: `sums[m]` is model m's row-major matrix of
/// `rows × classes` sums. A model whose sums are all equal for a row abstains on it.
pub fn composite_predict(sums: &[Vec<i32>], classes: usize) -> Vec<u32> {
    let rows = sums.first().map_or(0, |s| s.len() / classes.max(1));
    let mut votes = vec![0f64; classes];
    (0..rows)
        .map(|i| {
            votes.iter_mut().for_each(|v| *v = 0.0);
            for model in sums {
                let row = &model[i * classes..(i + 1) * classes];
                let (min, max) = row
                    .iter()
                    .fold((i32::MAX, i32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                if max > min {
                    let spread = f64::from(max - min);
                    for (v, &s) in votes.iter_mut().zip(row) {
                        *v += f64::from(s) / spread;
                    }
                }
            }
            let mut best = 0;
            for (c, &v) in votes.iter().enumerate() {
                if v > votes[best] {
                    best = c;
                }
            }
            best as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_votes_by_its_normalised_sums() {
        // Model A: sums (100, 0, 50): spread 100 → (1.0, 0.0, 0.5).
        // Model B: sums (0, 4, 1):    spread 4   → (0.0, 1.0, 0.25).
        // Votes (1.0, 1.0, 0.75): class 0 and 1 tie, the lower index wins. Without the
        // normalisation model A's scale would decide alone (100 + 0 against 0 + 4).
        let a = vec![100, 0, 50];
        let b = vec![0, 4, 1];
        assert_eq!(composite_predict(&[a.clone(), b.clone()], 3), vec![0]);
        // A third model leaning to class 1 breaks the tie.
        assert_eq!(composite_predict(&[a, b, vec![0, 2, 1]], 3), vec![1]);
    }

    #[test]
    fn a_model_with_equal_sums_abstains() {
        // Row 0: model A's sums (7, 7, 7) are flat and abstain; model B's (0, 1, 0) → class 1.
        // Row 1: A (3, 0, 9) / 9 = (1/3, 0, 1); B (5, 0, 0) / 5 = (1, 0, 0); total (4/3, 0, 1)
        // → class 0.
        let a = vec![7, 7, 7, 3, 0, 9];
        let b = vec![0, 1, 0, 5, 0, 0];
        assert_eq!(composite_predict(&[a, b], 3), vec![1, 0]);
    }
}
