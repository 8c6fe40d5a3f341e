//! The round state machine (docs/PROTOCOL.md §A round). Pure: time comes in as `now`, no I/O,
//! so every transition is testable in-process. The service drives it and wakes long-polls on
//! changes.
//!
//! Closing a round hands work back to the shell (the raft-rs `Ready` pattern): the round's
//! updates and the strategy leave as an [`AggregationJob`], which the shell runs off the lock and
//! off the async threads, then gives back to [`Rounds::install`]. Meanwhile the round is
//! `Aggregating`: joins, long-polls, health checks and refusals are answered as usual.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use flint_common::config::RoundPolicy;
use flint_common::metrics::ConfusionMatrix;
use flint_common::rng::derive_rng;
use flint_common::strategy::{
    Aggregate, Downloads, LocalMetrics, Predictor, RoundReport, ServerStrategy, StrategyState,
    UpdateDecoder,
};
use flint_common::wire::Update;
use flint_common::wire::proto::{DataSummary, Payload};
use flint_common::{ClientId, FlintError, Result, Round};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClosedBy {
    AllAnswered,
    /// `server.clients_per_round` updates were in before every over-selected client answered.
    TargetReached,
    Timeout,
}

/// A closed round, as recorded in the results.
#[derive(Debug, Clone, Serialize)]
pub struct RoundRecord {
    pub round: Round,
    pub selected: Vec<ClientId>,
    pub participants: Vec<ClientId>,
    pub closed_by: ClosedBy,
    pub seconds: f64,
    /// The strategy's aggregation alone (decoded updates in, encoded downloads out).
    pub aggregation_seconds: f64,
    pub weights: BTreeMap<ClientId, f64>,
    pub report: RoundReport,
    pub local: BTreeMap<ClientId, LocalMetrics>,
}

#[derive(Debug)]
enum Phase {
    WaitingForClients,
    Open {
        round: Round,
        opened_at: Instant,
        selected: BTreeSet<ClientId>,
        updates: BTreeMap<ClientId, Update>,
    },
    /// Closed; its aggregation runs outside (see [`AggregationJob`]).
    Aggregating {
        round: Round,
        opened_at: Instant,
        closed_at: Instant,
        closed_by: ClosedBy,
        selected: BTreeSet<ClientId>,
        participants: Vec<ClientId>,
    },
    Finished {
        at: Instant,
    },
}

/// What a long-poll gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Task {
    /// Train for `round`, starting from `download`.
    Train {
        round: Round,
        deadline: Instant,
        download: Option<Payload>,
    },
    /// The run is over; `download` is the final model for the last evaluation.
    Finished { download: Option<Payload> },
    /// Nothing for this client yet.
    Wait,
}

/// A closed round's aggregation, to be run off the lock: the strategy travels with it and
/// comes back in [`Aggregated`].
#[must_use = "a closed round stays closed until its aggregation is installed"]
pub struct AggregationJob {
    round: Round,
    strategy: Box<dyn ServerStrategy>,
    joined: BTreeMap<ClientId, DataSummary>,
    updates: BTreeMap<ClientId, Update>,
    /// Why the round is not aggregated: it timed out short of `min_updates`.
    abandoned: Option<String>,
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
    round: Round,
    strategy: Box<dyn ServerStrategy>,
    result: Result<Aggregate>,
    /// The strategy panicked: its state is not to be trusted, so the run ends.
    panicked: bool,
    /// The round timed out short of `min_updates`: not aggregated (`result` says why).
    abandoned: bool,
    seconds: f64,
}

/// What [`Rounds::accept_update`] did.
#[must_use]
pub struct Accepted {
    /// A repeat of an update already taken.
    pub duplicate: bool,
    /// The update completed the round: run this, then install it.
    pub closed: Option<AggregationJob>,
}

impl Accepted {
    pub const DUPLICATE: Accepted = Accepted {
        duplicate: true,
        closed: None,
    };
}

/// Decoding one update, as the round state hands it out: run it off the lock (the codes cost
/// milliseconds a machine), then give the result to [`Rounds::accept_decoded`].
pub struct UpdateDecoding {
    decoder: Arc<dyn UpdateDecoder>,
    client: ClientId,
    round: Round,
    features: usize,
}

impl UpdateDecoding {
    /// Whether it belongs on a blocking thread ([`UpdateDecoder::is_costly`]).
    pub fn is_costly(&self) -> bool {
        self.decoder.is_costly()
    }

    pub fn run(self, update: &Payload) -> Result<DecodedUpdate> {
        Ok(DecodedUpdate {
            update: self.decoder.decode(self.client, self.features, update)?,
            client: self.client,
            round: self.round,
        })
    }
}

/// An update read by [`UpdateDecoding::run`], for the round it was read for.
pub struct DecodedUpdate {
    client: ClientId,
    round: Round,
    update: Update,
}

/// Bounds on what a Join may declare, whatever the client says.
pub const MAX_SAMPLES: u64 = 1 << 40;
pub const MAX_GHZ: f64 = 1000.0;
/// Where the experiment does not fix the feature count, the most a first joiner may declare.
pub const MAX_FEATURES: usize = 1 << 16;

pub struct Rounds {
    policy: RoundPolicy,
    /// `None` only while its round aggregates.
    strategy: Option<Box<dyn ServerStrategy>>,
    /// The strategy's, kept while it aggregates: updates are read off the lock.
    decoder: Arc<dyn UpdateDecoder>,
    classes: usize,
    phase: Phase,
    joined: BTreeMap<ClientId, DataSummary>,
    /// The model's input width: from the experiment where it says it
    /// ([`with_features`](Self::with_features)), else from the first Join (bounded).
    features: Option<usize>,
    /// Whether `features` came from the experiment (a Join cannot change it).
    features_declared: bool,
    downloads: Option<Downloads>,
    history: Vec<RoundRecord>,
    evals: BTreeMap<Round, BTreeMap<ClientId, ConfusionMatrix>>,
    /// Per round, the sums the status shows, kept as reports come: summing every report of
    /// every round at each status made it cost rounds × clients.
    eval_sums: BTreeMap<Round, EvalSums>,
    /// Per round, the evaluations on the run's shared test set (one client holds it): the model
    /// and the baselines its download carries.
    global_evals: BTreeMap<Round, BTreeMap<Predictor, ConfusionMatrix>>,
    /// The client that holds the shared test set, if the strategy has one.
    global_holder: Option<ClientId>,
    counts: RoundCounts,
    /// Per round, the selected clients whose update came after the round closed.
    late: BTreeMap<Round, BTreeSet<ClientId>>,
}

