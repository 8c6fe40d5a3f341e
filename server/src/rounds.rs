//! The round state machine (docs/PROTOCOL.md §A round). Pure: time comes in as `now`, no I/O,
//! so every transition is testable in-process. The service drives it and wakes long-polls on
//! changes.
//!
//! Closing a round hands work back to the shell (the raft-rs `Ready` pattern): the round's
//! updates and the strategy leave as an [`AggregationJob`], which the shell runs off the lock and
//! off the async threads, then gives back to [`Rounds::install`]. Meanwhile the round is
//! `Aggregating`: joins, long-polls, health checks and refusals are answered as usual.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use flint_common::config::RoundPolicy;
use flint_common::metrics::ConfusionMatrix;
use flint_common::strategy::privacy::PrivacySpent;
use flint_common::strategy::{
    Downloads, LocalMetrics, Predictor, RoundReport, ServerStrategy, StrategyState, UpdateDecoder,
};
use flint_common::wire::Update;
use flint_common::wire::proto::{DataSummary, Payload};
use flint_common::{ClientId, FlintError, Result, Round};
use serde::Serialize;

mod aggregation;
mod check_in;
mod secure;
mod selection;
#[cfg(test)]
mod tests;

pub use aggregation::{Aggregated, AggregationJob, SecureInput};
pub use secure::{Answer, SecureSettings, Step, Stepped};

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
    /// What `[dp]` added and spent in the round.
    pub privacy: Option<PrivacySpent>,
}

#[derive(Debug)]
enum Phase {
    WaitingForClients,
    Open {
        round: Round,
        opened_at: Instant,
        selected: BTreeSet<ClientId>,
        updates: BTreeMap<ClientId, Update>,
        /// Under `[secagg]`: the round's protocol (its updates then stay empty).
        secure: Option<Box<secure::SecureRound>>,
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
    /// The rounds ahead as drawn among the clients joined so far (for check-ins).
    ahead: selection::Ahead,
    /// The first Join: how long clients have waited for round 1.
    waiting_since: Option<Instant>,
    /// `[secagg]`, where the run aggregates securely.
    secure: Option<SecureSettings>,
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

/// Rounds opened and closed so far, counted where it happens; a replayed journal counts them
/// again.
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
            ahead: selection::Ahead::default(),
            waiting_since: None,
            secure: None,
        }
    }

    /// Aggregates every round securely (`[secagg]`): clients send the protocol's messages
    /// ([`Rounds::secure_step`]), never an update.
    pub fn with_secagg(mut self, settings: Option<SecureSettings>) -> Rounds {
        self.secure = settings;
        self
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

    /// How the round being aggregated closed.
    pub fn closed_by(&self) -> Option<ClosedBy> {
        match &self.phase {
            Phase::Aggregating { closed_by, .. } => Some(*closed_by),
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
        self.waiting_since.get_or_insert(now);
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
        let secure = self.secure_round(round, selected.len(), now);
        self.phase = Phase::Open {
            round,
            opened_at: now,
            selected,
            updates: BTreeMap::new(),
            secure,
        };
    }

    /// The clients `round` asks: every joined client, or as many as the policy says, drawn
    /// from (seed, round) among those joined (see [`selection`]).
    fn select(&self, round: Round) -> BTreeSet<ClientId> {
        let ids: Vec<ClientId> = self.joined.keys().copied().collect();
        selection::select(&self.policy.selection, round, &ids)
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
                ..
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
        if self.secure.is_some() {
            return Err(FlintError::Precondition(
                "this run aggregates securely ([secagg]): a client's update goes through SecAgg, never PushUpdate".into(),
            ));
        }
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
        // A secure round's deadlines are its stages' ([`Rounds::tick_secure`]).
        if self.secure.is_some() {
            return None;
        }
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
            secure,
        } = std::mem::replace(&mut self.phase, Phase::WaitingForClients)
        else {
            unreachable!("the phase was checked to be open");
        };
        if let Some(secure) = secure {
            let shut = secure::Shut {
                round,
                opened_at,
                selected,
                closed_by,
            };
            return Some(self.close_secure(strategy, shut, *secure, now));
        }
        tracing::info!(round, ?closed_by, updates = updates.len(), "round closed");
        let shut = secure::Shut {
            round,
            opened_at,
            selected,
            closed_by,
        };
        self.start_aggregating(shut, updates.keys().copied().collect(), now);
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
            secure: None,
        })
    }

    /// The round `shut` closed with `participants`, counted: its aggregation runs outside.
    fn start_aggregating(&mut self, shut: secure::Shut, participants: Vec<ClientId>, now: Instant) {
        let secure::Shut {
            round,
            opened_at,
            selected,
            closed_by,
        } = shut;
        self.counts.missed += selected.len().saturating_sub(participants.len()) as u64;
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
            participants,
        };
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
        let recorded = match done.result {
            Ok(agg) => {
                self.downloads = Some(agg.downloads);
                Some((agg.weights, agg.report, agg.local, agg.privacy))
            }
            Err(e) if done.abandoned => {
                // Recorded, so that the reports and retries that name the round are taken.
                tracing::warn!(round, reason = %e, "round abandoned");
                let abandoned = RoundReport::plain("abandoned");
                Some((BTreeMap::new(), abandoned, BTreeMap::new(), None))
            }
            Err(e) => {
                // Recorded too: the clients' reports of the round are taken and the run goes
                // on to its end, where `results.json` says which round failed and why.
                tracing::error!(round, error = %e, "aggregation failed; round keeps the previous model");
                let failed = RoundReport::plain(&format!("failed: {e}"));
                Some((BTreeMap::new(), failed, BTreeMap::new(), None))
            }
        };
        if let Some((weights, report, local, privacy)) = recorded {
            self.history.push(RoundRecord {
                round,
                selected: selected.into_iter().collect(),
                participants,
                closed_by,
                seconds: closed_at.duration_since(opened_at).as_secs_f64(),
                aggregation_seconds: done.seconds,
                weights,
                report,
                local,
                privacy,
            });
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
