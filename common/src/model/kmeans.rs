//! k-means as FedTMOS's server runs it on class-weight vectors (FedTMOS §4.2.1, eq. 4; the
//! published code calls scikit-learn's `KMeans` with its defaults): greedy k-means++ seeding
//! with 2 + ⌊ln k⌋ candidates per centre, then Lloyd iterations until the labels stop changing or the centres
//! move less than `tol` × the mean per-dimension variance (squared, summed over centres), at most
//! `max_iter` times. A cluster left empty takes the point farthest from its centre, as
//! scikit-learn relocates them.
//!
//! Written here rather than taken from linfa-clustering: the vectors are a few hundred points
//! of a few hundred dimensions, the crate would bring ndarray and a second `rand`, and the seed
//! must come from the run's own generator. `tests` pins Lloyd against scikit-learn 1.x on fixed
//! data and fixed initial centres (`tests/oracles/kmeans_reference.py`).

use rand::RngExt;

use crate::rng::FlintRng;

/// Lloyd's stopping rules (scikit-learn's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LloydParams {
    pub max_iter: usize,
    pub tol: f64,
}

impl Default for LloydParams {
    fn default() -> Self {
        LloydParams {
            max_iter: 300,
            tol: 1e-4,
        }
    }
}

/// Centres, each point's cluster, the sum of squared distances to the centres, and the
/// iterations run.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansFit {
    pub centroids: Vec<Vec<f64>>,
    pub labels: Vec<usize>,
    pub inertia: f64,
    pub iterations: usize,
}

fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The closest centre to `p` (the first on a tie) and its squared distance.
fn nearest(p: &[f64], centroids: &[Vec<f64>]) -> (usize, f64) {
    let mut best = (0, f64::INFINITY);
    for (i, c) in centroids.iter().enumerate() {
        let d = squared_distance(p, c);
        if d < best.1 {
            best = (i, d);
        }
    }
    best
}

/// k clusters of `points` (all of one dimension): k-means++ from `rng`, then Lloyd. `k` must be
/// between 1 and the number of points.
pub fn kmeans(
    points: &[Vec<f64>],
    k: usize,
    params: LloydParams,
    rng: &mut FlintRng,
) -> Result<KMeansFit, String> {
    if k == 0 || k > points.len() {
        return Err(format!(
            "k-means needs 1 to {} clusters for {} points, got {k}",
            points.len(),
            points.len()
        ));
    }
    if let Some(p) = points.iter().find(|p| p.len() != points[0].len()) {
        return Err(format!(
            "k-means points of {} and {} dimensions",
            points[0].len(),
            p.len()
        ));
    }
    let init = plus_plus(points, k, rng);
    Ok(lloyd(points, init, params))
}

/// Greedy k-means++ (Arthur & Vassilvitskii; scikit-learn's variant): the first centre uniformly,
/// then each next one the best of 2 + ⌊ln k⌋ candidates drawn in proportion to the squared
/// distance to the nearest centre so far, "best" being the lowest resulting potential.
pub fn plus_plus(points: &[Vec<f64>], k: usize, rng: &mut FlintRng) -> Vec<Vec<f64>> {
    let trials = 2 + (k as f64).ln().floor() as usize;
    let first = rng.random_range(0..points.len());
    let mut centroids = vec![points[first].clone()];
    let mut closest: Vec<f64> = points
        .iter()
        .map(|p| squared_distance(p, &centroids[0]))
        .collect();
    while centroids.len() < k {
        let potential: f64 = closest.iter().sum();
        let mut best: Option<(usize, f64, Vec<f64>)> = None;
        for _ in 0..trials {
            let candidate = if potential > 0.0 {
                let target = rng.random::<f64>() * potential;
                let mut acc = 0.0;
                closest
                    .iter()
                    .position(|d| {
                        acc += d;
                        acc > target
                    })
                    .unwrap_or(points.len() - 1)
            } else {
                // Every point sits on a centre: any one will do.
                rng.random_range(0..points.len())
            };
            let with: Vec<f64> = points
                .iter()
                .zip(&closest)
                .map(|(p, d)| d.min(squared_distance(p, &points[candidate])))
                .collect();
            let total: f64 = with.iter().sum();
            if best.as_ref().is_none_or(|(_, t, _)| total < *t) {
                best = Some((candidate, total, with));
            }
        }
        let (chosen, _, with) = best.expect("at least two trials");
        centroids.push(points[chosen].clone());
        closest = with;
    }
    centroids
}