/// A round's evaluations on the clients' own test rows, summed in the order they came.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EvalSums {
    pub reports: usize,
    pub accuracy: f64,
    pub f1: f64,
}

impl EvalSums {
    /// Reports, mean accuracy and mean F1.
    pub fn means(&self) -> (usize, f64, f64) {
        let n = self.reports.max(1) as f64;
        (self.reports, self.accuracy / n, self.f1 / n)
    }
}

/// Rounds opened and closed so far, counted where it happens (not from the history, which has
/// no record of a round whose aggregation failed); a replayed journal counts them again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundCounts {
    /// The last round opened (rounds open in order, from 1).
    pub opened: Round,
    pub closed_all_answered: u64,
    pub closed_target: u64,
    pub closed_timeout: u64,
    /// Selected clients whose round closed without their update (dropped out, or late).
    pub missed: u64,
    /// Updates that came after their round closed.
    pub late: u64,
}

impl Rounds {
    pub fn new(policy: RoundPolicy, strategy: Box<dyn ServerStrategy>, classes: usize) -> Rounds {
        Rounds {
            policy,
            decoder: strategy.decoder(),
            strategy: Some(strategy),
            classes,
            phase: Phase::WaitingForClients,
            joined: BTreeMap::new(),
            features: None,
            features_declared: false,
            downloads: None,
            history: Vec::new(),
            evals: BTreeMap::new(),
            eval_sums: BTreeMap::new(),
            global_evals: BTreeMap::new(),
            global_holder: None,
            counts: RoundCounts::default(),
            late: BTreeMap::new(),
        }
    }

    /// Names the client that holds the run's shared test set: only its reports on it count.
    pub fn with_global_test_holder(mut self, holder: Option<ClientId>) -> Rounds {
        self.global_holder = holder;
        self
    }

    /// A round's aggregation never came back (its task was lost): the run ends with what it
    /// has, rather than waiting forever.
    pub fn abandon_aggregation(&mut self, now: Instant) {
        if let Phase::Aggregating { round, .. } = self.phase {
            tracing::error!(round, "aggregation lost; the run ends here");
            self.phase = Phase::Finished { at: now };
        }
    }

    pub fn joined(&self) -> &BTreeMap<ClientId, DataSummary> {
        &self.joined
    }

    pub fn counts(&self) -> RoundCounts {
        self.counts
    }

    pub fn history(&self) -> &[RoundRecord] {
        &self.history
    }

    pub fn evals(&self) -> &BTreeMap<Round, BTreeMap<ClientId, ConfusionMatrix>> {
        &self.evals
    }

    /// Per round, the evaluations' sums (for the status, which must not cost rounds × clients).
    pub fn eval_sums(&self) -> &BTreeMap<Round, EvalSums> {
        &self.eval_sums
    }

    pub fn global_evals(&self) -> &BTreeMap<Round, BTreeMap<Predictor, ConfusionMatrix>> {
        &self.global_evals
    }

    /// What the strategy keeps between rounds; `None` while a round aggregates.
    pub fn strategy_state(&self) -> Option<StrategyState> {
        self.strategy.as_ref().map(|s| s.snapshot())
    }

    fn strategy(&self) -> Result<&dyn ServerStrategy> {
        self.strategy.as_deref().ok_or_else(|| {
            FlintError::Precondition("the server is aggregating a round; try again".into())
        })
    }

    /// The open round, its updates so far and the clients it waits for.
    pub fn open_round(&self) -> Option<(Round, usize, usize)> {
        match &self.phase {
            Phase::Open {
                round,
                selected,
                updates,
                ..
            } => Some((*round, updates.len(), selected.len())),
            _ => None,
        }
    }

    /// How long the round being aggregated was open.
    pub fn closing_seconds(&self) -> Option<f64> {
        match &self.phase {
            Phase::Aggregating {
                opened_at,
                closed_at,
                ..
            } => Some(closed_at.duration_since(*opened_at).as_secs_f64()),
            _ => None,
        }
    }

    /// The round whose aggregation is running, if any.
    pub fn aggregating(&self) -> Option<Round> {
        match &self.phase {
            Phase::Aggregating { round, .. } => Some(*round),
            _ => None,
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished { .. })
    }

    /// The model's feature count, as the experiment gives it (`None` where only the data
    /// files would say: a CSV without `data.features`).
    pub fn with_features(mut self, features: Option<usize>) -> Rounds {
        self.features = features;
        self.features_declared = features.is_some();
        self
    }

    /// The model's feature count: the experiment's, or the first joiner's (bounded).
    pub fn features(&self) -> Option<usize> {
        self.features
    }

    pub fn check_joined(&self, client: ClientId) -> Result<()> {
        if !self.joined.contains_key(&client) {
            return Err(FlintError::UnknownClient(format!(
                "unknown client id {client}: join first"
            )));
        }
        Ok(())
    }

    /// Registers a client (again, after a restart); opens round 1 once `min_clients` are in.
    pub fn join(&mut self, id: ClientId, summary: DataSummary, now: Instant) -> Result<()> {
        let invalid = |m: String| Err(FlintError::InvalidRequest(m));
        if summary.train_class_counts.len() != self.classes {
            return invalid(format!(
                "data summary has {} classes, expected {}",
                summary.train_class_counts.len(),
                self.classes
            ));
        }
        // Counts a client sends are bounded and summed with checks: they weight aggregations.
        let samples = summary
            .train_class_counts
            .iter()
            .chain([&summary.test_samples])
            .try_fold(0u64, |sum, &n| {
                sum.checked_add(n).filter(|s| *s <= MAX_SAMPLES)
            });
        let Some(samples) = samples else {
            return invalid(format!(
                "data summary counts more than {MAX_SAMPLES} samples"
            ));
        };
        if samples == summary.test_samples {
            return invalid("data summary has no training samples".into());
        }
        if !(summary.compute_ghz.is_finite()
            && summary.compute_ghz > 0.0
            && summary.compute_ghz <= MAX_GHZ)
        {
            return invalid(format!(
                "compute_ghz must be in (0, {MAX_GHZ}], got {}",
                summary.compute_ghz
            ));
        }
        let features = summary.features as usize;
        match self.features {
            Some(f) if f != features && self.features_declared => {
                return invalid(format!(
                    "client has {features} features but the experiment's data has {f}"
                ));
            }
            Some(f) if f != features => {
                return invalid(format!(
                    "client has {features} features but the others have {f}"
                ));
            }
            None if features == 0 || features > MAX_FEATURES => {
                return invalid(format!(
                    "client has {features} features; this server takes 1 to {MAX_FEATURES} (declare data.features for a larger CSV)"
                ));
            }
            _ => {}
        }
        if let Some(previous) = self.joined.get(&id)
            && previous != &summary
        {
            return Err(FlintError::Precondition(format!(
                "client {id} rejoined with different data than it joined with"
            )));
        }
        let opens = matches!(self.phase, Phase::WaitingForClients)
            && !self.joined.contains_key(&id)
            && self.joined.len() + 1 >= self.policy.min_clients;
        let initial = if opens {
            Some(self.strategy()?.initial_download(features))
        } else {
            None
        };
        self.features = Some(features);
        self.joined.insert(id, summary);
        if let Some(initial) = initial {
            self.downloads = initial.map(Downloads::Broadcast);
            self.open(1, now);
        }
        Ok(())
    }

