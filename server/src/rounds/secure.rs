//! An open round under `[secagg]` (docs/PROTOCOL.md §Secure aggregation): Bonawitz et al.
//! 2017's four stages as sub-states of the round, each closed when every client it waits for
//! has spoken or at its deadline (the keys': the round's timeout; the others': `secagg.stage_secs`
//! after the last stage closed). The protocol itself is [`SecAggServer`]'s; this keeps what each
//! stage answered, so that a waiting call (or its retry) reads it again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flint_common::secagg::ring::FixedPoint;
use flint_common::secagg::server::Stage;
use flint_common::secagg::{Advert, SecAggServer, Unmasking};
use flint_common::strategy::ServerStrategy;
use flint_common::{ClientId, FlintError, Result, Round};

use super::{AggregationJob, ClosedBy, Phase, Rounds, SecureInput};

/// `[secagg]` as the round state runs it.
#[derive(Debug, Clone, Copy)]
pub struct SecureSettings {
    pub bound: f64,
    pub stage_timeout: Duration,
    /// Differs at each start of the server: a round's attempt is (nonce, round), so a message
    /// of an attempt before a restart is told to start again.
    pub nonce: u64,
}

/// One client's message of a stage.
#[derive(Clone)]
pub enum Step {
    Advert(Advert),
    Shares(BTreeMap<ClientId, Vec<u8>>),
    Masked(Vec<u32>),
    Unmasking(Unmasking),
}

impl Step {
    fn stage(&self) -> Stage {
        match self {
            Step::Advert(_) => Stage::Advertising,
            Step::Shares(_) => Stage::Sharing,
            Step::Masked(_) => Stage::Masking,
            Step::Unmasking(_) => Stage::Unmasking,
        }
    }
}

/// What closed U1: every member's keys, the threshold, the public weights and the ring.
#[derive(Debug, Clone)]
pub struct Roster {
    pub members: BTreeMap<ClientId, Advert>,
    pub threshold: usize,
    pub weights: BTreeMap<ClientId, f64>,
    pub fixed: FixedPoint,
}

/// A stage's answer to one client.
#[derive(Debug, Clone)]
pub enum Answer {
    Roster(Roster),
    Inbox(BTreeMap<ClientId, Vec<u8>>),
    Survivors(BTreeSet<ClientId>),
    /// The round closed: with this client's input in its sum, or without.
    Summed(bool),
}

impl std::fmt::Debug for SecureRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureRound")
            .field("session", &self.session)
            .field("stage", &self.group.stage())
            .field("failed", &self.failed)
            .finish()
    }
}

pub struct SecureRound {
    pub(super) session: u64,
    pub(super) group: SecAggServer,
    stage_opened: Instant,
    roster: Option<Roster>,
    inboxes: BTreeMap<ClientId, BTreeMap<ClientId, Vec<u8>>>,
    survivors: BTreeSet<ClientId>,
    /// Why the round cannot end (a stage closed under the threshold).
    pub(super) failed: Option<String>,
}

impl SecureRound {
    /// `asked` clients, of whom more than half must stay to the end.
    pub fn new(
        round: Round,
        asked: usize,
        len: usize,
        settings: &SecureSettings,
        now: Instant,
    ) -> Self {
        SecureRound {
            session: settings.nonce.wrapping_add(u64::from(round)),
            group: SecAggServer::new(round, asked / 2 + 1, len),
            stage_opened: now,
            roster: None,
            inboxes: BTreeMap::new(),
            survivors: BTreeSet::new(),
            failed: None,
        }
    }

    pub fn check_session(&self, step: &Step, session: u64, round: Round) -> Result<()> {
        // Keys start an attempt: whatever the client held before, these are fresh.
        if matches!(step, Step::Advert(_)) || session == self.session {
            return Ok(());
        }
        Err(FlintError::Restarted(format!(
            "round {round}'s secure aggregation started again (the server restarted): send fresh keys"
        )))
    }

