//! An open round under `[secagg]` (docs/PROTOCOL.md §Secure aggregation): Bonawitz et al.
//! 2017's four stages as sub-states of the round, each closed when every client it waits for
//! has spoken or at its deadline (the keys': the round's timeout; the others': `secagg.stage_secs`
//! after the last stage closed). Each group a client declares (TPFL: its confidence winner) runs
//! the protocol apart, its stages closing with the others'. The protocol itself is each group's
//! `SecAggServer`'s; this keeps what each stage answered, so that a waiting call (or its retry)
//! reads it again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flint_common::secagg::ring::FixedPoint;
use flint_common::secagg::server::Stage;
use flint_common::secagg::{Advert, Unmasking};
use flint_common::strategy::{GroupSum, ServerStrategy};
use flint_common::{ClientId, FlintError, Result, Round};

use super::aggregation::MaskedGroup;
use super::{AggregationJob, ClosedBy, Phase, Rounds, SecureInput};
use group::{Group, Weigh};

/// `[secagg]` as the round state runs it.
#[derive(Debug, Clone, Copy)]
pub struct SecureSettings {
    pub bound: f64,
    pub stage_timeout: Duration,
    /// Differs at each start of the server: a round's attempt is (nonce, round), so a message
    /// of an attempt before a restart is told to start again.
    pub nonce: u64,
    /// SecAgg+'s neighbours per member (`None`: every other member up to 255, then
    /// `secagg::graph::default_degree`).
    pub degree: Option<usize>,
}

/// One client's message of a stage.
#[derive(Clone)]
pub enum Step {
    /// Its keys, and the group it declares its input in.
    Advert(Advert, u32),
    Shares(BTreeMap<ClientId, Vec<u8>>),
    Masked(Vec<u32>),
    Unmasking(Unmasking),
}

impl Step {
    fn stage(&self) -> Stage {
        match self {
            Step::Advert(..) => Stage::Advertising,
            Step::Shares(_) => Stage::Sharing,
            Step::Masked(_) => Stage::Masking,
            Step::Unmasking(_) => Stage::Unmasking,
        }
    }
}

/// What closed a group's U1 (or, as one member is sent it, its neighbourhood's): the members'
/// keys, the threshold, the public weights, the ring and how many inputs it sums.
#[derive(Debug, Clone)]
pub struct Roster {
    pub members: BTreeMap<ClientId, Advert>,
    pub threshold: usize,
    pub weights: BTreeMap<ClientId, f64>,
    pub fixed: FixedPoint,
    pub summands: usize,
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
            .field("stage", &self.stage)
            .field("groups", &self.groups.keys().collect::<Vec<_>>())
            .field("failed", &self.failed)
            .finish()
    }
}

/// A round's secure aggregation: its groups move through the stages together.
pub struct SecureRound {
    pub(super) session: u64,
    round: Round,
    len: usize,
    /// How many groups clients may declare; more than one splits the round by what they
    /// declare, each group with its own threshold.
    declarable: u32,
    /// A round of one group: ⌊asked/2⌋ + 1.
    threshold: usize,
    /// SecAgg+'s neighbours per member, as configured.
    degree: Option<usize>,
    stage: Stage,
    stage_opened: Instant,
    groups: BTreeMap<u32, Group>,
    member_of: BTreeMap<ClientId, u32>,
    /// The last stage closed with some group summable.
    ended: bool,
    /// Why the round cannot end (no group left to sum).
    pub(super) failed: Option<String>,
}

impl SecureRound {
    /// `asked` clients, in at most `declarable` groups of vectors of `len` values.
    pub fn new(
        round: Round,
        asked: usize,
        len: usize,
        declarable: u32,
        settings: &SecureSettings,
        now: Instant,
    ) -> Self {
        SecureRound {
            session: settings.nonce.wrapping_add(u64::from(round)),
            round,
            len,
            declarable,
            threshold: asked / 2 + 1,
            degree: settings.degree,
            stage: Stage::Advertising,
            stage_opened: now,
            groups: BTreeMap::new(),
            member_of: BTreeMap::new(),
            ended: false,
            failed: None,
        }
    }

    fn split(&self) -> bool {
        self.declarable > 1
    }

    pub fn check_session(&self, step: &Step, session: u64, round: Round) -> Result<()> {
        // Keys start an attempt: whatever the client held before, these are fresh.
        if matches!(step, Step::Advert(..)) || session == self.session {
            return Ok(());
        }
        Err(FlintError::Restarted(format!(
            "round {round}'s secure aggregation started again (the server restarted): send fresh keys"
        )))
    }

