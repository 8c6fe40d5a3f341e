//! The Analytic Hierarchy Process as the AHP-FedAvg paper uses it (§3.1–3.3, §3.6).
//!
//! Priorities come from the geometric-mean method; consistency from λmax (the principal
//! eigenvalue), CI = (λmax − n)/(n − 1) and CR = CI / RCI with the paper's Table 2. A client's
//! weight is A_k = Σ_c P_c · x_kc / Σ_j x_jc: each criterion is sum-normalised across the clients
//! of the round and combined with the priorities (see docs/papers/ahp.md §4–§5 for why this reproduces
//! the paper's weights).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::params::{ParamError, ParamResult};

/// The paper's criteria, in the order of its preference matrix (docs/papers/ahp.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AhpCriterion {
    /// Declared compute power of the client machine.
    ComputeGhz,
    /// Class balance of the training split, its Gini impurity `1 − Σ p²`.
    Gini,
    /// Training samples.
    Size,
}

/// Random consistency index by matrix size (the paper's Table 2).
const RCI: [f64; 9] = [0.0, 0.0, 0.0, 0.5799, 0.9, 1.12, 1.25, 1.33, 1.39];

/// The paper's Figure 1, rows and columns (compute GHz, Gini, size).
pub fn paper_matrix() -> Vec<Vec<f64>> {
    vec![
        vec![1.0, 1.0 / 3.0, 7.0],
        vec![3.0, 1.0, 9.0],
        vec![1.0 / 7.0, 1.0 / 9.0, 1.0],
    ]
}

/// `[ahp]`: the criteria and their pairwise preferences (AHP paper §3.1–3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AhpSection {
    /// Criteria in the order of the matrix rows: `compute-ghz`, `gini`, `size` (`gini` and
    /// `size` where the clients are declared by `client_count`, which gives no compute speed).
    pub criteria: Vec<AhpCriterion>,
    /// Pairwise preference matrix (Saaty scale); by default the paper's Figure 1, between the
    /// criteria chosen (Gini over size, 9, for `["gini", "size"]`).
    pub preference: Vec<Vec<f64>>,
}

impl Default for AhpSection {
    fn default() -> Self {
        AhpSection {
            criteria: vec![
                AhpCriterion::ComputeGhz,
                AhpCriterion::Gini,
                AhpCriterion::Size,
            ],
            preference: paper_matrix(),
        }
    }
}

impl AhpSection {
    /// The default where the clients are declared by `client_count`, which gives no compute
    /// speed: the paper's criteria without `compute-ghz`, and its Figure 1 preferences between
    /// the other two (Gini over size, 9), priorities 0.9 and 0.1.
    pub fn without_compute_speed() -> AhpSection {
        let criteria = vec![AhpCriterion::Gini, AhpCriterion::Size];
        AhpSection {
            preference: paper_preferences(&criteria),
            criteria,
        }
    }

    /// The matrix the check uses: the one written, or where the file leaves the paper's
    /// Figure 1 as it is but names fewer criteria, its rows and columns for those.
    fn matrix(&self) -> Vec<Vec<f64>> {
        let all = AhpSection::default().criteria;
        match self.preference == paper_matrix() && self.criteria != all {
            true => paper_preferences(&self.criteria),
            false => self.preference.clone(),
        }
    }
}

/// The paper's Figure 1 between `criteria`, in their order.
fn paper_preferences(criteria: &[AhpCriterion]) -> Vec<Vec<f64>> {
    let paper = paper_matrix();
    let at = |c: &AhpCriterion| *c as usize;
    criteria
        .iter()
        .map(|i| criteria.iter().map(|j| paper[at(i)][at(j)]).collect())
        .collect()
}

/// Checked AHP settings with their priority vector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AhpHyper {
    pub criteria: Vec<AhpCriterion>,
    pub matrix: Vec<Vec<f64>>,
    pub priorities: Priorities,
}

