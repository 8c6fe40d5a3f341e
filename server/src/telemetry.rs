//! What the server counts as it happens, for its metrics: refusals by method and status code,
//! updates by outcome, aggregation and journal-sync times. Cheap atomics, kept whether or not
//! metrics are served; `exporter` serves them with the run's state.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Status codes and methods as label values: a refusal's labels come from these fixed sets,
/// never from what a caller sent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Refusal {
    pub method: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateOutcome {
    /// `accepted`, `duplicate`, or the refusal's status code.
    pub outcome: &'static str,
}

/// Counters and histograms updated as the server works (cheap atomics: kept whether or not
/// metrics are served).
#[derive(Debug, Clone)]
pub struct Telemetry {
    refused: Family<Refusal, Counter>,
    updates: Family<UpdateOutcome, Counter>,
    come_backs: Counter,
    aggregation: Histogram,
    journal_sync: Histogram,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            refused: Family::default(),
            updates: Family::default(),
            come_backs: Counter::default(),
            // 1 ms to about 4.4 min: a logistic regression's average to a large FedTMOS round.
            aggregation: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            // 50 µs to about 13 s: a page-cache sync to a stalled disk.
            journal_sync: Histogram::new(exponential_buckets(0.000_05, 4.0, 10)),
        }
    }
}

impl Telemetry {
    pub fn refused(&self, method: &'static str, code: tonic::Code) {
        let code = code_name(code);
        self.refused.get_or_create(&Refusal { method, code }).inc();
    }

    pub fn update(&self, outcome: Result<bool, tonic::Code>) {
        let outcome = match outcome {
            Ok(false) => "accepted",
            Ok(true) => "duplicate",
            Err(code) => code_name(code),
        };
        self.updates.get_or_create(&UpdateOutcome { outcome }).inc();
    }

    /// A client no round soon asks was told when to come back.
    pub fn come_back(&self) {
        self.come_backs.inc();
    }

    pub fn aggregated(&self, seconds: f64) {
        self.aggregation.observe(seconds);
    }

    pub fn journal_synced(&self, took: Duration) {
        self.journal_sync.observe(took.as_secs_f64());
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "flint_calls_refused",
            "Calls the server refused, by method and gRPC status code",
            self.refused.clone(),
        );
        registry.register(
            "flint_updates",
            "Model updates received, by outcome: accepted, duplicate, or the refusal's status code",
            self.updates.clone(),
        );
        registry.register(
            "flint_come_backs",
            "Clients told to come back later rather than wait on a call (sampled rounds that do not ask them soon)",
            self.come_backs.clone(),
        );
        registry.register(
            "flint_aggregation_seconds",
            "Time the strategy took to aggregate a closed round",
            self.aggregation.clone(),
        );
        registry.register(
            "flint_journal_sync_seconds",
            "Time one sync of the run's journal to disk took (a call is answered after it)",
            self.journal_sync.clone(),
        );
    }
}

/// A gRPC status code as gRPC's documentation spells it, lowercase (`invalid-argument`).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "ok",
        Cancelled => "cancelled",
        Unknown => "unknown",
        InvalidArgument => "invalid-argument",
        DeadlineExceeded => "deadline-exceeded",
        NotFound => "not-found",
        AlreadyExists => "already-exists",
        PermissionDenied => "permission-denied",
        ResourceExhausted => "resource-exhausted",
        FailedPrecondition => "failed-precondition",
        Aborted => "aborted",
        OutOfRange => "out-of-range",
        Unimplemented => "unimplemented",
        Internal => "internal",
        Unavailable => "unavailable",
        DataLoss => "data-loss",
        Unauthenticated => "unauthenticated",
    }
}
