//! A simulated client, as `flint client --name auto` runs one: it claims a free slot with its
//! token, joins it with the real client half of the strategy for that slot (its shard, its
//! training, its evaluation), and then performs what the real client's own state machine
//! (`flint_client::machine::Machine`) asks, over the simulated network: the same reading of
//! every answer, the same retry rule, the same checkpoint. It sends some calls twice (a
//! duplicate is answered as one) and reports to the oracle every acknowledgement and every
//! refusal of an honest call. The host may crash at any step: started again, it claims its slot
//! with the same token and goes on from its last checkpoint, kept where a crash does not reach
//! (its `--out`).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flint_client::core::{Backoff, retryable, upload};
use flint_client::machine::{Action, Churn, Event, Machine, PushAnswer, Saved};
use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::clients::{Prepared, prepare};
use flint_common::config::Experiment;
use flint_common::rng::{FlintRng, derive_rng};
use flint_common::wire::proto::{ClaimRequest, EvalReport, JoinRequest, Payload, RoundRequest};
use flint_common::wire::{CLIENT_HEADER, TOKEN_HEADER};
use flint_common::{ClientId, Round};
use prost::Message;
use rand::RngExt;
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::net::{PORT, connector};
use crate::oracle::{Acked, Shared};

/// How long a call may go unanswered before it counts as failed (simulated time), as the real
/// client's connection notices a dead server by its keep-alive.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A long-poll is given longer: a round may wait on a crashed server's restart.
const POLL_TIMEOUT: Duration = Duration::from_secs(20);
/// Between tries to connect to a server that is down.
const RECONNECT: Duration = Duration::from_millis(200);
/// The real client's `--retry-secs`, beyond any schedule: a simulated server always comes back.
const RETRY_FOR: Duration = Duration::from_secs(3600);

/// A client's checkpoint as its `--out` keeps it: beyond the reach of a crash of its host.
#[derive(Clone)]
pub struct Kept {
    pub run_id: String,
    pub saved: Saved,
    pub state: Option<Vec<u8>>,
}

/// Each host's checkpoint.
pub type Disks = Arc<Mutex<BTreeMap<u32, Kept>>>;

#[derive(Clone)]
pub struct SimClient {
    /// Which simulated host this is (its token is drawn from it, not from a slot).
    pub host: u32,
    pub experiment: Experiment,
    pub oracle: Shared,
    pub disks: Disks,
    /// The schedule's seed: this client's duplicates are drawn from it.
    pub seed: u64,
    /// How often an answered call is sent again.
    pub duplicates: f64,
    /// Whether a client started again reads its checkpoint, as the real one does.
    pub resume: bool,
}

struct Calls {
    id: ClientId,
    token: String,
    grpc: AggregatorClient<Channel>,
    oracle: Shared,
    /// Whether to send a call twice.
    faults: FlintRng,
    duplicates: f64,
    /// Where the machine's clock starts (simulated time).
    origin: tokio::time::Instant,
}

/// A client joined: its half, its calls, its run.
struct Joined {
    prepared: Prepared,
    calls: Calls,
    run_id: String,
    /// The last download applied: the final model, once the run is over.
    last: Option<Payload>,
}

impl SimClient {
    pub async fn run(self) -> turmoil::Result {
        let mut calls = Calls {
            id: 0,
            token: format!("{:032x}", u128::from(self.host) * 0x9e37_79b9_7f4a_7c15),
            grpc: connect().await,
            oracle: self.oracle.clone(),
            faults: derive_rng(self.seed, "sim-faults", self.host),
            duplicates: self.duplicates,
            origin: tokio::time::Instant::now(),
        };
        let id = calls.claim(&self.experiment, self.host).await?;
        let mut prepared = prepare(&self.experiment, Path::new("."), &[id], None)?
            .pop()
            .ok_or("no client prepared")?;
        let run_id = calls.join(&self.experiment, &prepared).await?;
        let machine = self.resume(&mut prepared, id, &run_id)?;
        let mut joined = Joined {
            prepared,
            calls,
            run_id,
            last: None,
        };
        self.drive(machine, &mut joined).await
    }

