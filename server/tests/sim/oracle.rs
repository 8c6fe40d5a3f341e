//! What the simulated clients were told, and the invariants checked against it: nothing
//! acknowledged is lost (checked each time the server comes back from its journal), honest
//! calls are never refused, the journal stays bounded, and the run ends as the fault-free one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use flint_common::{ClientId, Round};
use flint_server::identity::Identities;
use flint_server::rounds::{Rounds, Task};
use prost::Message;

/// One acknowledgement a client received.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Acked {
    /// A slot bound to the token with this hash.
    Claim(ClientId, [u8; 32]),
    Join(ClientId),
    Update(ClientId, Round),
    Eval(ClientId, Round),
}

/// A closed round as compared: its participants and aggregation weights (as bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    pub round: Round,
    pub participants: Vec<ClientId>,
    pub weights: Vec<(ClientId, u64)>,
}

/// What a finished run decided, compared across schedules: its closed rounds, each
/// evaluation's counts, each client's final download.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub rounds: Vec<Closed>,
    pub evals: BTreeMap<(Round, ClientId), Vec<u64>>,
    /// The final download each client received.
    pub finals: BTreeMap<ClientId, Vec<u8>>,
    /// The final download the server holds for each client at the end (after its last restart).
    pub served: BTreeMap<ClientId, Vec<u8>>,
}

impl Outcome {
    /// The server's side of the outcome, at the end of the run (the clients add their final
    /// downloads).
    pub fn record_server(&mut self, rounds: &Rounds) {
        let history = rounds.history().iter().map(|r| Closed {
            round: r.round,
            participants: r.participants.clone(),
            weights: r.weights.iter().map(|(c, w)| (*c, w.to_bits())).collect(),
        });
        let evals = rounds.evals().iter().flat_map(|(round, by)| {
            by.iter()
                .map(move |(c, m)| ((*round, *c), m.counts().to_vec()))
        });
        self.rounds = history.collect();
        self.evals = evals.collect();
        self.served = rounds
            .joined()
            .keys()
            .map(|&c| {
                let download = match rounds.task_for(c, Round::MAX) {
                    Task::Finished { download } => download.map(|d| d.encode_to_vec()),
                    _ => None,
                };
                (c, download.unwrap_or_default())
            })
            .collect();
    }
}

#[derive(Default)]
pub struct Oracle {
    acked: BTreeSet<Acked>,
    pub violations: Vec<String>,
    /// Servers started from the journal (the first start included).
    pub starts: usize,
    /// The largest journal a server came back from, in records.
    pub most_records: usize,
    pub outcome: Outcome,
    /// The hosts whose client finished the run (a finished client is not crashed again).
    pub finished: BTreeSet<u32>,
    /// Which host holds each slot: a slot claimed by two hosts is a violation.
    pub holders: BTreeMap<ClientId, u32>,
}

pub type Shared = Arc<Mutex<Oracle>>;

impl Oracle {
    pub fn ack(&mut self, what: Acked) {
        self.acked.insert(what);
    }

    pub fn acked(&self) -> &BTreeSet<Acked> {
        &self.acked
    }

    pub fn violation(&mut self, what: String) {
        self.violations.push(what);
    }

    /// A server just replayed its journal: everything a client was told is taken must be.
    pub fn check_recovered(&mut self, rounds: &Rounds, identities: &Identities, records: usize) {
        self.starts += 1;
        self.most_records = self.most_records.max(records);
        let lost: Vec<Acked> = self
            .acked
            .iter()
            .copied()
            .filter(|a| !holds(rounds, identities, *a))
            .collect();
        for a in lost {
            self.violation(format!(
                "acknowledged {a:?} lost by the server's start {}",
                self.starts
            ));
        }
    }
}

/// Without the token's hash: a violation names the slot.
impl std::fmt::Debug for Acked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Acked::Claim(c, _) => write!(f, "Claim({c})"),
            Acked::Join(c) => write!(f, "Join({c})"),
            Acked::Update(c, r) => write!(f, "Update({c}, {r})"),
            Acked::Eval(c, r) => write!(f, "Eval({c}, {r})"),
        }
    }
}

fn holds(rounds: &Rounds, identities: &Identities, acked: Acked) -> bool {
    match acked {
        Acked::Claim(c, token) => identities.binding(c).is_some_and(|(h, _)| *h == token),
        Acked::Join(c) => rounds.joined().contains_key(&c),
        Acked::Update(c, r) => rounds.holds_update(c, r),
        Acked::Eval(c, r) => rounds.evals().get(&r).is_some_and(|e| e.contains_key(&c)),
    }
}
