//! A simulated client, as `flint client --name auto` runs one: it claims a free slot with its
//! token, then joins it with the real client half of the strategy for that slot (its shard, its
//! training, its evaluation), calling the server over the simulated network and retrying each
//! call until it is answered, as the real client does; it sends some calls twice (a duplicate
//! is answered as one), and reports to the oracle every acknowledgement and every refusal of
//! an honest call.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::clients::Prepared;
use flint_common::config::Experiment;
use flint_common::rng::{FlintRng, derive_rng};
use flint_common::wire::chunks::split;
use flint_common::wire::proto::{
    ClaimRequest, EvalReport, JoinRequest, Payload, RoundRequest, RoundTask, UpdateHeader,
};
use flint_common::wire::{CLIENT_HEADER, TOKEN_HEADER};
use flint_common::{ClientId, Round};
use prost::Message;
use rand::RngExt;
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::net::{PORT, connector};
use crate::oracle::{Acked, Shared};

/// How long a call may go unanswered before it is tried again (simulated time).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A long-poll is given longer: a round may wait on a crashed server's restart.
const POLL_TIMEOUT: Duration = Duration::from_secs(20);
const BACKOFF: Duration = Duration::from_millis(200);

/// Each slot's client half, taken by the client that claims the slot.
pub type Slots = Arc<Mutex<BTreeMap<ClientId, Prepared>>>;

pub struct SimClient {
    /// Which simulated host this is (its token is drawn from it, not from a slot).
    pub host: u32,
    pub slots: Slots,
    pub experiment: Experiment,
    pub oracle: Shared,
    /// The schedule's seed: this client's duplicates are drawn from it.
    pub seed: u64,
    /// How often an answered call is sent again.
    pub duplicates: f64,
}

struct Calls {
    id: ClientId,
    token: String,
    grpc: AggregatorClient<Channel>,
    oracle: Shared,
    /// Whether to send a call twice.
    faults: FlintRng,
    duplicates: f64,
}

impl SimClient {
    pub async fn run(self) -> turmoil::Result {
        let SimClient {
            host,
            slots,
            experiment,
            oracle,
            seed,
            duplicates,
        } = self;
        let mut calls = Calls {
            id: 0,
            token: format!("{:032x}", u128::from(host) * 0x9e37_79b9_7f4a_7c15),
            grpc: connect().await,
            oracle,
            faults: derive_rng(seed, "sim-faults", host),
            duplicates,
        };
        let id = calls.claim(&experiment).await?;
        let Some(mut prepared) = slots.lock().expect("slots").remove(&id) else {
            let why = format!("host {host} claimed slot {id}, which another client holds");
            calls.oracle.lock().expect("oracle").violation(why.clone());
            return Err(why.into());
        };
        let join = JoinRequest {
            client_name: prepared.name.clone(),
            experiment_fingerprint: experiment.fingerprint.clone(),
            summary: Some(prepared.summary.clone()),
            token: calls.token.clone(),
            enrollment: String::new(),
        };
        let reply = calls
            .twice(
                "join",
                CALL_TIMEOUT,
                |g| {
                    let (req, mut g) = (Request::new(join.clone()), g.clone());
                    async move { g.join(req).await }
                },
                |r| Acked::Join(r.client_id),
                |a, b| a == b,
            )
            .await?;
        let run_id = reply.run_id;
        let mut train_rng = derive_rng(experiment.seed, "train", id);
        let mut after = 0;
        // The next task, when the last update's answer carried it.
        let mut carried = None;
        loop {
            let task = match carried.take() {
                Some(task) => task,
                None => calls.next_task(&run_id, after).await?,
            };
            let round = if task.finished {
                task.round
            } else {
                task.round - 1
            };
            if let Some(d) = &task.download {
                prepared.half.apply(round, d)?;
            }
            // The evaluation rides on the next update, as the real client's does; after the
            // last round it goes alone.
            let mut reports = Vec::new();
            if round > 0 {
                let report = calls.eval_report(round, prepared.half.evaluate());
                match task.finished {
                    true => calls.report(&run_id, report).await?,
                    false => reports.push(report),
                }
            }
            if task.finished {
                let download = task.download.map(|d| d.encode_to_vec()).unwrap_or_default();
                let mut o = calls.oracle.lock().expect("oracle");
                o.outcome.finals.insert(id, download);
                return Ok(());
            }
            let update = prepared.half.train(task.round, &mut train_rng)?;
            carried = calls.push(&run_id, task.round, &update, reports).await?;
            after = task.round;
        }
    }
}

