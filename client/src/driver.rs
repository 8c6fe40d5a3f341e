//! One client's run: the shell around [`Machine`]. It makes the calls the machine asks for and
//! counts their bytes, applies, evaluates and trains off the async threads, keeps the
//! checkpoint, waits where the machine says, and tells the machine what followed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flint_common::clients::BoundHalf;
use flint_common::config::Experiment;
use flint_common::degenerate::ModelHealth;
use flint_common::metrics::ConfusionMatrix;
use flint_common::model::kept::{Condition, ModelFile};
use flint_common::rng::{FlintRng, derive_rng};
use flint_common::strategy::Predictor;
use flint_common::wire::ledger::{CLOSING, Direction, mark_link_sent};
use flint_common::wire::proto::{
    Ack, DataSummary, EvalReport, JoinRequest, LinkCount, Payload, RoundRequest, RoundTask,
};
use flint_common::wire::{CLIENT_HEADER, ROUND_HEADER, TOKEN_HEADER, paper_convention_bytes};
use flint_common::{ClientId, Round};
use flint_shell::meter::SharedLedger;
use prost::Message;
use tokio::time::Instant;
use tonic::{Request, Status};
use tracing::Instrument;

use crate::core::{Pushed, retryable};
use crate::identity::Credentials;
use crate::identity::with_host;
use crate::machine::{Action, Churn, Event, Machine, PushAnswer, Saved};
use crate::progress::ProgressBook;
use crate::report::ClientReport;
use crate::resume;
use crate::retry::{JOIN_ATTEMPT, retry_bounded};
use crate::shell::{Conn, Dialer, Grpc, Shell};

mod secure;

/// The span of one round's work; its `round` is what a JSON line names (the innermost span's).
fn round_span(round: Round) -> tracing::Span {
    tracing::error_span!("round", round)
}

/// The bytes of a task's answer, booked once the machine has read the task (under the round
/// its download is the aggregate of).
struct TaskBytes {
    up: usize,
    down: usize,
    paper: u64,
}

/// What the loop carries beside the machine.
struct Run {
    half: Option<Box<dyn BoundHalf>>,
    train_seconds: BTreeMap<Round, f64>,
    /// The round of the task being worked on, for the log's spans.
    round: Round,
    /// When the loop started: the machine's clock counts from it.
    origin: Instant,
}

pub(crate) struct Client {
    experiment: Arc<Experiment>,
    name: String,
    id: ClientId,
    summary: DataSummary,
    /// Binds this client's slot to this process (see `Join`).
    token: String,
    /// The enrollment secret its first Join binds the slot with (empty without one).
    enrollment: String,
    /// Whether it speaks TLS (for the hint when a handshake fails).
    tls: bool,
    /// The interfaces counted at the link level, if any.
    link_interfaces: Vec<String>,
    /// Replaced by a fresh (unconnected) one while the client stays away.
    grpc: std::sync::Mutex<Grpc>,
    dialer: Dialer,
    ledger: Arc<SharedLedger>,
    /// The link counts its reports have sent, by round (each report sends what changed).
    link_sent: std::sync::Mutex<BTreeMap<Round, (u64, u64)>>,
    trainers: Arc<tokio::sync::Semaphore>,
    /// Turns at joining, shared by the process's clients.
    joins: Arc<tokio::sync::Semaphore>,
    retry_for: Duration,
    out: Option<std::path::PathBuf>,
    progress: Option<Arc<ProgressBook>>,
}

impl Client {
    /// A client of `shell`'s process in its slot.
    pub(crate) fn new(
        shell: &Shell,
        name: String,
        id: ClientId,
        summary: DataSummary,
        creds: Credentials,
        conn: Conn,
        progress: Option<&Arc<ProgressBook>>,
    ) -> Client {
        Client {
            experiment: shell.experiment.clone(),
            name,
            id,
            summary,
            token: creds.token,
            enrollment: creds.enrollment,
            tls: shell.tls.tls_ca.is_some(),
            link_interfaces: shell
                .link
                .as_ref()
                .map_or_else(Vec::new, |l| l.interfaces().to_vec()),
            grpc: std::sync::Mutex::new(conn.grpc),
            dialer: conn.dialer,
            ledger: conn.ledger,
            link_sent: Default::default(),
            trainers: shell.trainers.clone(),
            joins: shell.joins.clone(),
            retry_for: shell.retry_for,
            out: shell.out.clone(),
            progress: progress.cloned(),
        }
    }

