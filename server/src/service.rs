//! The tonic shell around [`Rounds`]: validates requests, counts payload bytes, maps refusals
//! to gRPC codes (in one place, [`status`]), and answers each call from [`Shared`].

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use flint_common::data::partition::MAX_CLIENT_NAME;
use flint_common::metrics::ConfusionMatrix;
use flint_common::strategy::Predictor;
use flint_common::wire::chunks::Reassembler;
use flint_common::wire::ledger::{Direction, check_link_counts};
use flint_common::wire::proto::{
    Ack, ClaimReply, ClaimRequest, EvalReport, JoinReply, JoinRequest, Payload, RoundRequest,
    RoundTask, SecAggReply, SecAggRequest, UpdateChunk, UpdateHeader,
};
use flint_common::wire::{CLIENT_HEADER, ROUND_HEADER, TOKEN_HEADER, paper_convention_bytes};
use flint_common::{ClientId, FlintError, Round};
use prost::Message;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::OwnedSemaphorePermit;
use tonic::{Request, Response, Status, Streaming};

use crate::identity::{Holder, Identities, Peer};
use crate::journal::{self, Event, RoundMark};
use crate::proto::aggregator_server::Aggregator;
use crate::rounds::{Accepted, DecodedUpdate, Task};
use crate::shared::{LongPoll, Shared, now, with_label};

pub struct AggregatorService(pub Arc<Shared>);

/// How long an upload may go without a chunk before it is dropped.
const CHUNK_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// The one place a refusal becomes a gRPC status.
pub fn status(e: FlintError) -> Status {
    let message = e.to_string();
    match e {
        FlintError::InvalidUpdate(_) | FlintError::InvalidRequest(_) => {
            Status::invalid_argument(message)
        }
        FlintError::Precondition(_) => Status::failed_precondition(message),
        FlintError::UnknownClient(_) => Status::not_found(message),
        FlintError::Unauthenticated(_) => Status::unauthenticated(message),
        FlintError::PermissionDenied(_) => Status::permission_denied(message),
        FlintError::ResourceExhausted(_) => Status::resource_exhausted(message),
        FlintError::NoBase(_) | FlintError::Restarted(_) => Status::aborted(message),
        FlintError::Config(_)
        | FlintError::Io { .. }
        | FlintError::MissingData { .. }
        | FlintError::Data { .. }
        | FlintError::Partition(_)
        | FlintError::Model(_) => {
            tracing::error!(error = %message, "internal error answering a request");
            Status::internal(message)
        }
    }
}

/// The journal's record of `id`'s binding, as it now stands.
fn bind_record(identities: &Identities, id: ClientId) -> Event {
    let (hash, holder) = identities.binding(id).expect("a slot just bound");
    Event::Bind(journal::Bind {
        client_id: id,
        token_hash: hash.to_vec(),
        host: holder.host.clone(),
        certificate: holder.certificate.clone(),
        enrollment_hash: identities
            .enrollment_of(id)
            .map_or_else(Vec::new, |h| h.to_vec()),
    })
}

/// An upload as it arrives: whose it is once its header's credentials are checked, its
/// chunks' sizes (booked under that client), and its share of the upload budget, held until the
/// update is taken or refused.
#[derive(Default)]
struct Upload {
    whose: Option<(ClientId, Round)>,
    sizes: Vec<usize>,
    budget: Option<OwnedSemaphorePermit>,
}

