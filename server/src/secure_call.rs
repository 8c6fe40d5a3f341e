//! The SecAgg call (docs/PROTOCOL.md §Secure aggregation): one client's message of a stage,
//! checked and taken by [`Rounds::secure_step`], then a long-poll until the stage answers.
//! Nothing of it is journaled but what closes a round: an abandoned round's close here, a
//! summed round's sum when it is installed ([`crate::shared::Shared::aggregate`]).

use flint_common::secagg::MAX_GROUP;
use flint_common::wire::ledger::Direction;
use flint_common::wire::proto::{
    SecAggMember, SecAggReply, SecAggRequest, SecAggRoster, SecAggShares, SecAggSurvivors,
    sec_agg_reply, sec_agg_request,
};
use flint_common::wire::secagg as convert;
use flint_common::{ClientId, FlintError};
use prost::Message;
use tonic::{Request, Response, Status};

use crate::rounds::{AggregationJob, Answer, Step, Stepped};
use crate::service::{AggregatorService, labelled, status};
use crate::shared::{LongPoll, Shared, closed_by_timeout, now, with_label};

/// The most bytes one sealed envelope may take (the protocol's own check is exact).
const MAX_ENVELOPE_BYTES: usize = 128;

impl AggregatorService {
    pub(crate) async fn sec_agg_call(
        &self,
        request: Request<SecAggRequest>,
    ) -> Result<Response<SecAggReply>, Status> {
        let s = &self.0;
        let (client, round) = (request.get_ref().client_id, request.get_ref().round);
        s.authorize(&request, client).map_err(status)?;
        let req = request.into_inner();
        let label = s.label_round(round);
        let up = req.encoded_len();
        let refusal = |e: FlintError| with_label(status(e), client, label);
        let answered = self.take_and_wait(s, client, &req).await;
        s.ledger
            .with(|l| l.payload(client, label, Direction::Up, up, 0));
        let reply = answered.map_err(|e| match e {
            Refusal::Flint(e) => refusal(e),
            Refusal::Status(st) => with_label(st, client, label),
        })?;
        s.ledger
            .with(|l| l.payload(client, label, Direction::Down, reply.encoded_len(), 0));
        Ok(labelled(reply, client, label))
    }

    async fn take_and_wait(
        &self,
        s: &std::sync::Arc<Shared>,
        client: ClientId,
        req: &SecAggRequest,
    ) -> Result<SecAggReply, Refusal> {
        s.check_run(&req.run_id)?;
        let step = read_step(req)?;
        // Entered before the message is taken: a call refused here has changed nothing.
        let waiting = LongPoll::enter(s, client)?;
        let stepped = {
            let mut rounds = s.rounds();
            let stepped = rounds.secure_step(client, req.round, req.session, step.clone(), now());
            // An abandoned round is journaled as closed by its timeout (a replay abandons it
            // again), under the lock that closed it; a summed one when its sum is installed.
            if let Ok(Stepped {
                closed: Some(job), ..
            }) = &stepped
                && !job.is_secure_sum()
            {
                s.record(closed_by_timeout(&rounds, job.round()));
            }
            stepped
        };
        match stepped {
            Ok(stepped) => {
                keep_masked(s, client, req.round, &step).await;
                if let Some(job) = stepped.closed {
                    close(s, job).await?;
                } else if stepped.advanced {
                    s.bump_phase();
                }
            }
            // The repeat of a last message whose answer was lost, or one that came as its
            // round closed: answered with whether the round summed this client's input.
            Err(FlintError::Precondition(_)) if matches!(step, Step::Unmasking(_)) => {}
            Err(e) => {
                tracing::info!(client, round = req.round, reason = %e, "secure aggregation message refused");
                return Err(e.into());
            }
        }
        let answer = wait_answer(s, client, req, &step).await?;
        drop(waiting);
        // A round summed (the last answer) is on disk before anyone acts on it.
        s.durable().await?;
        Ok(reply(client, answer))
    }
}

