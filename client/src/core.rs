//! The client's decisions, with no I/O (as the server's `Rounds`): what to do with each task
//! (GetRound's, or the one an update's answer carries), which round a byte belongs to, when to evaluate, whether a failed call is
//! tried again and after how long, and what a refused Join or update means. `lib.rs` keeps only
//! the calls, the timers and the files.

use std::time::Duration;

use flint_common::wire::chunks::{MAX_CHUNK, split};
use flint_common::wire::proto::{EvalReport, Payload, UpdateChunk, UpdateHeader};
use flint_common::{ClientId, Round};
use tonic::Code;

/// Where a client is in the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Position {
    /// The last round it trained (0 before the first): what its next GetRound asks after.
    after: Round,
    /// The last round whose aggregate it evaluated and reported.
    reported: Round,
    trained: Vec<Round>,
    /// The server said the run is over.
    told_finished: bool,
}

/// The server's answer to GetRound, as far as the client's decisions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub round: Round,
    pub finished: bool,
}

/// What to do with an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The round whose aggregate the answer's download carries, and which the answer's bytes
    /// are booked under: the round before the task, or the last round once the run is over.
    pub ledger_round: Round,
    /// Evaluate that aggregate and report it (once per round).
    pub evaluate: bool,
    pub next: Next,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Train this round and upload.
    Train(Round),
    /// The run is over: keep the model and stop.
    Finish,
}

impl Position {
    /// A client started again from its checkpoint: the rounds it had trained before the one
    /// the checkpoint holds, and the last round it reported.
    pub fn resumed(trained: Vec<Round>, reported: Round) -> Position {
        Position {
            after: trained.last().copied().unwrap_or(0),
            reported,
            trained,
            told_finished: false,
        }
    }

    pub fn reported_round(&self) -> Round {
        self.reported
    }

    /// The round a GetRound asks after.
    pub fn after_round(&self) -> Round {
        self.after
    }

    /// What an answer means. A task for round 0 is the server's mistake: rounds count from 1.
    pub fn step(&self, answer: Answer) -> Result<Step, String> {
        let ledger_round = match (answer.finished, answer.round) {
            (true, round) => round,
            (false, 0) => return Err("the server sent a task for round 0".into()),
            (false, round) => round - 1,
        };
        if !answer.finished && answer.round <= self.after {
            return Err(format!(
                "the server sent a task for round {} after round {} was trained",
                answer.round, self.after
            ));
        }
        Ok(Step {
            ledger_round,
            evaluate: ledger_round > self.reported,
            next: match answer.finished {
                true => Next::Finish,
                false => Next::Train(answer.round),
            },
        })
    }

    /// The server said the run is over.
    pub fn told_finished(&mut self) {
        self.told_finished = true;
    }

    /// The aggregate of `round` was evaluated and reported.
    pub fn reported(&mut self, round: Round) {
        self.reported = self.reported.max(round);
    }

    /// `round` was trained and its update pushed (taken or not).
    pub fn trained(&mut self, round: Round) {
        self.trained.push(round);
        self.after = round;
    }

    /// `round` was asked of this client and it vanished (`[churn]`): no update went up; its
    /// next GetRound asks after it.
    pub fn dropped(&mut self, round: Round) {
        self.after = self.after.max(round);
    }

    pub fn rounds_trained(&self) -> &[Round] {
        &self.trained
    }

    /// A call that failed with `code` after the retry window, once this client has trained
    /// (or is uploading, or dropped out of) the run's last round of `rounds`, or was told the
    /// run is over (a client the last round did not select): a server gone for good by then
    /// has finished the run without what this client had left to send, so the client ends
    /// with its ledger instead of failing. Earlier, or for any other refusal, it fails.
    pub fn ended_without_me(&self, uploading: Option<Round>, rounds: Round, code: Code) -> bool {
        let last = uploading.into_iter().chain([self.after]).max();
        let over = self.told_finished || last.is_some_and(|r| r >= rounds);
        code == Code::Unavailable && over
    }
}

/// Whether a call that failed with `code` may be tried again: the server was unreachable, the
/// connection was lost mid-call (every call of the protocol may be repeated: a repeat is
/// acknowledged as a duplicate), or the server was out of room for uploads for now.
pub fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::ResourceExhausted
    )
}

/// Exponential backoff over a streak of failures: 100 ms, doubling, at most 5 s between tries,
/// giving up once the streak would outlast `total`. The streak counts from its first failure,
/// not from the call: a long-poll may wait for hours before its server goes away.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    total: Duration,
    wait: Duration,
}