impl Upload {
    /// Reads the stream to its end, chunk by chunk: its header's client must hold the call's
    /// credentials and have joined, its run must be this one, and its size must fit the upload
    /// budget; a stream that stalls is abandoned, so that it cannot hold its share for ever.
    async fn receive(
        &mut self,
        s: &Shared,
        mut stream: Streaming<UpdateChunk>,
        token: Option<&str>,
        peer: &Peer,
        seen: &AtomicU64,
    ) -> Result<(UpdateHeader, Payload), FlintError> {
        let mut parts = Reassembler::new(s.max_update_bytes());
        loop {
            let next = tokio::time::timeout(CHUNK_IDLE, stream.message())
                .await
                .map_err(|_| {
                    FlintError::InvalidUpdate(format!(
                        "no chunk for {} s: upload abandoned",
                        CHUNK_IDLE.as_secs()
                    ))
                })?
                .map_err(|e| {
                    FlintError::InvalidUpdate(format!("the upload stream broke: {}", e.message()))
                })?;
            let Some(chunk) = next else { break };
            self.sizes.push(chunk.encoded_len());
            seen.fetch_add(chunk.encoded_len() as u64, Ordering::Relaxed);
            if let Some(h) = parts.push(chunk)? {
                let (client, round, run_id) = (h.client_id, h.round, h.run_id.clone());
                let len = h.payload_len;
                s.identities().check(client, token, peer)?;
                s.rounds().check_joined(client)?;
                self.whose = Some((client, s.label_round(round)));
                s.check_run(&run_id)?;
                self.budget = Some(s.reserve_upload(len)?);
            }
        }
        parts.finish()
    }

    /// The chunks' bytes and the update's paper-convention bytes, under the authenticated
    /// client (nothing is booked for a stream whose header was never checked).
    fn book(&self, s: &Shared, paper: u64) {
        let Some((client, round)) = self.whose else {
            return;
        };
        s.ledger.with(|l| {
            for n in &self.sizes {
                l.payload(client, round, Direction::Up, *n, 0);
            }
            l.at(client, round).up.paper += paper;
        });
    }
}

#[tonic::async_trait]
impl Aggregator for AggregatorService {
    async fn join(&self, request: Request<JoinRequest>) -> Result<Response<JoinReply>, Status> {
        let bytes = request.get_ref().encoded_len() as u64;
        let outcome = self.join_call(request).await;
        self.0.refused("Join", outcome, bytes)
    }

    async fn claim(&self, request: Request<ClaimRequest>) -> Result<Response<ClaimReply>, Status> {
        let bytes = request.get_ref().encoded_len() as u64;
        let outcome = self.claim_call(request).await;
        self.0.refused("Claim", outcome, bytes)
    }

    async fn get_round(
        &self,
        request: Request<RoundRequest>,
    ) -> Result<Response<RoundTask>, Status> {
        let bytes = request.get_ref().encoded_len() as u64;
        let outcome = self.get_round_call(request).await;
        self.0.refused("GetRound", outcome, bytes)
    }

    async fn push_update(
        &self,
        request: Request<Streaming<UpdateChunk>>,
    ) -> Result<Response<Ack>, Status> {
        let seen = AtomicU64::new(0);
        let outcome = self.push_update_call(request, &seen).await;
        let taken = outcome.as_ref().map(|ack| ack.get_ref().duplicate);
        self.0.telemetry.update(taken.map_err(Status::code));
        self.0
            .refused("PushUpdate", outcome, seen.load(Ordering::Relaxed))
    }

    async fn report_eval(&self, request: Request<EvalReport>) -> Result<Response<Ack>, Status> {
        let bytes = request.get_ref().encoded_len() as u64;
        let outcome = self.report_eval_call(request).await;
        self.0.refused("ReportEval", outcome, bytes)
    }

    async fn sec_agg(
        &self,
        request: Request<SecAggRequest>,
    ) -> Result<Response<SecAggReply>, Status> {
        let bytes = request.get_ref().encoded_len() as u64;
        let outcome = self.sec_agg_call(request).await;
        self.0.refused("SecAgg", outcome, bytes)
    }
}

/// A reply labelled with the (client, round) its bytes belong to, for the byte meters.
pub(crate) fn labelled<T>(msg: T, client: ClientId, round: Round) -> Response<T> {
    let mut r = Response::new(msg);
    r.metadata_mut().insert(CLIENT_HEADER, client.into());
    r.metadata_mut().insert(ROUND_HEADER, round.into());
    r
}

