//! Classification metrics from a confusion matrix (row = true class, column = predicted).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfusionMatrix {
    classes: usize,
    counts: Vec<u64>,
}

impl ConfusionMatrix {
    pub fn new(classes: usize) -> Self {
        ConfusionMatrix {
            classes,
            counts: vec![0; classes * classes],
        }
    }

    /// Rebuilds a matrix received over the wire; `None` when the length is not classes².
    pub fn from_counts(classes: usize, counts: Vec<u64>) -> Option<Self> {
        (classes > 0 && counts.len() == classes * classes)
            .then_some(ConfusionMatrix { classes, counts })
    }

    pub fn from_predictions(classes: usize, truth: &[u32], predicted: &[u32]) -> Self {
        let mut m = ConfusionMatrix::new(classes);
        for (&t, &p) in truth.iter().zip(predicted) {
            m.counts[t as usize * classes + p as usize] += 1;
        }
        m
    }

    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
    }

    #[inline]
    pub fn add(&mut self, truth: usize, predicted: usize) {
        self.counts[truth * self.classes + predicted] += 1;
    }

    /// Jaccard index: for two classes, of class 1, TP / (TP + FP + FN); for more, the mean over
    /// the classes that occur in the truth or the predictions. An empty union is a perfect match.
    pub fn jaccard(&self) -> f64 {
        let of = |c: usize| -> Option<f64> {
            let tp = self.get(c, c);
            let predicted: u64 = (0..self.classes).map(|t| self.get(t, c)).sum();
            let actual: u64 = (0..self.classes).map(|p| self.get(c, p)).sum();
            let union = predicted + actual - tp;
            (union > 0).then(|| tp as f64 / union as f64)
        };
        if self.classes == 2 {
            return of(1).unwrap_or(1.0);
        }
        let present: Vec<f64> = (0..self.classes).filter_map(of).collect();
        if present.is_empty() {
            return 1.0;
        }
        present.iter().sum::<f64>() / present.len() as f64
    }

    pub fn classes(&self) -> usize {
        self.classes
    }

    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub fn get(&self, truth: usize, predicted: usize) -> u64 {
        self.counts[truth * self.classes + predicted]
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Rows predicted as their true class.
    pub fn correct(&self) -> u64 {
        (0..self.classes).map(|c| self.get(c, c)).sum()
    }

    /// Rows of the most common true class: what always answering it would get right.
    pub fn majority_rows(&self) -> u64 {
        self.counts
            .chunks(self.classes)
            .map(|row| row.iter().sum::<u64>())
            .max()
            .unwrap_or(0)
    }

    /// Accuracy, and precision/recall/F1 of class 1 (binary) or macro-averaged over the classes
    /// that occur as truth or prediction (more classes; as scikit-learn's `average="macro"`, so
    /// a client that never sees a class is not scored 0 on it).
    pub fn metrics(&self) -> Metrics {
        let total = self.total();
        let accuracy = ratio(self.correct(), total);
        let per_class: Vec<(f64, f64, f64)> =
            (0..self.classes).map(|c| self.class_prf(c)).collect();
        let (precision, recall, f1) = if self.classes == 2 {
            per_class[1]
        } else {
            let present: Vec<&(f64, f64, f64)> = per_class
                .iter()
                .enumerate()
                .filter(|(c, _)| {
                    (0..self.classes).any(|o| self.get(*c, o) > 0 || self.get(o, *c) > 0)
                })
                .map(|(_, p)| p)
                .collect();
            let n = present.len().max(1) as f64;
            let sum = present
                .iter()
                .fold((0.0, 0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1, a.2 + p.2));
            (sum.0 / n, sum.1 / n, sum.2 / n)
        };
        Metrics {
            accuracy,
            precision,
            recall,
            f1,
            samples: total,
        }
    }

    /// Recall of class `c`, or `None` where it has no true rows.
    pub fn class_recall(&self, c: usize) -> Option<f64> {
        let actual: u64 = (0..self.classes).map(|p| self.get(c, p)).sum();
        (actual > 0).then(|| self.class_prf(c).1)
    }

    fn class_prf(&self, c: usize) -> (f64, f64, f64) {
        let tp = self.get(c, c);
        let predicted: u64 = (0..self.classes).map(|t| self.get(t, c)).sum();
        let actual: u64 = (0..self.classes).map(|p| self.get(c, p)).sum();
        let precision = ratio(tp, predicted);
        let recall = ratio(tp, actual);
        let f1 = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        (precision, recall, f1)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// For two classes, precision/recall/F1 are those of class 1 (the positive class); for more,
/// their unweighted mean over classes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub accuracy: f64,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub samples: u64,
}

impl Metrics {
    /// Unweighted mean over clients, as the papers report.
    pub fn mean<'a>(all: impl IntoIterator<Item = &'a Metrics>) -> Option<Metrics> {
        let all: Vec<&Metrics> = all.into_iter().collect();
        if all.is_empty() {
            return None;
        }
        let n = all.len() as f64;
        let avg = |f: fn(&Metrics) -> f64| all.iter().map(|m| f(m)).sum::<f64>() / n;
        Some(Metrics {
            accuracy: avg(|m| m.accuracy),
            precision: avg(|m| m.precision),
            recall: avg(|m| m.recall),
            f1: avg(|m| m.f1),
            samples: all.iter().map(|m| m.samples).sum(),
        })
    }
}