async fn connect() -> AggregatorClient<Channel> {
    loop {
        let endpoint = Endpoint::new(format!("http://server:{PORT}")).expect("a valid URI");
        match endpoint.connect_with_connector(connector()).await {
            Ok(channel) => return AggregatorClient::new(channel),
            Err(_) => tokio::time::sleep(BACKOFF).await,
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

/// A refusal a client retries: the server is down or restarting, the connection broke.
fn transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable | Code::Cancelled | Code::Unknown | Code::DeadlineExceeded
    )
}

impl Calls {
    fn acked(&self, what: Acked) {
        self.oracle.lock().expect("oracle").ack(what);
    }

    /// Tries `call` until it is answered; a refusal that is not transient is a violation.
    async fn call<T, F, Fut>(&mut self, what: &str, wait: Duration, call: F) -> turmoil::Result<T>
    where
        F: Fn(&AggregatorClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        loop {
            match tokio::time::timeout(wait, call(&self.grpc)).await {
                Ok(Ok(reply)) => return Ok(reply.into_inner()),
                Ok(Err(s)) if !transient(&s) => {
                    let why = format!("client {}: honest {what} refused: {s}", self.id);
                    self.oracle.lock().expect("oracle").violation(why.clone());
                    return Err(why.into());
                }
                _ => {}
            }
            tokio::time::sleep(BACKOFF).await;
            self.grpc = connect().await;
        }
    }

    /// [`call`](Self::call), its answer told to the oracle as `acked` says, then sent a second
    /// time when the schedule says so: the repeat must be answered as the duplicate it is
    /// (`same` says whether it was).
    async fn twice<T, F, Fut>(
        &mut self,
        what: &str,
        wait: Duration,
        call: F,
        acked: impl Fn(&T) -> Acked,
        same: impl Fn(&T, &T) -> bool,
    ) -> turmoil::Result<T>
    where
        F: Fn(&AggregatorClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let reply = self.call(what, wait, &call).await?;
        self.acked(acked(&reply));
        if self.faults.random_bool(self.duplicates) {
            let again = self.call(what, wait, &call).await?;
            if !same(&reply, &again) {
                let why = format!(
                    "client {}: a repeated {what} was not answered as one",
                    self.id
                );
                self.oracle.lock().expect("oracle").violation(why.clone());
                return Err(why.into());
            }
        }
        Ok(reply)
    }

    /// Claims a free slot (`--name auto`) and returns its id.
    async fn claim(&mut self, experiment: &Experiment) -> turmoil::Result<ClientId> {
        let claim = ClaimRequest {
            experiment_fingerprint: experiment.fingerprint.clone(),
            token: self.token.clone(),
            enrollment: String::new(),
        };
        let token: [u8; 32] = Sha256::digest(self.token.as_bytes()).into();
        let reply = self
            .twice(
                "claim",
                CALL_TIMEOUT,
                |g| {
                    let (req, mut g) = (Request::new(claim.clone()), g.clone());
                    async move { g.claim(req).await }
                },
                |r| Acked::Claim(r.client_id, token),
                |a, b| a == b,
            )
            .await?;
        self.id = reply.client_id;
        Ok(self.id)
    }

    async fn next_task(&mut self, run_id: &str, after: Round) -> turmoil::Result<RoundTask> {
        let ask = RoundRequest {
            client_id: self.id,
            run_id: run_id.to_string(),
            after_round: after,
        };
        let (token, id) = (self.token.clone(), self.id);
        self.call("get round", POLL_TIMEOUT, move |g| {
            let r = signed(id, &token, ask.clone());
            let mut g = g.clone();
            async move { g.get_round(r).await }
        })
        .await
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
        }
    }

    async fn report(&mut self, run_id: &str, report: EvalReport) -> turmoil::Result {
        let report = EvalReport {
            run_id: run_id.to_string(),
            ..report
        };
        let (token, id, round) = (self.token.clone(), self.id, report.round);
        self.twice(
            "report evaluation",
            CALL_TIMEOUT,
            move |g| {
                let r = signed(id, &token, report.clone());
                let mut g = g.clone();
                async move { g.report_eval(r).await }
            },
            |_| Acked::Eval(id, round),
            |_, again| again.duplicate,
        )
        .await?;
        Ok(())
    }

    /// Pushes `round`'s update with the reports that ride on it, waiting for the next task
    /// (a long-poll: given the long-poll's time); that task where the answer carried it.
    async fn push(
        &mut self,
        run_id: &str,
        round: Round,
        update: &Payload,
        reports: Vec<EvalReport>,
    ) -> turmoil::Result<Option<RoundTask>> {
        let evaluated: Vec<Round> = reports.iter().map(|r| r.round).collect();
        let header = UpdateHeader {
            client_id: self.id,
            run_id: run_id.to_string(),
            round,
            payload_len: 0,
            payload_crc32: 0,
            wait_next: true,
            reports,
        };
        let chunks = split(header, update, 1 << 16);
        let (token, id) = (self.token.clone(), self.id);
        let ack = self
            .twice(
                "push update",
                POLL_TIMEOUT,
                move |g| {
                    let r = signed(id, &token, tokio_stream::iter(chunks.clone()));
                    let mut g = g.clone();
                    async move { g.push_update(r).await }
                },
                |_| Acked::Update(id, round),
                |_, again| again.duplicate,
            )
            .await?;
        for r in evaluated {
            self.acked(Acked::Eval(id, r));
        }
        Ok(ack.next)
    }
}