    /// Its machine: from its checkpoint of this run if it has one, else from the start.
    fn resume(
        &self,
        prepared: &mut Prepared,
        id: ClientId,
        run_id: &str,
    ) -> turmoil::Result<Machine> {
        let rounds = self.experiment.policy.rounds;
        let churn = Churn {
            profile: self.experiment.churn,
            seed: self.experiment.seed,
            client: id,
        };
        let kept = self.disks.lock().expect("disks").get(&self.host).cloned();
        let Some(kept) = kept.filter(|k| self.resume && k.run_id == run_id) else {
            let rng = derive_rng(self.experiment.seed, "train", id);
            return Ok(Machine::new(rounds, rng, RETRY_FOR).with_churn(churn));
        };
        if let Some(state) = &kept.state {
            prepared.half.restore(state)?;
        }
        Ok(Machine::resumed(rounds, kept.saved, RETRY_FOR).with_churn(churn))
    }

    async fn drive(&self, mut machine: Machine, j: &mut Joined) -> turmoil::Result {
        let mut action = machine.start();
        loop {
            let event = match action {
                Action::Finish { told } => return self.finish(told, j),
                Action::GiveUp(why) => {
                    let why = format!("client {} gave up: {why}", j.calls.id);
                    return Err(j.calls.violation(why));
                }
                action => self.perform(action, j).await?,
            };
            action = machine.handle(event);
        }
    }

    async fn perform(&self, action: Action, j: &mut Joined) -> turmoil::Result<Event> {
        let half = &mut j.prepared.half;
        Ok(match action {
            Action::Ask { after } => j.calls.ask(&j.run_id, after).await?,
            Action::Apply {
                round,
                download,
                evaluate,
            } => {
                if let Some(d) = &download {
                    half.apply(round, d)?;
                }
                j.last = download;
                let reports = match evaluate {
                    true => vec![j.calls.eval_report(round, half.evaluate())],
                    false => Vec::new(),
                };
                Event::Applied(reports)
            }
            Action::Report(report) => j.calls.report(&j.run_id, report).await?,
            Action::Train { round, mut rng } => {
                let update = half.train(round, &mut rng)?;
                let whole = half.without_base(&update);
                Event::Trained { update, whole, rng }
            }
            Action::Keep(saved) => {
                let kept = Kept {
                    run_id: j.run_id.clone(),
                    saved,
                    state: half.checkpoint(),
                };
                self.disks.lock().expect("disks").insert(self.host, kept);
                Event::Kept
            }
            Action::Push {
                round,
                update,
                reports,
            } => j.calls.push(&j.run_id, round, &update, reports).await?,
            Action::Hold(hold) => {
                tokio::time::sleep(hold).await;
                Event::Held
            }
            Action::Wait(wait) => {
                tokio::time::sleep(wait).await;
                j.calls.grpc = connect().await;
                Event::Waited
            }
            Action::Away(away) => {
                tokio::time::sleep(away).await;
                j.calls.grpc = connect().await;
                Event::Back
            }
            Action::Finish { .. } | Action::GiveUp(_) => unreachable!("handled by drive"),
        })
    }

    /// The run is over: its final model recorded, its checkpoint gone (as the real client's).
    fn finish(&self, told: bool, j: &mut Joined) -> turmoil::Result {
        let id = j.calls.id;
        let mut o = j.calls.oracle.lock().expect("oracle");
        if !told {
            let why = format!("client {id} ended without the server's word");
            o.violation(why.clone());
            return Err(why.into());
        }
        let download = j.last.take().map(|d| d.encode_to_vec()).unwrap_or_default();
        o.outcome.finals.insert(id, download);
        o.finished.insert(self.host);
        self.disks.lock().expect("disks").remove(&self.host);
        Ok(())
    }
}

async fn connect() -> AggregatorClient<Channel> {
    loop {
        let endpoint = Endpoint::new(format!("http://server:{PORT}")).expect("a valid URI");
        match endpoint.connect_with_connector(connector()).await {
            Ok(channel) => return AggregatorClient::new(channel),
            Err(_) => tokio::time::sleep(RECONNECT).await,
        }
    }
}

/// A call as `id`, holding its token.
fn signed<T>(id: ClientId, token: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert(CLIENT_HEADER, id.into());
    r.metadata_mut()
        .insert(TOKEN_HEADER, token.parse().expect("hex token"));
    r
}

