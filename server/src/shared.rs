//! The server's state every call shares: the round state and identities behind their locks,
//! the journal and its group commit, the byte ledgers and budgets, long-polls' wake-ups, and
//! running a closed round's aggregation off the lock.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use flint_common::config::Experiment;
use flint_common::wire::ledger::CLOSING;
use flint_common::wire::proto::EvalReport;
use flint_common::wire::{CLIENT_HEADER, HOST_HEADER, ROUND_HEADER, TOKEN_HEADER};
use flint_common::{ClientId, FlintError, Round};
use flint_shell::meter::SharedLedger;
use flint_shell::tls::common_name;
use flint_shell::tls::server::ConnInfo;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tonic::{Request, Response, Status};

use crate::identity::{Identities, Peer};
use crate::journal::{self, Event, Journal, RoundMark};
use crate::rounds::{AggregationJob, Rounds};
use crate::telemetry::Telemetry;

pub struct Shared {
    pub experiment: Experiment,
    pub run_id: String,
    pub rounds: Mutex<Rounds>,
    pub ledger: Arc<SharedLedger>,
    /// Bumped on every state change (status.json is written on it).
    pub version: watch::Sender<u64>,
    /// Bumped when a round opens or closes or the run ends; long-polls wait on it.
    pub phase: watch::Sender<u64>,
    pub started: Instant,
    /// Where accepted updates are kept (`server.keep_updates`).
    pub updates_dir: Option<std::path::PathBuf>,
    /// Which token (and certificate) holds which client slot.
    pub identities: Mutex<Identities>,
    /// Whether clients must present a certificate (the server has a client CA).
    pub mutual_tls: bool,
    /// Every accepted change, for a restart (see `journal`).
    pub journal: Journal,
    /// Why the journal could not be written, if it could not: the run then stops, since its
    /// state could no longer be recovered.
    pub journal_failed: Mutex<Option<String>>,
    /// Whose turn it is to sync the journal (see [`Shared::durable`]).
    pub sync_turn: tokio::sync::Mutex<()>,
    /// How long each aggregation is held before it is installed (fault injection; zero).
    pub hold_aggregation: std::time::Duration,
    /// Calls refused before their caller proved who it is ([`Refused`]), by method and status.
    pub refused: Mutex<std::collections::BTreeMap<String, Refused>>,
    /// KiB of uploads that may be buffered at once, across all streams.
    pub upload_budget: Arc<Semaphore>,
    pub upload_budget_kib: u32,
    /// Long-polls (GetRound) waiting, per client.
    pub long_polls: Mutex<std::collections::BTreeMap<ClientId, usize>>,
    /// The reports whose repeat had its link counts journaled: one repeat each, so a client
    /// sending one report again and again cannot grow the journal.
    pub repeated_reports: Mutex<std::collections::BTreeSet<(ClientId, Round, String)>>,
    /// What the metrics count as it happens (see `telemetry`).
    pub telemetry: Telemetry,
    /// Where the journal's syncs and the aggregations run.
    pub blocking: Blocking,
}

/// Where blocking work (the journal's sync, an aggregation) runs: tokio's blocking pool, or
/// inline on the calling task for the deterministic simulation (`server/tests/sim`), which
/// runs every host on one thread and must see one schedule per seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocking {
    Pool,
    /// After this long on the (simulated) clock, the work's latency: other calls run meanwhile,
    /// as they do beside a real sync, and a crash can fall between a record and its sync.
    Inline(std::time::Duration),
}

/// The clock the server decides by: tokio's, which is the system's except on a paused
/// runtime (the simulation's), whose time is simulated.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Long-polls one client may hold at once. An honest client waits in one, and a retry after
/// a broken connection may briefly overlap it; each held costs a task and a watch receiver,
/// so a token that opened thousands would hold the server's memory.
pub const MAX_LONG_POLLS_PER_CLIENT: usize = 4;