    fn grpc(&self) -> Grpc {
        self.grpc.lock().expect("grpc lock").clone()
    }

    /// Closes the connection (its last handle goes) while the client stays away; the next
    /// call makes a new one.
    fn hang_up(&self) {
        *self.grpc.lock().expect("grpc lock") = self.dialer.dial();
    }

    fn request<T>(&self, msg: T, round: Option<Round>) -> Request<T> {
        let mut r = Request::new(msg);
        r.metadata_mut().insert(CLIENT_HEADER, self.id.into());
        if let Ok(token) = self.token.parse() {
            r.metadata_mut().insert(TOKEN_HEADER, token);
        }
        if let Some(round) = round {
            r.metadata_mut().insert(ROUND_HEADER, round.into());
        }
        r
    }

    /// The run's classes (one count per class in the data summary), for the papers' byte
    /// convention.
    fn classes(&self) -> usize {
        self.summary.train_class_counts.len()
    }

    /// Records a request's payload once the server answered (so it reached the handler).
    fn count(&self, round: Round, d: Direction, len: usize, paper: u64) {
        self.ledger
            .with(|l| l.payload(self.id, round, d, len, paper));
    }

    pub(crate) async fn run(
        self,
        half: Box<dyn BoundHalf>,
        feature_names: Vec<String>,
        conditions: Vec<Condition>,
    ) -> anyhow::Result<ClientReport> {
        let run_id = self.join().await?;
        let (half, mut machine) = self.resume(half, &run_id).await?;
        let mut run = Run {
            half: Some(half),
            train_seconds: BTreeMap::new(),
            round: 0,
            origin: Instant::now(),
        };
        let told = self.drive(&run_id, &mut machine, &mut run).await?;
        let trained = machine.position().rounds_trained().to_vec();
        tracing::info!(client = self.id, rounds = trained.len(), "run finished");
        // A finished run needs no checkpoint (as the server's journal, it goes with the run);
        // a server only presumed gone may come back and still need the saved update.
        if let Some(out) = self.out.as_ref().filter(|_| told) {
            resume::remove(&resume::path(out, &self.name));
        }
        let half = run.half.take().context("the client's model was lost")?;
        let (model, model_health) = self.kept_model(half.as_ref(), feature_names, conditions);
        Ok(ClientReport {
            model,
            model_health,
            client_id: self.id,
            name: self.name.clone(),
            rounds_trained: trained,
            train_seconds: run.train_seconds,
            ledger: self.ledger.snapshot(),
            link_interfaces: self.link_interfaces.clone(),
        })
    }

    /// Performs the machine's actions until it finishes (`true`: told by the server) or gives
    /// up.
    async fn drive(
        &self,
        run_id: &str,
        machine: &mut Machine,
        run: &mut Run,
    ) -> anyhow::Result<bool> {
        let mut action = machine.start();
        loop {
            let round = match &action {
                Action::Ask { after } => *after,
                Action::Train { round, .. } | Action::Push { round, .. } => *round,
                _ => run.round,
            };
            let (event, bytes) = match action {
                Action::Finish { told } => return Ok(self.finished(told)),
                Action::GiveUp(why) => bail!("{why}"),
                action => {
                    self.perform(run_id, action, run)
                        .instrument(round_span(round))
                        .await?
                }
            };
            if let Some(task) = answered_task(&event) {
                run.round = task.round;
                self.say_if_dropping(task);
            }
            action = machine.handle(event);
            if let Some(b) = bytes {
                self.book_task(machine.task_round(), b);
            }
        }
    }