/// The answer to a client no round soon asks: no task, but when to ask again.
fn come_back(away: std::time::Duration, rounds: Round) -> RoundTask {
    RoundTask {
        total_rounds: rounds,
        come_back_ms: u64::try_from(away.as_millis()).unwrap_or(u64::MAX),
        ..RoundTask::default()
    }
}

fn unix_ms(at: Instant) -> u64 {
    let now = now();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ms = wall.as_millis() as i128 + (at.saturating_duration_since(now).as_millis() as i128)
        - (now.saturating_duration_since(at).as_millis() as i128);
    ms.max(0) as u64
}

/// The most of a caller's fingerprint a refusal echoes: a fingerprint is 16 hex digits, and a
/// caller's megabytes must not come back in the error (nor go into the log).
const ECHOED_FINGERPRINT: usize = 32;

/// The caller runs the server's experiment.
fn same_experiment(given: &str, expected: &str) -> Result<(), Status> {
    if given == expected {
        return Ok(());
    }
    let shown: String = given.chars().take(ECHOED_FINGERPRINT).collect();
    let more = given.chars().count().saturating_sub(ECHOED_FINGERPRINT);
    let tail = match more {
        0 => String::new(),
        n => format!(" (and {n} more characters)"),
    };
    Err(status(FlintError::Precondition(format!(
        "client experiment fingerprint {shown:?}{tail} differs from the server's: start the client with the server's experiment file"
    ))))
}

/// The handlers, each answering one call; [`Aggregator`] below counts what they refuse.
impl AggregatorService {
    async fn join_call(
        &self,
        request: Request<JoinRequest>,
    ) -> Result<Response<JoinReply>, Status> {
        let s = &self.0;
        let peer = s.peer(&request);
        let host = Shared::host(&request);
        let req = request.into_inner();
        // Refusals name nothing of the run (its clients, its fingerprint): the caller has not
        // proved it belongs to it.
        if req.client_name.len() > MAX_CLIENT_NAME {
            return Err(status(FlintError::InvalidRequest(format!(
                "a client name has at most {MAX_CLIENT_NAME} characters"
            ))));
        }
        let id = s.experiment.client_id(&req.client_name).ok_or_else(|| {
            status(FlintError::UnknownClient(format!(
                "unknown client name {:?}: not declared in this experiment",
                req.client_name
            )))
        })?;
        same_experiment(&req.experiment_fingerprint, &s.experiment.fingerprint)?;
        let summary = req.summary.clone().ok_or_else(|| {
            status(FlintError::InvalidRequest(
                "join without a data summary".into(),
            ))
        })?;
        // Whether this join opened round 1.
        let opened;
        {
            // One lock order (identities, then rounds), and the slot is bound only once the
            // join is taken: a refused Join changes nothing.
            let mut identities = s.identities();
            identities
                .check_claim(id, &req.token, &peer)
                .map_err(status)?;
            let enrolled = identities
                .check_enrollment(id, &req.token, &req.enrollment, &peer)
                .map_err(status)?;
            {
                let mut rounds = s.rounds();
                let fresh = !rounds.joined().contains_key(&id);
                let was_open = rounds.open_round().is_some();
                rounds.join(id, summary.clone(), now()).map_err(status)?;
                opened = !was_open && rounds.open_round().is_some();
                if fresh {
                    s.record(Event::Join(journal::Join {
                        client_id: id,
                        summary: Some(summary),
                    }));
                }
            }
            identities.enroll(id, enrolled);
            if identities
                .bind(id, &req.token, Holder::new(&host, &peer))
                .map_err(status)?
            {
                s.record(bind_record(&identities, id));
            }
        }
        s.durable().await?;
        let reply = JoinReply {
            client_id: id,
            run_id: s.run_id.clone(),
            strategy: s.experiment.strategy.name(),
            seed: s.experiment.seed,
            rounds: s.experiment.policy.rounds,
        };
        s.ledger.with(|l| {
            l.payload(id, 0, Direction::Up, req.encoded_len(), 0);
            l.payload(id, 0, Direction::Down, reply.encoded_len(), 0);
        });
        tracing::info!(client = id, name = %req.client_name, "client joined");
        match opened {
            true => s.bump_phase(),
            false => s.bump(),
        }
        Ok(labelled(reply, id, 0))
    }

