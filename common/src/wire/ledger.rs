//! Byte accounting: per client, per round, per direction, at the levels of docs/PROTOCOL.md
//! §Byte accounting: `payload` (protobuf `encoded_len`), `message` (gRPC body bytes: payload +
//! 5-byte frame headers), `socket` (bytes through the TCP connection: HTTP/2 framing, headers,
//! pings, TLS) and, for a client alone in its network namespace, `link`; plus the papers'
//! convention. Round 0 is the join; a client's closing ([`CLOSING`]) is booked apart from the
//! rounds.

use std::collections::BTreeMap;
use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

use super::proto::LinkCount;
use crate::{ClientId, FlintError, Result, Round};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Protobuf messages counted at the payload level.
    pub messages: u64,
    pub payload: u64,
    pub message: u64,
    pub socket: u64,
    /// Bytes on the client's own network interfaces (IP, TCP, TLS, gRPC), counted only by a
    /// client alone in its network namespace (`--link-bytes`); 0 where not measured.
    #[serde(default)]
    pub link: u64,
    /// The papers' convention (parameters × bytes per parameter); 0 where a paper counts nothing.
    pub paper: u64,
}

impl AddAssign for Traffic {
    /// Saturating: the link level is what clients say, and sums over many clients and rounds
    /// of bounded figures must not wrap (or panic under the ledger's lock).
    fn add_assign(&mut self, o: Traffic) {
        self.messages = self.messages.saturating_add(o.messages);
        self.payload = self.payload.saturating_add(o.payload);
        self.message = self.message.saturating_add(o.message);
        self.socket = self.socket.saturating_add(o.socket);
        self.link = self.link.saturating_add(o.link);
        self.paper = self.paper.saturating_add(o.paper);
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    pub up: Traffic,
    pub down: Traffic,
}

impl Flow {
    pub fn get_mut(&mut self, d: Direction) -> &mut Traffic {
        match d {
            Direction::Up => &mut self.up,
            Direction::Down => &mut self.down,
        }
    }
}

impl AddAssign for Flow {
    fn add_assign(&mut self, o: Flow) {
        self.up += o.up;
        self.down += o.down;
    }
}

/// The label of a client's closing: its last report (`EvalReport.last`) and whatever its
/// connection carries after it (its close). A report cannot carry the link count of its own
/// bytes, so the last one is booked apart, and every round's count is complete without it.
pub const CLOSING: Round = Round::MAX;

/// One side's view of a run's traffic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub flows: BTreeMap<ClientId, BTreeMap<Round, Flow>>,
    /// Each client's closing ([`CLOSING`]), kept out of `flows` and the totals: its link level
    /// is the client's own alone (the server's ledger has none, as no later report can say it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub closing: BTreeMap<ClientId, Flow>,
    /// gRPC message bytes by RPC method and client, all rounds together.
    pub by_method: BTreeMap<String, BTreeMap<ClientId, Flow>>,
    /// The server's restarts after a crash, each with the rounds whose bytes the crashed
    /// process counted and did not keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<Resumed>,
}

/// A server restarted from the ledger it kept when a round closed: rounds `from` (that one,
/// whose last replies may still have been on their way) to `to` (the round it restarted in)
/// lack what the crashed process counted after that, at every level but the link, which the
/// clients' reports bring whole; their levels may then be out of order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    pub from: Round,
    pub to: Round,
}

/// The ledger a server keeps beside its journal, with the rounds closed when it was kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeptLedger {
    pub closed_rounds: Round,
    pub ledger: Ledger,
}

impl KeptLedger {
    /// The kept ledger of a server restarted in round `now`, with its restart recorded: what
    /// `kept` holds (none: nothing was kept, from the join on) is all of its rounds the crashed
    /// process left.
    pub fn resume(kept: Option<KeptLedger>, now: Round) -> Ledger {
        let (from, mut ledger) = match kept {
            Some(k) => (k.closed_rounds, k.ledger),
            None => (0, Ledger::default()),
        };
        ledger.resumed.push(Resumed {
            from: from.min(now),
            to: now,
        });
        ledger
    }
}

