//! Tsetlin Machines: a bit-parallel clause bank and the machines built on it.

pub mod bank;
pub mod checkpoint;
pub mod coalesced;
pub mod composite;
pub mod conv;
pub mod infer;
pub mod multiclass;
pub mod parts;
#[cfg(test)]
pub(crate) mod testing;

pub use bank::{ClauseBank, ExcludedAt, FeedbackMasks};
pub use coalesced::CoalescedTm;
pub use multiclass::MultiClassTm;

use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, parse_name_or, require};

/// `[tm]` as written; [`TmSection::check`] makes it a [`TmHyper`], which says what each means.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmSection {
    pub clauses: Option<usize>,
    pub t: Option<i32>,
    pub s: Option<f64>,
    pub state_bits: Option<usize>,
    pub weighted: Option<bool>,
    pub boost_true_positive: Option<bool>,
    pub negative_sampling: Option<String>,
}

/// Which classes a training example trains against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NegativeSampling {
    /// One, uniformly among the other classes (Granmo 2018).
    Uniform,
    /// One, in proportion to how strongly each other class votes for the example (T + v_c).
    Focused,
    /// Every other class (one-vs-all: the FedTMOS code's `mc_tm_update`). The classes then
    /// learn independently of each other, so threaded training runs them in parallel.
    All,
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

impl TmSection {
    pub fn check(&self) -> ParamResult<TmHyper> {
        let clauses = self.clauses.unwrap_or(100);
        let t = self.t.unwrap_or(1000);
        let s = self.s.unwrap_or(10.0);
        let state_bits = self.state_bits.unwrap_or(8);
        Ok(TmHyper {
            clauses: require(
                "tm.clauses",
                "even and at least 2",
                clauses,
                clauses >= 2 && clauses.is_multiple_of(2),
            )?,
            t: require("tm.t", "at least 1", t, t >= 1)?,
            s: require("tm.s", "at least 1", s, s.is_finite() && s >= 1.0)?,
            state_bits: require(
                "tm.state_bits",
                "2 to 16",
                state_bits,
                (2..=16).contains(&state_bits),
            )?,
            weighted: self.weighted.unwrap_or(false),
            boost_true_positive: self.boost_true_positive.unwrap_or(true),
            negative_sampling: parse_name_or(
                "tm.negative_sampling",
                self.negative_sampling.as_deref(),
                NegativeSampling::Uniform,
            )?,
        })
    }
}