    /// Takes one message of the stage under way (a repeat of one taken is answered as before).
    pub fn take(&mut self, client: ClientId, step: Step) -> Result<()> {
        match step {
            Step::Advert(a) => self.group.advertise(client, a),
            Step::Shares(s) => self.group.share(client, s),
            Step::Masked(y) => self.group.masked(client, y),
            Step::Unmasking(u) => self.group.unmasking(client, u),
        }
    }

    /// Whether every client the stage waits for has spoken (`asked`: the round's selected).
    pub fn stage_complete(&self, asked: usize) -> bool {
        self.failed.is_none() && self.group.taken() >= self.group.awaited(asked)
    }

    /// The stage's deadline: the round's for the keys, else `stage_timeout` after it opened.
    pub fn deadline(&self, round_deadline: Instant, stage_timeout: Duration) -> Instant {
        match self.group.stage() {
            Stage::Advertising => round_deadline,
            _ => self.stage_opened + stage_timeout,
        }
    }

    /// Closes the stage under way with what it has; the roster's weights come from `weigh`.
    /// Under the threshold the round fails (`failed` says why). Whether the protocol is at its
    /// end (every unmasking in): the round's sum can be taken.
    pub fn close_stage(
        &mut self,
        now: Instant,
        bound: f64,
        weigh: impl FnOnce(&[ClientId]) -> Result<BTreeMap<ClientId, f64>>,
    ) -> bool {
        let closed = match self.group.stage() {
            Stage::Advertising => self.close_roster(bound, weigh),
            Stage::Sharing => self.group.inboxes().map(|i| self.inboxes = i),
            Stage::Masking => self.group.survivors().map(|s| self.survivors = s),
            Stage::Unmasking if self.group.taken() >= self.group.threshold() => return true,
            Stage::Unmasking => Err(FlintError::Precondition(format!(
                "{} survivors sent their shares, under the threshold {}: the round cannot end",
                self.group.taken(),
                self.group.threshold()
            ))),
        };
        self.stage_opened = now;
        if let Err(e) = closed {
            self.failed = Some(e.to_string());
        }
        false
    }

    fn close_roster(
        &mut self,
        bound: f64,
        weigh: impl FnOnce(&[ClientId]) -> Result<BTreeMap<ClientId, f64>>,
    ) -> Result<()> {
        let members = self.group.roster()?;
        let ids: Vec<ClientId> = members.keys().copied().collect();
        self.roster = Some(Roster {
            threshold: self.group.threshold(),
            weights: weigh(&ids)?,
            fixed: FixedPoint::for_sums(bound, ids.len())?,
            members,
        });
        Ok(())
    }

    /// What the stage `step` belongs to answered `client`; `None` while it is open.
    pub fn answer(&self, client: ClientId, step: &Step) -> Result<Option<Answer>> {
        if let Some(why) = &self.failed {
            return Err(FlintError::Precondition(why.clone()));
        }
        if self.group.stage() <= step.stage() {
            return Ok(None);
        }
        let left_out = || {
            Err(FlintError::Precondition(format!(
                "client {client} was left out of the secure round's {:?} stage (it came after it closed)",
                step.stage()
            )))
        };
        match step {
            Step::Advert(_) => match &self.roster {
                Some(r) if r.members.contains_key(&client) => Ok(Some(Answer::Roster(r.clone()))),
                _ => left_out(),
            },
            Step::Shares(_) => match self.inboxes.get(&client) {
                Some(inbox) => Ok(Some(Answer::Inbox(inbox.clone()))),
                None => left_out(),
            },
            Step::Masked(_) => match self.survivors.contains(&client) {
                true => Ok(Some(Answer::Survivors(self.survivors.clone()))),
                false => left_out(),
            },
            Step::Unmasking(_) => Ok(None),
        }
    }

