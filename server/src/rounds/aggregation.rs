//! A closed round's aggregation, handed out of [`super::Rounds`] to run off its lock and off the
//! async threads, and what comes back to [`super::Rounds::install`].

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use flint_common::strategy::{Aggregate, ServerStrategy};
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
}

impl AggregationJob {
    pub fn round(&self) -> Round {
        self.round
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
            };
        }
        let strategy = &mut self.strategy;
        let (round, joined, updates) = (self.round, &self.joined, &self.updates);
        // A panicking strategy must not take the server with it: the results so far are kept
        // and the run ends (see `install`).
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            strategy.aggregate(round, joined, updates)
        }));
        let seconds = started.elapsed().as_secs_f64();
        let panicked = outcome.is_err();
        let result = outcome.unwrap_or_else(|_| {
            Err(FlintError::Model(format!(
                "aggregation of round {round} panicked"
            )))
        });
        Aggregated {
            round,
            strategy: self.strategy,
            result,
            panicked,
            abandoned: false,
            seconds,
        }
    }
}

impl Aggregated {
    pub fn round(&self) -> Round {
        self.round
    }

    /// How long the strategy's aggregation took.
    pub fn seconds(&self) -> f64 {
        self.seconds
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
}