const FIRST_WAIT: Duration = Duration::from_millis(100);
const LONGEST_WAIT: Duration = Duration::from_secs(5);

impl Backoff {
    pub fn new(total: Duration) -> Backoff {
        Backoff {
            total,
            wait: FIRST_WAIT,
        }
    }

    /// After a call failed with `code`, `failing_for` into the streak: how long to wait before
    /// the next try, or `None` to give up.
    pub fn next(&mut self, code: Code, failing_for: Duration) -> Option<Duration> {
        if !retryable(code) || failing_for + self.wait >= self.total {
            return None;
        }
        let wait = self.wait;
        self.wait = (wait * 2).min(LONGEST_WAIT);
        Some(wait)
    }
}

/// Why a Join was refused, in words the user can act on. The server's own refusals say what is
/// wrong; a transport failure needs its details (a TLS alert, say).
pub fn join_refused(name: &str, code: Code, status: &str, message: &str, tls: bool) -> String {
    match code {
        Code::PermissionDenied => format!(
            "client {name} cannot join: {message}; a client started again must reuse its token: give it the same --out"
        ),
        Code::Unauthenticated
        | Code::NotFound
        | Code::FailedPrecondition
        | Code::InvalidArgument => {
            format!("client {name} cannot join: {message}")
        }
        _ if tls => format!(
            "client {name} cannot join: {status}; if the TLS handshake was refused, check --tls-ca, and whether the server requires a client certificate (--tls-cert, --tls-key) from its CA"
        ),
        _ => format!("client {name} cannot join: {status}"),
    }
}

/// A push of `round`'s `update` as its chunks: the header (with the `reports` that ride on it,
/// and asking for the next task in the answer), then the payload.
pub fn upload(
    client: ClientId,
    run_id: &str,
    round: Round,
    update: &Payload,
    reports: Vec<EvalReport>,
) -> Vec<UpdateChunk> {
    let header = UpdateHeader {
        client_id: client,
        run_id: run_id.to_string(),
        round,
        payload_len: 0,
        payload_crc32: 0,
        wait_next: true,
        reports,
    };
    split(header, update, MAX_CHUNK)
}

/// What became of a pushed update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Taken,
    /// Too late or for a round no longer open: the run goes on without it (its bytes were
    /// sent all the same).
    NotTaken,
    /// A delta whose base the server no longer holds: send the weights themselves.
    NoBase,
    /// Refused: the run cannot go on for this client.
    Refused,
}

