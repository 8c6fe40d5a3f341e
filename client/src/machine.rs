//! The client as a pure state machine, in the manner of raft-rs's `RawNode`: it does no I/O and
//! reads no clock. The shell (the real client, or the server's simulation) performs each
//! [`Action`] the machine hands it and answers with the [`Event`] that followed; the machine
//! holds everything the round loop carries between calls: where the client is in the run, the
//! training stream, a trained round on its way up, the next task an answer carried, and the
//! streak of failed calls with its backoff. One machine, so one retry rule and one reading of
//! every answer for every shell.

use std::collections::VecDeque;
use std::time::Duration;

use flint_common::config::ChurnSection;
use flint_common::rng::FlintRng;
use flint_common::wire::chunks::MAX_CARRIED_REPORTS;
use flint_common::wire::proto::{EvalReport, Payload, RoundTask};
use flint_common::{ClientId, Round};
use tonic::Code;

use crate::core::{Answer, Backoff, Next, Position, Pushed, Step};

/// A round trained and not yet settled: its update, the reports that ride on it, and where the
/// update is a delta, the weights themselves (sent if the server no longer holds its base).
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    pub round: Round,
    pub update: Payload,
    pub reports: Vec<EvalReport>,
    pub whole: Option<Payload>,
}

/// What a checkpoint holds beside the strategy's own bytes: enough for a client started again
/// to go on exactly (the update of `trained.round` is pushed again or settled, the stream
/// goes on where it was).
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// The rounds trained before `trained.round`.
    pub before: Vec<Round>,
    /// The last round whose aggregate was evaluated and reported.
    pub reported: Round,
    /// The stream after training `trained.round`.
    pub rng: FlintRng,
    pub trained: Trained,
}

/// What the shell does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Ask for the task after round `after` (GetRound, a long-poll).
    Ask { after: Round },
    /// Apply `download`, the aggregate of `round` (none: nothing to apply), and where
    /// `evaluate`, evaluate it: answer [`Event::Applied`] with the reports, the shared test
    /// set's first.
    Apply {
        round: Round,
        download: Option<Payload>,
        evaluate: bool,
    },
    /// Send this evaluation report alone (ReportEval): answer [`Event::Reported`].
    Report(EvalReport),
    /// Train `round` from this stream: answer [`Event::Trained`].
    Train { round: Round, rng: FlintRng },
    /// Keep this checkpoint (with the strategy's bytes) before the update goes up: answer
    /// [`Event::Kept`].
    Keep(Saved),
    /// Hold the update this long before it goes up (a straggler, `[churn]`): answer
    /// [`Event::Held`].
    Hold(Duration),
    /// Push `round`'s update with the reports that ride on it: answer [`Event::Pushed`].
    Push {
        round: Round,
        update: Payload,
        reports: Vec<EvalReport>,
    },
    /// Wait this long, then answer [`Event::Waited`]: the last call failed and is tried again.
    Wait(Duration),
    /// No round soon asks this client: close the connection, stay away this long, then answer
    /// [`Event::Back`].
    Away(Duration),
    /// The run is over for this client: keep the model. `told`: the server said so (the
    /// checkpoint can go); else it went away after the last round, finishing without this
    /// client's last word.
    Finish { told: bool },
    /// The client cannot go on.
    GiveUp(String),
}

/// What followed the shell's last action.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The answer to [`Action::Ask`].
    Answered(RoundTask),
    Applied(Vec<EvalReport>),
    Reported,
    Trained {
        update: Payload,
        whole: Option<Payload>,
        rng: FlintRng,
    },
    Kept,
    Held,
    Back,
    /// The server's answer to [`Action::Push`].
    Pushed(PushAnswer),
    /// The last call failed with `code` at `now` (on the shell's clock, from any origin);
    /// `transport`: the transport's own failure, not an answer of the server's.
    Failed {
        code: Code,
        transport: bool,
        why: String,
        now: Duration,
    },
    Waited,
}

/// The server's answer to a pushed update.
#[derive(Debug, Clone, PartialEq)]
pub enum PushAnswer {
    /// Taken; with the next task where the answer carried it.
    Taken(Option<RoundTask>),
    /// Refused with `code` (see [`crate::core::pushed`]).
    Refused { code: Code, why: String },
}