/// Lloyd's algorithm from the given centres.
pub fn lloyd(points: &[Vec<f64>], init: Vec<Vec<f64>>, params: LloydParams) -> KMeansFit {
    let dims = init.first().map_or(0, Vec::len);
    let k = init.len();
    let n = points.len() as f64;
    // scikit-learn's tolerance: tol × the mean over dimensions of the points' variance.
    let mut variance = 0.0;
    for d in 0..dims {
        let mean = points.iter().map(|p| p[d]).sum::<f64>() / n;
        variance += points.iter().map(|p| (p[d] - mean).powi(2)).sum::<f64>() / n;
    }
    let tol = params.tol * variance / dims.max(1) as f64;
    // scikit-learn's loop, step for step, so that its iteration count and stopping point match.
    let mut centroids = init;
    let mut previous: Option<Vec<usize>> = None;
    let mut iterations = 0;
    let mut strict = false;
    for i in 0..params.max_iter {
        iterations = i + 1;
        let labels: Vec<usize> = points.iter().map(|p| nearest(p, &centroids).0).collect();
        let mut sums = vec![vec![0.0; dims]; k];
        let mut counts = vec![0usize; k];
        for (p, &l) in points.iter().zip(&labels) {
            counts[l] += 1;
            sums[l].iter_mut().zip(p).for_each(|(s, x)| *s += x);
        }
        relocate_empty(points, &centroids, &labels, &mut sums, &mut counts);
        let moved: Vec<Vec<f64>> = sums
            .iter()
            .zip(&counts)
            .zip(&centroids)
            .map(|((s, &c), old)| match c {
                0 => old.clone(),
                c => s.iter().map(|x| x / c as f64).collect(),
            })
            .collect();
        let shift: f64 = moved
            .iter()
            .zip(&centroids)
            .map(|(a, b)| squared_distance(a, b))
            .sum();
        centroids = moved;
        if previous.as_ref() == Some(&labels) {
            strict = true;
            break;
        }
        if shift <= tol {
            break;
        }
        previous = Some(labels);
    }
    // Unless the labels settled, they are recomputed so that they match the final centres.
    let labels: Vec<usize> = match (strict, previous) {
        (true, Some(l)) => l,
        _ => points.iter().map(|p| nearest(p, &centroids).0).collect(),
    };
    let inertia = points
        .iter()
        .zip(&labels)
        .map(|(p, &l)| squared_distance(p, &centroids[l]))
        .sum();
    KMeansFit {
        centroids,
        labels,
        inertia,
        iterations,
    }
}

