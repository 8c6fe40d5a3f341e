//! One group of a secure round: the clients whose inputs are summed together (every client
//! of the round, or TPFL's members of one cluster), over its own [`SecAggServer`], with what
//! each of its stages answered.

use std::collections::{BTreeMap, BTreeSet};

use flint_common::config::MIN_GROUP;
use flint_common::secagg::SecAggServer;
use flint_common::secagg::ring::FixedPoint;
use flint_common::secagg::server::Stage;
use flint_common::{ClientId, FlintError, Result, Round};

use super::Roster;

/// The public weights of a group's members, by the strategy.
pub type Weigh<'a> = dyn Fn(&[ClientId]) -> Result<BTreeMap<ClientId, f64>> + 'a;

/// What closing U1 fixed for the whole group (each member's roster is drawn from it and the
/// server's graph): the members' public weights, the ring and how many inputs it sums.
pub struct Closed {
    pub weights: BTreeMap<ClientId, f64>,
    pub fixed: FixedPoint,
    pub summands: usize,
}

pub struct Group {
    pub(super) server: SecAggServer,
    pub(super) closed: Option<Closed>,
    pub(super) inboxes: BTreeMap<ClientId, BTreeMap<ClientId, Vec<u8>>>,
    pub(super) survivors: BTreeSet<ClientId>,
    /// Why this group's inputs are not summed this round.
    pub(super) failed: Option<String>,
}

impl Group {
    pub fn new(round: Round, threshold: usize, len: usize, degree: Option<usize>) -> Group {
        Group {
            server: SecAggServer::new(round, threshold, len).with_degree(degree),
            closed: None,
            inboxes: BTreeMap::new(),
            survivors: BTreeSet::new(),
            failed: None,
        }
    }

    pub fn live(&self) -> bool {
        self.failed.is_none()
    }

    /// Whether every member the stage waits for has spoken (keys: see the round).
    pub fn complete(&self) -> bool {
        self.server.taken() >= self.server.awaited(0)
    }

    /// Closes the group's part of `stage`; a failure leaves the group out of the round.
    /// `split`: a group formed by what its members declared, which needs [`MIN_GROUP`]
    /// members and more than half of them to the end.
    pub fn close(&mut self, stage: Stage, split: bool, bound: f64, weigh: &Weigh<'_>) {
        let closed = match stage {
            Stage::Advertising => self.close_roster(split, bound, weigh),
            Stage::Sharing => self.server.inboxes().map(|i| self.inboxes = i),
            Stage::Masking => self.server.survivors().map(|s| self.survivors = s),
            Stage::Unmasking if self.server.can_sum() => Ok(()),
            Stage::Unmasking => Err(FlintError::Precondition(format!(
                "{} survivors sent their shares, too few to rebuild every secret: the round cannot end",
                self.server.taken()
            ))),
        };
        if let Err(e) = closed {
            self.failed = Some(e.to_string());
        }
    }

    fn close_roster(&mut self, split: bool, bound: f64, weigh: &Weigh<'_>) -> Result<()> {
        let declared = self.server.taken();
        if split {
            if declared < MIN_GROUP {
                return Err(FlintError::Precondition(format!(
                    "{declared} clients declared this group, fewer than {MIN_GROUP}: a sum of so few would show their inputs; not summed this round"
                )));
            }
            self.server.set_threshold(declared / 2 + 1)?;
        }
        let ids: Vec<ClientId> = self.server.roster()?.into_keys().collect();
        self.closed = Some(Closed {
            weights: weigh(&ids)?,
            fixed: FixedPoint::for_sums(bound, ids.len())?,
            summands: ids.len(),
        });
        Ok(())
    }

    /// The roster `client` is sent: its neighbourhood's keys and weights and its threshold
    /// (the whole roster over the complete graph); `None` where it is not a member.
    pub fn roster_for(&self, client: ClientId) -> Option<Roster> {
        let r = self
            .closed
            .as_ref()
            .filter(|_| self.server.is_member(client))?;
        let members = self.server.roster_for(client);
        let weights = members
            .keys()
            .filter_map(|id| r.weights.get(id).map(|w| (*id, *w)))
            .collect();
        Some(Roster {
            members,
            threshold: self.server.threshold_of(client),
            weights,
            fixed: r.fixed,
            summands: r.summands,
        })
    }

    /// The weights of the survivors, whose inputs the sum holds.
    pub fn survivors_weights(&self) -> BTreeMap<ClientId, f64> {
        let Some(r) = &self.closed else {
            return BTreeMap::new();
        };
        self.survivors
            .iter()
            .filter_map(|c| r.weights.get(c).map(|&w| (*c, w)))
            .collect()
    }

    /// Whether the protocol reached its end here: every survivor's sum can be unmasked.
    pub fn summable(&self) -> bool {
        self.live() && self.server.can_sum()
    }
}