/// The client's loop, its state and its decisions.
#[derive(Debug, Clone)]
pub struct Machine {
    position: Position,
    /// The run's last round.
    rounds: Round,
    rng: FlintRng,
    /// The round trained and not yet settled (read from a checkpoint, or on its way up).
    pending: Option<Trained>,
    /// Whether the last push of `pending` sent its whole weights.
    sent_whole: bool,
    /// The ledger round of the task being worked on: the round its download is the aggregate
    /// of, which its bytes are booked under.
    task_round: Round,
    /// What the task being worked on says to do once its download is applied.
    step: Option<Step>,
    /// The action in progress: tried again after a wait.
    current: Action,
    /// What follows the action in progress.
    queue: VecDeque<Action>,
    backoff: Option<(Backoff, Duration)>,
    retry_for: Duration,
    churn: Option<Churn>,
}

/// How this client drops out and straggles, drawn per round (`[churn]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Churn {
    pub profile: ChurnSection,
    pub seed: u64,
    pub client: ClientId,
}

impl Machine {
    /// A client at the start of the run, with the run's training stream.
    pub fn new(rounds: Round, rng: FlintRng, retry_for: Duration) -> Machine {
        Machine {
            position: Position::default(),
            rounds,
            rng,
            pending: None,
            sent_whole: false,
            task_round: 0,
            step: None,
            current: Action::Ask { after: 0 },
            queue: VecDeque::new(),
            backoff: None,
            retry_for,
            churn: None,
        }
    }

    /// The same machine, dropping out and straggling as `churn` draws it.
    pub fn with_churn(mut self, churn: Churn) -> Machine {
        self.churn = (!churn.profile.is_none()).then_some(churn);
        self
    }

    /// How long this client holds its update of `round`, if it straggles then.
    fn hold(&self, round: Round) -> Option<Duration> {
        self.churn
            .and_then(|c| c.profile.straggles(c.seed, c.client, round))
    }

    /// Whether this client vanishes in `round`.
    fn drops(&self, round: Round) -> bool {
        self.churn
            .is_some_and(|c| c.profile.drops(c.seed, c.client, round))
    }

    /// A client started again from its checkpoint: the round it holds is settled by the next
    /// answer (pushed again if the server still waits for it).
    pub fn resumed(rounds: Round, saved: Saved, retry_for: Duration) -> Machine {
        let Saved {
            before,
            reported,
            rng,
            trained,
        } = saved;
        let position = Position::resumed(before, reported);
        Machine {
            current: Action::Ask {
                after: position.after_round(),
            },
            position,
            pending: Some(trained),
            ..Machine::new(rounds, rng, retry_for)
        }
    }

    /// The first action.
    pub fn start(&self) -> Action {
        self.current.clone()
    }

    /// Where the client is in the run.
    pub fn position(&self) -> &Position {
        &self.position
    }

    /// The round the task being worked on books its bytes under.
    pub fn task_round(&self) -> Round {
        self.task_round
    }

    /// The round being trained or uploaded, if any.
    pub fn uploading(&self) -> Option<Round> {
        self.pending.as_ref().map(|t| t.round)
    }

    /// The next action, after `event` answered the last one.
    pub fn handle(&mut self, event: Event) -> Action {
        if !matches!(event, Event::Failed { .. } | Event::Waited) {
            self.backoff = None;
        }
        let next = match event {
            Event::Answered(task) => self.answered(task),
            Event::Applied(reports) => self.applied(reports),
            Event::Reported | Event::Kept | Event::Held | Event::Back => self.dequeue(),
            Event::Trained { update, whole, rng } => self.trained(update, whole, rng),
            Event::Pushed(answer) => self.pushed(answer),
            Event::Failed {
                code,
                transport,
                why,
                now,
            } => self.failed(code, transport, why, now),
            Event::Waited => return self.current.clone(),
        };
        if !matches!(next, Action::Wait(_)) {
            self.current = next.clone();
        }
        next
    }

    fn dequeue(&mut self) -> Action {
        self.queue.pop_front().unwrap_or_else(|| Action::Ask {
            after: self.position.after_round(),
        })
    }