    /// One action's call or work, and the event that followed.
    async fn perform(
        &self,
        run_id: &str,
        action: Action,
        run: &mut Run,
    ) -> anyhow::Result<(Event, Option<TaskBytes>)> {
        let now = || run.origin.elapsed();
        Ok(match action {
            Action::Ask { after } => self.ask(run_id, after, now()).await,
            Action::Apply {
                round,
                download,
                evaluate,
            } => {
                let reports = self.apply(run, round, download, evaluate).await?;
                (Event::Applied(reports), None)
            }
            Action::Report(report) => (self.report(run_id, report, now()).await, None),
            Action::Train { round, rng } => (self.train(run, round, rng).await?, None),
            Action::Keep(saved) => {
                self.keep(run, run_id, saved).await?;
                (Event::Kept, None)
            }
            Action::Push {
                round,
                update,
                reports,
            } if self.experiment.secagg.is_some() => {
                self.secure_push(run_id, round, &update, reports, now())
                    .await
            }
            Action::Push {
                round,
                update,
                reports,
            } => self.push(run_id, round, &update, reports, now()).await,
            Action::Hold(hold) => {
                tracing::info!(
                    client = self.id,
                    round = run.round,
                    ?hold,
                    "straggling: the update waits"
                );
                tokio::time::sleep(hold).await;
                (Event::Held, None)
            }
            Action::Away(away) => {
                tracing::debug!(
                    client = self.id,
                    ?away,
                    "no round soon asks this client; it comes back later"
                );
                self.hang_up();
                tokio::time::sleep(away).await;
                (Event::Back, None)
            }
            Action::Wait(wait) => {
                tracing::debug!(client = self.id, ?wait, "server unreachable; retrying");
                tokio::time::sleep(wait).await;
                (Event::Waited, None)
            }
            Action::Finish { .. } | Action::GiveUp(_) => unreachable!("handled by drive"),
        })
    }

    /// A task this client's `[churn]` drops out of, said in the log (the machine goes on
    /// without a word).
    fn say_if_dropping(&self, task: &RoundTask) {
        let e = &self.experiment;
        let work = !task.finished && task.come_back_ms == 0;
        if work && e.churn.drops(e.seed, self.id, task.round) {
            tracing::info!(
                client = self.id,
                round = task.round,
                "dropping out of the round ([churn])"
            );
        }
    }

    /// The end of the loop: said in the log where the server went away after the last round.
    fn finished(&self, told: bool) -> bool {
        if !told {
            tracing::warn!(
                client = self.id,
                "the server is gone after the run's last round: it finished without this client's last word; the client ends with its ledger"
            );
        }
        told
    }

    /// The next task after `after` (a long-poll).
    async fn ask(&self, run_id: &str, after: Round, now: Duration) -> (Event, Option<TaskBytes>) {
        let ask = RoundRequest {
            client_id: self.id,
            run_id: run_id.to_string(),
            after_round: after,
        };
        let mut g = self.grpc();
        match g.get_round(self.request(ask.clone(), None)).await {
            Ok(reply) => {
                let task = reply.into_inner();
                let bytes = self.task_bytes(&task, ask.encoded_len(), task.encoded_len());
                (Event::Answered(task), Some(bytes))
            }
            Err(s) => (failed(&s, s.to_string(), now), None),
        }
    }

    /// The bytes of an answer carrying `task`: `up` asked, `down` received.
    fn task_bytes(&self, task: &RoundTask, up: usize, down: usize) -> TaskBytes {
        let paper = task.download.as_ref().map_or(0, |d| {
            paper_convention_bytes(d, self.classes(), self.experiment.strategy.clauses())
        });
        TaskBytes { up, down, paper }
    }

    fn book_task(&self, round: Round, bytes: TaskBytes) {
        if bytes.up > 0 {
            self.count(round, Direction::Up, bytes.up, 0);
        }
        self.count(round, Direction::Down, bytes.down, bytes.paper);
    }

    /// Applies `download`, the aggregate of `round`, and where `evaluate`, evaluates it, off
    /// the async threads (a composite of many machines takes seconds). The reports: the shared
    /// test set's first, if this client holds it (baselines before the model: the server waits
    /// for the model's).
    async fn apply(
        &self,
        run: &mut Run,
        round: Round,
        download: Option<Payload>,
        evaluate: bool,
    ) -> anyhow::Result<Vec<EvalReport>> {
        let evaluations = blocking(&mut run.half, move |h| -> anyhow::Result<_> {
            if let Some(d) = &download {
                h.apply(round, d)
                    .context("applying the server's download")?;
            }
            Ok(evaluate.then(|| (h.evaluate_global(), h.evaluate())))
        })
        .await??;
        let Some((global, local)) = evaluations else {
            return Ok(Vec::new());
        };
        Ok(global
            .into_iter()
            .map(|(p, cm)| self.eval_report(round, cm, Some(p)))
            .chain([self.eval_report(round, local, None)])
            .collect())
    }