    fn open(&mut self, round: Round, now: Instant) {
        let selected = self.select(round);
        tracing::info!(
            round,
            clients = self.joined.len(),
            selected = selected.len(),
            "round open"
        );
        self.counts.opened = round;
        self.phase = Phase::Open {
            round,
            opened_at: now,
            selected,
            updates: BTreeMap::new(),
        };
    }

    /// The clients `round` asks: every joined client, or as many as the policy says, drawn
    /// from (seed, round) among those joined in id order.
    fn select(&self, round: Round) -> BTreeSet<ClientId> {
        let ids: Vec<ClientId> = self.joined.keys().copied().collect();
        let selection = self.policy.selection;
        let n = selection.selected(ids.len());
        if n >= ids.len() {
            return ids.into_iter().collect();
        }
        let mut rng = derive_rng(selection.seed, "select", round);
        rand::seq::index::sample(&mut rng, ids.len(), n)
            .into_iter()
            .map(|i| ids[i])
            .collect()
    }

    fn download_for(&self, client: ClientId) -> Option<Payload> {
        self.downloads.as_ref()?.for_client(client).cloned()
    }

    /// Whether `client`'s update for `round` is taken: in the open round, or among a closed
    /// round's participants (the simulation's check that nothing acknowledged is lost).
    pub fn holds_update(&self, client: ClientId, round: Round) -> bool {
        let closed = self
            .history
            .iter()
            .any(|r| r.round == round && r.participants.contains(&client));
        closed
            || match &self.phase {
                Phase::Open {
                    round: r, updates, ..
                } => *r == round && updates.contains_key(&client),
                Phase::Aggregating {
                    round: r,
                    participants,
                    ..
                } => *r == round && participants.contains(&client),
                _ => false,
            }
    }

    /// The next task of a client that has seen rounds up to `after_round`.
    pub fn task_for(&self, client: ClientId, after_round: Round) -> Task {
        match &self.phase {
            Phase::Finished { .. } => Task::Finished {
                download: self.download_for(client),
            },
            Phase::Open {
                round,
                opened_at,
                selected,
                updates,
            } if *round > after_round
                && selected.contains(&client)
                && !updates.contains_key(&client) =>
            {
                Task::Train {
                    round: *round,
                    deadline: *opened_at + self.policy.round_timeout,
                    download: self.download_for(client),
                }
            }
            _ => Task::Wait,
        }
    }

    /// Whether a round after `after_round` has opened without `client` (its next task is a
    /// later round's, or the end of the run).
    pub fn passes_over(&self, client: ClientId, after_round: Round) -> bool {
        match &self.phase {
            Phase::Open {
                round, selected, ..
            }
            | Phase::Aggregating {
                round, selected, ..
            } => *round > after_round && !selected.contains(&client),
            Phase::WaitingForClients | Phase::Finished { .. } => false,
        }
    }

    /// Decodes and takes one client's update. When every selected client has answered, the
    /// round closes and its aggregation is handed back. The shell does the same in three steps,
    /// decoding off the lock: [`Rounds::update_decoding`], [`UpdateDecoding::run`],
    /// [`Rounds::accept_decoded`].
    pub fn accept_update(
        &mut self,
        client: ClientId,
        round: Round,
        update: &Payload,
        now: Instant,
    ) -> Result<Accepted> {
        match self.update_decoding(client, round)? {
            None => Ok(Accepted::DUPLICATE),
            Some(decoding) => self.accept_decoded(decoding.run(update)?, now),
        }
    }

    /// What decoding `client`'s update for `round` needs, if the round wants it; `None` for an
    /// update already taken. Checked again when the decoded update is taken: the round may move
    /// while it is read (the model's width may not: the first Join fixed it).
    pub fn update_decoding(
        &self,
        client: ClientId,
        round: Round,
    ) -> Result<Option<UpdateDecoding>> {
        if !self.wants_update(client, round)? {
            return Ok(None);
        }
        Ok(Some(UpdateDecoding {
            decoder: Arc::clone(&self.decoder),
            client,
            round,
            features: self.features.unwrap_or(0),
        }))
    }

    /// Takes an update decoded by [`UpdateDecoding::run`] (a repeat is answered as a duplicate).
    pub fn accept_decoded(&mut self, decoded: DecodedUpdate, now: Instant) -> Result<Accepted> {
        let DecodedUpdate {
            client,
            round,
            update,
        } = decoded;
        if !self.wants_update(client, round)? {
            return Ok(Accepted::DUPLICATE);
        }
        let Phase::Open {
            selected, updates, ..
        } = &mut self.phase
        else {
            unreachable!("wants_update holds only for an open round")
        };
        updates.insert(client, update);
        let (taken, asked) = (updates.len(), selected.len());
        let closed = if taken == asked {
            self.close(ClosedBy::AllAnswered, now)
        } else if taken >= self.policy.selection.target(asked) {
            self.close(ClosedBy::TargetReached, now)
        } else {
            None
        };
        Ok(Accepted {
            duplicate: false,
            closed,
        })
    }

