//! A client's round under `[secagg]` (docs/PROTOCOL.md §Secure aggregation): its update never
//! leaves in the clear. In place of PushUpdate it sends the protocol's four messages on the
//! SecAgg call (its keys, its sealed shares, its masked input, its unmasking shares), each
//! answered once the server's stage has closed; the machine sees one push and its answer.
//! A call that fails on the way is sent again unchanged (the server takes a repeat as the first);
//! a server restarted in the middle answers ABORTED and the round starts again with fresh keys.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flint_common::secagg::ring::FixedPoint;
use flint_common::secagg::{Advert, SecAggClient};
use flint_common::wire::ledger::Direction;
use flint_common::wire::paper_convention_bytes;
use flint_common::wire::proto::{
    EvalReport, Payload, SecAggAdvert, SecAggMasked, SecAggReply, SecAggRequest, SecAggRoster,
    SecAggShares, sec_agg_reply, sec_agg_request,
};
use flint_common::wire::secagg as convert;
use flint_common::{ClientId, Round};
use prost::Message;
use tonic::{Code, Status};

use super::{Client, TaskBytes};
use crate::machine::{Event, PushAnswer};

/// Rounds of the protocol one update may start before it is given up as not taken (each start
/// after the server restarted in the middle).
const MAX_STARTS: usize = 3;

/// How a secure push ended, short of its input being summed.
enum Stop {
    /// The server restarted the round's protocol: start again with fresh keys.
    Restarted,
    /// The server's answer: the round went on without this input, or refused it.
    Answered(Status),
    /// The server stayed unreachable for the client's retry budget.
    Unreachable(Status),
}

impl Client {
    /// Sends `round`'s `update` by secure aggregation; `reports` go on their own calls (they
    /// have no update header to ride on).
    pub(super) async fn secure_push(
        &self,
        run_id: &str,
        round: Round,
        update: &Payload,
        reports: Vec<EvalReport>,
        now: Duration,
    ) -> (Event, Option<TaskBytes>) {
        for report in reports {
            if let Event::Failed { why, .. } = self.report(run_id, report, now).await {
                tracing::warn!(client = self.id, round, reason = %why, "an evaluation report was not delivered");
            }
        }
        let params = self.experiment.strategy.params();
        let (input, group) = match params
            .secure_input(update)
            .and_then(|i| Ok((i, params.secure_group(update)?)))
        {
            Ok(declared) => declared,
            Err(e) => return refused(Code::InvalidArgument, e.to_string()),
        };
        let paper =
            paper_convention_bytes(update, self.classes(), self.experiment.strategy.clauses());
        // Whether this client has revealed its shares for this input: the server may have
        // unmasked a sum holding it, and a second sum over other clients would show it (their
        // difference). Its input is then never sent again, whatever the server asks.
        let mut revealed = false;
        for _ in 0..MAX_STARTS {
            if revealed {
                let why = format!(
                    "round {round}'s secure aggregation started again after this client revealed its shares: its input is not sent a second time"
                );
                tracing::warn!(client = self.id, round, "{why}");
                return refused(Code::FailedPrecondition, why);
            }
            let outcome = self
                .secure_attempt(run_id, round, (&input, group), &mut revealed)
                .await;
            self.book_progress();
            match outcome {
                Ok(summed) => {
                    self.ledger.with(|l| l.at(self.id, round).up.paper += paper);
                    return match summed {
                        true => (Event::Pushed(PushAnswer::Taken(None)), None),
                        false => refused(
                            Code::FailedPrecondition,
                            format!("round {round} closed without this client's input"),
                        ),
                    };
                }
                Err(Stop::Restarted) => {
                    tracing::info!(
                        client = self.id,
                        round,
                        "secure aggregation started again; fresh keys"
                    );
                }
                Err(Stop::Answered(s)) => {
                    tracing::warn!(client = self.id, round, code = ?s.code(), reason = %s.message(), "secure aggregation went on without this update");
                    return refused(s.code(), s.message().to_string());
                }
                Err(Stop::Unreachable(s)) => {
                    return (super::failed(&s, s.message().to_string(), now), None);
                }
            }
        }
        refused(
            Code::FailedPrecondition,
            format!("round {round}'s secure aggregation started again {MAX_STARTS} times"),
        )
    }