impl Ledger {
    /// The flow of `client` in `round`, or its closing where `round` is [`CLOSING`].
    pub fn at(&mut self, client: ClientId, round: Round) -> &mut Flow {
        if round == CLOSING {
            return self.closing.entry(client).or_default();
        }
        self.flows
            .entry(client)
            .or_default()
            .entry(round)
            .or_default()
    }

    /// One protobuf message of `len` encoded bytes, and its paper-convention size.
    pub fn payload(
        &mut self,
        client: ClientId,
        round: Round,
        d: Direction,
        len: usize,
        paper: u64,
    ) {
        let t = self.at(client, round).get_mut(d);
        t.messages += 1;
        t.payload += len as u64;
        t.paper += paper;
    }

    pub fn message(
        &mut self,
        method: &str,
        client: ClientId,
        round: Round,
        d: Direction,
        bytes: u64,
    ) {
        self.at(client, round).get_mut(d).message += bytes;
        let by = self
            .by_method
            .entry(method.to_string())
            .or_default()
            .entry(client)
            .or_default();
        by.get_mut(d).message += bytes;
    }

    pub fn socket(&mut self, client: ClientId, round: Round, d: Direction, bytes: u64) {
        self.at(client, round).get_mut(d).socket += bytes;
    }

    pub fn link(&mut self, client: ClientId, round: Round, d: Direction, bytes: u64) {
        self.at(client, round).get_mut(d).link += bytes;
    }

    /// The link level as a client reported it (cumulative counts of its rounds, so a count
    /// only ever grows): each round's figure is the largest reported, whatever the order the
    /// reports came or were replayed in. Check the counts first ([`check_link_counts`]).
    pub fn reported_link(&mut self, client: ClientId, counts: &[LinkCount]) {
        for c in counts {
            let f = self.at(client, c.round);
            f.up.link = f.up.link.max(c.up);
            f.down.link = f.down.link.max(c.down);
        }
    }

    /// The link level the client's own meter booked, by round, as a report sends it: the
    /// rounds whose counts differ from `sent` (what earlier reports sent; the caller marks
    /// these sent once the server has them, [`mark_link_sent`]).
    pub fn link_counts_since(
        &self,
        client: ClientId,
        sent: &BTreeMap<Round, (u64, u64)>,
    ) -> Vec<LinkCount> {
        let mut out = Vec::new();
        for (round, flow) in self.flows.get(&client).into_iter().flatten() {
            let now = (flow.up.link, flow.down.link);
            if now != (0, 0) && sent.get(round) != Some(&now) {
                out.push(LinkCount {
                    round: *round,
                    up: now.0,
                    down: now.1,
                });
            }
        }
        out
    }

    /// Round `round`'s bytes over the clients (client 0's, no client's, left out).
    pub fn round_total(&self, round: Round) -> Flow {
        let mut f = Flow::default();
        for rounds in self.clients().map(|(_, r)| r) {
            if let Some(x) = rounds.get(&round) {
                f += *x;
            }
        }
        f
    }

    /// Rounds 0 to `last`'s bytes over the clients, as [`round_total`](Self::round_total) of
    /// each, in one pass over the ledger.
    pub fn round_totals(&self, last: Round) -> BTreeMap<Round, Flow> {
        let mut totals = vec![Flow::default(); last as usize + 1];
        for rounds in self.clients().map(|(_, r)| r) {
            // A client's rounds are few and in order: a walk beats a range search.
            for (round, flow) in rounds.iter().take_while(|(r, _)| **r <= last) {
                totals[*round as usize] += *flow;
            }
        }
        (0..=last).zip(totals).collect()
    }

    /// Whether a restart left `round`'s bytes short of what was sent ([`Resumed`]).
    pub fn cut_by_restart(&self, round: Round) -> bool {
        self.resumed
            .iter()
            .any(|r| (r.from..=r.to).contains(&round))
    }

    /// Every client's closing, summed (client 0's left out).
    pub fn closing_total(&self) -> Flow {
        sum(self
            .closing
            .iter()
            .filter(|(id, _)| **id != 0)
            .map(|(_, f)| f))
    }