/// A failed call as the machine reads it, at `now` on the host's clock: a timeout is the
/// transport's failure, as the real client's keep-alive reports a dead server.
fn failed(s: Status, now: Duration) -> Event {
    Event::Failed {
        code: s.code(),
        transport: true,
        why: s.message().to_string(),
        now,
    }
}

impl Calls {
    fn acked(&self, what: Acked) {
        self.oracle.lock().expect("oracle").ack(what);
    }

    /// Tells the oracle of a violation, and returns it as the host's error.
    fn violation(&self, why: String) -> Box<dyn std::error::Error> {
        self.oracle.lock().expect("oracle").violation(why.clone());
        why.into()
    }

    /// One attempt of `call`, given `wait` to answer; a refusal the real client would not
    /// try again is a violation (every call here is honest).
    async fn once<T, F, Fut>(
        &self,
        what: &str,
        wait: Duration,
        call: F,
    ) -> turmoil::Result<Result<T, Status>>
    where
        F: Fn(&AggregatorClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let answer = match tokio::time::timeout(wait, call(&self.grpc)).await {
            Ok(answer) => answer,
            Err(_) => return Ok(Err(Status::unavailable("no answer in time"))),
        };
        match answer {
            Ok(reply) => Ok(Ok(reply.into_inner())),
            Err(s) if !retryable(s.code()) => {
                Err(self.violation(format!("client {}: honest {what} refused: {s}", self.id)))
            }
            Err(s) => Ok(Err(s)),
        }
    }

    /// `call` until it is answered, tried again by the real client's rule.
    async fn call<T, F, Fut>(&mut self, what: &str, wait: Duration, call: F) -> turmoil::Result<T>
    where
        F: Fn(&AggregatorClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let mut backoff = Backoff::new(RETRY_FOR);
        let started = tokio::time::Instant::now();
        loop {
            let s = match self.once(what, wait, &call).await? {
                Ok(reply) => return Ok(reply),
                Err(s) => s,
            };
            let Some(pause) = backoff.next(s.code(), started.elapsed()) else {
                let why = format!("client {}: {what} never answered: {s}", self.id);
                return Err(self.violation(why));
            };
            tokio::time::sleep(pause).await;
            self.grpc = connect().await;
        }
    }

    /// Sent a second time when the schedule says so, after `reply`: the repeat must be
    /// answered as the duplicate it is (`same` says whether it was).
    async fn maybe_again<T, F, Fut>(
        &mut self,
        what: &str,
        wait: Duration,
        call: F,
        reply: &T,
        same: impl Fn(&T, &T) -> bool,
    ) -> turmoil::Result
    where
        F: Fn(&AggregatorClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        if !self.faults.random_bool(self.duplicates) {
            return Ok(());
        }
        let again = self.call(what, wait, call).await?;
        if !same(reply, &again) {
            let why = format!(
                "client {}: a repeated {what} was not answered as one",
                self.id
            );
            return Err(self.violation(why));
        }
        Ok(())
    }

    /// Claims a free slot (`--name auto`) and returns its id; a slot another host holds is a
    /// violation.
    async fn claim(&mut self, experiment: &Experiment, host: u32) -> turmoil::Result<ClientId> {
        let claim = ClaimRequest {
            experiment_fingerprint: experiment.fingerprint.clone(),
            token: self.token.clone(),
            enrollment: String::new(),
        };
        let token: [u8; 32] = Sha256::digest(self.token.as_bytes()).into();
        let call = |g: &AggregatorClient<Channel>| {
            let (req, mut g) = (Request::new(claim.clone()), g.clone());
            async move { g.claim(req).await }
        };
        let reply = self.call("claim", CALL_TIMEOUT, call).await?;
        self.acked(Acked::Claim(reply.client_id, token));
        self.maybe_again("claim", CALL_TIMEOUT, call, &reply, |a, b| a == b)
            .await?;
        self.id = reply.client_id;
        let holder = *self
            .oracle
            .lock()
            .expect("oracle")
            .holders
            .entry(self.id)
            .or_insert(host);
        if holder != host {
            let why = format!(
                "host {host} claimed slot {}, which host {holder} holds",
                self.id
            );
            return Err(self.violation(why));
        }
        Ok(self.id)
    }