    /// A task: settle a round trained before a restart (the server still waits for its
    /// update, which goes up as it was; or it has moved on, and the saved state meets the
    /// download, the update's reports going up on their own: they may never have reached it),
    /// then apply the download.
    fn answered(&mut self, task: RoundTask) -> Action {
        if task.come_back_ms > 0 && !task.finished {
            return self.away(Duration::from_millis(task.come_back_ms));
        }
        let answer = Answer {
            round: task.round,
            finished: task.finished,
        };
        let step = match self.position.step(answer) {
            Ok(step) => step,
            Err(why) => return Action::GiveUp(why),
        };
        self.task_round = step.ledger_round;
        if step.next == Next::Finish {
            self.position.told_finished();
        }
        self.queue.clear();
        if let Some(pending) = self.pending.take() {
            if step.next == Next::Train(pending.round) {
                let push = push_of(&pending, &pending.update);
                let hold = self.hold(pending.round);
                self.pending = Some(pending);
                // A straggler started again holds its update as it would have.
                return match hold {
                    Some(hold) => {
                        self.queue.push_back(push);
                        Action::Hold(hold)
                    }
                    None => push,
                };
            }
            self.position.trained(pending.round);
            self.queue
                .extend(pending.reports.into_iter().map(Action::Report));
        }
        self.step = Some(step);
        let drops = matches!(step.next, Next::Train(round) if self.drops(round));
        self.queue.push_back(Action::Apply {
            round: step.ledger_round,
            download: task.download,
            evaluate: step.evaluate && !drops,
        });
        self.dequeue()
    }

    /// Told to come back later: a round trained before a restart is settled (the server has
    /// moved on from it, or it would have asked for it), its reports going up first.
    fn away(&mut self, away: Duration) -> Action {
        self.queue.clear();
        if let Some(pending) = self.pending.take() {
            self.position.trained(pending.round);
            self.queue
                .extend(pending.reports.into_iter().map(Action::Report));
        }
        self.queue.push_back(Action::Away(away));
        self.dequeue()
    }

    /// The download applied: the reports go alone at the end of the run or when more than an
    /// update's header carries, else they ride on this round's update.
    fn applied(&mut self, reports: Vec<EvalReport>) -> Action {
        let Some(step) = self.step.take() else {
            return Action::GiveUp("the client applied a download it was not given".into());
        };
        if let Next::Train(round) = step.next
            && self.drops(round)
        {
            // Gone mid-round: no update and no report; it asks again for a later round.
            self.position.dropped(round);
            return self.dequeue();
        }
        if step.evaluate {
            self.position.reported(step.ledger_round);
        }
        let round = match step.next {
            Next::Finish => {
                let mut reports = reports;
                if let Some(r) = reports.last_mut() {
                    r.last = true;
                }
                self.queue.extend(reports.into_iter().map(Action::Report));
                self.queue.push_back(Action::Finish { told: true });
                return self.dequeue();
            }
            Next::Train(round) => round,
        };
        let carried = if reports.len() > MAX_CARRIED_REPORTS {
            self.queue.extend(reports.into_iter().map(Action::Report));
            Vec::new()
        } else {
            reports
        };
        self.pending = Some(Trained {
            round,
            update: Payload::default(),
            reports: carried,
            whole: None,
        });
        self.queue.push_back(Action::Train {
            round,
            rng: self.rng.clone(),
        });
        self.dequeue()
    }

    /// Trained: kept, then pushed.
    fn trained(&mut self, update: Payload, whole: Option<Payload>, rng: FlintRng) -> Action {
        let Some(pending) = self.pending.as_mut() else {
            return Action::GiveUp("the client trained a round it was not given".into());
        };
        pending.update = update;
        pending.whole = whole;
        self.rng = rng;
        self.sent_whole = false;
        let saved = Saved {
            before: self.position.rounds_trained().to_vec(),
            reported: self.position.reported_round(),
            rng: self.rng.clone(),
            trained: pending.clone(),
        };
        let (round, push) = (pending.round, push_of(pending, &pending.update));
        if let Some(hold) = self.hold(round) {
            self.queue.push_back(Action::Hold(hold));
        }
        self.queue.push_back(push);
        Action::Keep(saved)
    }