    /// Every client's bytes in the rounds: the run's own traffic (client 0's and the
    /// closings left out).
    pub fn total(&self) -> Flow {
        sum(self.clients().flat_map(|(_, r)| r.values()))
    }

    /// Client 0's bytes: connections that never proved a client (health probes, strangers'
    /// refused calls), booked apart from the run's.
    pub fn unattributed(&self) -> Flow {
        sum(self.flows.get(&0).into_iter().flat_map(|r| r.values()))
    }

    fn clients(&self) -> impl Iterator<Item = (&ClientId, &BTreeMap<Round, Flow>)> {
        self.flows.iter().filter(|(id, _)| **id != 0)
    }
}

fn sum<'a>(flows: impl Iterator<Item = &'a Flow>) -> Flow {
    let mut f = Flow::default();
    for x in flows {
        f += *x;
    }
    f
}

/// `counts` went to the server: later reports send only what changes after them.
pub fn mark_link_sent(sent: &mut BTreeMap<Round, (u64, u64)>, counts: &[LinkCount]) {
    for c in counts {
        sent.insert(c.round, (c.up, c.down));
    }
}

/// The most link-level bytes a client may report for one round in one direction (1 TiB): a
/// count beyond it is no honest meter's.
pub const MAX_LINK_BYTES: u64 = 1 << 40;