pub fn pushed(outcome: Result<(), Code>) -> Pushed {
    match outcome {
        Ok(()) => Pushed::Taken,
        Err(Code::FailedPrecondition) => Pushed::NotTaken,
        Err(Code::Aborted) => Pushed::NoBase,
        Err(_) => Pushed::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(round: Round, finished: bool) -> Answer {
        Answer { round, finished }
    }

    /// A client whose last update or final report found the server gone for good
    /// ends with its ledger; gone earlier, or refused, it fails.
    #[test]
    fn a_server_gone_after_the_last_round_ended_the_run_without_this_client() {
        let mut p = Position::default();
        assert!(
            !p.ended_without_me(Some(2), 3, Code::Unavailable),
            "round 2 of 3"
        );
        assert!(
            p.ended_without_me(Some(3), 3, Code::Unavailable),
            "uploading the last"
        );
        p.trained(1);
        p.trained(2);
        assert!(!p.ended_without_me(None, 3, Code::Unavailable));
        p.trained(3);
        assert!(
            p.ended_without_me(None, 3, Code::Unavailable),
            "its final report"
        );
        assert!(
            !p.ended_without_me(None, 3, Code::PermissionDenied),
            "refused"
        );
    }

    #[test]
    fn the_first_task_trains_round_one_without_evaluating() {
        let p = Position::default();
        assert_eq!(p.after_round(), 0);
        let step = p.step(answer(1, false)).unwrap();
        assert_eq!(
            step,
            Step {
                ledger_round: 0,
                evaluate: false,
                next: Next::Train(1)
            }
        );
    }

    #[test]
    fn a_later_task_carries_the_last_aggregate_evaluated_once() {
        let mut p = Position::default();
        p.trained(1);
        let step = p.step(answer(2, false)).unwrap();
        assert_eq!(step.ledger_round, 1);
        assert!(step.evaluate);
        assert_eq!(step.next, Next::Train(2));
        p.reported(1);
        // The same aggregate again (an answer repeated after a lost connection): not reported
        // twice.
        assert!(!p.step(answer(2, false)).unwrap().evaluate);
        p.trained(2);
        assert_eq!(p.after_round(), 2);
        assert_eq!(p.rounds_trained(), &[1, 2]);
    }

    #[test]
    fn the_end_of_the_run_evaluates_the_last_aggregate_and_finishes() {
        let mut p = Position::default();
        p.trained(1);
        p.reported(0);
        let step = p.step(answer(1, true)).unwrap();
        assert_eq!(
            step,
            Step {
                ledger_round: 1,
                evaluate: true,
                next: Next::Finish
            }
        );
        p.reported(1);
        assert!(!p.step(answer(1, true)).unwrap().evaluate);
    }

    #[test]
    fn a_client_that_missed_rounds_trains_the_one_it_is_given() {
        // Its update of round 1 was not taken in time; the server has moved on to round 3.
        let mut p = Position::default();
        p.trained(1);
        let step = p.step(answer(3, false)).unwrap();
        assert_eq!((step.ledger_round, step.next), (2, Next::Train(3)));
    }

    #[test]
    fn a_task_for_round_zero_or_one_already_trained_is_refused() {
        let mut p = Position::default();
        assert!(p.step(answer(0, false)).unwrap_err().contains("round 0"));
        p.trained(2);
        let err = p.step(answer(2, false)).unwrap_err();
        assert!(err.contains("round 2 after round 2 was trained"), "{err}");
        // A finished run may name any round.
        assert_eq!(p.step(answer(2, true)).unwrap().next, Next::Finish);
    }

    #[test]
    fn unreachable_servers_are_retried_with_doubling_waits_until_the_time_is_up() {
        let mut b = Backoff::new(Duration::from_secs(20));
        let waits: Vec<Option<Duration>> = [0, 1, 2, 3, 4, 5, 6, 7]
            .iter()
            .map(|&s| b.next(Code::Unavailable, Duration::from_millis(s * 100)))
            .collect();
        let ms = |v: u64| Some(Duration::from_millis(v));
        assert_eq!(
            waits,
            [
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(3200),
                ms(5000),
                ms(5000)
            ]
        );
        // The streak's time is up once the next wait would outlast it.
        assert_eq!(b.next(Code::Unavailable, Duration::from_secs(15)), None);
        let mut b = Backoff::new(Duration::from_secs(20));
        assert_eq!(
            b.next(Code::Unavailable, Duration::from_millis(19_950)),
            None
        );
    }

    #[test]
    fn only_transport_failures_and_a_full_upload_budget_are_retried() {
        for code in [
            Code::Unavailable,
            Code::Unknown,
            Code::Cancelled,
            Code::ResourceExhausted,
        ] {
            assert!(
                Backoff::new(Duration::from_secs(60))
                    .next(code, Duration::ZERO)
                    .is_some()
            );
        }
        for code in [
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::Internal,
            Code::DeadlineExceeded,
        ] {
            assert_eq!(
                Backoff::new(Duration::from_secs(60)).next(code, Duration::ZERO),
                None,
                "{code:?}"
            );
        }
    }

    #[test]
    fn a_refused_join_says_what_to_do() {
        let said = |code, tls| join_refused("c1", code, "status text", "the reason", tls);
        assert!(said(Code::PermissionDenied, false).contains("give it the same --out"));
        for code in [
            Code::Unauthenticated,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::InvalidArgument,
        ] {
            assert_eq!(said(code, true), "client c1 cannot join: the reason");
        }
        assert!(said(Code::Unavailable, true).contains("check --tls-ca"));
        assert_eq!(
            said(Code::Unavailable, false),
            "client c1 cannot join: status text"
        );
    }

    #[test]
    fn an_update_not_taken_lets_the_run_go_on_and_a_refused_one_stops_it() {
        assert_eq!(pushed(Ok(())), Pushed::Taken);
        assert_eq!(pushed(Err(Code::FailedPrecondition)), Pushed::NotTaken);
        assert_eq!(pushed(Err(Code::Aborted)), Pushed::NoBase);
        assert_eq!(pushed(Err(Code::InvalidArgument)), Pushed::Refused);
        assert_eq!(pushed(Err(Code::PermissionDenied)), Pushed::Refused);
    }
}