/// One waiting long-poll of `client`, counted until it is dropped.
pub(crate) struct LongPoll {
    shared: Arc<Shared>,
    pub(crate) client: ClientId,
}

impl LongPoll {
    pub(crate) fn enter(shared: &Arc<Shared>, client: ClientId) -> Result<LongPoll, Status> {
        let mut held = shared.long_polls.lock().expect("long_polls lock");
        let n = held.entry(client).or_insert(0);
        if *n >= MAX_LONG_POLLS_PER_CLIENT {
            return Err(with_label(
                Status::resource_exhausted(format!(
                    "client {client} already waits in {MAX_LONG_POLLS_PER_CLIENT} calls for its next task"
                )),
                client,
                0,
            ));
        }
        *n += 1;
        Ok(LongPoll {
            shared: shared.clone(),
            client,
        })
    }
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        let mut held = self.shared.long_polls.lock().expect("long_polls lock");
        if let Some(n) = held.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.client);
            }
        }
    }
}

impl Shared {
    pub fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// A change a long-poll may be waiting for: a round opened, closed or the run finished.
    /// Long-polls wait on this alone: waking every one of them on each update made a round of
    /// N clients cost N² wake-ups.
    pub fn bump_phase(&self) {
        self.phase.send_modify(|v| *v += 1);
        self.bump();
    }