    /// The update's answer: taken or not taken, the run goes on (with the task the answer
    /// carried); a delta whose base the server no longer holds goes again as the weights
    /// themselves; refused, the client cannot go on.
    fn pushed(&mut self, answer: PushAnswer) -> Action {
        let Some(pending) = self.pending.take() else {
            return Action::GiveUp("the server answered an update that was not sent".into());
        };
        let round = pending.round;
        let (code, why) = match answer {
            PushAnswer::Taken(next) => return self.settled(round, next),
            PushAnswer::Refused { code, why } => (code, why),
        };
        match crate::core::pushed(Err(code)) {
            Pushed::Taken | Pushed::NotTaken => self.settled(round, None),
            Pushed::NoBase => match (&pending.whole, self.sent_whole) {
                (Some(whole), false) => {
                    let push = push_of(&pending, whole);
                    self.sent_whole = true;
                    self.pending = Some(pending);
                    push
                }
                _ => Action::GiveUp(format!("update of round {round} refused: {why}")),
            },
            Pushed::Refused => Action::GiveUp(format!("update of round {round} refused: {why}")),
        }
    }

    fn settled(&mut self, round: Round, next: Option<RoundTask>) -> Action {
        self.position.trained(round);
        match next {
            Some(task) => self.answered(task),
            None => self.dequeue(),
        }
    }

    /// A call failed: tried again after a wait while the failure is one a repeat may cure and
    /// the streak is within the retry window; past it, a server gone after the run's last
    /// round finished the run without this client (see [`Position::ended_without_me`]).
    fn failed(&mut self, code: Code, transport: bool, why: String, now: Duration) -> Action {
        let (backoff, since) = self
            .backoff
            .get_or_insert_with(|| (Backoff::new(self.retry_for), now));
        if let Some(wait) = backoff.next(code, now.saturating_sub(*since)) {
            return Action::Wait(wait);
        }
        self.backoff = None;
        let uploading = match self.current {
            Action::Push { round, .. } => Some(round),
            Action::Ask { .. } => self.uploading(),
            _ => None,
        };
        let ended = transport && self.position.ended_without_me(uploading, self.rounds, code);
        match (&self.current, ended) {
            (Action::Report(_), true) => {
                // The rest of these reports would find no server either.
                while matches!(self.queue.front(), Some(Action::Report(_))) {
                    self.queue.pop_front();
                }
                self.dequeue()
            }
            (_, true) => {
                if let Some(t) = self.pending.take() {
                    self.position.trained(t.round);
                }
                Action::Finish { told: false }
            }
            (Action::Report(r), false) => {
                Action::GiveUp(format!("cannot report round {}: {why}", r.round))
            }
            (Action::Push { round, .. }, false) => {
                Action::GiveUp(format!("update of round {round} refused: {why}"))
            }
            (_, false) => Action::GiveUp(why),
        }
    }
}