    async fn claim_call(
        &self,
        request: Request<ClaimRequest>,
    ) -> Result<Response<ClaimReply>, Status> {
        let s = &self.0;
        let peer = s.peer(&request);
        let host = Shared::host(&request);
        let req = request.into_inner();
        same_experiment(&req.experiment_fingerprint, &s.experiment.fingerprint)?;
        let (id, name) = {
            // One lock order (identities, then rounds): a slot whose claimer joined never lapses.
            let mut identities = s.identities();
            let rounds = s.rounds();
            let joined = |id: ClientId| rounds.joined().contains_key(&id);
            let holder = Holder::new(&host, &peer);
            let (id, name, bound) = identities
                .claim_any(&req.token, &req.enrollment, &peer, holder, &joined, now())
                .map_err(status)?;
            drop(rounds);
            if bound {
                s.record(bind_record(&identities, id));
            }
            (id, name)
        };
        s.durable().await?;
        tracing::info!(client = id, name = %name, ?peer, "client slot claimed");
        let reply = ClaimReply {
            client_name: name,
            client_id: id,
        };
        s.ledger.with(|l| {
            l.payload(id, 0, Direction::Up, req.encoded_len(), 0);
            l.payload(id, 0, Direction::Down, reply.encoded_len(), 0);
        });
        Ok(labelled(reply, id, 0))
    }

    async fn get_round_call(
        &self,
        request: Request<RoundRequest>,
    ) -> Result<Response<RoundTask>, Status> {
        let s = &self.0;
        s.authorize(&request, request.get_ref().client_id)
            .map_err(status)?;
        let req = request.into_inner();
        s.check_run(&req.run_id)
            .map_err(|e| with_label(status(e), req.client_id, 0))?;
        let waiting = LongPoll::enter(s, req.client_id)?;
        let (reply, ledger_round) = self
            .wait_task(waiting, req.after_round, false)
            .await?
            .ok_or_else(|| Status::internal("a long-poll ended without a task"))?;
        s.ledger.with(|l| {
            l.payload(
                req.client_id,
                ledger_round,
                Direction::Up,
                req.encoded_len(),
                0,
            )
        });
        self.book_down(
            req.client_id,
            ledger_round,
            reply.encoded_len(),
            Some(&reply),
        );
        Ok(labelled(reply, req.client_id, ledger_round))
    }

    /// Waits (the long-poll `waiting`) for its client's next task after `after_round`, on disk
    /// before it is answered; with the round its download belongs to (its aggregate's; round 0:
    /// the initial model). `None` where `until_passed_over` and a round after `after_round`
    /// opened without the client.
    async fn wait_task(
        &self,
        waiting: LongPoll,
        after_round: Round,
        until_passed_over: bool,
    ) -> Result<Option<(RoundTask, Round)>, Status> {
        let s = &self.0;
        let client = waiting.client;
        let mut changes = s.phase.subscribe();
        let task = loop {
            let (task, away, passed_over) = {
                let mut rounds = s.rounds();
                let task = rounds.task_for(client, after_round);
                let away = (task == Task::Wait)
                    .then(|| rounds.come_back(client, after_round, crate::shared::now()))
                    .flatten();
                (task, away, rounds.passes_over(client, after_round))
            };
            if task != Task::Wait {
                break task;
            }
            if let Some(away) = away {
                s.telemetry.come_back();
                return Ok(Some((
                    come_back(away, s.experiment.policy.rounds),
                    after_round,
                )));
            }
            if until_passed_over && passed_over {
                return Ok(None);
            }
            if changes.changed().await.is_err() {
                return Err(Status::unavailable("server is shutting down"));
            }
        };
        drop(waiting);
        // What the task shows (a round closed and aggregated, the run finished) is on disk
        // before anyone acts on it.
        s.durable().await?;
        let rounds = s.experiment.policy.rounds;
        Ok(Some(match task {
            Task::Train {
                round,
                deadline,
                download,
            } => (
                RoundTask {
                    round,
                    total_rounds: rounds,
                    finished: false,
                    deadline_unix_ms: unix_ms(deadline),
                    download,
                    come_back_ms: 0,
                },
                round - 1,
            ),
            Task::Finished { download } => (
                RoundTask {
                    round: rounds,
                    total_rounds: rounds,
                    finished: true,
                    deadline_unix_ms: 0,
                    download,
                    come_back_ms: 0,
                },
                rounds,
            ),
            Task::Wait => unreachable!("the loop only ends on a task"),
        }))
    }