    /// The weights of the survivors, whose inputs the sum holds.
    pub fn survivors_weights(&self) -> BTreeMap<ClientId, f64> {
        let Some(r) = &self.roster else {
            return BTreeMap::new();
        };
        self.survivors
            .iter()
            .filter_map(|c| r.weights.get(c).map(|&w| (*c, w)))
            .collect()
    }

    pub fn fixed(&self) -> Option<FixedPoint> {
        self.roster.as_ref().map(|r| r.fixed)
    }

    pub fn survivors(&self) -> &BTreeSet<ClientId> {
        &self.survivors
    }
}

/// What [`Rounds::secure_step`] did.
#[must_use]
pub struct Stepped {
    /// A stage closed: long-polls waiting on it have their answer.
    pub advanced: bool,
    /// The round closed (summed, or abandoned): run this, then install it.
    pub closed: Option<AggregationJob>,
}

/// The open round being closed, as [`Rounds::close_secure`] takes it.
pub(super) struct Shut {
    pub round: Round,
    pub opened_at: Instant,
    pub selected: BTreeSet<ClientId>,
    pub closed_by: ClosedBy,
}

impl Rounds {
    /// The protocol of a round that asks `asked` clients, where the run aggregates securely.
    pub(super) fn secure_round(
        &self,
        round: Round,
        asked: usize,
        now: Instant,
    ) -> Option<Box<SecureRound>> {
        let settings = self.secure.as_ref()?;
        let len = self.strategy.as_ref()?.secure_len(self.features?)?;
        Some(Box::new(SecureRound::new(round, asked, len, settings, now)))
    }

    /// Takes one client's message of `round`'s secure aggregation; closes the stage it
    /// completes, and the round at the protocol's end. A refused message changes nothing.
    pub fn secure_step(
        &mut self,
        client: ClientId,
        round: Round,
        session: u64,
        step: Step,
        now: Instant,
    ) -> Result<Stepped> {
        self.check_joined(client)?;
        let Phase::Open {
            round: open,
            selected,
            secure: Some(secure),
            ..
        } = &mut self.phase
        else {
            return Err(FlintError::Precondition(format!(
                "secure aggregation message for round {round}, which is not open"
            )));
        };
        if *open != round || !selected.contains(&client) {
            return Err(FlintError::Precondition(format!(
                "secure aggregation message for round {round}; round {open} is open{}",
                match selected.contains(&client) {
                    true => "",
                    false => " without this client",
                }
            )));
        }
        secure.check_session(&step, session, round)?;
        secure.take(client, step)?;
        Ok(self.advance(now, false))
    }

    /// Closes the stages whose clients have all spoken, or (`timed_out`) whose deadline passed.
    fn advance(&mut self, now: Instant, timed_out: bool) -> Stepped {
        let (Some(settings), Some(strategy)) = (self.secure, self.strategy.as_deref()) else {
            return Stepped {
                advanced: false,
                closed: None,
            };
        };
        let round_timeout = self.policy.round_timeout;
        let joined = &self.joined;
        let Phase::Open {
            opened_at,
            selected,
            secure: Some(secure),
            ..
        } = &mut self.phase
        else {
            return Stepped {
                advanced: false,
                closed: None,
            };
        };
        let mut advanced = false;
        let mut ended = false;
        loop {
            let due = timed_out
                && now >= secure.deadline(*opened_at + round_timeout, settings.stage_timeout);
            if secure.failed.is_some() || !(secure.stage_complete(selected.len()) || due) {
                break;
            }
            ended = secure.close_stage(now, settings.bound, |ids| {
                strategy.secure_weights(joined, ids)
            });
            advanced = true;
            if ended || due {
                break;
            }
        }
        let closes = ended || secure.failed.is_some();
        let closed_by = match timed_out {
            true => ClosedBy::Timeout,
            false => ClosedBy::AllAnswered,
        };
        Stepped {
            advanced,
            closed: closes.then(|| self.close(closed_by, now)).flatten(),
        }
    }