    /// Sends one evaluation report (ReportEval).
    async fn report(&self, run_id: &str, report: EvalReport, now: Duration) -> Event {
        // The counts as the report leaves, with the reports sent since it was made.
        let fresh = self.unsent_link();
        let report = EvalReport {
            run_id: run_id.to_string(),
            link: up_to_date(report.link, &fresh),
            ..report
        };
        // The last report is the client's closing: no later one can say its link level.
        let round = match report.last {
            true => CLOSING,
            false => report.round,
        };
        let mut g = self.grpc();
        let event = match g
            .report_eval(self.request(report.clone(), Some(round)))
            .await
        {
            Ok(ack) => {
                self.count(round, Direction::Up, report.encoded_len(), 0);
                self.count(round, Direction::Down, ack.get_ref().encoded_len(), 0);
                self.mark_sent(&fresh);
                Event::Reported
            }
            Err(s) => failed(&s, s.to_string(), now),
        };
        self.book_progress();
        event
    }

    /// One round's local training in a training slot, off the async threads.
    async fn train(&self, run: &mut Run, round: Round, mut rng: FlintRng) -> anyhow::Result<Event> {
        let permit = self
            .trainers
            .clone()
            .acquire_owned()
            .await
            .context("training slots closed")?;
        let started = std::time::Instant::now();
        let (rng, update) = blocking(&mut run.half, move |h| {
            let update = h.train(round, &mut rng).map(|u| {
                let whole = h.without_base(&u);
                (u, whole)
            });
            (rng, update)
        })
        .await?;
        let (update, whole) = update?;
        // A masked input is summed with others': it can be no change since a base of this
        // client's alone.
        let (update, whole) = match (self.experiment.secagg, whole) {
            (Some(_), Some(whole)) => (whole, None),
            (_, whole) => (update, whole),
        };
        let seconds = started.elapsed().as_secs_f64();
        drop(permit);
        tracing::info!(client = self.id, round, seconds, "trained");
        run.train_seconds.insert(round, seconds);
        Ok(Event::Trained { update, whole, rng })
    }

    /// Pushes `round`'s `update` with the `reports` that ride on it; the answer carries the
    /// next task where the server knew it (one call less per round).
    async fn push(
        &self,
        run_id: &str,
        round: Round,
        update: &Payload,
        reports: Vec<EvalReport>,
        now: Duration,
    ) -> (Event, Option<TaskBytes>) {
        let chunks = crate::core::upload(self.id, run_id, round, update, reports);
        let mut g = self.grpc();
        let req = self.request(tokio_stream::iter(chunks.clone()), Some(round));
        let outcome = g.push_update(req).await;
        let answered = match &outcome {
            Ok(_) => true,
            Err(s) => !retryable(s.code()),
        };
        let taken = crate::core::pushed(outcome.as_ref().map(|_| ()).map_err(Status::code));
        if taken != Pushed::Refused {
            for c in &chunks {
                self.count(round, Direction::Up, c.encoded_len(), 0);
            }
            let (classes, clauses) = (self.classes(), self.experiment.strategy.clauses());
            let paper = paper_convention_bytes(update, classes, clauses);
            self.ledger.with(|l| l.at(self.id, round).up.paper += paper);
        }
        let pushed = match outcome {
            Ok(ack) => self.taken(round, ack.into_inner()),
            Err(s) if answered => {
                self.not_taken(round, taken, &s);
                let why = s.message().to_string();
                (
                    Event::Pushed(PushAnswer::Refused {
                        code: s.code(),
                        why,
                    }),
                    None,
                )
            }
            Err(s) => {
                // Its bytes are counted again when it goes again: say why at the default level.
                tracing::info!(
                    client = self.id,
                    round,
                    code = ?s.code(),
                    error = %s.message(),
                    "update not delivered; it is sent again"
                );
                (failed(&s, s.message().to_string(), now), None)
            }
        };
        self.book_progress();
        pushed
    }

    /// An update's answer: the next task where it carried it (one message, booked with the
    /// task it carries), else booked under the update's round.
    fn taken(&self, round: Round, ack: Ack) -> (Event, Option<TaskBytes>) {
        let len = ack.encoded_len();
        let Some(task) = ack.next else {
            self.count(round, Direction::Down, len, 0);
            return (Event::Pushed(PushAnswer::Taken(None)), None);
        };
        let bytes = self.task_bytes(&task, 0, len);
        (Event::Pushed(PushAnswer::Taken(Some(task))), Some(bytes))
    }

    /// Says in the log why an update was not taken where the run goes on all the same.
    fn not_taken(&self, round: Round, pushed: Pushed, s: &Status) {
        let reason = s.message();
        match pushed {
            Pushed::NotTaken => tracing::warn!(
                client = self.id,
                round,
                reason,
                "update not taken; continuing with the next round"
            ),
            Pushed::NoBase => tracing::warn!(
                client = self.id,
                round,
                reason,
                "the server no longer holds the delta's base: the weights themselves go instead"
            ),
            Pushed::Taken | Pushed::Refused => {}
        }
    }