/// An empty cluster takes the points farthest from their own centres, one each, and they leave
/// their old cluster's sums (scikit-learn's `_relocate_empty_clusters`).
fn relocate_empty(
    points: &[Vec<f64>],
    centroids: &[Vec<f64>],
    labels: &[usize],
    sums: &mut [Vec<f64>],
    counts: &mut [usize],
) {
    let empty: Vec<usize> = (0..counts.len()).filter(|&c| counts[c] == 0).collect();
    if empty.is_empty() {
        return;
    }
    let mut far: Vec<(f64, usize)> = points
        .iter()
        .zip(labels)
        .enumerate()
        .map(|(i, (p, &l))| (squared_distance(p, &centroids[l]), i))
        .collect();
    // Farthest first; the lower index first on a tie, so the choice is deterministic.
    far.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (&cluster, &(_, i)) in empty.iter().zip(&far) {
        let from = labels[i];
        if counts[from] <= 1 {
            continue;
        }
        counts[from] -= 1;
        sums[from]
            .iter_mut()
            .zip(&points[i])
            .for_each(|(s, x)| *s -= x);
        counts[cluster] = 1;
        sums[cluster] = points[i].clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::derive_rng;

    #[test]
    fn separable_groups_are_found_whatever_the_seed() {
        // Three tight groups far apart: every seed must find them.
        let mut points = Vec::new();
        for (cx, cy) in [(0.0, 0.0), (100.0, 0.0), (0.0, 100.0)] {
            for i in 0..5 {
                points.push(vec![cx + f64::from(i) * 0.1, cy - f64::from(i) * 0.1]);
            }
        }
        for seed in 0..20 {
            let mut rng = derive_rng(seed, "kmeans-test", 0);
            let fit = kmeans(&points, 3, LloydParams::default(), &mut rng).unwrap();
            for group in fit.labels.chunks(5) {
                assert!(
                    group.iter().all(|&l| l == group[0]),
                    "seed {seed}: {group:?}"
                );
            }
            let mut distinct = fit.labels.clone();
            distinct.dedup();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "seed {seed}");
            assert!(fit.inertia < 1.0, "seed {seed}: {}", fit.inertia);
        }
    }

    /// scikit-learn 1.9.1's Lloyd from the same initial centres
    /// (`tests/oracles/kmeans_reference.py`): same labels, same iteration count, same centres.
    #[test]
    fn lloyd_matches_scikit_learn_on_fixed_data() {
        let points: Vec<Vec<f64>> = (0..40u32)
            .map(|i| {
                vec![
                    f64::from(i * 37 % 23),
                    f64::from(i * 11 % 17),
                    f64::from(i * 5 % 13),
                ]
            })
            .collect();
        /// Initial rows, then scikit-learn's labels, iterations, centres and inertia.
        type Case<'a> = (&'a [usize], &'a [usize], usize, &'a [[f64; 3]], f64);
        let cases: [Case; 2] = [
            (
                &[0, 5, 10],
                &[
                    1, 2, 1, 2, 2, 1, 2, 1, 0, 2, 1, 0, 2, 0, 0, 1, 0, 1, 0, 0, 2, 0, 1, 1, 2, 1,
                    2, 2, 1, 2, 1, 0, 2, 1, 0, 2, 0, 2, 1, 0,
                ],
                4,
                &[
                    [17.75, 4.583333333333333, 4.333333333333334],
                    [3.642857142857146, 6.071428571428572, 8.428571428571427],
                    [12.0, 12.714285714285714, 4.571428571428571],
                ],
                1385.6904761904764,
            ),
            (
                &[1, 2, 3, 4],
                &[
                    1, 3, 1, 2, 3, 1, 2, 1, 0, 3, 1, 0, 3, 2, 0, 1, 0, 1, 0, 0, 3, 2, 1, 1, 2, 1,
                    2, 3, 1, 2, 1, 0, 3, 1, 0, 3, 0, 3, 1, 0,
                ],
                5,
                &[
                    [17.400000000000002, 3.799999999999999, 5.1],
                    [3.642857142857146, 6.071428571428572, 8.428571428571427],
                    [17.285714285714285, 12.0, 1.7142857142857135],
                    [9.555555555555555, 12.333333333333334, 5.888888888888889],
                ],
                1160.4396825396825,
            ),
        ];
        for (init, labels, iterations, centres, inertia) in cases {
            let start = init.iter().map(|&i| points[i].clone()).collect();
            let fit = lloyd(&points, start, LloydParams::default());
            assert_eq!(fit.labels, labels, "init {init:?}");
            assert_eq!(fit.iterations, iterations, "init {init:?}");
            for (got, want) in fit.centroids.iter().zip(centres) {
                for (g, w) in got.iter().zip(want) {
                    // scikit-learn centres the data before Lloyd: the last bits may differ.
                    assert!(
                        (g - w).abs() < 1e-9,
                        "init {init:?}: {got:?} against {want:?}"
                    );
                }
            }
            assert!((fit.inertia - inertia).abs() < 1e-6, "{}", fit.inertia);
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let mut rng = derive_rng(1, "kmeans-test", 0);
        let p = vec![vec![1.0], vec![2.0]];
        assert!(kmeans(&p, 3, LloydParams::default(), &mut rng).is_err());
        assert!(kmeans(&p, 0, LloydParams::default(), &mut rng).is_err());
        let ragged = vec![vec![1.0], vec![2.0, 3.0]];
        assert!(kmeans(&ragged, 1, LloydParams::default(), &mut rng).is_err());
    }
}