/// FedTMOS's `GiniIndex` of a class distribution: Σ p² (1 for a client of one class, 1/C for a
/// balanced one). Not the AHP criterion, which is the impurity 1 − Σ p².
pub fn gini_index(class_counts: &[u64]) -> f64 {
    let n: u64 = class_counts.iter().sum();
    if n == 0 {
        return 0.0;
    }
    class_counts
        .iter()
        .map(|&c| (c as f64 / n as f64).powi(2))
        .sum()
}

/// What a client said about its own freshly trained model when it uploaded (Blind FL: accuracy
/// and precision on its test split, which the server may weight by).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LocalMetrics {
    pub accuracy: f64,
    pub precision: f64,
}

impl LocalMetrics {
    /// Unweighted mean over clients.
    pub fn mean<'a>(all: impl IntoIterator<Item = &'a LocalMetrics>) -> Option<LocalMetrics> {
        let all: Vec<&LocalMetrics> = all.into_iter().collect();
        if all.is_empty() {
            return None;
        }
        let n = all.len() as f64;
        Some(LocalMetrics {
            accuracy: all.iter().map(|m| m.accuracy).sum::<f64>() / n,
            precision: all.iter().map(|m| m.precision).sum::<f64>() / n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_metrics_on_hand_counted_predictions() {
        // truth:     1 1 1 0 0 0 0 1
        // predicted: 1 0 1 0 1 0 0 1  -> tp 3, fn 1, fp 1, tn 3
        let m = ConfusionMatrix::from_predictions(
            2,
            &[1, 1, 1, 0, 0, 0, 0, 1],
            &[1, 0, 1, 0, 1, 0, 0, 1],
        );
        let x = m.metrics();
        assert_eq!(x.accuracy, 6.0 / 8.0);
        assert_eq!(x.precision, 3.0 / 4.0);
        assert_eq!(x.recall, 3.0 / 4.0);
        assert_eq!(x.f1, 0.75);
        assert_eq!(x.samples, 8);
        // Recall per class: class 1 has 3 of its 4 rows right, class 0 3 of 4.
        assert_eq!(
            (m.class_recall(0), m.class_recall(1)),
            (Some(0.75), Some(0.75))
        );
        let one_sided = ConfusionMatrix::from_predictions(3, &[0, 0], &[0, 2]);
        assert_eq!(one_sided.class_recall(0), Some(0.5));
        assert_eq!(one_sided.class_recall(2), None, "no true rows of class 2");
    }

    #[test]
    fn no_positive_predictions_gives_zero_not_nan() {
        let m = ConfusionMatrix::from_predictions(2, &[1, 0], &[0, 0]);
        let x = m.metrics();
        assert_eq!((x.precision, x.recall, x.f1), (0.0, 0.0, 0.0));
    }

    #[test]
    fn jaccard_of_the_positive_class_and_macro_over_present_classes() {
        // tp 3, fp 1, fn 1: 3 / 5.
        let m = ConfusionMatrix::from_predictions(
            2,
            &[1, 1, 1, 0, 0, 0, 0, 1],
            &[1, 0, 1, 0, 1, 0, 0, 1],
        );
        assert_eq!(m.jaccard(), 0.6);
        // No positives anywhere: the (empty) sets agree.
        assert_eq!(
            ConfusionMatrix::from_predictions(2, &[0], &[0]).jaccard(),
            1.0
        );
        // Three classes, class 2 absent from truth and predictions: mean of classes 0 and 1.
        // class 0: tp 1, union 2 (one 0 predicted as 1); class 1: tp 1, union 2.
        let m = ConfusionMatrix::from_predictions(3, &[0, 0, 1], &[0, 1, 1]);
        assert_eq!(m.jaccard(), 0.5);
    }

    #[test]
    fn multi_class_metrics_average_over_the_classes_that_occur() {
        // Four classes; class 3 never occurs, so the mean is over classes 0-2.
        // Class 0: tp 2, predicted 2, actual 3 → p 1, r 2/3. Class 1: tp 1, predicted 2,
        // actual 2 → p 1/2, r 1/2. Class 2: predicted once, never true → p 0, r 0.
        let m = ConfusionMatrix::from_predictions(4, &[0, 0, 0, 1, 1], &[0, 0, 1, 1, 2]);
        let x = m.metrics();
        assert_eq!(x.accuracy, 3.0 / 5.0);
        assert_eq!(x.precision, (1.0 + 0.5 + 0.0) / 3.0);
        assert_eq!(x.recall, (2.0 / 3.0 + 0.5 + 0.0) / 3.0);
    }

    #[test]
    fn wire_counts_must_be_square() {
        assert!(ConfusionMatrix::from_counts(2, vec![1, 2, 3]).is_none());
        assert!(ConfusionMatrix::from_counts(0, vec![]).is_none());
        assert!(ConfusionMatrix::from_counts(2, vec![1, 2, 3, 4]).is_some());
    }
}