    /// Where this client starts: its checkpoint in `--out` of this run, if it has one (a
    /// restart), else the first round with the run's stream.
    async fn resume(
        &self,
        half: Box<dyn BoundHalf>,
        run_id: &str,
    ) -> anyhow::Result<(Box<dyn BoundHalf>, Machine)> {
        let rounds = self.experiment.policy.rounds;
        let churn = Churn {
            profile: self.experiment.churn,
            seed: self.experiment.seed,
            client: self.id,
        };
        let fresh = Machine::new(
            rounds,
            derive_rng(self.experiment.seed, "train", self.id),
            self.retry_for,
        )
        .with_churn(churn);
        let Some(out) = &self.out else {
            return Ok((half, fresh));
        };
        let path = resume::path(out, &self.name);
        let Some(c) = resume::read(&path, &self.experiment.fingerprint, run_id)? else {
            return Ok((half, fresh));
        };
        let (saved, state) = c.saved();
        let mut half = Some(half);
        let restored = blocking(&mut half, move |h| h.restore(&state)).await?;
        restored.with_context(|| format!("restoring {}", path.display()))?;
        let round = saved.trained.round;
        tracing::info!(client = self.id, round, "resumed from its checkpoint");
        let half = half.context("the client's model was lost")?;
        let resumed = Machine::resumed(rounds, saved, self.retry_for).with_churn(churn);
        Ok((half, resumed))
    }

    /// Writes this client's checkpoint after training a round, before its update goes up (see
    /// [`resume`]); a strategy that carries nothing writes none. A checkpoint that cannot be
    /// written ends the client: a restart would not go on exactly.
    async fn keep(&self, run: &mut Run, run_id: &str, saved: Saved) -> anyhow::Result<()> {
        let Some(out) = self.out.clone() else {
            return Ok(());
        };
        let header = resume::Header::of(&self.experiment.fingerprint, run_id, &saved);
        let path = resume::path(&out, &self.name);
        let written = blocking(&mut run.half, move |h| match h.checkpoint() {
            Some(state) => resume::write(&path, &header, &state),
            None => Ok(()),
        })
        .await?;
        written.context("writing the client's checkpoint")
    }

    /// Joins the run under this client's slot (retried within the window) and returns the
    /// run id; its log lines carry the run from here on.
    async fn join(&self) -> anyhow::Result<String> {
        let join = JoinRequest {
            client_name: self.name.clone(),
            experiment_fingerprint: self.experiment.fingerprint.clone(),
            summary: Some(self.summary.clone()),
            token: self.token.clone(),
            enrollment: self.enrollment.clone(),
        };
        // Held until answered: a process's thousand clients do not all wait on a busy server
        // with a connection each.
        let _turn = self.joins.acquire().await;
        let reply = retry_bounded(self.retry_for, JOIN_ATTEMPT, "join", || {
            let mut g = self.grpc();
            let req = with_host(Request::new(join.clone()));
            async move { g.join(req).await }
        })
        .await
        .map_err(|s| {
            let status = s.to_string();
            let why =
                crate::core::join_refused(&self.name, s.code(), &status, s.message(), self.tls);
            anyhow::anyhow!(why)
        })?;
        if reply.client_id != self.id {
            bail!(
                "server gave client {} id {} but the experiment says {}",
                self.name,
                reply.client_id,
                self.id
            );
        }
        self.count(0, Direction::Up, join.encoded_len(), 0);
        self.count(0, Direction::Down, reply.encoded_len(), 0);
        let run_id = reply.run_id;
        // Round 0 is the join, as in the byte ledger. Every client of a process is in one run.
        flint_shell::logging::set_run(&run_id);
        tracing::Span::current()
            .record("run", run_id.as_str())
            .record("round", 0);
        tracing::info!(client = self.id, name = %self.name, run = %run_id, "joined");
        Ok(run_id)
    }