    /// Books a reply of `len` bytes going down, with the papers' convention for the download
    /// of the task it carries, if any.
    fn book_down(&self, client: ClientId, round: Round, len: usize, task: Option<&RoundTask>) {
        let s = &self.0;
        let paper = task.and_then(|t| t.download.as_ref()).map_or(0, |d| {
            paper_convention_bytes(d, s.classes(), s.experiment.strategy.clauses())
        });
        s.ledger
            .with(|l| l.payload(client, round, Direction::Down, len, paper));
    }

    async fn push_update_call(
        &self,
        request: Request<Streaming<UpdateChunk>>,
        seen: &AtomicU64,
    ) -> Result<Response<Ack>, Status> {
        let s = &self.0;
        // The stream's header names the client; the caller's credentials are checked against it.
        let token = request
            .metadata()
            .get(TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let peer = s.peer(&request);
        let mut upload = Upload::default();
        let received = upload
            .receive(s, request.into_inner(), token.as_deref(), &peer, seen)
            .await;
        // From here on the bytes are an authenticated client's, refused or not.
        let (header, payload) = match received {
            Ok(update) => update,
            Err(e) => {
                upload.book(s, 0);
                return Err(match upload.whose {
                    Some((client, round)) => with_label(status(e), client, round),
                    None => status(e),
                });
            }
        };
        let (client, round) = (header.client_id, header.round);
        upload.book(
            s,
            paper_convention_bytes(&payload, s.classes(), s.experiment.strategy.clauses()),
        );
        let label = s.label_round(round);
        let reported = self.take_carried_reports(&header)?;
        let duplicate = match self.take_update(client, round, &payload).await {
            Ok(duplicate) => duplicate,
            Err(refused) => {
                // A late update's reports still count: on disk before the refusal.
                if reported {
                    s.durable()
                        .await
                        .map_err(|st| with_label(st, client, label))?;
                    s.bump();
                }
                return Err(refused);
            }
        };
        let wait_next = header.wait_next;
        // Nothing of the upload is held while it waits for the next task.
        drop((upload, payload, header));
        tracing::debug!(client, round = label, duplicate, "update accepted");
        s.bump();
        let next = match wait_next {
            true => self.task_after(client, round).await,
            false => None,
        };
        let ack = Ack { duplicate, next };
        self.book_down(client, label, ack.encoded_len(), ack.next.as_ref());
        Ok(labelled(ack, client, label))
    }

    /// The task after `round` for an update sent with `wait_next`, if its download is that
    /// round's aggregate (another round's bytes would go under this one's label), or the
    /// answer telling a client no round soon asks when to come back. None too where the client
    /// holds its most long-polls, the next round does not select it, or the wait fails (the
    /// server stops): the update is taken, so its answer says so, and the client asks GetRound.
    async fn task_after(&self, client: ClientId, round: Round) -> Option<RoundTask> {
        let waiting = LongPoll::enter(&self.0, client).ok()?;
        match self.wait_task(waiting, round, true).await {
            Ok(Some((task, ledger_round))) => (ledger_round == round).then_some(task),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(client, round, reason = %e.message(), "no next task with the update's answer");
                None
            }
        }
    }