    /// Takes one message of the stage under way (a repeat of one taken is answered as before).
    pub fn take(&mut self, client: ClientId, step: Step) -> Result<()> {
        if let Step::Advert(advert, group) = step {
            return self.advertise(client, advert, group);
        }
        let group = self.group_of(client)?;
        if let Some(why) = &group.failed {
            return Err(FlintError::Precondition(why.clone()));
        }
        let server = &mut group.server;
        match step {
            Step::Advert(..) => unreachable!("taken above"),
            Step::Shares(s) => server.share(client, s),
            Step::Masked(y) => server.masked(client, y),
            Step::Unmasking(u) => server.unmasking(client, u),
        }
    }

    fn group_of(&mut self, client: ClientId) -> Result<&mut Group> {
        match self.member_of.get(&client) {
            Some(g) => Ok(self
                .groups
                .get_mut(g)
                .expect("every member's group is kept")),
            None => Err(FlintError::InvalidRequest(format!(
                "secure aggregation: client {client} sent no keys this round"
            ))),
        }
    }

    fn advertise(&mut self, client: ClientId, advert: Advert, group: u32) -> Result<()> {
        let refuse = |m: String| {
            Err(FlintError::InvalidRequest(format!(
                "secure aggregation: {m}"
            )))
        };
        if group >= self.declarable {
            return refuse(format!(
                "client {client} declares group {group}; this run's are 0 to {}",
                self.declarable - 1
            ));
        }
        match self.member_of.get(&client) {
            Some(&g) if g != group => {
                return refuse(format!("client {client} declared group {g}, not {group}"));
            }
            // A repeat (answered as the first) or, while the keys' stage is open, new keys.
            Some(_) => {
                let g = self
                    .groups
                    .get_mut(&group)
                    .expect("every member's group is kept");
                if let Some(why) = &g.failed {
                    return Err(FlintError::Precondition(why.clone()));
                }
                return g.server.advertise(client, advert);
            }
            None if self.stage != Stage::Advertising => {
                return refuse(format!(
                    "client {client}'s keys after the round's keys' stage closed"
                ));
            }
            None => {}
        }
        // A refused advert leaves no group behind.
        let mut g = match self.groups.remove(&group) {
            Some(g) => g,
            None => Group::new(self.round, self.threshold, self.len, self.degree),
        };
        let taken = g.server.advertise(client, advert);
        if g.server.taken() > 0 {
            self.groups.insert(group, g);
        }
        taken?;
        self.member_of.insert(client, group);
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = &Group> {
        self.groups.values().filter(|g| g.live())
    }

    /// Whether every client the stage waits for has spoken (`asked`: the round's selected).
    pub fn stage_complete(&self, asked: usize) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match self.stage {
            Stage::Advertising => self.member_of.len() >= asked,
            _ => self.live().all(Group::complete),
        }
    }

    /// The stage's deadline: the round's for the keys, else `stage_timeout` after it opened.
    pub fn deadline(&self, round_deadline: Instant, stage_timeout: Duration) -> Instant {
        match self.stage {
            Stage::Advertising => round_deadline,
            _ => self.stage_opened + stage_timeout,
        }
    }

    /// Closes the stage under way with what each group has; the rosters' weights come from
    /// `weigh`. A group that cannot go on is left out; with none left the round fails (`failed`
    /// says why). Whether the protocol is at its end (the round's sums can be taken).
    pub fn close_stage(&mut self, now: Instant, bound: f64, weigh: &Weigh<'_>) -> bool {
        let (stage, split) = (self.stage, self.split());
        for g in self.groups.values_mut().filter(|g| g.live()) {
            g.close(stage, split, bound, weigh);
        }
        self.stage_opened = now;
        if self.live().next().is_none() {
            self.failed = Some(self.why_failed());
            return false;
        }
        match stage {
            Stage::Advertising => self.stage = Stage::Sharing,
            Stage::Sharing => self.stage = Stage::Masking,
            Stage::Masking => self.stage = Stage::Unmasking,
            Stage::Unmasking => self.ended = true,
        }
        self.ended
    }

