//! Which clients a round asks, and how long a client the next rounds leave out stays away
//! (docs/PROTOCOL.md §Checking in).
//!
//! A round ranks the joined clients by a key drawn from (seed, round, client) and asks those
//! with the smallest keys. A client that joins later can take a selected client's place but
//! never makes a left-out one selected, so "no round before r asks you" stays true whatever
//! joins meanwhile: a client told to come back for round r misses none before it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flint_common::config::Selection;
use flint_common::rng::derive_seed;
use flint_common::{ClientId, Round};

/// The shortest stay away: a client told to come back sooner asks again at once.
pub const MIN_AWAY: Duration = Duration::from_secs(1);

/// A client's rank in `round`'s draw (ties, vanishingly rare, go to the smaller id).
fn rank(seed: u64, round: Round, client: ClientId) -> (u64, ClientId) {
    let round_seed = derive_seed(seed, "select", round);
    (derive_seed(round_seed, "", client), client)
}

/// The clients `round` asks among `joined`: every one, or the policy's count of them.
pub fn select(selection: &Selection, round: Round, joined: &[ClientId]) -> BTreeSet<ClientId> {
    let n = selection.selected(joined.len());
    if n >= joined.len() {
        return joined.iter().copied().collect();
    }
    let mut ranked = ranks(selection.seed, round, joined);
    ranked.select_nth_unstable(n - 1);
    ranked[..n].iter().map(|&(_, id)| id).collect()
}

fn ranks(seed: u64, round: Round, joined: &[ClientId]) -> Vec<(u64, ClientId)> {
    joined.iter().map(|&c| rank(seed, round, c)).collect()
}

/// The rounds ahead as the clients joined so far would be drawn: for each, the largest rank
/// it asks (computed once per round while nobody joins, so a check-in costs a few keys). One
/// per run: it holds one selection's draws.
#[derive(Debug, Default)]
pub struct Ahead {
    joined: usize,
    cutoffs: BTreeMap<Round, Option<(u64, ClientId)>>,
}

impl Ahead {
    /// The first round in `from..=last` that asks `client`, as far as the clients joined so
    /// far decide (a later join can only postpone it).
    pub fn next_asking(
        &mut self,
        selection: &Selection,
        client: ClientId,
        (from, last): (Round, Round),
        joined: &BTreeMap<ClientId, impl Sized>,
    ) -> Option<Round> {
        if self.joined != joined.len() {
            self.joined = joined.len();
            self.cutoffs.clear();
        }
        (from..=last).find(|&round| {
            let cutoff = self.cutoffs.entry(round).or_insert_with(|| {
                let ids: Vec<ClientId> = joined.keys().copied().collect();
                cutoff(selection, round, &ids)
            });
            cutoff.is_none_or(|c| rank(selection.seed, round, client) <= c)
        })
    }
}

/// The largest rank `round` asks; `None` where it asks every joined client.
fn cutoff(selection: &Selection, round: Round, joined: &[ClientId]) -> Option<(u64, ClientId)> {
    let n = selection.selected(joined.len());
    if n >= joined.len() {
        return None;
    }
    let mut ranked = ranks(selection.seed, round, joined);
    let (_, nth, _) = ranked.select_nth_unstable(n - 1);
    Some(*nth)
}

/// How long to stay away to be back when the `rounds`-th round after the one opened at
/// `opened` opens, rounds lasting `period`; unknown, or already past, the wait grows with
/// how far off the guess is (so a run slower than guessed is asked about ever less often).
pub fn away(opened: Instant, rounds: u32, period: Option<Duration>, now: Instant) -> Duration {
    let target = period.map_or(opened, |p| opened + p * rounds);
    let wait = match target.checked_duration_since(now) {
        Some(ahead) => ahead,
        None => now.duration_since(target),
    };
    wait.max(MIN_AWAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(per_round: usize) -> Selection {
        Selection {
            seed: 5,
            per_round: Some(per_round),
            over_selection: 0.0,
        }
    }

    #[test]
    fn a_client_joining_later_can_take_a_selected_place_but_never_adds_a_left_out_one() {
        let (five, six): (Vec<ClientId>, Vec<ClientId>) = ((1..=5).collect(), (1..=6).collect());
        let mut displaced = 0;
        for round in 1..=40 {
            let before = select(&sampling(2), round, &five);
            let after = select(&sampling(2), round, &six);
            assert_eq!((before.len(), after.len()), (2, 2));
            let kept: BTreeSet<ClientId> = after.iter().copied().filter(|&c| c != 6).collect();
            assert!(
                kept.is_subset(&before),
                "round {round}: {before:?} → {after:?}"
            );
            displaced += usize::from(after.contains(&6));
        }
        assert!(displaced > 0, "the newcomer is drawn too");
    }

    #[test]
    fn the_round_ahead_that_asks_a_client_is_the_one_its_draw_will_make() {
        let joined: BTreeMap<ClientId, ()> = (1..=7).map(|c| (c, ())).collect();
        let ids: Vec<ClientId> = joined.keys().copied().collect();
        let mut ahead = Ahead::default();
        for client in 1..=7 {
            let next = ahead.next_asking(&sampling(3), client, (2, 9), &joined);
            let drawn = (2..=9).find(|&r| select(&sampling(3), r, &ids).contains(&client));
            assert_eq!(next, drawn, "client {client}");
        }
        let everyone = Selection::everyone();
        let next = Ahead::default().next_asking(&everyone, 4, (3, 9), &joined);
        assert_eq!(next, Some(3));
    }

    #[test]
    fn a_stay_away_ends_when_the_round_should_open_and_grows_with_a_wrong_guess() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(away(t0, 3, Some(s(4)), t0 + s(2)), s(10));
        assert_eq!(away(t0, 1, Some(s(4)), t0 + s(9)), s(5), "5 s late");
        assert_eq!(
            away(t0, 2, None, t0 + s(6)),
            s(6),
            "unknown: as long as so far"
        );
        assert_eq!(away(t0, 1, Some(s(4)), t0 + s(4)), MIN_AWAY);
    }
}