    /// The model as it ends the run, with its features' names, for `models/<name>.json`, and
    /// its health; not kept if any of its weights is not finite (training diverged).
    fn kept_model(
        &self,
        half: &dyn BoundHalf,
        feature_names: Vec<String>,
        conditions: Vec<Condition>,
    ) -> (Option<ModelFile>, Option<ModelHealth>) {
        let Some(model) = half.export() else {
            return (None, None);
        };
        let health = model.health();
        if health.not_finite {
            tracing::error!(
                client = self.id,
                "the model has non-finite weights (training diverged?); it is not kept"
            );
            return (None, Some(health));
        }
        if health.empty_machines > 0 {
            tracing::warn!(
                client = self.id,
                machines = health.machines,
                empty = health.empty_machines,
                "machines with no clauses: they vote nothing"
            );
        }
        let file = ModelFile::new(
            &self.name,
            self.experiment.data.classes(),
            feature_names,
            flint_common::params::name_of(&self.experiment.data.scaling),
            model,
        );
        (Some(file.with_conditions(conditions)), Some(health))
    }

    /// This client's bytes so far into its process's progress file (written by a task of its
    /// own, so the round goes on at once).
    fn book_progress(&self) {
        let Some(book) = &self.progress else {
            return;
        };
        self.ledger.with(|l| {
            if let Some(rounds) = l.flows.get(&self.id) {
                book.book(self.id, rounds);
            }
        });
    }

    /// The report of one evaluation of the aggregate of `round` (said in the log), its run id
    /// left to the call that carries it.
    fn eval_report(
        &self,
        round: Round,
        cm: ConfusionMatrix,
        global_test: Option<Predictor>,
    ) -> EvalReport {
        let m = cm.metrics();
        let predictor = global_test.map_or_else(String::new, Predictor::name);
        tracing::info!(
            client = self.id,
            round,
            accuracy = m.accuracy,
            f1 = m.f1,
            global_test = global_test.is_some(),
            predictor = predictor.as_str(),
            "evaluated"
        );
        EvalReport {
            client_id: self.id,
            run_id: String::new(),
            round,
            classes: cm.classes() as u32,
            confusion: cm.counts().to_vec(),
            global_test: global_test.is_some(),
            predictor,
            link: self.link_counts(),
            last: false,
        }
    }

    /// The link level its meter booked since its last report, for the server's results (empty
    /// where it does not measure it), counted as sent.
    fn link_counts(&self) -> Vec<LinkCount> {
        let counts = self.unsent_link();
        self.mark_sent(&counts);
        counts
    }

    fn mark_sent(&self, counts: &[LinkCount]) {
        mark_link_sent(&mut self.link_sent.lock().expect("link_sent lock"), counts);
    }

    /// The link counts no report has sent yet.
    fn unsent_link(&self) -> Vec<LinkCount> {
        if self.link_interfaces.is_empty() {
            return Vec::new();
        }
        let sent = self.link_sent.lock().expect("link_sent lock").clone();
        self.ledger.with(|l| l.link_counts_since(self.id, &sent))
    }
}

/// A report's link counts with `fresh` ones in place of its rounds' (counts only grow).
fn up_to_date(mut link: Vec<LinkCount>, fresh: &[LinkCount]) -> Vec<LinkCount> {
    for c in fresh {
        match link.iter_mut().find(|x| x.round == c.round) {
            Some(x) => *x = *c,
            None => link.push(*c),
        }
    }
    link
}

/// The task an event brings, if any.
fn answered_task(event: &Event) -> Option<&RoundTask> {
    match event {
        Event::Answered(task) | Event::Pushed(PushAnswer::Taken(Some(task))) => Some(task),
        _ => None,
    }
}

/// A call that failed with `s`: whether the transport failed (no connection, reset), not the
/// server's answer, which may say UNAVAILABLE of a run that stops without finishing (a
/// journal it cannot write).
fn failed(s: &Status, why: String, now: Duration) -> Event {
    Event::Failed {
        code: s.code(),
        transport: std::error::Error::source(s).is_some(),
        why,
        now,
    }
}

/// `work` on the client's half off the async threads, so keep-alives and the other clients of
/// the process keep moving; the half goes back into `slot` after it.
async fn blocking<T: Send + 'static>(
    slot: &mut Option<Box<dyn BoundHalf>>,
    work: impl FnOnce(&mut dyn BoundHalf) -> T + Send + 'static,
) -> anyhow::Result<T> {
    let mut half = slot.take().context("the client's model was lost")?;
    let (half, out) = tokio::task::spawn_blocking(move || {
        let out = work(half.as_mut());
        (half, out)
    })
    .await
    .context("the client's model panicked")?;
    *slot = Some(half);
    Ok(out)
}