/// A report's link counts as the server takes them: rounds of the run (0 to `rounds`), each at
/// most once, each count within [`MAX_LINK_BYTES`]. Sizes come from the run, never the sender.
pub fn check_link_counts(counts: &[LinkCount], rounds: Round) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for c in counts {
        if c.round > rounds {
            return Err(FlintError::InvalidRequest(format!(
                "link bytes for round {} of a run of {rounds}",
                c.round
            )));
        }
        if !seen.insert(c.round) {
            return Err(FlintError::InvalidRequest(format!(
                "link bytes for round {} twice in one report",
                c.round
            )));
        }
        if c.up > MAX_LINK_BYTES || c.down > MAX_LINK_BYTES {
            return Err(FlintError::InvalidRequest(format!(
                "link bytes of round {} beyond {MAX_LINK_BYTES}",
                c.round
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_link_counts_keep_the_largest_per_round_in_any_order() {
        let count = |round, up, down| LinkCount { round, up, down };
        let mut l = Ledger::default();
        l.reported_link(2, &[count(0, 900, 1500), count(1, 300, 400)]);
        // A repeat, or an older report replayed late, lowers nothing.
        l.reported_link(2, &[count(1, 100, 100)]);
        l.reported_link(2, &[count(1, 350, 420)]);
        assert_eq!((l.at(2, 0).up.link, l.at(2, 0).down.link), (900, 1500));
        assert_eq!((l.at(2, 1).up.link, l.at(2, 1).down.link), (350, 420));
    }

    #[test]
    fn round_totals_in_one_pass_equal_each_rounds_total() {
        let mut l = Ledger::default();
        for (client, round, bytes) in [(0, 1, 7), (1, 0, 10), (1, 2, 20), (2, 1, 5), (2, 3, 9)] {
            l.socket(client, round, Direction::Up, bytes);
            l.payload(client, round, Direction::Down, bytes as usize, 1);
        }
        let totals = l.round_totals(2);
        assert_eq!(totals.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
        for (round, flow) in totals {
            assert_eq!(flow, l.round_total(round));
        }
        assert_eq!(
            l.round_totals(2)[&1].up.socket,
            5,
            "client 0's bytes are left out"
        );
    }

    #[test]
    fn a_clients_link_counts_are_sent_once_until_they_change() {
        let mut l = Ledger::default();
        l.link(3, 0, Direction::Up, 10);
        l.link(3, 1, Direction::Down, 20);
        l.payload(3, 2, Direction::Up, 5, 0);
        let mut sent = BTreeMap::new();
        let first = l.link_counts_since(3, &sent);
        assert_eq!(first.iter().map(|c| c.round).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(l.link_counts_since(3, &sent), first, "until marked sent");
        mark_link_sent(&mut sent, &first);
        assert!(l.link_counts_since(3, &sent).is_empty());
        l.link(3, 1, Direction::Up, 7);
        let again = l.link_counts_since(3, &sent);
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].round, again[0].up, again[0].down), (1, 7, 20));
    }

    #[test]
    fn link_counts_are_bounded_by_the_run_not_the_sender() {
        let count = |round, up| LinkCount { round, up, down: 0 };
        assert!(check_link_counts(&[count(0, 1), count(3, MAX_LINK_BYTES)], 3).is_ok());
        for bad in [
            vec![count(4, 1)],
            vec![count(1, 1), count(1, 2)],
            vec![count(1, MAX_LINK_BYTES + 1)],
        ] {
            let e = check_link_counts(&bad, 3).unwrap_err();
            assert!(matches!(e, FlintError::InvalidRequest(_)), "{bad:?}");
        }
    }

    #[test]
    fn entries_add_up_per_round_and_in_total() {
        let mut l = Ledger::default();
        l.payload(1, 1, Direction::Up, 10, 8);
        l.message("/flint.v1.Aggregator/PushUpdate", 1, 1, Direction::Up, 15);
        l.socket(1, 1, Direction::Up, 100);
        l.payload(2, 1, Direction::Down, 7, 0);
        l.payload(2, 2, Direction::Down, 7, 0);
        let r1 = l.round_total(1);
        assert_eq!(
            (r1.up.payload, r1.up.message, r1.up.socket, r1.up.paper),
            (10, 15, 100, 8)
        );
        assert_eq!(r1.down.payload, 7);
        assert_eq!(l.total().down.messages, 2);
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(serde_json::from_str::<Ledger>(&json).unwrap(), l);
    }

    #[test]
    fn a_restart_marks_the_rounds_after_the_kept_ledger_as_cut() {
        let mut kept = Ledger::default();
        kept.socket(1, 2, Direction::Up, 100);
        let first = KeptLedger::resume(
            Some(KeptLedger {
                closed_rounds: 2,
                ledger: kept,
            }),
            4,
        );
        assert_eq!(first.resumed, [Resumed { from: 2, to: 4 }]);
        assert_eq!(first.flows[&1][&2].up.socket, 100, "what was kept stays");
        assert!(!first.cut_by_restart(1) && first.cut_by_restart(2) && first.cut_by_restart(4));
        assert!(!first.cut_by_restart(5));
        // Restarted again before any ledger was kept: every earlier restart is still said.
        let again = KeptLedger::resume(
            Some(KeptLedger {
                closed_rounds: 2,
                ledger: first,
            }),
            3,
        );
        assert_eq!(again.resumed.len(), 2);
        let none = KeptLedger::resume(None, 1);
        assert_eq!(none.resumed, [Resumed { from: 0, to: 1 }]);
        assert!(none.cut_by_restart(0));
    }

    #[test]
    fn a_closing_is_booked_apart_from_the_rounds_and_their_link_counts() {
        let mut l = Ledger::default();
        l.socket(4, 2, Direction::Up, 100);
        l.link(4, 2, Direction::Up, 150);
        l.payload(4, CLOSING, Direction::Up, 30, 0);
        l.socket(4, CLOSING, Direction::Up, 90);
        l.link(4, CLOSING, Direction::Up, 140);
        assert_eq!(l.flows[&4].keys().copied().collect::<Vec<_>>(), [2]);
        assert_eq!(l.total().up.socket, 100, "the rounds' alone");
        assert_eq!(l.round_totals(2)[&2].up.socket, 100);
        assert_eq!(l.closing_total().up.socket, 90);
        let counts = l.link_counts_since(4, &BTreeMap::new());
        assert_eq!(
            counts.iter().map(|c| c.round).collect::<Vec<_>>(),
            [2],
            "a closing's count is never sent: no report follows it"
        );
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(serde_json::from_str::<Ledger>(&json).unwrap(), l);
    }
}
