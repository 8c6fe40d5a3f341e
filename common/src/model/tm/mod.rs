//! Tsetlin Machines: a bit-parallel clause bank and the machines built on it.

pub mod bank;
pub mod checkpoint;
pub mod coalesced;
pub mod composite;
pub mod conv;
pub mod infer;
pub mod multiclass;
#[cfg(test)]
pub(crate) mod testing;

pub use bank::{ClauseBank, FeedbackMasks};
pub use coalesced::CoalescedTm;
pub use multiclass::MultiClassTm;

use serde::{Deserialize, Serialize};

/// Hyper-parameters as written in an experiment (`[tm]`); see [`TmHyper`] for their meaning.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmParams {
    pub clauses: Option<usize>,
    pub t: Option<i32>,
    pub s: Option<f64>,
    pub state_bits: Option<usize>,
    pub weighted: Option<bool>,
    pub boost_true_positive: Option<bool>,
    pub negative_sampling: Option<String>,
}

/// How the one negative class of a training example is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NegativeSampling {
    /// Uniformly among the other classes (Granmo 2018).
    Uniform,
    /// In proportion to how strongly each other class votes for the example (T + v_c).
    Focused,
}

/// Checked hyper-parameters; the defaults are pyTsetlinMachine's (unweighted, boost on, 8 bits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TmHyper {
    /// Clauses per class (multi-class) or in the shared bank (coalesced); even for polarity halves.
    pub clauses: usize,
    /// Voting margin: class sums are clamped to [−T, T] during training.
    pub t: i32,
    /// Specificity: literals are forgotten with probability 1/s.
    pub s: f64,
    /// Bits per automaton state; 2^(bits−1) states per action.
    pub state_bits: usize,
    /// Integer clause weights (Phoulady et al.): +1 on Type I of a firing clause, −1 on Type II
    /// while above 1.
    pub weighted: bool,
    /// True literals of a firing clause under Type I are always reinforced (not with (s−1)/s).
    pub boost_true_positive: bool,
    pub negative_sampling: NegativeSampling,
}

impl TmHyper {
    pub fn from_params(p: &TmParams) -> Result<TmHyper, String> {
        let h = TmHyper {
            clauses: p.clauses.unwrap_or(100),
            t: p.t.unwrap_or(1000),
            s: p.s.unwrap_or(10.0),
            state_bits: p.state_bits.unwrap_or(8),
            weighted: p.weighted.unwrap_or(false),
            boost_true_positive: p.boost_true_positive.unwrap_or(true),
            negative_sampling: match p.negative_sampling.as_deref().unwrap_or("uniform") {
                "uniform" => NegativeSampling::Uniform,
                "focused" => NegativeSampling::Focused,
                other => {
                    return Err(format!(
                        "unknown tm.negative_sampling {other:?}; expected uniform or focused"
                    ));
                }
            },
        };
        if h.clauses < 2 || !h.clauses.is_multiple_of(2) {
            return Err(format!(
                "tm.clauses must be even and at least 2, got {}",
                h.clauses
            ));
        }
        if h.t < 1 {
            return Err(format!("tm.t must be at least 1, got {}", h.t));
        }
        if !(h.s.is_finite() && h.s >= 1.0) {
            return Err(format!("tm.s must be at least 1, got {}", h.s));
        }
        if !(2..=16).contains(&h.state_bits) {
            return Err(format!(
                "tm.state_bits must be 2 to 16, got {}",
                h.state_bits
            ));
        }
        Ok(h)
    }
}
