//! `[tm]` as an experiment writes it: every key may be left out, and what is left out takes the
//! default of the data the machine reads — the papers' values on images, a size from the
//! table's classes on a table ([`TmHyper::for_table`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{NegativeSampling, TmHyper};
use crate::params::at_least_or_unset;

/// `[tm]`: the Tsetlin Machine (`model = "tm"`, TPFL's coalesced machine, FedTMOS's
/// convolutional one). A key left out takes its default for the data: on MNIST and
/// Fashion-MNIST the papers' machine (100 clauses, T = 1000, s = 10, unweighted); on a table a
/// machine sized by its classes (docs/guide/strategies.md, "A Tsetlin Machine's size on a
/// table"). A run's resolved file writes every key with the value it ran with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TmSection {
    /// Clauses per class (multi-class) or in the shared bank (coalesced); even for polarity
    /// halves (on a table: sized by its classes).
    #[serde(
        deserialize_with = "at_least_or_unset::<2, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 100))]
    pub clauses: Option<usize>,
    /// Voting margin T: class sums are clamped to [−T, T] during training (on a table: from
    /// the clauses).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1000))]
    pub t: Option<i32>,
    /// Specificity s: literals are forgotten with probability 1/s (on a table: 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 10.0))]
    pub s: Option<f64>,
    /// Bits per automaton state; 2^(bits−1) states per action.
    #[serde(
        deserialize_with = "at_least_or_unset::<2, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 8))]
    pub state_bits: Option<usize>,
    /// Integer clause weights (Phoulady et al.): +1 on Type I of a firing clause, −1 on Type II
    /// while above 1 (on a table: true).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub weighted: Option<bool>,
    /// True literals of a firing clause under Type I are always reinforced (not with (s−1)/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub boost_true_positive: Option<bool>,
    /// Which classes an example trains against: `uniform`, `focused` or `all` (one-vs-all).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "uniform"))]
    pub negative_sampling: Option<NegativeSampling>,
}

impl TmSection {
    /// The written keys over `base`, which fills in the others.
    pub fn over(&self, base: TmHyper) -> TmHyper {
        TmHyper {
            clauses: self.clauses.unwrap_or(base.clauses),
            t: self.t.unwrap_or(base.t),
            s: self.s.unwrap_or(base.s),
            state_bits: self.state_bits.unwrap_or(base.state_bits),
            weighted: self.weighted.unwrap_or(base.weighted),
            boost_true_positive: self.boost_true_positive.unwrap_or(base.boost_true_positive),
            negative_sampling: self.negative_sampling.unwrap_or(base.negative_sampling),
        }
    }
}

impl From<TmHyper> for TmSection {
    fn from(h: TmHyper) -> Self {
        TmSection {
            clauses: Some(h.clauses),
            t: Some(h.t),
            s: Some(h.s),
            state_bits: Some(h.state_bits),
            weighted: Some(h.weighted),
            boost_true_positive: Some(h.boost_true_positive),
            negative_sampling: Some(h.negative_sampling),
        }
    }
}

/// How a machine's `clauses` count: one bank shared by all classes, or a bank per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClauseBanks {
    /// TPFL's coalesced machine (`model = "tm"`).
    Shared,
    /// FedTMOS's, the ensemble's and FedTM's multi-class machines.
    PerClass,
}

impl TmHyper {
    /// The machine for a table of `classes` classes, where `[tm]` leaves a key out. Weighted
    /// clauses, s = 5, and a size by the classes: a shared bank of 100 clauses per class (at
    /// least 200, at most 2,000) with T a quarter of it, or 100 clauses per class with T half of
    /// them. Chosen on Breast Cancer and scikit-learn's digits and checked on four other tables
    /// (docs/results/tables.md); the papers' image machine (T = 1000 over 100 clauses) leaves
    /// a table's class sums far below T, so every clause keeps learning the same few rows, and
    /// on a table FedTMOS's composite then holds machines with no clause.
    ///
    /// T follows the clauses the machine has, `clauses` where `[tm]` writes them.
    pub fn for_table(classes: usize, banks: ClauseBanks, clauses: Option<usize>) -> TmHyper {
        let (clauses, t) = match banks {
            ClauseBanks::Shared => {
                let clauses = clauses.unwrap_or((100 * classes).clamp(200, 2000));
                (clauses, clauses / 4)
            }
            ClauseBanks::PerClass => {
                let clauses = clauses.unwrap_or(TmHyper::default().clauses);
                (clauses, clauses / 2)
            }
        };
        TmHyper {
            clauses,
            t: i32::try_from(t.max(1)).unwrap_or(i32::MAX),
            s: 5.0,
            weighted: true,
            ..TmHyper::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_keys_win_and_the_rest_come_from_the_base() {
        let written = TmSection {
            clauses: Some(40),
            weighted: Some(false),
            ..TmSection::default()
        };
        let table = TmHyper::for_table(3, ClauseBanks::Shared, None);
        let h = written.over(table);
        assert_eq!((h.clauses, h.weighted), (40, false));
        assert_eq!((h.t, h.s), (table.t, table.s));
        assert_eq!(TmSection::from(h).over(TmHyper::default()), h);
    }

    #[test]
    fn a_tables_machine_grows_with_its_classes_within_bounds() {
        let size = |c, written| {
            let h = TmHyper::for_table(c, ClauseBanks::Shared, written);
            (h.clauses, h.t)
        };
        assert_eq!(size(2, None), (200, 50));
        assert_eq!(size(10, None), (1000, 250));
        assert_eq!(size(26, None), (2000, 500));
        assert_eq!(size(2, Some(2000)), (2000, 500));
        assert_eq!(size(2, Some(2)), (2, 1));
        let per_class = TmHyper::for_table(26, ClauseBanks::PerClass, None);
        assert_eq!((per_class.clauses, per_class.t), (100, 50));
        let written = TmHyper::for_table(3, ClauseBanks::PerClass, Some(40));
        assert_eq!((written.clauses, written.t), (40, 20));
        for h in [TmHyper::for_table(2, ClauseBanks::Shared, None), per_class] {
            assert!(h.weighted && h.s == 5.0);
            assert!(h.check().is_ok());
        }
    }
}