fn push_of(trained: &Trained, update: &Payload) -> Action {
    Action::Push {
        round: trained.round,
        update: update.clone(),
        reports: trained.reports.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_common::rng::derive_rng;

    const RETRY: Duration = Duration::from_secs(60);

    fn task(round: Round, finished: bool) -> RoundTask {
        RoundTask {
            round,
            finished,
            download: (round > 1 || finished).then(|| payload(round)),
            ..RoundTask::default()
        }
    }

    fn payload(tag: u32) -> Payload {
        use flint_common::wire::proto::{LinearModel, payload::Kind};
        Payload {
            kind: Some(Kind::LinearModel(LinearModel {
                bias: tag as f32,
                ..LinearModel::default()
            })),
        }
    }

    fn report(round: Round) -> EvalReport {
        EvalReport {
            round,
            ..EvalReport::default()
        }
    }

    fn trained(m: &mut Machine, round: Round) -> Action {
        let Action::Train { round: r, rng } = m.current.clone() else {
            panic!("expected training, got {:?}", m.current);
        };
        assert_eq!(r, round);
        let kept = m.handle(Event::Trained {
            update: payload(100 + round),
            whole: None,
            rng,
        });
        assert!(matches!(kept, Action::Keep(_)), "{kept:?}");
        m.handle(Event::Kept)
    }

    fn failed(code: Code, transport: bool, at_secs: u64) -> Event {
        Event::Failed {
            code,
            transport,
            why: "gone".into(),
            now: Duration::from_secs(at_secs),
        }
    }

    fn fresh() -> Machine {
        Machine::new(2, derive_rng(1, "train", 1), RETRY)
    }

    #[test]
    fn a_client_asks_trains_keeps_and_pushes_round_one_without_evaluating() {
        let mut m = fresh();
        assert_eq!(m.start(), Action::Ask { after: 0 });
        let apply = m.handle(Event::Answered(task(1, false)));
        assert_eq!(
            apply,
            Action::Apply {
                round: 0,
                download: None,
                evaluate: false
            }
        );
        assert!(matches!(
            m.handle(Event::Applied(vec![])),
            Action::Train { round: 1, .. }
        ));
        let push = trained(&mut m, 1);
        assert_eq!(
            push,
            Action::Push {
                round: 1,
                update: payload(101),
                reports: vec![]
            }
        );
        assert_eq!(
            m.handle(Event::Pushed(PushAnswer::Taken(None))),
            Action::Ask { after: 1 }
        );
        assert_eq!(m.position().rounds_trained(), &[1]);
    }

    #[test]
    fn the_next_task_carried_by_an_update_answer_is_applied_and_its_report_rides_on_the_next_update()
     {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        let apply = m.handle(Event::Pushed(PushAnswer::Taken(Some(task(2, false)))));
        assert_eq!(
            apply,
            Action::Apply {
                round: 1,
                download: Some(payload(2)),
                evaluate: true
            }
        );
        assert_eq!(m.task_round(), 1);
        m.handle(Event::Applied(vec![report(1)]));
        let push = trained(&mut m, 2);
        assert_eq!(
            push,
            Action::Push {
                round: 2,
                update: payload(102),
                reports: vec![report(1)]
            }
        );
    }

    /// A client of `profile` for which `pick` holds of its draws in rounds 1 and 2.
    fn churned(profile: ChurnSection, pick: impl Fn(&Churn) -> bool) -> Machine {
        let churn = (1..1_000)
            .map(|client| Churn {
                profile,
                seed: 5,
                client,
            })
            .find(|c| pick(c))
            .expect("some client draws so");
        fresh().with_churn(churn)
    }

    #[test]
    fn a_client_that_drops_out_of_a_round_neither_evaluates_nor_trains_and_asks_after_it() {
        let profile = ChurnSection {
            dropout: 0.5,
            ..ChurnSection::default()
        };
        let mut m = churned(profile, |c| {
            !profile.drops(c.seed, c.client, 1) && profile.drops(c.seed, c.client, 2)
        });
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        let apply = m.handle(Event::Pushed(PushAnswer::Taken(Some(task(2, false)))));
        assert!(
            matches!(
                apply,
                Action::Apply {
                    round: 1,
                    evaluate: false,
                    ..
                }
            ),
            "{apply:?}"
        );
        assert_eq!(m.handle(Event::Applied(vec![])), Action::Ask { after: 2 });
        assert_eq!(m.position().rounds_trained(), &[1]);
        // The end of the run: it evaluates the final model and finishes as told.
        let apply = m.handle(Event::Answered(task(2, true)));
        assert!(matches!(apply, Action::Apply { evaluate: true, .. }));
    }

    #[test]
    fn a_straggler_keeps_its_checkpoint_then_holds_its_update_and_again_when_started_again() {
        let profile = ChurnSection {
            straggle: 0.5,
            straggle_secs: 7.0,
            ..ChurnSection::default()
        };
        let mut m = churned(profile, |c| {
            profile.straggles(c.seed, c.client, 1).is_some()
        });
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        let Action::Train { rng, .. } = m.current.clone() else {
            panic!("expected training");
        };
        let kept = m.handle(Event::Trained {
            update: payload(101),
            whole: None,
            rng,
        });
        let Action::Keep(saved) = kept else {
            panic!("a checkpoint, got {kept:?}");
        };
        assert_eq!(m.handle(Event::Kept), Action::Hold(Duration::from_secs(7)));
        assert!(matches!(
            m.handle(Event::Held),
            Action::Push { round: 1, .. }
        ));
        let churn = m.churn.expect("the machine's churn");
        let mut again = Machine::resumed(2, saved, RETRY).with_churn(churn);
        let hold = again.handle(Event::Answered(task(1, false)));
        assert_eq!(hold, Action::Hold(Duration::from_secs(7)));
        assert!(matches!(
            again.handle(Event::Held),
            Action::Push { round: 1, .. }
        ));
    }

    #[test]
    fn the_end_of_the_run_sends_the_last_reports_alone_and_finishes_told() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        m.handle(Event::Pushed(PushAnswer::Taken(None)));
        let apply = m.handle(Event::Answered(task(1, true)));
        assert!(matches!(
            apply,
            Action::Apply {
                round: 1,
                evaluate: true,
                ..
            }
        ));
        // The last of them is the client's closing (docs/PROTOCOL.md §Byte accounting).
        let last = EvalReport {
            last: true,
            ..report(1)
        };
        assert_eq!(
            m.handle(Event::Applied(vec![report(1), report(1)])),
            Action::Report(report(1))
        );
        assert_eq!(m.handle(Event::Reported), Action::Report(last));
        assert_eq!(m.handle(Event::Reported), Action::Finish { told: true });
    }

    #[test]
    fn more_reports_than_a_header_carries_go_alone_before_training() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        m.handle(Event::Pushed(PushAnswer::Taken(Some(task(2, false)))));
        let many = vec![report(1); MAX_CARRIED_REPORTS + 1];
        assert_eq!(m.handle(Event::Applied(many)), Action::Report(report(1)));
        for _ in 0..MAX_CARRIED_REPORTS {
            assert_eq!(m.handle(Event::Reported), Action::Report(report(1)));
        }
        assert!(matches!(
            m.handle(Event::Reported),
            Action::Train { round: 2, .. }
        ));
        let Action::Push { reports, .. } = trained(&mut m, 2) else {
            panic!("a push");
        };
        assert!(reports.is_empty());
    }

    /// The checkpoint holds what a restart needs to go on exactly: its stream after training
    /// and the rounds before.
    #[test]
    fn a_client_started_again_pushes_its_saved_update_if_the_server_still_waits_for_it() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        let Action::Train { rng, .. } = m.current.clone() else {
            panic!("training");
        };
        let Action::Keep(saved) = m.handle(Event::Trained {
            update: payload(101),
            whole: None,
            rng,
        }) else {
            panic!("a checkpoint");
        };
        assert_eq!((saved.before.clone(), saved.reported), (vec![], 0));
        let mut again = Machine::resumed(2, saved, RETRY);
        assert_eq!(again.start(), Action::Ask { after: 0 });
        let push = again.handle(Event::Answered(task(1, false)));
        assert!(matches!(push, Action::Push { round: 1, .. }), "{push:?}");
        again.handle(Event::Pushed(PushAnswer::Taken(None)));
        assert_eq!(again.position().rounds_trained(), &[1]);
    }

    /// A checkpoint of round 2 trained, its report of round 1 riding on it.
    fn trained_round_2() -> Saved {
        Saved {
            before: vec![1],
            reported: 0,
            rng: derive_rng(1, "train", 1),
            trained: Trained {
                round: 2,
                update: payload(102),
                reports: vec![report(1)],
                whole: None,
            },
        }
    }

    #[test]
    fn a_client_started_again_after_the_server_moved_on_reports_then_applies_the_download() {
        let mut m = Machine::resumed(3, trained_round_2(), RETRY);
        assert_eq!(m.start(), Action::Ask { after: 1 });
        let first = m.handle(Event::Answered(task(3, false)));
        assert_eq!(first, Action::Report(report(1)));
        let apply = m.handle(Event::Reported);
        assert!(matches!(
            apply,
            Action::Apply {
                round: 2,
                evaluate: true,
                ..
            }
        ));
        assert_eq!(m.position().rounds_trained(), &[1, 2]);
    }

    fn come_back(ms: u64) -> RoundTask {
        RoundTask {
            come_back_ms: ms,
            total_rounds: 3,
            ..RoundTask::default()
        }
    }

    #[test]
    fn a_client_told_to_come_back_stays_away_then_asks_again_for_the_same_round() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        // The update's answer says no round soon asks this client.
        let away = m.handle(Event::Pushed(PushAnswer::Taken(Some(come_back(2500)))));
        assert_eq!(away, Action::Away(Duration::from_millis(2500)));
        assert_eq!(m.handle(Event::Back), Action::Ask { after: 1 });
        assert_eq!(
            m.handle(Event::Answered(come_back(1000))),
            Action::Away(Duration::from_millis(1000))
        );
        m.handle(Event::Back);
        let apply = m.handle(Event::Answered(task(2, false)));
        assert!(matches!(apply, Action::Apply { round: 1, .. }), "{apply:?}");
        assert_eq!(m.position().rounds_trained(), &[1]);
    }

    #[test]
    fn a_client_started_again_and_told_to_come_back_settles_its_round_and_reports_first() {
        let mut m = Machine::resumed(3, trained_round_2(), RETRY);
        let first = m.handle(Event::Answered(come_back(4000)));
        assert_eq!(first, Action::Report(report(1)));
        assert_eq!(
            m.handle(Event::Reported),
            Action::Away(Duration::from_millis(4000))
        );
        assert_eq!(m.handle(Event::Back), Action::Ask { after: 2 });
        assert_eq!(m.position().rounds_trained(), &[1, 2]);
    }

    #[test]
    fn a_delta_whose_base_is_gone_goes_again_whole_once() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        let Action::Train { rng, .. } = m.current.clone() else {
            panic!("training");
        };
        m.handle(Event::Trained {
            update: payload(101),
            whole: Some(payload(201)),
            rng,
        });
        m.handle(Event::Kept);
        let no_base = || {
            Event::Pushed(PushAnswer::Refused {
                code: Code::Aborted,
                why: "no base".into(),
            })
        };
        let whole = m.handle(no_base());
        assert!(
            matches!(&whole, Action::Push { update, .. } if *update == payload(201)),
            "{whole:?}"
        );
        assert_eq!(
            m.handle(no_base()),
            Action::GiveUp("update of round 1 refused: no base".into())
        );
    }

    #[test]
    fn an_update_not_taken_lets_the_run_go_on_and_a_refused_one_gives_up() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        let late = PushAnswer::Refused {
            code: Code::FailedPrecondition,
            why: "late".into(),
        };
        assert_eq!(m.handle(Event::Pushed(late)), Action::Ask { after: 1 });
        m.handle(Event::Answered(task(2, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 2);
        let refused = PushAnswer::Refused {
            code: Code::InvalidArgument,
            why: "bad".into(),
        };
        assert_eq!(
            m.handle(Event::Pushed(refused)),
            Action::GiveUp("update of round 2 refused: bad".into())
        );
    }

    #[test]
    fn a_failed_call_waits_doubling_then_is_asked_again_and_a_success_resets_the_streak() {
        let mut m = fresh();
        let ms = |v| Action::Wait(Duration::from_millis(v));
        assert_eq!(m.handle(failed(Code::Unavailable, true, 0)), ms(100));
        assert_eq!(m.handle(Event::Waited), Action::Ask { after: 0 });
        assert_eq!(m.handle(failed(Code::Unavailable, true, 1)), ms(200));
        m.handle(Event::Waited);
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        let push = trained(&mut m, 1);
        assert_eq!(m.handle(failed(Code::ResourceExhausted, false, 5)), ms(100));
        assert_eq!(m.handle(Event::Waited), push);
    }

    #[test]
    fn a_server_gone_for_good_fails_the_client_unless_the_last_round_was_sent() {
        let mut m = fresh();
        m.handle(failed(Code::Unavailable, true, 0));
        assert_eq!(
            m.handle(failed(Code::Unavailable, true, 61)),
            Action::GiveUp("gone".into())
        );
        let mut m = Machine::new(1, derive_rng(1, "train", 1), RETRY);
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        m.handle(failed(Code::Unavailable, true, 0));
        assert_eq!(
            m.handle(failed(Code::Unavailable, true, 61)),
            Action::Finish { told: false }
        );
        assert_eq!(m.position().rounds_trained(), &[1]);
    }

    #[test]
    fn a_refusal_no_repeat_cures_gives_up_at_once_and_the_servers_own_unavailable_too() {
        let mut m = fresh();
        assert_eq!(
            m.handle(failed(Code::PermissionDenied, false, 0)),
            Action::GiveUp("gone".into())
        );
        // A run that stops without finishing says UNAVAILABLE itself: not a server gone.
        let mut m = Machine::new(1, derive_rng(1, "train", 1), RETRY);
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        m.handle(failed(Code::Unavailable, false, 0));
        assert_eq!(
            m.handle(failed(Code::Unavailable, false, 61)),
            Action::GiveUp("update of round 1 refused: gone".into())
        );
    }

    #[test]
    fn a_task_for_a_round_already_trained_gives_up() {
        let mut m = fresh();
        m.handle(Event::Answered(task(1, false)));
        m.handle(Event::Applied(vec![]));
        trained(&mut m, 1);
        m.handle(Event::Pushed(PushAnswer::Taken(None)));
        let Action::GiveUp(why) = m.handle(Event::Answered(task(1, false))) else {
            panic!("gave up");
        };
        assert!(why.contains("round 1 after round 1 was trained"), "{why}");
    }
}