impl AhpSection {
    pub fn check(&self) -> ParamResult<AhpHyper> {
        let criteria = self.criteria.clone();
        for (i, c) in criteria.iter().enumerate() {
            if criteria[..i].contains(c) {
                return Err(ParamError::Inconsistent(format!(
                    "ahp criterion {} appears twice",
                    crate::params::name_of(c)
                )));
            }
        }
        let matrix = self.matrix();
        let priorities = priorities(&matrix).map_err(ParamError::Inconsistent)?;
        if matrix.len() != criteria.len() {
            return Err(ParamError::Inconsistent(format!(
                "ahp.preference is {}×{} but there are {} criteria",
                matrix.len(),
                matrix.len(),
                criteria.len()
            )));
        }
        if priorities.cr > 0.1 {
            tracing::warn!(
                cr = priorities.cr,
                "ahp preference matrix has consistency ratio above 0.1; using it anyway"
            );
        }
        Ok(AhpHyper {
            criteria,
            matrix,
            priorities,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Priorities {
    pub weights: Vec<f64>,
    pub lambda_max: f64,
    pub ci: f64,
    pub cr: f64,
}

/// Geometric-mean priorities and consistency of a pairwise preference matrix (§3.2).
pub fn priorities(matrix: &[Vec<f64>]) -> Result<Priorities, String> {
    let n = matrix.len();
    if n == 0 || n >= RCI.len() {
        return Err(format!(
            "ahp.preference must have 1 to {} rows, got {n}",
            RCI.len() - 1
        ));
    }
    for (i, row) in matrix.iter().enumerate() {
        if row.len() != n {
            return Err(format!(
                "ahp.preference row {} has {} entries, expected {n}",
                i + 1,
                row.len()
            ));
        }
        if let Some(v) = row.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return Err(format!(
                "ahp.preference row {} has {v}; entries must be positive",
                i + 1
            ));
        }
        if (row[i] - 1.0).abs() > 1e-9 {
            return Err(format!(
                "ahp.preference diagonal entry {} is {}, expected 1",
                i + 1,
                row[i]
            ));
        }
        for (j, v) in row.iter().enumerate() {
            // Written fractions like 0.333 for 1/3 are fine; 2 against 2 is not.
            if (v * matrix[j][i] - 1.0).abs() > 0.01 {
                return Err(format!(
                    "ahp.preference is not reciprocal: a[{}][{}] = {v} but a[{}][{}] = {}, expected {:.4}",
                    i + 1,
                    j + 1,
                    j + 1,
                    i + 1,
                    matrix[j][i],
                    1.0 / v
                ));
            }
        }
    }
    let gm: Vec<f64> = matrix
        .iter()
        .map(|row| row.iter().product::<f64>().powf(1.0 / n as f64))
        .collect();
    let total: f64 = gm.iter().sum();
    let weights: Vec<f64> = gm.iter().map(|g| g / total).collect();
    let lambda_max = principal_eigenvalue(matrix);
    let ci = if n > 1 {
        (lambda_max - n as f64) / (n as f64 - 1.0)
    } else {
        0.0
    };
    let cr = if RCI[n] > 0.0 { ci / RCI[n] } else { 0.0 };
    Ok(Priorities {
        weights,
        lambda_max,
        ci,
        cr,
    })
}

/// Power iteration: a positive matrix has a unique largest (Perron) eigenvalue.
fn principal_eigenvalue(matrix: &[Vec<f64>]) -> f64 {
    let n = matrix.len();
    let mut v = vec![1.0 / n as f64; n];
    let mut lambda = 0.0;
    for _ in 0..1000 {
        let av: Vec<f64> = matrix
            .iter()
            .map(|row| row.iter().zip(&v).map(|(a, x)| a * x).sum())
            .collect();
        let sum: f64 = av.iter().sum();
        let next = sum / v.iter().sum::<f64>();
        v = av.iter().map(|x| x / sum).collect();
        if (next - lambda).abs() < 1e-15 {
            return next;
        }
        lambda = next;
    }
    lambda
}

/// Gini impurity of a class distribution, `1 − Σ p²` (0.5 for a balanced binary client): the
/// AHP paper's balance criterion. Not FedTMOS's `GiniIndex`, which is `Σ p²`.
pub fn gini_impurity(class_counts: &[u64]) -> f64 {
    if class_counts.iter().all(|&c| c == 0) {
        return 0.0;
    }
    1.0 - crate::metrics::gini_index(class_counts)
}

/// One client's value of every criterion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CriteriaValues {
    pub compute_ghz: f64,
    pub gini: f64,
    pub size: f64,
}

impl CriteriaValues {
    fn get(&self, c: AhpCriterion) -> f64 {
        match c {
            AhpCriterion::ComputeGhz => self.compute_ghz,
            AhpCriterion::Gini => self.gini,
            AhpCriterion::Size => self.size,
        }
    }
}

/// A_k = Σ_c P_c · x_kc / Σ_j x_jc over the given clients (§3.6); the weights sum to 1.
pub fn client_weights(hyper: &AhpHyper, clients: &[CriteriaValues]) -> Vec<f64> {
    let mut weights = vec![0.0; clients.len()];
    let mut used = 0.0;
    for (c, p) in hyper.criteria.iter().zip(&hyper.priorities.weights) {
        let total: f64 = clients.iter().map(|x| x.get(*c)).sum();
        if total <= 0.0 {
            // Every client scores 0 on this criterion: it cannot tell them apart.
            continue;
        }
        used += p;
        for (w, x) in weights.iter_mut().zip(clients) {
            *w += p * x.get(*c) / total;
        }
    }
    if used > 0.0 {
        weights.iter_mut().for_each(|w| *w /= used);
    } else {
        weights
            .iter_mut()
            .for_each(|w| *w = 1.0 / clients.len() as f64);
    }
    weights
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_matrix_priorities_and_consistency() {
        // AHP paper §3.3: priorities (0.29, 0.66, 0.05), λmax 3.08, CR 0.068.
        let p = priorities(&paper_matrix()).unwrap();
        for (got, want) in p.weights.iter().zip([0.2897, 0.6554, 0.0549]) {
            assert!((got - want).abs() <= 0.0005, "{:?}", p.weights);
        }
        assert!((p.lambda_max - 3.080).abs() <= 0.005, "{}", p.lambda_max);
        assert!((p.cr - 0.069).abs() <= 0.002, "{}", p.cr);
    }

    #[test]
    fn table3_clients_get_the_papers_weights() {
        // AHP paper Table 3 (GHz, Gini, size) and the weights printed under it.
        let table = [
            (4.5, 0.5, 4000.0),
            (3.0, 0.4, 6300.0),
            (1.5, 0.48, 3500.0),
            (4.5, 0.49, 1100.0),
            (3.0, 0.31, 4120.0),
        ];
        let clients: Vec<CriteriaValues> = table
            .iter()
            .map(|&(compute_ghz, gini, size)| CriteriaValues {
                compute_ghz,
                gini,
                size,
            })
            .collect();
        let hyper = AhpSection::default().check().unwrap();
        let w = client_weights(&hyper, &clients);
        for (got, want) in w.iter().zip([0.242, 0.199, 0.171, 0.222, 0.164]) {
            assert!((got - want).abs() <= 0.01, "{w:?}");
        }
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    /// Criteria named by hand, the preferences left at the default: the paper's Figure 1
    /// between them, in the order named (it used to refuse a 3×3 matrix for two criteria).
    #[test]
    fn criteria_named_by_hand_take_the_papers_preferences_between_them() {
        use AhpCriterion::*;
        let with = |criteria: Vec<AhpCriterion>| {
            let section = AhpSection {
                criteria,
                ..Default::default()
            };
            section.check().unwrap()
        };
        let gs = with(vec![Gini, Size]);
        assert_eq!(gs.matrix, AhpSection::without_compute_speed().preference);
        assert!((gs.priorities.weights[0] - 0.9).abs() < 1e-12, "{gs:?}");
        let sg = with(vec![Size, Gini]);
        assert_eq!(sg.matrix, vec![vec![1.0, 1.0 / 9.0], vec![9.0, 1.0]]);
        let cs = with(vec![ComputeGhz, Size]);
        assert_eq!(cs.matrix, vec![vec![1.0, 7.0], vec![1.0 / 7.0, 1.0]]);
        // A matrix written by hand is taken as written, and checked against the criteria.
        let written = AhpSection {
            criteria: vec![Gini, Size],
            preference: vec![vec![1.0]],
        };
        assert!(written.check().is_err());
    }

    #[test]
    fn gini_of_table3_counts() {
        assert_eq!(gini_impurity(&[2000, 2000]), 0.5);
        assert!((gini_impurity(&[4500, 1800]) - 0.408).abs() < 0.001);
        assert_eq!(gini_impurity(&[]), 0.0);
    }

    #[test]
    fn bad_matrices_are_refused_with_the_reason() {
        let e = priorities(&[vec![1.0, 2.0], vec![2.0, 1.0]]).unwrap_err();
        assert!(e.contains("not reciprocal"), "{e}");
        let e = priorities(&[vec![1.0, 2.0]]).unwrap_err();
        assert!(e.contains("row 1 has 2 entries"), "{e}");
        let e = priorities(&[vec![1.0, -2.0], vec![-0.5, 1.0]]).unwrap_err();
        assert!(e.contains("positive"), "{e}");
        // A 3×3 matrix of one's own for two criteria (the paper's is narrowed to them).
        let section = AhpSection {
            criteria: vec![AhpCriterion::Gini, AhpCriterion::Size],
            preference: vec![
                vec![1.0, 2.0, 4.0],
                vec![0.5, 1.0, 2.0],
                vec![0.25, 0.5, 1.0],
            ],
        };
        let e = section.check().unwrap_err().to_string();
        assert!(e.contains("3×3 but there are 2 criteria"), "{e}");
    }

    #[test]
    fn an_inconsistent_matrix_is_accepted_with_its_cr() {
        let m = vec![
            vec![1.0, 9.0, 1.0 / 9.0],
            vec![1.0 / 9.0, 1.0, 9.0],
            vec![9.0, 1.0 / 9.0, 1.0],
        ];
        assert!(priorities(&m).unwrap().cr > 0.1);
    }
}