    /// Closes the secure round's stages (and the round) whose deadline has passed.
    pub fn tick_secure(&mut self, now: Instant) -> Stepped {
        self.advance(now, true)
    }

    /// The answer of the stage `step` belongs to, with the attempt's session; `None` while it
    /// is open.
    pub fn secure_answer(
        &self,
        client: ClientId,
        round: Round,
        session: u64,
        step: &Step,
    ) -> Result<Option<(u64, Answer)>> {
        match &self.phase {
            Phase::Open {
                round: open,
                secure: Some(secure),
                ..
            } if *open == round => {
                secure.check_session(step, session, round)?;
                let answer = secure.answer(client, step)?;
                Ok(answer.map(|a| (secure.session, a)))
            }
            // Answered once the round's aggregate is installed (and the shell has it on disk):
            // a client told its input was summed never has to send it again.
            Phase::Aggregating { round: r, .. } if *r == round => Ok(None),
            _ if matches!(step, Step::Unmasking(_)) => Ok(Some((
                session,
                Answer::Summed(self.holds_update(client, round)),
            ))),
            _ => Err(FlintError::Precondition(format!(
                "round {round} closed before client {client}'s secure aggregation went on"
            ))),
        }
    }

    /// The open secure round's closing: its masked inputs summed at the protocol's end, else
    /// abandoned (the model stays).
    pub(super) fn close_secure(
        &mut self,
        strategy: Box<dyn ServerStrategy>,
        shut: Shut,
        secure: SecureRound,
        now: Instant,
    ) -> AggregationJob {
        let round = shut.round;
        let at_end = secure.failed.is_none()
            && secure.group.stage() == Stage::Unmasking
            && secure.group.taken() >= secure.group.threshold();
        let participants: Vec<ClientId> = match at_end {
            true => secure.survivors().iter().copied().collect(),
            false => Vec::new(),
        };
        tracing::info!(
            round,
            closed_by = ?shut.closed_by,
            summed = participants.len(),
            "secure round closed"
        );
        self.start_aggregating(shut, participants, now);
        let abandoned = (!at_end).then(|| {
            let why = secure.failed.clone().unwrap_or_else(|| {
                format!("round {round} closed before its secure aggregation ended")
            });
            format!("{why}; abandoned, the model stays")
        });
        let input = match (at_end, secure.fixed()) {
            (true, Some(fixed)) => Some(SecureInput::Masked {
                weights: secure.survivors_weights(),
                group: Box::new(secure.group),
                fixed,
            }),
            _ => None,
        };
        AggregationJob {
            round,
            strategy,
            joined: self.joined.clone(),
            updates: BTreeMap::new(),
            abandoned,
            secure: input,
        }
    }

    /// Closes open `round` with the sum its secure aggregation had (the journal's record of
    /// it), whatever the protocol's state now.
    pub fn close_with_sum(
        &mut self,
        round: Round,
        closed_by: ClosedBy,
        weights: BTreeMap<ClientId, f64>,
        sum: Vec<f64>,
        now: Instant,
    ) -> Result<AggregationJob> {
        let open = self.open_round().map(|(r, _, _)| r);
        let (Some(r), Some(strategy)) = (open.filter(|r| *r == round), self.strategy.take()) else {
            return Err(FlintError::Precondition(format!(
                "round {round}'s secure sum, but the open round is {open:?}"
            )));
        };
        let Phase::Open {
            opened_at,
            selected,
            ..
        } = std::mem::replace(&mut self.phase, Phase::WaitingForClients)
        else {
            unreachable!("the phase was checked to be open");
        };
        let shut = Shut {
            round: r,
            opened_at,
            selected,
            closed_by,
        };
        self.start_aggregating(shut, weights.keys().copied().collect(), now);
        Ok(AggregationJob {
            round,
            strategy,
            joined: self.joined.clone(),
            updates: BTreeMap::new(),
            abandoned: None,
            secure: Some(SecureInput::Summed { weights, sum }),
        })
    }
}

#[cfg(test)]
mod tests;
