//! `[robust]`: how a round's updates are combined where a strategy averages. The
//! mean, as the papers have it, is the default; against clients that lie, the coordinate-wise
//! median or trimmed mean of Yin et al. (2018, "Byzantine-robust distributed learning: towards
//! optimal statistical rates", §3, options I and II), each update's change clipped to a norm,
//! and a cap on any one client's aggregation weight. Pure functions over the round's vectors in
//! client-id order, so a replayed round combines exactly as it did.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::params::{ParamError, ParamResult, require};

/// How the round's vectors become one, coordinate by coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// The weighted mean: each strategy's own weights (sizes, AHP, scores), as its paper.
    Mean,
    /// The median of each coordinate, every client alike (Yin et al., option I).
    Median,
    /// The mean of each coordinate once its `trim` largest and smallest shares are dropped,
    /// every client alike (Yin et al., option II).
    TrimmedMean,
}

/// What an update's change is clipped to before it is combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Clip {
    /// No clipping.
    None,
    /// The round's median change: no scale to choose, and an outlier's change is brought to a
    /// typical one.
    Median,
    /// `clip_norm`, in the model's own units.
    Norm,
}

/// `[robust]`: the rule, the clipping and the weight cap. The defaults change nothing: the mean,
/// no clipping, no cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RobustHyper {
    /// `mean` (the papers'), `median` or `trimmed-mean` (coordinate-wise, Yin et al. 2018).
    pub rule: Rule,
    /// `trimmed-mean`: the share of clients dropped at each end of every coordinate, below 0.5
    /// (default 0.2: one of five at each end).
    pub trim: f64,
    /// Each update's distance from the round's coordinate-wise median, clipped in L2 norm:
    /// `none`, `median` (to the round's median distance) or `norm` (to `clip_norm`).
    pub clip: Clip,
    /// `clip = "norm"`: the largest L2 distance from the round's median an update keeps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip_norm: Option<f64>,
    /// The largest share of the aggregation weight one client may have, in (0, 1] (default 1:
    /// no cap; twice the equal share of the updates combined for the strategies whose weights
    /// clients declare, where the file has no `[robust]`); what a cap takes is shared among the others in proportion, and a capped
    /// client's update is brought within the round's median distance (as `clip = "median"`
    /// does for all), so that the cap bounds what it moves. Under `mean` only.
    pub max_weight: f64,
    /// A cap of this many equal shares of the updates combined (a round's, a cluster's), as
    /// the strategies whose weights clients declare take by default; never written in a file.
    #[serde(skip)]
    #[schemars(skip)]
    pub equal_shares: Option<f64>,
}

impl Default for RobustHyper {
    fn default() -> Self {
        RobustHyper {
            rule: Rule::Mean,
            trim: 0.2,
            clip: Clip::None,
            clip_norm: None,
            max_weight: 1.0,
            equal_shares: None,
        }
    }
}

impl RobustHyper {
    /// The settings, refused where a value is out of range or two keys disagree.
    pub fn check(self) -> ParamResult<RobustHyper> {
        require(
            "robust.trim",
            "at least 0 and below 0.5",
            self.trim,
            (0.0..0.5).contains(&self.trim),
        )?;
        require(
            "robust.max_weight",
            "above 0 and at most 1",
            self.max_weight,
            self.max_weight > 0.0 && self.max_weight <= 1.0,
        )?;
        match (self.clip, self.clip_norm) {
            (Clip::Norm, None) => {
                return Err(ParamError::Inconsistent(
                    "robust.clip = \"norm\" needs robust.clip_norm, the largest change's L2 norm"
                        .into(),
                ));
            }
            (Clip::Norm, Some(n)) => {
                require("robust.clip_norm", "positive", n, n.is_finite() && n > 0.0)?;
            }
            (_, Some(_)) => {
                return Err(ParamError::Inconsistent(
                    "robust.clip_norm is read only with robust.clip = \"norm\"".into(),
                ));
            }
            (_, None) => {}
        }
        if self.rule != Rule::Mean && self.max_weight < 1.0 {
            return Err(ParamError::Inconsistent(format!(
                "robust.max_weight caps the mean's weights; robust.rule = {:?} gives every client the same",
                crate::params::name_of(&self.rule)
            )));
        }
        Ok(self)
    }