    /// Joins its slot and returns the run id.
    async fn join(&mut self, experiment: &Experiment, p: &Prepared) -> turmoil::Result<String> {
        let join = JoinRequest {
            client_name: p.name.clone(),
            experiment_fingerprint: experiment.fingerprint.clone(),
            summary: Some(p.summary.clone()),
            token: self.token.clone(),
            enrollment: String::new(),
        };
        let call = |g: &AggregatorClient<Channel>| {
            let (req, mut g) = (Request::new(join.clone()), g.clone());
            async move { g.join(req).await }
        };
        let reply = self.call("join", CALL_TIMEOUT, call).await?;
        self.acked(Acked::Join(reply.client_id));
        self.maybe_again("join", CALL_TIMEOUT, call, &reply, |a, b| a == b)
            .await?;
        Ok(reply.run_id)
    }

    async fn ask(&mut self, run_id: &str, after: Round) -> turmoil::Result<Event> {
        let ask = RoundRequest {
            client_id: self.id,
            run_id: run_id.to_string(),
            after_round: after,
        };
        let (token, id) = (self.token.clone(), self.id);
        let call = move |g: &AggregatorClient<Channel>| {
            let r = signed(id, &token, ask.clone());
            let mut g = g.clone();
            async move { g.get_round(r).await }
        };
        Ok(match self.once("get round", POLL_TIMEOUT, call).await? {
            Ok(task) => Event::Answered(task),
            Err(s) => failed(s, self.origin.elapsed()),
        })
    }

    /// An evaluation of the aggregate of `round`, its run id left to the call that carries it.
    fn eval_report(&self, round: Round, m: flint_common::metrics::ConfusionMatrix) -> EvalReport {
        EvalReport {
            client_id: self.id,
            run_id: String::new(),
            round,
            classes: m.classes() as u32,
            confusion: m.counts().to_vec(),
            global_test: false,
            predictor: String::new(),
            link: Vec::new(),
            last: false,
        }
    }

    async fn report(&mut self, run_id: &str, report: EvalReport) -> turmoil::Result<Event> {
        let report = EvalReport {
            run_id: run_id.to_string(),
            ..report
        };
        let (token, id, round) = (self.token.clone(), self.id, report.round);
        let call = move |g: &AggregatorClient<Channel>| {
            let r = signed(id, &token, report.clone());
            let mut g = g.clone();
            async move { g.report_eval(r).await }
        };
        let ack = match self.once("report evaluation", CALL_TIMEOUT, &call).await? {
            Ok(ack) => ack,
            Err(s) => return Ok(failed(s, self.origin.elapsed())),
        };
        self.acked(Acked::Eval(id, round));
        self.maybe_again(
            "report evaluation",
            CALL_TIMEOUT,
            &call,
            &ack,
            |_, again| again.duplicate,
        )
        .await?;
        Ok(Event::Reported)
    }

    /// Pushes `round`'s update with the reports that ride on it, waiting for the next task
    /// (a long-poll: given the long-poll's time).
    async fn push(
        &mut self,
        run_id: &str,
        round: Round,
        update: &Payload,
        reports: Vec<EvalReport>,
    ) -> turmoil::Result<Event> {
        let evaluated: Vec<Round> = reports.iter().map(|r| r.round).collect();
        let chunks = upload(self.id, run_id, round, update, reports);
        let (token, id) = (self.token.clone(), self.id);
        let call = move |g: &AggregatorClient<Channel>| {
            let r = signed(id, &token, tokio_stream::iter(chunks.clone()));
            let mut g = g.clone();
            async move { g.push_update(r).await }
        };
        let ack = match self.once("push update", POLL_TIMEOUT, &call).await? {
            Ok(ack) => ack,
            Err(s) => return Ok(failed(s, self.origin.elapsed())),
        };
        self.acked(Acked::Update(id, round));
        for r in evaluated {
            self.acked(Acked::Eval(id, r));
        }
        self.maybe_again("push update", POLL_TIMEOUT, &call, &ack, |_, again| {
            again.duplicate
        })
        .await?;
        Ok(Event::Pushed(PushAnswer::Taken(ack.next)))
    }
}