    /// Takes a received update into the round, journals it (and the round's close) before the
    /// answer, starts the aggregation it completes, and keeps it with `server.keep_updates`.
    /// Returns whether it was a duplicate.
    async fn take_update(
        &self,
        client: ClientId,
        round: Round,
        payload: &Payload,
    ) -> Result<bool, Status> {
        let s = &self.0;
        // Framed before the lock is taken: an update can be large.
        let framed = journal::frame(&Event::Update(journal::Update {
            client_id: client,
            round,
            payload: Some(payload.clone()),
        }));
        let decoded = self.decode_update(client, round, payload).await?;
        let (outcome, late) = {
            let mut rounds = s.rounds();
            let outcome = match decoded {
                Ok(Some(decoded)) => rounds.accept_decoded(decoded, now()),
                Ok(None) => Ok(Accepted::DUPLICATE),
                Err(e) => Err(e),
            };
            let late = outcome.is_err() && rounds.note_late(client, round);
            if late {
                tracing::info!(client, round, "update came after its round closed");
                s.record(Event::Late(journal::Late {
                    client_id: client,
                    round,
                }));
            }
            if let Ok(Accepted {
                duplicate: false,
                closed,
            }) = &outcome
            {
                s.record_framed(framed);
                if closed.is_some() {
                    s.record(Event::Close(RoundMark {
                        seconds: rounds.closing_seconds().unwrap_or(0.0),
                        ..RoundMark::of(round)
                    }));
                }
            }
            (outcome, late)
        };
        let round = s.label_round(round);
        // The aggregation starts before this call awaits anything: a caller gone while its
        // update is made durable (its future dropped) must not leave the round closed and
        // never aggregated. Nobody sees its result before it is on disk (`wait_task`).
        let duplicate = outcome.map(|accepted| {
            if let Some(job) = accepted.closed {
                s.aggregate(job);
            }
            accepted.duplicate
        });
        if duplicate.is_ok() || late {
            s.durable().await?;
        }
        let duplicate = match duplicate {
            Ok(duplicate) => duplicate,
            Err(e) => {
                tracing::warn!(client, round, reason = %e, "update refused");
                return Err(with_label(status(e), client, round));
            }
        };
        if let (Some(dir), false) = (&s.updates_dir, duplicate) {
            let path = dir.join(format!("round-{round}-client-{client}.pb"));
            if let Err(e) = tokio::fs::write(&path, payload.encode_to_vec()).await {
                tracing::error!(client, round, path = %path.display(), error = %e, "cannot keep the update");
            }
        }
        Ok(duplicate)
    }

    /// Reads an update the open round wants off the lock (`Ok(None)`: already taken), a costly
    /// one off the async threads. The lock is held only to check the round and again to take
    /// the result. `Err`: the blocking pool dropped the work (the server is shutting down).
    async fn decode_update(
        &self,
        client: ClientId,
        round: Round,
        payload: &Payload,
    ) -> Result<flint_common::Result<Option<DecodedUpdate>>, Status> {
        let decoding = match self.0.rounds().update_decoding(client, round) {
            Ok(Some(decoding)) => decoding,
            other => return Ok(other.map(|_| None)),
        };
        if !decoding.is_costly() {
            return Ok(decoding.run(payload).map(Some));
        }
        let payload = payload.clone();
        match self.0.run_blocking(move || decoding.run(&payload)).await {
            Some(decoded) => Ok(decoded.map(Some)),
            None => Err(with_label(
                Status::unavailable("the server could not read the update now; try again"),
                client,
                self.0.label_round(round),
            )),
        }
    }