    /// The default of the strategies whose weights come from what clients declare (AHP's
    /// criteria, n_k): the mean with no client above twice the equal share of the updates
    /// combined (none for two or fewer). A summary within the caps took 0.483 of five clients'
    /// AHP weight; a capped client's change is clipped too, so one liar moves the mean little,
    /// and the papers' weights (the largest 0.239 of five on MAGIC) are untouched. A share of
    /// what is combined, so that a sampled round or a cluster gets its own.
    pub fn capped_at_twice_the_share() -> RobustHyper {
        RobustHyper {
            equal_shares: Some(2.0),
            ..RobustHyper::default()
        }
    }

    /// The cap on one client's share when `n` updates are combined.
    fn max_weight_of(&self, n: usize) -> f64 {
        let shares = self
            .equal_shares
            .map_or(1.0, |k| (k / n.max(1) as f64).min(1.0));
        self.max_weight.min(shares)
    }

    /// Whether this changes anything: the papers' plain mean.
    pub fn is_plain(&self) -> bool {
        self.rule == Rule::Mean
            && self.clip == Clip::None
            && self.max_weight >= 1.0
            && self.equal_shares.is_none()
    }

    /// The round's vectors (one per client, in id order, all one length) combined into one, with
    /// `weights` (summing to 1) under `mean`. Returns the combined vector and the weight each
    /// client had in it.
    ///
    /// Clipping measures each vector from the round's coordinate-wise median rather than from
    /// the model the round started from: the servers keep no model between rounds (a resumed
    /// server combines a replayed round exactly as before), and a minority cannot move the
    /// median far.
    pub fn combine(&self, vectors: &[&[f64]], weights: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let Some(first) = vectors.first() else {
            return (Vec::new(), Vec::new());
        };
        // The mean's weights, capped once: which clients the cap holds decides what is clipped.
        let max_weight = self.max_weight_of(vectors.len());
        let capped_weights = (self.rule == Rule::Mean).then(|| cap_weights(weights, max_weight));
        let clipped = match self.clip {
            Clip::None => capped_weights
                .as_ref()
                .and_then(|c| clip_capped(vectors, &at_the_cap(weights, c, max_weight))),
            Clip::Median => Some(clip(vectors, None)),
            Clip::Norm => Some(clip(vectors, self.clip_norm)),
        };
        let owned: Vec<&[f64]> = match &clipped {
            Some(c) => c.iter().map(Vec::as_slice).collect(),
            None => vectors.to_vec(),
        };
        let n = vectors.len();
        match (self.rule, capped_weights) {
            (Rule::Mean, Some(weights)) => {
                let mut out = vec![0.0; first.len()];
                for (v, a) in owned.iter().zip(&weights) {
                    for (o, x) in out.iter_mut().zip(v.iter()) {
                        *o += a * x;
                    }
                }
                (out, weights)
            }
            (Rule::TrimmedMean, _) => {
                let cut = (self.trim * n as f64).floor() as usize;
                let out = coordinate_wise(&owned, |column| trimmed_mean(column, cut));
                (out, vec![1.0 / n as f64; n])
            }
            // The median (the mean always has its weights).
            _ => (coordinate_wise(&owned, median), vec![1.0 / n as f64; n]),
        }
    }
}

/// Each coordinate's column of values, sorted, through `f`.
fn coordinate_wise(vectors: &[&[f64]], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let len = vectors.first().map_or(0, |v| v.len());
    let mut column = vec![0.0; vectors.len()];
    (0..len)
        .map(|i| {
            for (c, v) in column.iter_mut().zip(vectors) {
                *c = v[i];
            }
            column.sort_by(f64::total_cmp);
            f(&column)
        })
        .collect()
}