    /// Runs `work` where [`Blocking`] says; `None` if the blocking pool dropped it.
    pub(crate) async fn run_blocking<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        match self.blocking {
            Blocking::Pool => tokio::task::spawn_blocking(work).await.ok(),
            Blocking::Inline(latency) => {
                tokio::time::sleep(latency).await;
                Some(work())
            }
        }
    }

    /// The run's classes, for the papers' byte convention.
    pub(crate) fn classes(&self) -> usize {
        self.experiment.data.classes().len()
    }

    /// Appends a change to the journal. Called with the lock of the state it changed held, so
    /// the records keep the order the changes were made in.
    pub fn record(&self, event: Event) {
        if let Err(e) = self.journal.append(event) {
            self.journal_broke(&e);
        }
    }

    /// [`record`](Self::record) of a record framed beforehand, outside the lock.
    pub(crate) fn record_framed(&self, framed: std::io::Result<Vec<u8>>) {
        if let Err(e) = framed.and_then(|bytes| self.journal.append_framed(&bytes)) {
            self.journal_broke(&e);
        }
    }

    /// Why the journal could not be written, if it could not.
    pub fn journal_failure(&self) -> Option<String> {
        self.journal_failed
            .lock()
            .expect("journal flag lock")
            .clone()
    }

    fn journal_broke(&self, e: &std::io::Error) {
        let path = self.journal.path().display();
        tracing::error!(path = %path, error = %e, "cannot write the journal; the run stops");
        let mut failed = self.journal_failed.lock().expect("journal flag lock");
        failed.get_or_insert_with(|| format!("cannot write the journal {path}: {e}"));
    }

    /// Waits until everything journaled so far is on disk: a call is answered only then.
    ///
    /// Group commit: one sync at a time, off the async threads, each covering every record
    /// appended before it began, so a burst of a thousand calls costs a few syncs, not a
    /// thousand, and waiters hold no thread.
    pub async fn durable(self: &Arc<Self>) -> Result<(), Status> {
        let unavailable =
            || Status::unavailable("the server cannot keep its state on disk; try again later");
        let target = self.journal.appended();
        if self.journal.synced() < target {
            let _turn = self.sync_turn.lock().await;
            if self.journal.synced() < target {
                let shared = self.clone();
                let synced = self
                    .run_blocking(move || {
                        let started = Instant::now();
                        let r = shared.journal.sync();
                        shared.telemetry.journal_synced(started.elapsed());
                        if let Err(e) = &r {
                            shared.journal_broke(e);
                        }
                        r
                    })
                    .await;
                if !matches!(synced, Some(Ok(()))) {
                    return Err(unavailable());
                }
            }
        }
        if self.journal_failure().is_some() {
            return Err(unavailable());
        }
        Ok(())
    }

    /// The largest update this run takes, from its model's shape (and never beyond what one
    /// journal record holds).
    pub(crate) fn max_update_bytes(&self) -> u64 {
        let features = self.rounds().features().unwrap_or(0);
        self.experiment
            .strategy
            .max_update_bytes(features, self.classes())
            .min(journal::MAX_RECORD as u64 - 4096)
    }

    /// The ledger's label of a report: the client's closing for its last one, which is of the
    /// run's last round (a flag on an earlier one would take its bytes out of the rounds).
    pub(crate) fn report_label(&self, report: &EvalReport) -> Round {
        match report.last && report.round == self.experiment.policy.rounds {
            true => CLOSING,
            false => self.label_round(report.round),
        }
    }

    /// The round a client-sent round number is booked under: itself if the run has it, else
    /// 0 (made-up rounds must not grow the ledger).
    pub(crate) fn label_round(&self, round: Round) -> Round {
        if round <= self.experiment.policy.rounds {
            round
        } else {
            0
        }
    }

    /// Room for an upload of `len` bytes in the budget of uploads in flight (KiB-granular).
    pub(crate) fn reserve_upload(&self, len: u64) -> Result<OwnedSemaphorePermit, FlintError> {
        let kib = u32::try_from(len.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        self.upload_budget
            .clone()
            .try_acquire_many_owned(kib)
            .map_err(|_| {
                FlintError::ResourceExhausted(format!(
                    "the server's budget for uploads in flight ({} KiB) is in use; try again",
                    self.upload_budget_kib
                ))
            })
    }

    pub fn rounds(&self) -> std::sync::MutexGuard<'_, Rounds> {
        self.rounds.lock().expect("rounds lock")
    }

    pub(crate) fn check_run(&self, run_id: &str) -> Result<(), FlintError> {
        if run_id != self.run_id {
            return Err(FlintError::Precondition(format!(
                "request for run {run_id:?} but this server runs {:?}; rejoin",
                self.run_id
            )));
        }
        Ok(())
    }

    pub(crate) fn identities(&self) -> std::sync::MutexGuard<'_, Identities> {
        self.identities.lock().expect("identities lock")
    }

    /// The name the caller's client certificate proves, under mutual TLS.
    pub(crate) fn peer<T>(&self, request: &Request<T>) -> Peer {
        if !self.mutual_tls {
            return Peer::Anonymous;
        }
        request
            .extensions()
            .get::<ConnInfo>()
            .and_then(|info| info.peer_certs.as_ref())
            .and_then(|certs| certs.first().and_then(|c| common_name(c)))
            .map_or(Peer::Uncertified, Peer::Certified)
    }

    /// The host a joining client says it runs on.
    pub(crate) fn host<T>(request: &Request<T>) -> String {
        request
            .metadata()
            .get(HOST_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }

    /// Whether the caller holds `client` (its token, its certificate) and has joined. Checked
    /// before anything else, so a stranger learns nothing about the run.
    pub(crate) fn authorize<T>(
        &self,
        request: &Request<T>,
        client: ClientId,
    ) -> Result<(), FlintError> {
        let token = request
            .metadata()
            .get(TOKEN_HEADER)
            .and_then(|v| v.to_str().ok());
        self.identities()
            .check(client, token, &self.peer(request))?;
        self.rounds().check_joined(client)
    }

    /// Runs a closed round's aggregation where [`Blocking`] says, then installs it and wakes
    /// everyone waiting; the lock is free meanwhile.
    pub fn aggregate(self: &Arc<Self>, job: AggregationJob) {
        let shared = self.clone();
        let round = job.round();
        tokio::spawn(async move {
            let started = Instant::now();
            let hold = shared.hold_aggregation;
            let run = move || {
                let done = job.run();
                std::thread::sleep(hold);
                done
            };
            match shared.run_blocking(run).await {
                Some(done) => {
                    let mut rounds = shared.rounds();
                    let closing = secure_record(&rounds, &done);
                    if rounds.install(done, now()) {
                        if let Some(closing) = closing {
                            shared.record(closing);
                        }
                        shared.record(installed(&rounds, round));
                        if let Some((_, seconds)) = rounds.timings(round) {
                            shared.telemetry.aggregated(seconds);
                        }
                    }
                }
                // `run` catches a strategy's panic, so only a cancelled pool ends here.
                None => {
                    tracing::error!(round, "aggregation did not finish");
                    shared.rounds().abandon_aggregation(now());
                }
            }
            tracing::debug!(
                round,
                seconds = started.elapsed().as_secs_f64(),
                "round aggregated"
            );
            shared.bump_phase();
        });
    }
}

