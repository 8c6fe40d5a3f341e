//! `[secagg]`: secure aggregation (Bonawitz et al. 2017, [`crate::secagg`]) of the averaging
//! strategies' updates (FedAvg, AHP-FedAvg, Blind and Blended FCM, FedAvg and FedProx of a
//! CNN, TPFL and IFCA per cluster): the server sees the weighted sum of a round's updates (TPFL: of each
//! cluster's), never one of them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::RoundPolicy;
use crate::secagg::{MAX_GROUP, MAX_SPARSE_GROUP};
use crate::strategy::StrategySpec;
use crate::strategy::privacy::{DpHyper, Mechanism};
use crate::strategy::robust::RobustHyper;
use crate::{FlintError, Result};

/// `[secagg]`, as written and checked. Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SecAggSection {
    /// Masks each client's update so that the server learns only the round's weighted sum
    /// (default false).
    pub enabled: bool,
    /// The largest |value| of one client's weighted update: the fixed-point ring is sized so
    /// that a round's sum cannot wrap; a client whose update goes beyond it sends nothing and
    /// says so (default 100; TPFL's integer weights: 1e6).
    pub bound: Option<f64>,
    /// Seconds each stage after the key adverts waits for the clients it expects before it goes
    /// on without them (default 30).
    pub stage_secs: f64,
    /// SecAgg+ (Bell et al. 2020): how many neighbours each client shares its keys and masks
    /// with, an even number from 2 to 254 (default: every other client of a group of up to 255,
    /// Bonawitz et al.'s protocol; beyond, the even number above 4 log₂ of the group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<u32>,
}

impl Default for SecAggSection {
    fn default() -> Self {
        SecAggSection {
            enabled: false,
            bound: None,
            stage_secs: 30.0,
            neighbours: None,
        }
    }
}

/// The fewest clients a secure round may ask: with two, each would learn the other's update
/// from the sum.
pub const MIN_GROUP: usize = 3;

impl SecAggSection {
    pub fn is_off(&self) -> bool {
        !self.enabled
    }

    /// The section checked, its bound resolved (`default_bound`: the strategy's).
    pub fn check(self, default_bound: f64) -> Result<SecAggSection> {
        let bad = |m: String| Err(FlintError::Config(m));
        let bound = self.bound.unwrap_or(default_bound);
        if !(bound.is_finite() && bound > 0.0 && bound <= 1e6) {
            return bad(format!("secagg.bound must be in (0, 1e6], got {bound}"));
        }
        if !(self.stage_secs.is_finite() && self.stage_secs > 0.0 && self.stage_secs <= 86_400.0) {
            return bad(format!(
                "secagg.stage_secs must be in (0, 86400] seconds, got {}",
                self.stage_secs
            ));
        }
        if let Some(k) = self.neighbours {
            let fits = k >= 2 && k % 2 == 0 && (k as usize) < MAX_GROUP;
            if !fits {
                return bad(format!(
                    "secagg.neighbours must be an even number from 2 to {}, got {k}",
                    MAX_GROUP - 1
                ));
            }
        }
        Ok(SecAggSection {
            bound: Some(bound),
            ..self
        })
    }

    /// SecAgg+'s neighbours per client, where set.
    pub fn degree(&self) -> Option<usize> {
        self.neighbours.map(|k| k as usize)
    }

    /// The bound, as [`SecAggSection::check`] resolved it.
    pub fn bound(&self) -> f64 {
        self.bound.unwrap_or(100.0)
    }

    pub fn stage_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.stage_secs)
    }
}

/// Whether the run can aggregate securely: a strategy whose server needs only the weighted
/// sum, the plain mean, no noise the server adds per update, and a group a round can share
/// among.
pub(super) fn check_secagg(
    strategy: &StrategySpec,
    robust: &RobustHyper,
    dp: Option<&DpHyper>,
    policy: &RoundPolicy,
    clients: usize,
) -> Result<()> {
    let bad = |m: String| Err(FlintError::Config(m));
    if !strategy.params().takes_secagg() {
        return bad(format!(
            "[secagg] applies to strategies fedavg, fedavg-ahp, blind-fcm, blended-fcm, \
             fedavg-cnn, fedprox, tpfl and ifca, whose server needs only (per cluster) a \
             weighted sum of the updates; \
             strategy {} reads each client's update ({})",
            strategy.name(),
            strategy.params().why_not_secagg()
        ));
    }
    if !robust.is_plain() {
        return bad(
            "[secagg] hides each client's values, which a [robust] rule (median, trimmed mean, \
             clip, weight cap) needs: remove one of the two"
                .into(),
        );
    }
    if dp.is_some_and(|d| d.mechanism == Mechanism::Central) {
        return bad(
            "dp.mechanism = \"central\" clips each client's update at the server, which [secagg] \
             hides: use dp.mechanism = \"local\" with it"
                .into(),
        );
    }
    let group = policy.selection.selected(clients);
    if !(MIN_GROUP..=MAX_SPARSE_GROUP).contains(&group) {
        return bad(format!(
            "[secagg] shares each round's masks among its clients: {MIN_GROUP} to \
             {MAX_SPARSE_GROUP} of them (beyond {MAX_GROUP}, among SecAgg+'s neighbours), but a \
             round here asks {group}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SecAgg+'s degree: an even number of neighbours from 2 to 254 (a neighbourhood of at most
    /// 255, GF(256)'s share count); anything else is refused with the range.
    #[test]
    fn neighbours_are_an_even_number_a_neighbourhood_can_share_among() {
        let with = |k| SecAggSection {
            enabled: true,
            neighbours: Some(k),
            ..SecAggSection::default()
        };
        for k in [2, 40, 254] {
            assert_eq!(with(k).check(100.0).unwrap().degree(), Some(k as usize));
        }
        for k in [0, 3, 256] {
            let e = with(k).check(100.0).unwrap_err().to_string();
            assert!(e.contains("even number from 2 to 254"), "{k}: {e}");
        }
        assert_eq!(
            SecAggSection::default().check(100.0).unwrap().degree(),
            None
        );
    }
}