    async fn report_eval_call(
        &self,
        request: Request<EvalReport>,
    ) -> Result<Response<Ack>, Status> {
        let s = &self.0;
        s.authorize(&request, request.get_ref().client_id)
            .map_err(status)?;
        let req = request.into_inner();
        let label = s.report_label(&req);
        s.ledger
            .with(|l| l.payload(req.client_id, label, Direction::Up, req.encoded_len(), 0));
        let duplicate = self.take_report(&req)?;
        s.durable().await?;
        s.bump();
        let ack = Ack {
            duplicate,
            next: None,
        };
        self.book_down(req.client_id, label, ack.encoded_len(), None);
        Ok(labelled(ack, req.client_id, label))
    }

    /// Checks and records one evaluation report of its (authorized) client, journaled but not
    /// yet durable; whether it was a duplicate.
    fn take_report(&self, req: &EvalReport) -> Result<bool, Status> {
        let s = &self.0;
        let refuse = |e| with_label(status(e), req.client_id, s.report_label(req));
        s.check_run(&req.run_id).map_err(refuse)?;
        let m = ConfusionMatrix::from_counts(req.classes as usize, req.confusion.clone())
            .ok_or_else(|| {
                refuse(FlintError::InvalidRequest(format!(
                    "confusion matrix has {} counts, expected {} (classes²)",
                    req.confusion.len(),
                    u64::from(req.classes) * u64::from(req.classes)
                )))
            })?;
        let predictor = Predictor::parse(&req.predictor).map_err(refuse)?;
        check_link_counts(&req.link, s.experiment.policy.rounds).map_err(refuse)?;
        let mut rounds = s.rounds();
        let duplicate = rounds
            .report_eval(req.client_id, req.round, m, req.global_test, predictor)
            .map_err(refuse)?;
        // A repeat sent after its answer was lost carries that attempt's link bytes, which the
        // client sends no more: its counts are taken too, and journaled once per report.
        let first_repeat = || {
            let key = (req.client_id, req.round, req.predictor.clone());
            let mut repeated = s.repeated_reports.lock().expect("repeated_reports lock");
            !req.link.is_empty() && repeated.insert(key)
        };
        if !duplicate || first_repeat() {
            s.record(Event::Eval(EvalReport {
                run_id: String::new(),
                ..req.clone()
            }));
        }
        // Under the rounds lock (then the ledger's, as results are collected): the run cannot
        // be seen done before the report's link counts are booked (a count only grows, so a
        // repeat's are taken whatever came before).
        s.ledger.with(|l| l.reported_link(req.client_id, &req.link));
        Ok(duplicate)
    }

    /// Takes the evaluation reports an update's header carries. Each must be its client's and
    /// of the round before the update's, or the update is refused with nothing taken; each is
    /// then taken as ReportEval would, and one the round refuses (a round whose aggregation
    /// failed has no metrics) is left out and said in the log: it never holds the update back.
    /// Whether any was new (to be made durable).
    fn take_carried_reports(&self, header: &UpdateHeader) -> Result<bool, Status> {
        let stranger = header.reports.iter().find(|r| {
            r.client_id != header.client_id || r.round.checked_add(1) != Some(header.round)
        });
        if let Some(r) = stranger {
            return Err(with_label(
                status(FlintError::InvalidRequest(format!(
                    "an update of client {} for round {} carries a report of client {} for round {}",
                    header.client_id, header.round, r.client_id, r.round
                ))),
                header.client_id,
                self.0.label_round(header.round),
            ));
        }
        let mut fresh = false;
        for report in &header.reports {
            let report = EvalReport {
                run_id: header.run_id.clone(),
                ..report.clone()
            };
            match self.take_report(&report) {
                Ok(duplicate) => fresh |= !duplicate,
                Err(st) => {
                    self.0.telemetry.refused("ReportEval", st.code());
                    tracing::warn!(
                        client = header.client_id,
                        round = report.round,
                        reason = %st.message(),
                        "an evaluation report carried by an update refused; the update goes on"
                    );
                }
            }
        }
        Ok(fresh)
    }
}