/// The journal's record of `round` closed as by its timeout (a replay closes it so, and a round
/// short of its updates or its secure sum is abandoned again), with how long it was open.
/// Written with the lock of the change held, so the records keep its order.
pub fn closed_by_timeout(rounds: &Rounds, round: Round) -> Event {
    Event::Close(RoundMark {
        seconds: rounds.closing_seconds().unwrap_or(0.0),
        timed_out: true,
        ..RoundMark::of(round)
    })
}

/// What a secure round's replay needs before its `Installed`: its sum (with how it closed), or,
/// where its sum could not be unmasked, a close by its timeout (a replay abandons it again).
fn secure_record(rounds: &Rounds, done: &crate::rounds::Aggregated) -> Option<Event> {
    let round = done.round();
    if done.secure_abandoned() {
        return Some(closed_by_timeout(rounds, round));
    }
    let groups = done
        .secure_sum()?
        .iter()
        .map(|(&group, g)| crate::journal::SecureGroupSum {
            group,
            clients: g.weights.keys().copied().collect(),
            weights: g.weights.values().copied().collect(),
            sum: g.sum.clone(),
        })
        .collect();
    Some(Event::SecureSum(crate::journal::SecureSum {
        round,
        groups,
        timed_out: rounds.closed_by() == Some(crate::rounds::ClosedBy::Timeout),
        ..Default::default()
    }))
}

/// The journal's record of `round`'s aggregation installed, with the timings it ran with.
pub fn installed(rounds: &Rounds, round: Round) -> Event {
    let (seconds, aggregation_seconds) = rounds.timings(round).unwrap_or_default();
    Event::Installed(RoundMark {
        seconds,
        aggregation_seconds,
        ..RoundMark::of(round)
    })
}

/// A refusal of an authenticated client's call, labelled as its replies are: its bytes are that
/// client's at every level (a stranger's refusals carry no label: client 0, and `refused`).
pub(crate) fn with_label(mut st: Status, client: ClientId, round: Round) -> Status {
    st.metadata_mut().insert(CLIENT_HEADER, client.into());
    st.metadata_mut().insert(ROUND_HEADER, round.into());
    st
}

/// Calls refused before the caller proved who it is, by method and status: one counter each,
/// so a flood of them costs nothing but the counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    pub calls: u64,
    /// Their request payloads, as far as they were read.
    pub payload_bytes: u64,
}

impl Shared {
    /// Counts a refusal in the metrics, and under `refused` if it names no client.
    pub(crate) fn refused<T>(
        &self,
        method: &'static str,
        outcome: Result<Response<T>, Status>,
        bytes: u64,
    ) -> Result<Response<T>, Status> {
        if let Err(st) = &outcome {
            self.telemetry.refused(method, st.code());
        }
        if let Err(st) = &outcome
            && st.metadata().get(CLIENT_HEADER).is_none()
        {
            let key = format!("{method}/{}", crate::telemetry::code_name(st.code()));
            let mut refused = self.refused.lock().expect("refused lock");
            let r = refused.entry(key).or_default();
            r.calls += 1;
            r.payload_bytes += bytes;
        }
        outcome
    }
}