    /// Whether the open round takes `client`'s update for `round`: `false` for one already
    /// taken (maybe in a round closed since, by that very update: a retry whose answer was
    /// lost), an error for one it cannot take.
    fn wants_update(&self, client: ClientId, round: Round) -> Result<bool> {
        self.check_joined(client)?;
        if self.holds_update(client, round) {
            return Ok(false);
        }
        let precondition = |m: String| Err(FlintError::Precondition(m));
        let (open, selected) = match &self.phase {
            Phase::Open {
                round: open,
                selected,
                ..
            } => (*open, selected),
            Phase::WaitingForClients => {
                return precondition(format!(
                    "update for round {round} but no round is open yet (waiting for clients)"
                ));
            }
            Phase::Aggregating { round: closing, .. } => {
                let when = if round <= *closing {
                    "closed"
                } else {
                    "not open yet"
                };
                return precondition(format!(
                    "update for round {round} but round {closing} is being aggregated; round {round} is {when}"
                ));
            }
            Phase::Finished { .. } => {
                return precondition(format!("update for round {round} but the run is finished"));
            }
        };
        if round != open {
            let when = if round < open {
                "closed"
            } else {
                "not open yet"
            };
            return precondition(format!(
                "update for round {round} but round {open} is open; round {round} is {when}"
            ));
        }
        if !selected.contains(&client) && self.policy.selection.per_round.is_some() {
            return precondition(format!(
                "round {open} did not select client {client} ({} of {} clients per round)",
                selected.len(),
                self.joined.len()
            ));
        }
        if !selected.contains(&client) {
            return precondition(format!(
                "client {client} joined after round {open} opened; it takes part from round {}",
                open + 1
            ));
        }
        Ok(true)
    }

    /// Notes `client`'s update for closed `round` as late, if the round selected it and went on
    /// without it; whether it was not noted before (the journal keeps it then).
    pub fn note_late(&mut self, client: ClientId, round: Round) -> bool {
        let missed = |selected: &BTreeSet<ClientId>, participants: &[ClientId]| {
            selected.contains(&client) && !participants.contains(&client)
        };
        let was_missed = match &self.phase {
            Phase::Aggregating {
                round: r,
                selected,
                participants,
                ..
            } if *r == round => missed(selected, participants),
            _ => self.history.iter().any(|r| {
                r.round == round
                    && r.selected.contains(&client)
                    && !r.participants.contains(&client)
            }),
        };
        if !was_missed || !self.late.entry(round).or_default().insert(client) {
            return false;
        }
        self.counts.late += 1;
        true
    }

    /// Per round, the selected clients whose update came after the round closed.
    pub fn late(&self) -> &BTreeMap<Round, BTreeSet<ClientId>> {
        &self.late
    }

    /// Closes a round whose timeout has passed once it has `min_updates`; where the policy says
    /// `abandon_short` (clients sampled, or dropping out), at its timeout whatever it has, and
    /// short of `min_updates` the round is abandoned: the model stays, the next round selects
    /// anew (Bonawitz et al. 2019, §2.2).
    pub fn tick(&mut self, now: Instant) -> Option<AggregationJob> {
        if let Phase::Open {
            opened_at, updates, ..
        } = &self.phase
            && now >= *opened_at + self.policy.round_timeout
            && (updates.len() >= self.policy.min_updates || self.policy.abandon_short)
        {
            return self.close(ClosedBy::Timeout, now);
        }
        None
    }

    /// Closes `round` as its timeout did before a restart (the journal's record of it), whatever
    /// the clock says now.
    pub fn close_as_timed_out(&mut self, round: Round, now: Instant) -> Result<AggregationJob> {
        match self.open_round() {
            Some((open, _, _)) if open == round => {}
            other => {
                return Err(FlintError::Precondition(format!(
                    "round {round} closed by its timeout, but the open round is {other:?}"
                )));
            }
        }
        self.close(ClosedBy::Timeout, now).ok_or_else(|| {
            FlintError::Precondition(format!("round {round} cannot close while aggregating"))
        })
    }

    fn close(&mut self, closed_by: ClosedBy, now: Instant) -> Option<AggregationJob> {
        // Only an open round with its strategy at hand closes; anything else is left as it is.
        if !matches!(self.phase, Phase::Open { .. }) {
            return None;
        }
        let strategy = self.strategy.take()?;
        let Phase::Open {
            round,
            opened_at,
            selected,
            updates,
        } = std::mem::replace(&mut self.phase, Phase::WaitingForClients)
        else {
            unreachable!("the phase was checked to be open");
        };
        tracing::info!(round, ?closed_by, updates = updates.len(), "round closed");
        self.counts.missed += (selected.len() - updates.len()) as u64;
        match closed_by {
            ClosedBy::AllAnswered => self.counts.closed_all_answered += 1,
            ClosedBy::TargetReached => self.counts.closed_target += 1,
            ClosedBy::Timeout => self.counts.closed_timeout += 1,
        }
        self.phase = Phase::Aggregating {
            round,
            opened_at,
            closed_at: now,
            closed_by,
            selected,
            participants: updates.keys().copied().collect(),
        };
        let abandoned = (updates.len() < self.policy.min_updates).then(|| {
            format!(
                "round {round} timed out with {} of server.min_updates = {} updates: abandoned, the model stays",
                updates.len(),
                self.policy.min_updates
            )
        });
        Some(AggregationJob {
            round,
            strategy,
            joined: self.joined.clone(),
            updates,
            abandoned,
        })
    }

    /// Takes a finished aggregation back: records the round, then opens the next one or
    /// finishes the run.
    pub fn install(&mut self, done: Aggregated, now: Instant) -> bool {
        self.strategy = Some(done.strategy);
        if self.aggregating() != Some(done.round) {
            tracing::error!(
                round = done.round,
                "an aggregation came back for a round that is not aggregating; ignored"
            );
            return false;
        }
        let Phase::Aggregating {
            round,
            opened_at,
            closed_at,
            closed_by,
            selected,
            participants,
        } = std::mem::replace(&mut self.phase, Phase::WaitingForClients)
        else {
            unreachable!("the phase was checked to be aggregating");
        };
        if done.panicked {
            // The strategy's state may be half-updated: no further round is run on it.
            tracing::error!(round, "aggregation panicked; the run ends here");
            self.phase = Phase::Finished { at: now };
            return true;
        }
        match done.result {
            Ok(agg) => {
                self.downloads = Some(agg.downloads);
                self.history.push(RoundRecord {
                    round,
                    selected: selected.into_iter().collect(),
                    participants,
                    closed_by,
                    seconds: closed_at.duration_since(opened_at).as_secs_f64(),
                    aggregation_seconds: done.seconds,
                    weights: agg.weights,
                    report: agg.report,
                    local: agg.local,
                });
            }
            Err(e) if done.abandoned => {
                // Recorded, so that the reports and retries that name the round are taken.
                tracing::warn!(round, reason = %e, "round abandoned");
                self.history.push(RoundRecord {
                    round,
                    selected: selected.into_iter().collect(),
                    participants,
                    closed_by,
                    seconds: closed_at.duration_since(opened_at).as_secs_f64(),
                    aggregation_seconds: 0.0,
                    weights: BTreeMap::new(),
                    report: RoundReport::plain("abandoned"),
                    local: BTreeMap::new(),
                });
            }
            Err(e) => {
                tracing::error!(round, error = %e, "aggregation failed; round keeps the previous model");
            }
        }
        if round >= self.policy.rounds {
            self.phase = Phase::Finished { at: now };
        } else {
            self.open(round + 1, now);
        }
        true
    }

