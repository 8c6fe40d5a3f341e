//! Tsetlin Machines: a bit-parallel clause bank and the machines built on it.

pub mod bank;
mod block_outputs;
pub mod checkpoint;
pub mod coalesced;
pub mod composite;
pub mod conv;
mod deferred;
mod handoff;
pub mod infer;
pub mod multiclass;
pub mod parts;
mod patch_literals;
pub mod section;
#[cfg(test)]
pub(crate) mod testing;

pub use bank::{ClauseBank, ExcludedAt, FeedbackMasks};
pub use coalesced::CoalescedTm;
pub use multiclass::MultiClassTm;
pub use section::{ClauseBanks, TmSection};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::params::{ParamResult, at_least, require};

/// Which classes a training example trains against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

/// The Tsetlin Machine's settings, every one decided (`[tm]` as written is [`TmSection`]). The
/// defaults are the image machine's: pyTsetlinMachine's (unweighted, boost on, 8 bits) with
/// MNIST's size; [`TmHyper::check`] says what each allows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TmHyper {
    /// Clauses per class (multi-class) or in the shared bank (coalesced); even for polarity halves.
    #[serde(deserialize_with = "at_least::<2, _, _>")]
    pub clauses: usize,
    /// Voting margin T: class sums are clamped to [−T, T] during training.
    pub t: i32,
    /// Specificity s: literals are forgotten with probability 1/s.
    pub s: f64,
    /// Bits per automaton state; 2^(bits−1) states per action.
    #[serde(deserialize_with = "at_least::<2, _, _>")]
    pub state_bits: usize,
    /// Integer clause weights (Phoulady et al.): +1 on Type I of a firing clause, −1 on Type II
    /// while above 1.
    pub weighted: bool,
    /// True literals of a firing clause under Type I are always reinforced (not with (s−1)/s).
    pub boost_true_positive: bool,
    /// Which classes an example trains against: `uniform`, `focused` or `all` (one-vs-all).
    pub negative_sampling: NegativeSampling,
}

impl Default for TmHyper {
    fn default() -> Self {
        TmHyper {
            clauses: 100,
            t: 1000,
            s: 10.0,
            state_bits: 8,
            weighted: false,
            boost_true_positive: true,
            negative_sampling: NegativeSampling::Uniform,
        }
    }
}

impl TmHyper {
    /// The settings, refused where a value is out of its range.
    pub fn check(self) -> ParamResult<TmHyper> {
        require(
            "tm.clauses",
            "even and at least 2",
            self.clauses,
            self.clauses >= 2 && self.clauses.is_multiple_of(2),
        )?;
        require("tm.t", "at least 1", self.t, self.t >= 1)?;
        require(
            "tm.s",
            "at least 1",
            self.s,
            self.s.is_finite() && self.s >= 1.0,
        )?;
        require(
            "tm.state_bits",
            "2 to 16",
            self.state_bits,
            (2..=16).contains(&self.state_bits),
        )?;
        Ok(self)
    }
}
