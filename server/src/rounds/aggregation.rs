//! A closed round's aggregation, handed out of [`super::Rounds`] to run off its lock and off the
//! async threads, and what comes back to [`super::Rounds::install`].

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use flint_common::secagg::SecAggServer;
use flint_common::secagg::ring::FixedPoint;
use flint_common::strategy::{Aggregate, GroupSum, ServerStrategy};
use flint_common::wire::Update;
use flint_common::wire::proto::DataSummary;
use flint_common::{ClientId, FlintError, Result, Round};

/// A closed round's aggregation, to be run off the lock: the strategy travels with it and
/// comes back in [`Aggregated`].
#[must_use = "a closed round stays closed until its aggregation is installed"]
pub struct AggregationJob {
    pub(super) round: Round,
    pub(super) strategy: Box<dyn ServerStrategy>,
    pub(super) joined: BTreeMap<ClientId, DataSummary>,
    pub(super) updates: BTreeMap<ClientId, Update>,
    /// Why the round is not aggregated: it timed out short of `min_updates`.
    pub(super) abandoned: Option<String>,
    /// Under `[secagg]`: what the round summed (its `updates` are then empty).
    pub(super) secure: Option<SecureInput>,
}

/// A secure round's input to its aggregation.
pub enum SecureInput {
    /// Each summable group's masked inputs and the shares that unmask their sum (taken off the
    /// lock: rebuilding the masks is the slow part).
    Masked(Vec<MaskedGroup>),
    /// The sums as the journal kept them.
    Summed(BTreeMap<u32, GroupSum>),
}

/// One group's masked inputs, its ring and its survivors' weights.
pub struct MaskedGroup {
    pub id: u32,
    pub server: Box<SecAggServer>,
    pub fixed: FixedPoint,
    pub weights: BTreeMap<ClientId, f64>,
}

impl SecureInput {
    /// Each group's survivors' weights and Σ weight × update.
    fn sums(self) -> Result<BTreeMap<u32, GroupSum>> {
        match self {
            SecureInput::Masked(groups) => groups
                .into_iter()
                .map(|g| {
                    let sum = g.fixed.decode(&g.server.sum()?);
                    Ok((
                        g.id,
                        GroupSum {
                            weights: g.weights,
                            sum,
                        },
                    ))
                })
                .collect(),
            SecureInput::Summed(sums) => Ok(sums),
        }
    }
}

impl AggregationJob {
    pub fn round(&self) -> Round {
        self.round
    }

    /// Whether it sums a secure round (journaled with its sum once aggregated, not at its
    /// close: a replay needs the sum, which the masked inputs alone cannot give back).
    pub fn is_secure_sum(&self) -> bool {
        self.secure.is_some()
    }

    /// Aggregates; the slow part (blocking: call it off the async threads).
    pub fn run(mut self) -> Aggregated {
        if let Some(why) = self.abandoned.take() {
            return Aggregated {
                round: self.round,
                strategy: self.strategy,
                result: Err(FlintError::Model(why)),
                panicked: false,
                abandoned: true,
                seconds: 0.0,
                secure_sum: None,
                secure: false,
            };
        }
        if let Some(input) = self.secure.take() {
            return self.run_secure(input);
        }
        let strategy = &mut self.strategy;
        let (round, joined, updates) = (self.round, &self.joined, &self.updates);
        let outcome = guarded(round, || strategy.aggregate(round, joined, updates));
        Aggregated::of(round, self.strategy, outcome, None)
    }

    fn run_secure(mut self, input: SecureInput) -> Aggregated {
        let round = self.round;
        // Unmasking the sum is part of the round's aggregation time.
        let started = Instant::now();
        let (secure_sum, (result, panicked, _)) = match input.sums() {
            Ok(sums) => {
                let (strategy, joined) = (&mut self.strategy, &self.joined);
                let outcome = guarded(round, || strategy.aggregate_groups(round, joined, &sums));
                (Some(sums), outcome)
            }
            // Shares that do not rebuild their secrets: the round is abandoned, as a stage
            // under the threshold would leave it (and journaled so: a replay abandons it too).
            Err(e) => {
                let why = format!("round {round}'s secure sum could not be unmasked: {e}");
                let failed = (Err(FlintError::Model(why)), false, 0.0);
                let mut done = Aggregated::of(round, self.strategy, failed, None);
                done.abandoned = true;
                done.secure = true;
                return done;
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        let timed = (result, panicked, seconds);
        let mut done = Aggregated::of(round, self.strategy, timed, secure_sum);
        done.secure = true;
        done
    }
}

/// Runs a strategy's aggregation, timed; a panicking strategy must not take the server with it:
/// the results so far are kept and the run ends (see `install`). Whether it panicked.
fn guarded(
    round: Round,
    aggregate: impl FnOnce() -> Result<Aggregate>,
) -> (Result<Aggregate>, bool, f64) {
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(aggregate));
    let seconds = started.elapsed().as_secs_f64();
    let panicked = outcome.is_err();
    let result = outcome.unwrap_or_else(|_| {
        Err(FlintError::Model(format!(
            "aggregation of round {round} panicked"
        )))
    });
    (result, panicked, seconds)
}

impl Aggregated {
    fn of(
        round: Round,
        strategy: Box<dyn ServerStrategy>,
        (result, panicked, seconds): (Result<Aggregate>, bool, f64),
        secure_sum: Option<BTreeMap<u32, GroupSum>>,
    ) -> Aggregated {
        Aggregated {
            round,
            strategy,
            result,
            panicked,
            abandoned: false,
            seconds,
            secure_sum,
            secure: false,
        }
    }

    pub fn round(&self) -> Round {
        self.round
    }

    /// How long the strategy's aggregation took.
    pub fn seconds(&self) -> f64 {
        self.seconds
    }

    /// A secure round's sums by group (survivors' weights and sum), for the journal.
    pub fn secure_sum(&self) -> Option<&BTreeMap<u32, GroupSum>> {
        self.secure_sum.as_ref()
    }

    /// A secure round abandoned at its aggregation (its sum could not be unmasked): journaled
    /// as closed by its timeout, which a replay abandons again.
    pub fn secure_abandoned(&self) -> bool {
        self.secure && self.secure_sum.is_none()
    }
}

/// A finished [`AggregationJob`], for [`Rounds::install`].
pub struct Aggregated {
    pub(super) round: Round,
    pub(super) strategy: Box<dyn ServerStrategy>,
    pub(super) result: Result<Aggregate>,
    /// The strategy panicked: its state is not to be trusted, so the run ends.
    pub(super) panicked: bool,
    /// The round timed out short of `min_updates`: not aggregated (`result` says why).
    pub(super) abandoned: bool,
    pub(super) seconds: f64,
    pub(super) secure_sum: Option<BTreeMap<u32, GroupSum>>,
    /// It aggregated a secure round.
    pub(super) secure: bool,
}