    /// How long closed `round` was open, and its aggregation took (for the journal).
    pub fn timings(&self, round: Round) -> Option<(f64, f64)> {
        self.history
            .iter()
            .rev()
            .find(|r| r.round == round)
            .map(|r| (r.seconds, r.aggregation_seconds))
    }

    /// The timings `round` had when it ran, as the journal kept them (a replay aggregates again
    /// in no time and at once).
    pub fn restore_timings(&mut self, round: Round, seconds: f64, aggregation_seconds: f64) {
        if let Some(r) = self.history.last_mut().filter(|r| r.round == round) {
            r.seconds = seconds;
            r.aggregation_seconds = aggregation_seconds;
        }
    }

    /// Takes a client's evaluation of the model it holds after `round`, on its own test rows
    /// or (`global_test`) on the run's shared test set, where it may also report the baselines
    /// its download carries (`predictor`).
    pub fn report_eval(
        &mut self,
        client: ClientId,
        round: Round,
        m: ConfusionMatrix,
        global_test: bool,
        predictor: Predictor,
    ) -> Result<bool> {
        self.check_joined(client)?;
        if predictor != Predictor::Model && !global_test {
            return Err(FlintError::InvalidRequest(format!(
                "predictor {:?} is reported on the shared test set only",
                predictor.name()
            )));
        }
        if let Predictor::Client(j) = predictor
            && !self.joined.contains_key(&j)
        {
            return Err(FlintError::InvalidRequest(format!(
                "predictor client-{j} names no client of the run"
            )));
        }
        if m.classes() != self.classes {
            return Err(FlintError::InvalidRequest(format!(
                "evaluation has {} classes, expected {}",
                m.classes(),
                self.classes
            )));
        }
        let closed = self.history.last().map_or(0, |r| r.round);
        if round == 0 || round > closed {
            return Err(FlintError::Precondition(format!(
                "evaluation for round {round} but the last closed round is {closed}"
            )));
        }
        if global_test {
            if self.global_holder != Some(client) {
                return Err(FlintError::InvalidRequest(format!(
                    "client {client} reports on the shared test set, which it does not hold"
                )));
            }
            // Every client predicts with the same model; the first report of a round stands.
            let reports = self.global_evals.entry(round).or_default();
            let fresh = !reports.contains_key(&predictor);
            reports.entry(predictor).or_insert(m);
            return Ok(!fresh);
        }
        let evals = self.evals.entry(round).or_default();
        if evals.contains_key(&client) {
            return Ok(true);
        }
        let metrics = m.metrics();
        let sums = self.eval_sums.entry(round).or_default();
        sums.reports += 1;
        sums.accuracy += metrics.accuracy;
        sums.f1 += metrics.f1;
        evals.insert(client, m);
        Ok(false)
    }

    /// Finished, and every joined client has reported on the final model (the holder of the
    /// shared test set on that as well), or the evaluation timeout has passed.
    pub fn is_done(&self, now: Instant) -> bool {
        let Phase::Finished { at } = self.phase else {
            return false;
        };
        self.final_evaluations_in() || now >= at + self.policy.eval_timeout
    }

    /// Finished, and every evaluation of the final model is in (not cut short by the
    /// evaluation timeout).
    pub fn completed(&self) -> bool {
        matches!(self.phase, Phase::Finished { .. }) && self.final_evaluations_in()
    }