/// The median of sorted values (the mean of the two middle ones for an even count).
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The mean of sorted values without the `cut` smallest and `cut` largest (the median when
/// nothing would be left).
fn trimmed_mean(sorted: &[f64], cut: usize) -> f64 {
    if 2 * cut >= sorted.len() {
        return median(sorted);
    }
    let kept = &sorted[cut..sorted.len() - cut];
    kept.iter().sum::<f64>() / kept.len() as f64
}

/// Each vector's distance from the coordinate-wise median scaled down to at most `bound` in L2
/// norm, or to the round's median distance without a bound.
fn clip(vectors: &[&[f64]], bound: Option<f64>) -> Vec<Vec<f64>> {
    let centre = coordinate_wise(vectors, median);
    let norms: Vec<f64> = vectors
        .iter()
        .map(|v| {
            v.iter()
                .zip(&centre)
                .map(|(x, c)| (x - c) * (x - c))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let bound = bound.unwrap_or_else(|| {
        let mut sorted = norms.clone();
        sorted.sort_by(f64::total_cmp);
        median(&sorted)
    });
    vectors
        .iter()
        .zip(&norms)
        .map(|(v, &norm)| {
            let scale = if norm > bound { bound / norm } else { 1.0 };
            v.iter()
                .zip(&centre)
                .map(|(x, c)| c + scale * (x - c))
                .collect()
        })
        .collect()
}

/// The clients the cap holds: where it changed the weights, those left at `max` (a client
/// above it, or one the others' excess pushed to it).
fn at_the_cap(weights: &[f64], capped: &[f64], max: f64) -> Vec<bool> {
    if capped == weights {
        return vec![false; weights.len()];
    }
    capped.iter().map(|&w| w >= max - 1e-12).collect()
}

/// The vectors of the clients the cap holds brought within the round's median distance of the
/// coordinate-wise median, the others as they are (`None` where it holds none): a cap on the
/// coefficient alone would still let a capped client's vector, however far, move the mean as
/// far as it likes.
fn clip_capped(vectors: &[&[f64]], held: &[bool]) -> Option<Vec<Vec<f64>>> {
    if !held.contains(&true) {
        return None;
    }
    let clipped = clip(vectors, None);
    let kept = vectors
        .iter()
        .zip(clipped)
        .zip(held)
        .map(|((v, c), &held)| if held { c } else { v.to_vec() })
        .collect();
    Some(kept)
}

/// Weights summing to 1 with none above `max` (where `max` times the count reaches 1; else
/// equal weights): each capped weight's excess goes to the others in proportion to theirs.
pub fn cap_weights(weights: &[f64], max: f64) -> Vec<f64> {
    let n = weights.len();
    if weights.iter().all(|&w| w <= max) {
        return weights.to_vec();
    }
    if max * n as f64 <= 1.0 {
        return vec![1.0 / n as f64; n];
    }
    let mut capped = vec![false; n];
    let mut out = weights.to_vec();
    // Each pass caps at least one more weight, so at most n passes.
    for _ in 0..n {
        let free_mass: f64 = (0..n).filter(|&i| !capped[i]).map(|i| weights[i]).sum();
        let left = 1.0 - max * capped.iter().filter(|&&c| c).count() as f64;
        for i in 0..n {
            out[i] = match (capped[i], free_mass > 0.0) {
                (true, _) => max,
                (false, true) => weights[i] / free_mass * left,
                (false, false) => left / capped.iter().filter(|&&c| !c).count() as f64,
            };
        }
        let over: Vec<usize> = (0..n).filter(|&i| !capped[i] && out[i] > max).collect();
        if over.is_empty() {
            break;
        }
        over.into_iter().for_each(|i| capped[i] = true);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hyper(rule: Rule, clip: Clip) -> RobustHyper {
        RobustHyper {
            rule,
            clip,
            ..RobustHyper::default()
        }
        .check()
        .unwrap()
    }

    /// Four honest clients near 1 and one that sends 1000 with 96 % of the weight (an insider
    /// capturing the AHP weight with a summary within the caps).
    fn captured() -> (Vec<Vec<f64>>, Vec<f64>) {
        let vectors = vec![
            vec![1.0, -1.0],
            vec![1.1, -0.9],
            vec![0.9, -1.1],
            vec![1.0, -1.0],
            vec![1000.0, 1000.0],
        ];
        (vectors, vec![0.01, 0.01, 0.01, 0.01, 0.96])
    }

    fn views(v: &[Vec<f64>]) -> Vec<&[f64]> {
        v.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn the_default_is_the_papers_weighted_mean() {
        let (v, w) = captured();
        let (out, weights) = RobustHyper::default().combine(&views(&v), &w);
        assert!(RobustHyper::default().is_plain());
        assert_eq!(weights, w);
        assert!(
            (out[0] - (0.04 * 1.0 + 0.96 * 1000.0)).abs() < 1e-9,
            "{out:?}"
        );
    }

    /// Yin et al. (2018) §3, option I: the coordinate-wise median ignores the weights and the
    /// one outlier.
    #[test]
    fn the_median_takes_each_coordinates_middle_value() {
        let (v, w) = captured();
        let (out, weights) = hyper(Rule::Median, Clip::None).combine(&views(&v), &w);
        assert_eq!(out, vec![1.0, -1.0]);
        assert_eq!(weights, vec![0.2; 5]);
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), 2.5);
    }

    /// Option II: β = 0.2 of five clients drops one at each end of every coordinate.
    #[test]
    fn the_trimmed_mean_drops_each_end() {
        let (v, w) = captured();
        let (out, _) = hyper(Rule::TrimmedMean, Clip::None).combine(&views(&v), &w);
        assert!((out[0] - (1.0 + 1.0 + 1.1) / 3.0).abs() < 1e-12, "{out:?}");
        assert!((out[1] - (-1.0 - 1.0 - 0.9) / 3.0).abs() < 1e-12, "{out:?}");
        assert_eq!(
            trimmed_mean(&[1.0, 2.0], 1),
            1.5,
            "nothing left: the median"
        );
    }

    #[test]
    fn clipping_brings_each_distance_within_its_bound() {
        let (v, w) = captured();
        let centre = [1.0, -1.0];
        for c in clip(&views(&v), Some(0.05)) {
            let norm = ((c[0] - centre[0]).powi(2) + (c[1] - centre[1]).powi(2)).sqrt();
            assert!(norm <= 0.05 + 1e-12, "{c:?}");
        }
        assert_eq!(
            clip(&views(&v), Some(0.5))[0],
            vec![1.0, -1.0],
            "within the bound: kept"
        );
        // To the round's median distance: the outlier moves no further than a typical client,
        // so even with 96 % of the weight it barely moves the mean.
        let (out, _) = hyper(Rule::Mean, Clip::Median).combine(&views(&v), &w);
        assert!(
            (out[0] - 1.0).abs() < 0.2 && (out[1] + 1.0).abs() < 0.2,
            "{out:?}"
        );
    }

    #[test]
    fn a_weight_cap_shares_the_excess_in_proportion() {
        let capped = cap_weights(&[0.01, 0.01, 0.01, 0.01, 0.96], 0.25);
        assert!((capped.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((capped[4] - 0.25).abs() < 1e-12, "{capped:?}");
        assert!((capped[0] - 0.1875).abs() < 1e-12, "{capped:?}");
        // Two above the cap, and the first pass pushes a third over it.
        let capped = cap_weights(&[0.5, 0.3, 0.15, 0.05], 0.3);
        assert!(capped.iter().all(|&w| w <= 0.3 + 1e-12), "{capped:?}");
        assert!(
            (capped.iter().sum::<f64>() - 1.0).abs() < 1e-12,
            "{capped:?}"
        );
        assert_eq!(
            cap_weights(&[0.9, 0.1], 0.4),
            vec![0.5, 0.5],
            "no room: equal"
        );
        let under = [0.239_305_919_202_841_08, 0.5, 0.260_694_080_797_158_9];
        assert_eq!(
            cap_weights(&under, 0.5),
            under.to_vec(),
            "none over: as they were"
        );
    }

    /// A cap bounds what the capped client moves, not only its coefficient: the outlier at
    /// 0.25 of the weight is brought to a typical client's distance first, and the honest
    /// clients, under the cap, keep their vectors.
    #[test]
    fn a_capped_client_moves_the_mean_no_further_than_a_typical_one() {
        let (v, w) = captured();
        let capped = RobustHyper {
            max_weight: 0.25,
            ..RobustHyper::default()
        }
        .check()
        .unwrap();
        let (out, weights) = capped.combine(&views(&v), &w);
        assert!((weights[4] - 0.25).abs() < 1e-12, "{weights:?}");
        assert!(
            (out[0] - 1.0).abs() < 0.1 && (out[1] + 1.0).abs() < 0.1,
            "{out:?}"
        );
        // Without the clip the cap alone would leave 0.25 × 1000 in the mean.
        let honest = cap_weights(&w, 0.25);
        let unclipped: f64 = v.iter().zip(&honest).map(|(x, a)| a * x[0]).sum();
        assert!(unclipped > 200.0, "{unclipped}");
        // Clients under the cap keep their vectors.
        let held = at_the_cap(&w, &honest, 0.25);
        let kept = clip_capped(&views(&v), &held).unwrap();
        assert_eq!(&kept[..4], &v[..4]);
        // A client the others' excess pushes to the cap is held too; none where nothing is capped.
        let pushed = [0.5, 0.3, 0.15, 0.05];
        let held = at_the_cap(&pushed, &cap_weights(&pushed, 0.3), 0.3);
        assert_eq!(held, [true, true, true, false]);
        assert_eq!(at_the_cap(&w, &w, 0.25), [false; 5]);
        assert!(clip_capped(&views(&v), &[false; 5]).is_none());
    }

    /// The default cap is twice the equal share of whatever is combined: a round of ten, a
    /// cluster of four, none for two.
    #[test]
    fn the_default_cap_is_a_share_of_the_updates_combined() {
        let r = RobustHyper::capped_at_twice_the_share();
        assert!(!r.is_plain());
        assert_eq!(r.max_weight_of(10), 0.2);
        assert_eq!(r.max_weight_of(4), 0.5);
        assert_eq!(r.max_weight_of(2), 1.0);
        let a: [f64; 4] = [0.0; 4];
        let b: [f64; 4] = [1.0; 4];
        let four: Vec<&[f64]> = vec![&a, &a, &a, &b];
        let (_, w) = r.combine(&four, &[0.1, 0.1, 0.1, 0.7]);
        assert!((w[3] - 0.5).abs() < 1e-12, "{w:?}");
        let (_, w) = r.combine(&four[2..], &[0.3, 0.7]);
        assert_eq!(w, vec![0.3, 0.7], "two: no cap");
    }

    #[test]
    fn settings_that_contradict_each_other_are_refused() {
        let bad = [
            RobustHyper {
                trim: 0.5,
                ..RobustHyper::default()
            },
            RobustHyper {
                max_weight: 0.0,
                ..RobustHyper::default()
            },
            RobustHyper {
                clip: Clip::Norm,
                ..RobustHyper::default()
            },
            RobustHyper {
                clip_norm: Some(1.0),
                ..RobustHyper::default()
            },
            RobustHyper {
                rule: Rule::Median,
                max_weight: 0.3,
                ..RobustHyper::default()
            },
        ];
        for b in bad {
            assert!(b.check().is_err(), "{b:?}");
        }
    }
}