    /// Why no group is left: the one group's reason, or each group's.
    fn why_failed(&self) -> String {
        let reasons: Vec<String> = self
            .groups
            .iter()
            .map(|(g, group)| {
                let why = group.failed.as_deref().unwrap_or("no reason");
                match self.split() {
                    true => format!("group {g}: {why}"),
                    false => why.to_string(),
                }
            })
            .collect();
        match reasons.is_empty() {
            true => format!("no client of round {} sent its keys", self.round),
            false => reasons.join("; "),
        }
    }

    /// What the stage `step` belongs to answered `client`; `None` while it is open.
    pub fn answer(&self, client: ClientId, step: &Step) -> Result<Option<Answer>> {
        if let Some(why) = &self.failed {
            return Err(FlintError::Precondition(why.clone()));
        }
        if self.stage <= step.stage() {
            return Ok(None);
        }
        let left_out = || {
            Err(FlintError::Precondition(format!(
                "client {client} was left out of the secure round's {:?} stage (it came after it closed)",
                step.stage()
            )))
        };
        let Some(group) = self.member_of.get(&client).map(|g| &self.groups[g]) else {
            return left_out();
        };
        if let Some(why) = &group.failed {
            return Err(FlintError::Precondition(why.clone()));
        }
        match step {
            Step::Advert(..) => match group.roster_for(client) {
                Some(r) => Ok(Some(Answer::Roster(r))),
                None => left_out(),
            },
            Step::Shares(_) => match group.inboxes.get(&client) {
                Some(inbox) => Ok(Some(Answer::Inbox(inbox.clone()))),
                None => left_out(),
            },
            Step::Masked(_) => match group.survivors.contains(&client) {
                true => Ok(Some(Answer::Survivors(group.server.survivors_for(client)))),
                false => left_out(),
            },
            Step::Unmasking(_) => Ok(None),
        }
    }

    /// The groups whose sums can be taken, at the protocol's end (none before it).
    fn into_summable(self) -> Vec<(u32, Group)> {
        match self.ended && self.failed.is_none() {
            true => self
                .groups
                .into_iter()
                .filter(|(_, g)| g.summable())
                .collect(),
            false => Vec::new(),
        }
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
        let strategy = self.strategy.as_ref()?;
        let len = strategy.secure_len(self.features?)?;
        let groups = strategy.secure_groups();
        Some(Box::new(SecureRound::new(
            round, asked, len, groups, settings, now,
        )))
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
            round,
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
            let stage = secure.stage;
            ended = secure.close_stage(now, settings.bound, &|ids| {
                strategy.secure_weights(joined, ids)
            });
            // Said so that an operator (and a test) can tell where a round's protocol stands.
            tracing::info!(round = *round, ?stage, "secure stage closed");
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
        let why = secure.failed.clone();
        let summable = secure.into_summable();
        let participants: Vec<ClientId> = summable
            .iter()
            .flat_map(|(_, g)| g.survivors.iter().copied())
            .collect();
        tracing::info!(
            round,
            closed_by = ?shut.closed_by,
            summed = participants.len(),
            groups = summable.len(),
            "secure round closed"
        );
        self.start_aggregating(shut, participants, now);
        let abandoned = summable.is_empty().then(|| {
            let why = why.unwrap_or_else(|| {
                format!("round {round} closed before its secure aggregation ended")
            });
            format!("{why}; abandoned, the model stays")
        });
        let groups: Vec<MaskedGroup> = summable
            .into_iter()
            .filter_map(|(id, g)| {
                Some(MaskedGroup {
                    id,
                    weights: g.survivors_weights(),
                    fixed: g.closed.as_ref()?.fixed,
                    server: Box::new(g.server),
                })
            })
            .collect();
        AggregationJob {
            round,
            strategy,
            joined: self.joined.clone(),
            updates: BTreeMap::new(),
            abandoned,
            secure: (!groups.is_empty()).then_some(SecureInput::Masked(groups)),
        }
    }

    /// Closes open `round` with the sum its secure aggregation had (the journal's record of
    /// it), whatever the protocol's state now.
    pub fn close_with_sum(
        &mut self,
        round: Round,
        closed_by: ClosedBy,
        sums: BTreeMap<u32, GroupSum>,
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
        let participants = sums.values().flat_map(|g| g.weights.keys().copied());
        self.start_aggregating(shut, participants.collect(), now);
        Ok(AggregationJob {
            round,
            strategy,
            joined: self.joined.clone(),
            updates: BTreeMap::new(),
            abandoned: None,
            secure: Some(SecureInput::Summed(sums)),
        })
    }
}

mod group;
#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod tests;