    /// Every joined client gets the final model and is awaited: one the last round did not
    /// select, dropped or left behind waits for the end of the run, and one whose update
    /// is still on its way (a straggler) is told it came late before the server ends. A client
    /// gone for good costs `eval_timeout`.
    fn final_evaluations_in(&self) -> bool {
        let Some(last) = self.history.last() else {
            return true;
        };
        let reported = self.evals.get(&last.round);
        let all = self
            .joined
            .keys()
            .all(|c| reported.is_some_and(|r| r.contains_key(c)));
        // The holder of the shared test set reports on it too.
        let global = self.global_holder.is_none_or(|h| {
            !self.joined.contains_key(&h)
                || self
                    .global_evals
                    .get(&last.round)
                    .is_some_and(|g| g.contains_key(&Predictor::Model))
        });
        all && global
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_common::model::logreg::LogReg;
    use flint_common::strategy::fedavg::FedAvgServer;
    use flint_common::wire::encode_linear;
    use std::time::Duration;

    fn policy(rounds: u32, min_clients: usize, min_updates: usize) -> RoundPolicy {
        RoundPolicy {
            rounds,
            min_clients,
            min_updates,
            round_timeout: Duration::from_secs(10),
            eval_timeout: Duration::from_secs(5),
            selection: flint_common::config::Selection::everyone(),
            abandon_short: false,
        }
    }

    fn summary(n: u64) -> DataSummary {
        DataSummary {
            train_class_counts: vec![n, n],
            test_samples: 4,
            features: 2,
            compute_ghz: 1.0,
        }
    }

    fn model(w: f64) -> Payload {
        encode_linear(&LogReg::binary(vec![w, w], 0.0))
    }

    fn rounds(p: RoundPolicy) -> Rounds {
        Rounds::new(p, Box::new(FedAvgServer::by_size(2)), 2)
    }

    /// An update as the service takes it: a round it completes is aggregated and installed.
    fn take(
        r: &mut Rounds,
        client: ClientId,
        round: Round,
        p: Payload,
        now: Instant,
    ) -> Result<bool> {
        let a = r.accept_update(client, round, &p, now)?;
        if let Some(job) = a.closed {
            r.install(job.run(), now);
        }
        Ok(a.duplicate)
    }

    /// A tick as the service runs it.
    fn tick(r: &mut Rounds, now: Instant) -> bool {
        match r.tick(now) {
            Some(job) => {
                r.install(job.run(), now);
                true
            }
            None => false,
        }
    }

    #[test]
    fn round_one_opens_at_min_clients_and_late_joiners_wait_a_round() {
        let t0 = Instant::now();
        let mut r = rounds(policy(3, 2, 1));
        r.join(1, summary(5), t0).unwrap();
        assert_eq!(r.task_for(1, 0), Task::Wait);
        r.join(2, summary(5), t0).unwrap();
        assert!(matches!(r.task_for(1, 0), Task::Train { round: 1, .. }));
        r.join(3, summary(5), t0).unwrap();
        assert_eq!(r.task_for(3, 0), Task::Wait);
        let err = take(&mut r, 3, 1, model(1.0), t0).unwrap_err();
        assert!(matches!(err, FlintError::Precondition(m) if m.contains("from round 2")));
        take(&mut r, 1, 1, model(1.0), t0).unwrap();
        take(&mut r, 2, 1, model(3.0), t0).unwrap();
        // Round 2 selects everyone who has joined, and carries the average of round 1.
        match r.task_for(3, 0) {
            Task::Train {
                round: 2, download, ..
            } => assert_eq!(download, Some(model(2.0))),
            other => panic!("{other:?}"),
        }
    }

    fn sampled(rounds: u32, per_round: usize, over_selection: f64, seed: u64) -> RoundPolicy {
        RoundPolicy {
            selection: flint_common::config::Selection {
                seed,
                per_round: Some(per_round),
                over_selection,
            },
            abandon_short: true,
            ..policy(rounds, 5, 1)
        }
    }

    /// The clients `round` asks, as their tasks say.
    fn asked(r: &Rounds, round: Round) -> Vec<ClientId> {
        (1..=5)
            .filter(
                |&c| matches!(r.task_for(c, round - 1), Task::Train { round: t, .. } if t == round),
            )
            .collect()
    }

    /// Rounds of `policy` with clients 1 to 5 joined at `t0`.
    fn five_joined(policy: RoundPolicy, t0: Instant) -> Rounds {
        let mut r = rounds(policy);
        for c in 1..=5 {
            r.join(c, summary(1), t0).unwrap();
        }
        r
    }

    /// Five clients join; every round's selected clients answer, in id order.
    fn selections(policy: RoundPolicy) -> Vec<Vec<ClientId>> {
        let t0 = Instant::now();
        let mut r = five_joined(policy, t0);
        let mut all = Vec::new();
        while let Some((round, _, _)) = r.open_round() {
            let asked = asked(&r, round);
            for &c in &asked {
                take(&mut r, c, round, model(1.0), t0).unwrap();
            }
            all.push(asked);
        }
        all
    }

    #[test]
    fn a_round_selects_clients_per_round_from_the_seed_the_same_every_time() {
        let once = selections(sampled(6, 2, 0.0, 7));
        assert_eq!(once.len(), 6);
        assert!(once.iter().all(|s| s.len() == 2), "{once:?}");
        assert_eq!(
            once,
            selections(sampled(6, 2, 0.0, 7)),
            "a replay selects alike"
        );
        assert_ne!(
            once,
            selections(sampled(6, 2, 0.0, 8)),
            "another seed, others"
        );
        let distinct: BTreeSet<_> = once.iter().collect();
        assert!(distinct.len() > 1, "rounds draw anew: {once:?}");
        let everyone = selections(policy(2, 5, 1));
        assert_eq!(everyone, vec![vec![1, 2, 3, 4, 5]; 2]);
    }

    #[test]
    fn an_over_selected_round_closes_at_its_target_and_records_the_rest_as_late() {
        let t0 = Instant::now();
        let mut r = five_joined(sampled(2, 2, 0.5, 3), t0);
        let asked = asked(&r, 1);
        assert_eq!(asked.len(), 3, "2 × 1.5 selected");
        take(&mut r, asked[0], 1, model(1.0), t0).unwrap();
        take(&mut r, asked[1], 1, model(3.0), t0).unwrap();
        let record = &r.history()[0];
        assert_eq!(record.closed_by, ClosedBy::TargetReached);
        assert_eq!(record.participants, asked[..2]);
        assert_eq!(r.counts().closed_target, 1);
        let err = take(&mut r, asked[2], 1, model(9.0), t0).unwrap_err();
        assert!(matches!(err, FlintError::Precondition(_)));
        assert!(r.note_late(asked[2], 1));
        assert!(!r.note_late(asked[2], 1), "noted once");
        let unselected = (1..=5).find(|c| !asked.contains(c)).unwrap();
        assert!(
            !r.note_late(unselected, 1),
            "a client not asked is not late"
        );
        assert_eq!(r.late()[&1], BTreeSet::from([asked[2]]));
        assert_eq!(r.counts().late, 1);
        assert_eq!(
            r.counts().missed,
            1,
            "one of three asked was missing at the close"
        );
    }

    #[test]
    fn a_sampled_round_short_of_min_updates_at_its_timeout_is_abandoned_and_the_next_opens() {
        let t0 = Instant::now();
        let mut r = five_joined(
            RoundPolicy {
                min_updates: 2,
                ..sampled(3, 2, 0.0, 3)
            },
            t0,
        );
        let first = asked(&r, 1);
        take(&mut r, first[0], 1, model(1.0), t0).unwrap();
        // The other selected client dropped out: the timeout closes the round anyway.
        assert!(tick(&mut r, t0 + Duration::from_secs(10)));
        let record = &r.history()[0];
        assert_eq!(record.report, RoundReport::plain("abandoned"));
        assert!(record.weights.is_empty(), "nothing aggregated");
        assert_eq!(r.open_round().map(|o| o.0), Some(2));
        assert_eq!(r.counts().closed_timeout, 1);
        // Reports on the model round 1 left (round 0's, unchanged) are taken as round 1's.
        let eval = ConfusionMatrix::from_counts(2, vec![1, 0, 0, 1]).unwrap();
        let second = asked(&r, 2)[0];
        r.report_eval(second, 1, eval, false, Predictor::Model)
            .unwrap();
        // Full participation keeps waiting for min_updates (its clients are asked again).
        let mut full = rounds(policy(2, 2, 2));
        full.join(1, summary(1), t0).unwrap();
        full.join(2, summary(1), t0).unwrap();
        take(&mut full, 1, 1, model(1.0), t0).unwrap();
        assert!(!tick(&mut full, t0 + Duration::from_secs(10)));
    }

    #[test]
    fn a_client_a_round_passes_over_is_told_so_refused_and_awaited_at_the_end() {
        let t0 = Instant::now();
        let mut r = five_joined(sampled(1, 2, 0.0, 3), t0);
        let asked = asked(&r, 1);
        let idle = (1..=5).find(|c| !asked.contains(c)).unwrap();
        assert!(r.passes_over(idle, 0));
        assert!(!r.passes_over(asked[0], 0));
        let err = take(&mut r, idle, 1, model(1.0), t0).unwrap_err();
        assert!(matches!(&err, FlintError::Precondition(m) if m.contains("did not select")));
        for &c in &asked {
            take(&mut r, c, 1, model(1.0), t0).unwrap();
        }
        assert!(matches!(r.task_for(idle, 0), Task::Finished { .. }));
        let eval = ConfusionMatrix::from_counts(2, vec![1, 0, 0, 1]).unwrap();
        for &c in &asked {
            r.report_eval(c, 1, eval.clone(), false, Predictor::Model)
                .unwrap();
        }
        assert!(!r.completed(), "the clients left out get the model too");
        for c in (1..=5).filter(|c| !asked.contains(c)) {
            r.report_eval(c, 1, eval.clone(), false, Predictor::Model)
                .unwrap();
        }
        assert!(r.completed());
    }

    #[test]
    fn updates_are_idempotent_and_wrong_rounds_refused() {
        let t0 = Instant::now();
        let mut r = rounds(policy(2, 2, 1));
        r.join(1, summary(1), t0).unwrap();
        r.join(2, summary(1), t0).unwrap();
        assert!(!take(&mut r, 1, 1, model(1.0), t0).unwrap());
        assert!(take(&mut r, 1, 1, model(1.0), t0).unwrap());
        assert_eq!(r.task_for(1, 0), Task::Wait);
        let e = take(&mut r, 2, 2, model(1.0), t0).unwrap_err();
        assert!(matches!(e, FlintError::Precondition(m) if m.contains("round 2 is not open yet")));
        let e = take(&mut r, 9, 1, model(1.0), t0).unwrap_err();
        assert!(matches!(e, FlintError::UnknownClient(m) if m.contains("unknown client id 9")));
        let bad = encode_linear(&LogReg::zeros(3));
        let e = take(&mut r, 2, 1, bad, t0).unwrap_err();
        assert!(matches!(e, FlintError::InvalidUpdate(m) if m.contains("3 weights, expected 2")));
        // The refused update left round 1 open with client 1's update intact.
        assert_eq!(r.open_round(), Some((1, 1, 2)));
    }

    /// The service reads an update between two holds of the lock: whatever happened to the
    /// round meanwhile, the decoded update is checked again as it is taken.
    #[test]
    fn an_update_read_off_the_lock_is_checked_again_when_taken() {
        let t0 = Instant::now();
        let mut r = rounds(policy(2, 3, 2));
        for id in 1..=3 {
            r.join(id, summary(1), t0).unwrap();
        }
        let read = |r: &Rounds, client| {
            let decoding = r.update_decoding(client, 1).unwrap().unwrap();
            decoding.run(&model(1.0)).unwrap()
        };
        // Client 1's upload is read, and its retry is taken first: the first is a duplicate.
        let first = read(&r, 1);
        assert!(!take(&mut r, 1, 1, model(1.0), t0).unwrap());
        assert!(
            r.update_decoding(1, 1).unwrap().is_none(),
            "nothing to read again"
        );
        let a = r.accept_decoded(first, t0).unwrap();
        assert!(a.duplicate && a.closed.is_none());
        assert_eq!(r.open_round(), Some((1, 1, 3)));
        // Client 3's upload is read, then round 1 closes by its timeout: refused, no change.
        let late = read(&r, 3);
        take(&mut r, 2, 1, model(1.0), t0).unwrap();
        assert!(tick(&mut r, t0 + Duration::from_secs(11)));
        let e = r.accept_decoded(late, t0).err().unwrap();
        assert!(matches!(e, FlintError::Precondition(m) if m.contains("round 1 is closed")));
        assert_eq!(r.open_round(), Some((2, 0, 3)));
        assert_eq!(r.history()[0].participants, vec![1, 2]);
    }

    #[test]
    fn timeout_closes_a_round_once_it_has_min_updates() {
        let t0 = Instant::now();
        let mut r = rounds(policy(2, 3, 2));
        for id in 1..=3 {
            r.join(id, summary(1), t0).unwrap();
        }
        take(&mut r, 1, 1, model(1.0), t0).unwrap();
        let late = t0 + Duration::from_secs(11);
        assert!(!tick(&mut r, late), "one update is below min_updates");
        take(&mut r, 2, 1, model(1.0), late).unwrap();
        assert!(tick(&mut r, late));
        assert_eq!(r.history()[0].closed_by, ClosedBy::Timeout);
        assert_eq!(r.history()[0].participants, vec![1, 2]);
        assert_eq!((r.counts().opened, r.counts().closed_timeout), (2, 1));
        // Client 3 missed round 1 and continues with round 2.
        assert!(matches!(r.task_for(3, 0), Task::Train { round: 2, .. }));
        let e = take(&mut r, 3, 1, model(1.0), late).unwrap_err();
        assert!(matches!(e, FlintError::Precondition(m) if m.contains("round 1 is closed")));
    }

    #[test]
    fn finishes_after_the_last_round_and_waits_for_final_evaluations() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 1, 1));
        r.join(1, summary(1), t0).unwrap();
        take(&mut r, 1, 1, model(2.0), t0).unwrap();
        assert_eq!(
            r.task_for(1, 1),
            Task::Finished {
                download: Some(model(2.0))
            }
        );
        assert!(!r.is_done(t0));
        let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
        let e = r
            .report_eval(1, 2, cm.clone(), false, Predictor::Model)
            .unwrap_err();
        assert!(matches!(e, FlintError::Precondition(_)));
        assert!(
            !r.report_eval(1, 1, cm.clone(), false, Predictor::Model)
                .unwrap()
        );
        assert!(r.report_eval(1, 1, cm, false, Predictor::Model).unwrap());
        assert!(r.is_done(t0));
    }

    #[test]
    fn the_status_sums_count_each_report_once() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 2, 2));
        for id in 1..=2 {
            r.join(id, summary(1), t0).unwrap();
        }
        take(&mut r, 1, 1, model(2.0), t0).unwrap();
        take(&mut r, 2, 1, model(2.0), t0).unwrap();
        let right = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
        let half = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 0]);
        r.report_eval(1, 1, right.clone(), false, Predictor::Model)
            .unwrap();
        r.report_eval(1, 1, right, false, Predictor::Model).unwrap();
        r.report_eval(2, 1, half.clone(), false, Predictor::Model)
            .unwrap();
        let all: Vec<_> = r.evals()[&1].values().map(|m| m.metrics()).collect();
        let mean = flint_common::metrics::Metrics::mean(&all).unwrap();
        let (n, accuracy, f1) = r.eval_sums()[&1].means();
        assert_eq!((n, accuracy, f1), (2, mean.accuracy, mean.f1));
        assert_eq!(accuracy, 0.75);
    }

    #[test]
    fn final_evaluations_are_not_awaited_forever() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 1, 1));
        r.join(1, summary(1), t0).unwrap();
        take(&mut r, 1, 1, model(2.0), t0).unwrap();
        assert!(!r.is_done(t0 + Duration::from_secs(4)));
        assert!(r.is_done(t0 + Duration::from_secs(5)));
    }

    #[test]
    fn joins_with_inconsistent_data_are_refused() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 2, 1));
        r.join(1, summary(1), t0).unwrap();
        let mut other = summary(1);
        other.features = 3;
        assert!(
            matches!(r.join(2, other, t0), Err(FlintError::InvalidRequest(m)) if m.contains("3 features"))
        );
        assert!(matches!(
            r.join(1, summary(2), t0),
            Err(FlintError::Precondition(_))
        ));
        assert!(r.join(1, summary(1), t0).is_ok());
    }

    /// The experiment fixes the shape; a Join cannot size an allocation, lock the
    /// others out with another shape, or overflow the counts that weight aggregation.
    #[test]
    fn a_join_cannot_declare_a_shape_or_counts_out_of_bounds() {
        let t0 = Instant::now();
        let refused = |r: &mut Rounds, s: DataSummary, says: &str| {
            let e = r.join(1, s, t0).unwrap_err();
            assert!(
                matches!(&e, FlintError::InvalidRequest(m) if m.contains(says)),
                "{e}"
            );
        };
        let mut declared = rounds(policy(1, 1, 1)).with_features(Some(2));
        let mut huge = summary(1);
        huge.features = u32::MAX;
        refused(&mut declared, huge.clone(), "the experiment's data has 2");
        let mut undeclared = rounds(policy(1, 1, 1));
        refused(&mut undeclared, huge, "takes 1 to 65536");
        let mut wraps = summary(1);
        wraps.train_class_counts = vec![u64::MAX, 2];
        refused(&mut declared, wraps, "more than");
        let mut fast = summary(1);
        fast.compute_ghz = 1e9;
        refused(&mut declared, fast, "compute_ghz must be in");
        assert!(declared.joined().is_empty() && undeclared.joined().is_empty());
        declared.join(1, summary(1), t0).unwrap();
    }

    /// A strategy that panics in aggregation: the server keeps running.
    struct Panics;

    impl ServerStrategy for Panics {
        fn initial_download(&self, _features: usize) -> Option<Payload> {
            None
        }
        fn decoder(&self) -> Arc<dyn UpdateDecoder> {
            FedAvgServer::by_size(2).decoder()
        }
        fn aggregate(
            &mut self,
            _round: Round,
            _clients: &BTreeMap<ClientId, DataSummary>,
            _updates: &BTreeMap<ClientId, Update>,
        ) -> Result<Aggregate> {
            panic!("a bug in a strategy")
        }
        fn snapshot(&self) -> StrategyState {
            StrategyState::stateless()
        }
        fn restore(&mut self, _state: StrategyState) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_panicking_aggregation_ends_the_run_with_what_it_has() {
        let t0 = Instant::now();
        let mut r = Rounds::new(policy(3, 1, 1), Box::new(Panics), 2);
        r.join(1, summary(1), t0).unwrap();
        take(&mut r, 1, 1, model(1.0), t0).unwrap();
        assert!(r.is_finished(), "no round runs on a strategy that panicked");
        assert!(r.history().is_empty());
        // The metrics still count the round that opened and closed.
        let counts = RoundCounts {
            opened: 1,
            closed_all_answered: 1,
            ..RoundCounts::default()
        };
        assert_eq!(r.counts(), counts);
        assert!(r.strategy_state().is_some(), "the strategy came back");
    }

    #[test]
    fn only_the_holder_reports_on_the_shared_test_set() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 2, 1)).with_global_test_holder(Some(1));
        r.join(1, summary(1), t0).unwrap();
        r.join(2, summary(1), t0).unwrap();
        take(&mut r, 1, 1, model(1.0), t0).unwrap();
        take(&mut r, 2, 1, model(1.0), t0).unwrap();
        let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
        let e = r
            .report_eval(2, 1, cm.clone(), true, Predictor::Model)
            .unwrap_err();
        assert!(matches!(e, FlintError::InvalidRequest(m) if m.contains("does not hold")));
        assert!(
            !r.report_eval(1, 1, cm.clone(), true, Predictor::Model)
                .unwrap()
        );
        assert!(
            r.report_eval(1, 1, cm.clone(), true, Predictor::Model)
                .unwrap(),
            "a repeat"
        );
        assert_eq!(r.global_evals().len(), 1);
    }

    #[test]
    fn baselines_are_taken_on_the_shared_test_set_for_clients_of_the_run_only() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 2, 1)).with_global_test_holder(Some(1));
        r.join(1, summary(1), t0).unwrap();
        r.join(2, summary(1), t0).unwrap();
        take(&mut r, 1, 1, model(1.0), t0).unwrap();
        take(&mut r, 2, 1, model(1.0), t0).unwrap();
        let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
        let wrong = ConfusionMatrix::from_predictions(2, &[0, 1], &[1, 1]);
        let e = r
            .report_eval(1, 1, cm.clone(), false, Predictor::Ensemble)
            .unwrap_err();
        assert!(matches!(e, FlintError::InvalidRequest(m) if m.contains("shared test set only")));
        let e = r
            .report_eval(1, 1, cm.clone(), true, Predictor::Client(9))
            .unwrap_err();
        assert!(
            matches!(e, FlintError::InvalidRequest(m) if m.contains("client-9 names no client"))
        );
        for p in [Predictor::Ensemble, Predictor::Client(2)] {
            assert!(!r.report_eval(1, 1, cm.clone(), true, p).unwrap());
            // The first report of a predictor stands.
            assert!(r.report_eval(1, 1, wrong.clone(), true, p).unwrap());
        }
        let reports = &r.global_evals()[&1];
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[&Predictor::Ensemble], cm);
        assert!(!r.is_done(t0), "baselines are not the model's report");
    }

    #[test]
    fn the_run_waits_for_the_holders_report_on_the_shared_test_set() {
        let t0 = Instant::now();
        let mut r = rounds(policy(1, 1, 1)).with_global_test_holder(Some(1));
        r.join(1, summary(1), t0).unwrap();
        take(&mut r, 1, 1, model(1.0), t0).unwrap();
        let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
        r.report_eval(1, 1, cm.clone(), false, Predictor::Model)
            .unwrap();
        assert!(!r.is_done(t0), "the shared test set is not reported yet");
        r.report_eval(1, 1, cm, true, Predictor::Model).unwrap();
        assert!(r.is_done(t0));
    }
}