    /// One run of the protocol from fresh keys, the input declared in `group`: whether the
    /// round summed it.
    async fn secure_attempt(
        &self,
        run_id: &str,
        round: Round,
        (input, group): (&[f64], u32),
        revealed: &mut bool,
    ) -> Result<bool, Stop> {
        let id = self.id;
        let mut rng: rand::rngs::StdRng = rand::make_rng();
        let (mut me, advert) = SecAggClient::new(id, round, &mut rng);
        let ask = |session, step| SecAggRequest {
            client_id: id,
            run_id: run_id.to_string(),
            round,
            session,
            step: Some(step),
        };
        let reply = self
            .secure_call(
                round,
                ask(
                    0,
                    sec_agg_request::Step::Advert(SecAggAdvert {
                        group,
                        ..convert::advert_to_proto(&advert)
                    }),
                ),
            )
            .await?;
        let session = reply.session;
        let roster = expect_roster(reply)?;
        let (members, threshold) = read_roster(&roster)?;
        let sealed = me
            .share_keys(members, threshold, &mut rng)
            .map_err(|e| Stop::Answered(Status::invalid_argument(e.to_string())))?;
        let shares = SecAggShares {
            envelopes: convert::envelopes_to_proto(&sealed),
        };
        let reply = self
            .secure_call(round, ask(session, sec_agg_request::Step::Shares(shares)))
            .await?;
        let inbox = match reply.step {
            Some(sec_agg_reply::Step::Inbox(i)) => {
                convert::envelopes_from_proto(&i.envelopes, usize::MAX, 128)
                    .map_err(|e| Stop::Answered(Status::invalid_argument(e.to_string())))?
            }
            _ => return Err(unexpected("an inbox")),
        };
        let encoded = encode(input, &roster)?;
        let y = me
            .masked_input(inbox, &encoded)
            .map_err(|e| Stop::Answered(Status::invalid_argument(e.to_string())))?;
        let masked = SecAggMasked { values: y };
        let reply = self
            .secure_call(round, ask(session, sec_agg_request::Step::Masked(masked)))
            .await?;
        let survivors: BTreeSet<ClientId> = match reply.step {
            Some(sec_agg_reply::Step::Survivors(s)) => s.client_ids.into_iter().collect(),
            _ => return Err(unexpected("the survivors")),
        };
        let e = &self.experiment;
        if e.churn.drops_after_masking(e.seed, id, round) {
            tracing::info!(client = id, round, "churn: gone after the masked input");
            return Ok(true);
        }
        *revealed = true;
        let unmasking = me
            .unmask(&survivors)
            .map_err(|e| Stop::Answered(Status::invalid_argument(e.to_string())))?;
        let step = sec_agg_request::Step::Unmasking(convert::unmasking_to_proto(&unmasking));
        match self.secure_call(round, ask(session, step)).await?.step {
            Some(sec_agg_reply::Step::Summed(summed)) => Ok(summed),
            _ => Err(unexpected("whether the round summed the input")),
        }
    }

    /// One message, sent again unchanged while the server is unreachable; its bytes booked
    /// under `round` once answered.
    async fn secure_call(&self, round: Round, req: SecAggRequest) -> Result<SecAggReply, Stop> {
        let e = &self.experiment;
        // Each answer waits for a stage: at most the round's timeout, then one stage each.
        let attempt = e.policy.round_timeout
            + 4 * e.secagg.map_or(Duration::ZERO, |s| s.stage_timeout())
            + Duration::from_secs(60);
        let outcome = crate::retry::retry_bounded(self.retry_for, attempt, "SecAgg", || {
            let mut g = self.grpc();
            let r = self.request(req.clone(), Some(round));
            async move { g.sec_agg(r).await }
        })
        .await;
        match outcome {
            Ok(reply) => {
                self.count(round, Direction::Up, req.encoded_len(), 0);
                self.count(round, Direction::Down, reply.encoded_len(), 0);
                Ok(reply)
            }
            Err(s) if s.code() == Code::Aborted => Err(Stop::Restarted),
            Err(s) if crate::core::retryable(s.code()) => Err(Stop::Unreachable(s)),
            Err(s) => Err(Stop::Answered(s)),
        }
    }
}

fn refused(code: Code, why: String) -> (Event, Option<TaskBytes>) {
    (Event::Pushed(PushAnswer::Refused { code, why }), None)
}

fn unexpected(what: &str) -> Stop {
    Stop::Answered(Status::internal(format!(
        "the server's secure aggregation answer is not {what}"
    )))
}

fn expect_roster(reply: SecAggReply) -> Result<SecAggRoster, Stop> {
    match reply.step {
        Some(sec_agg_reply::Step::Roster(r)) => Ok(r),
        _ => Err(unexpected("a roster")),
    }
}

fn read_roster(r: &SecAggRoster) -> Result<(BTreeMap<ClientId, Advert>, usize), Stop> {
    let bad = |e: flint_common::FlintError| Stop::Answered(Status::invalid_argument(e.to_string()));
    let mut members = BTreeMap::new();
    for m in &r.members {
        let advert = m
            .advert
            .as_ref()
            .ok_or_else(|| unexpected("a roster with every key"))?;
        members.insert(
            m.client_id,
            convert::advert_from_proto(advert).map_err(bad)?,
        );
    }
    Ok((members, r.threshold as usize))
}

/// The input times this client's public weight, in the ring the roster names (its scale must be
/// the one this client derives from the bound and the group's size, `summands`: the sum could
/// wrap else).
fn encode(input: &[f64], r: &SecAggRoster) -> Result<Vec<u32>, Stop> {
    let bad =
        |e: flint_common::FlintError| Stop::Answered(Status::failed_precondition(e.to_string()));
    let summands = (r.summands as usize).max(r.members.len());
    if summands > flint_common::secagg::MAX_SPARSE_GROUP {
        return Err(unexpected("a ring sized for a group this client can check"));
    }
    let fixed = FixedPoint::for_sums(r.bound, summands).map_err(bad)?;
    if fixed.scale != r.scale || !(r.weight > 0.0 && r.weight <= 1.0) {
        return Err(unexpected("a ring and a weight this client can check"));
    }
    let weighted: Vec<f64> = input.iter().map(|v| v * r.weight).collect();
    fixed.encode(&weighted).map_err(bad)
}