/// With `server.keep_updates`, a masked input as it arrived (little-endian u32s): what the
/// server holds of a client's update under `[secagg]`.
async fn keep_masked(s: &Shared, client: ClientId, round: u32, step: &Step) {
    let (Some(dir), Step::Masked(values)) = (&s.updates_dir, step) else {
        return;
    };
    let path = dir.join(format!("round-{round}-client-{client}.masked"));
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    if let Err(e) = tokio::fs::write(&path, bytes).await {
        tracing::error!(client, round, path = %path.display(), error = %e, "cannot keep the masked input");
    }
}

/// Why a call is refused: a rule of the protocol, or the shell's own status.
enum Refusal {
    Flint(FlintError),
    Status(Status),
}

impl From<FlintError> for Refusal {
    fn from(e: FlintError) -> Self {
        Refusal::Flint(e)
    }
}

impl From<Status> for Refusal {
    fn from(st: Status) -> Self {
        Refusal::Status(st)
    }
}

/// A round a message closed (journaled already): aggregated, an abandoned one on disk first.
async fn close(s: &std::sync::Arc<Shared>, job: AggregationJob) -> Result<(), Status> {
    let abandoned = !job.is_secure_sum();
    s.aggregate(job);
    s.bump_phase();
    if abandoned {
        s.durable().await?;
    }
    Ok(())
}

async fn wait_answer(
    s: &Shared,
    client: ClientId,
    req: &SecAggRequest,
    step: &Step,
) -> Result<(u64, Answer), Refusal> {
    let mut changes = s.phase.subscribe();
    loop {
        let answer = s
            .rounds()
            .secure_answer(client, req.round, req.session, step)?;
        if let Some(answer) = answer {
            return Ok(answer);
        }
        if changes.changed().await.is_err() {
            return Err(Status::unavailable("server is shutting down").into());
        }
    }
}

/// The request's message, each part checked for its size before the protocol reads it.
fn read_step(req: &SecAggRequest) -> Result<Step, FlintError> {
    use sec_agg_request::Step as S;
    let envelopes = |v| convert::envelopes_from_proto(v, MAX_GROUP, MAX_ENVELOPE_BYTES);
    Ok(match &req.step {
        Some(S::Advert(a)) => Step::Advert(convert::advert_from_proto(a)?, a.group),
        Some(S::Shares(sh)) => Step::Shares(envelopes(&sh.envelopes)?),
        Some(S::Masked(m)) => Step::Masked(m.values.clone()),
        Some(S::Unmasking(u)) => Step::Unmasking(convert::unmasking_from_proto(u, MAX_GROUP)?),
        None => {
            return Err(FlintError::InvalidRequest(
                "a secure aggregation request without a message".into(),
            ));
        }
    })
}

/// The stage's answer as `client` gets it: the roster with its own weight.
fn reply(client: ClientId, (session, answer): (u64, Answer)) -> SecAggReply {
    use sec_agg_reply::Step as S;
    let step = match answer {
        Answer::Roster(r) => S::Roster(SecAggRoster {
            members: r
                .members
                .iter()
                .map(|(&client_id, a)| SecAggMember {
                    client_id,
                    advert: Some(convert::advert_to_proto(a)),
                })
                .collect(),
            threshold: r.threshold as u32,
            weight: r.weights.get(&client).copied().unwrap_or(0.0),
            scale: r.fixed.scale,
            bound: r.fixed.max_abs,
            summands: r.summands as u32,
        }),
        Answer::Inbox(inbox) => S::Inbox(SecAggShares {
            envelopes: convert::envelopes_to_proto(&inbox),
        }),
        Answer::Survivors(ids) => S::Survivors(SecAggSurvivors {
            client_ids: ids.into_iter().collect(),
        }),
        Answer::Summed(summed) => S::Summed(summed),
    };
    SecAggReply {
        session,
        step: Some(step),
    }
}
