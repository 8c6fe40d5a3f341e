//! `[churn]`: how selected clients fail to answer, as a cross-device federation sees it
//! (Bonawitz et al. 2019, §2.2 and §9: devices drop out mid-round and some are slow). Drawn
//! from (seed, client, round), so a run and its resumed twin lose the same updates.

use std::time::Duration;

use rand::RngExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rng::derive_rng;
use crate::{ClientId, FlintError, Result, Round};

/// `[churn]`, as written and checked: probabilities per selected client and round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ChurnSection {
    /// Probability that a selected client vanishes mid-round: it takes its download and sends
    /// no update (nor its evaluation of the download); it asks again for a later round.
    pub dropout: f64,
    /// Probability that a selected client is a straggler: its update leaves `straggle_secs`
    /// after its training ends.
    pub straggle: f64,
    /// How long a straggler holds its update.
    pub straggle_secs: f64,
    /// Under `[secagg]`: probability that a selected client vanishes right after its masked
    /// input is sent, before it helps unmask (its input still counts: the others' shares
    /// rebuild its self-mask).
    pub masked_dropout: f64,
}

impl Default for ChurnSection {
    fn default() -> Self {
        ChurnSection {
            dropout: 0.0,
            straggle: 0.0,
            straggle_secs: 30.0,
            masked_dropout: 0.0,
        }
    }
}

impl ChurnSection {
    /// No client drops out or straggles (what a file without `[churn]` says).
    pub fn is_none(&self) -> bool {
        self.dropout == 0.0 && self.straggle == 0.0 && self.masked_dropout == 0.0
    }

    pub fn check(self) -> Result<ChurnSection> {
        let probabilities = [
            ("dropout", self.dropout),
            ("straggle", self.straggle),
            ("masked_dropout", self.masked_dropout),
        ];
        for (key, p) in probabilities {
            if !(p.is_finite() && (0.0..1.0).contains(&p)) {
                return Err(FlintError::Config(format!(
                    "churn.{key} must be a probability in [0, 1), got {p}"
                )));
            }
        }
        if !(self.straggle_secs.is_finite() && (0.0..=86_400.0).contains(&self.straggle_secs)) {
            return Err(FlintError::Config(format!(
                "churn.straggle_secs must be between 0 and 86400 seconds, got {}",
                self.straggle_secs
            )));
        }
        Ok(self)
    }

    /// Whether `client` vanishes in `round`.
    pub fn drops(&self, seed: u64, client: ClientId, round: Round) -> bool {
        self.dropout > 0.0 && draw(seed, "dropout", client, round) < self.dropout
    }

    /// Whether `client` vanishes in `round` right after its masked input.
    pub fn drops_after_masking(&self, seed: u64, client: ClientId, round: Round) -> bool {
        self.masked_dropout > 0.0
            && draw(seed, "masked-dropout", client, round) < self.masked_dropout
    }

    /// How long `client` holds its update of `round`, if it straggles then.
    pub fn straggles(&self, seed: u64, client: ClientId, round: Round) -> Option<Duration> {
        (self.straggle > 0.0 && draw(seed, "straggle", client, round) < self.straggle)
            .then(|| Duration::from_secs_f64(self.straggle_secs))
    }
}

/// A uniform draw in [0, 1) for one client and round.
fn draw(seed: u64, purpose: &str, client: ClientId, round: Round) -> f64 {
    derive_rng(seed, &format!("{purpose}-{round}"), client).random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_drops_about_its_share_and_the_same_clients_every_time() {
        let churn = ChurnSection {
            dropout: 0.2,
            ..ChurnSection::default()
        };
        let drops = |seed| {
            (1..=2_000)
                .filter(|&c| churn.drops(seed, c, 3))
                .collect::<Vec<_>>()
        };
        let once = drops(7);
        assert_eq!(once, drops(7));
        assert_ne!(once, drops(8));
        let share = once.len() as f64 / 2_000.0;
        assert!((0.17..0.23).contains(&share), "{share}");
        assert!(!ChurnSection::default().drops(7, 1, 1));
    }

    #[test]
    fn probabilities_out_of_range_are_refused_by_name() {
        let bad = ChurnSection {
            straggle: 1.0,
            ..ChurnSection::default()
        };
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains("churn.straggle must be a probability"), "{e}");
        let bad = ChurnSection {
            dropout: f64::NAN,
            ..ChurnSection::default()
        };
        assert!(bad.check().is_err());
    }
}
