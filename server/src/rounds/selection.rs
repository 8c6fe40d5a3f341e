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

/// A client one of the next this many rounds asks waits on its call: a run whose rounds are
/// shorter than a guess can be good still finds the clients of its next round connected.
pub const WAIT_AHEAD: u32 = 2;

/// The shortest stay away: a client told to come back sooner asks again at once.
pub const MIN_AWAY: Duration = Duration::from_millis(250);

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
    /// far decide (a later join can only postpone it); no later than the round that asks it.
    pub fn next_asking(
        &mut self,
        selection: &Selection,
        client: ClientId,
        (from, last): (Round, Round),
        joined: &BTreeMap<ClientId, impl Sized>,
    ) -> Option<Round> {
        // Cutoffs drawn among fewer clients are no smaller, so a client they leave out is left
        // out still: they are drawn again only once the joined have grown by a sixteenth.
        if joined.len() > self.joined + self.joined / 16 {
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

/// Check-ins a server is assumed to take a second (each a connection, a TLS handshake and one
/// call): what spreads the clients sent back for the run's end.
pub const CHECK_INS_PER_SECOND: f64 = 500.0;

/// How much later than the others `client` comes back, of `joined` clients sent back together:
/// a share of the time the server needs to see them all, drawn from (seed, client), so that
/// the run's end is not a hundred thousand handshakes at once.
pub fn spread(seed: u64, client: ClientId, joined: usize) -> Duration {
    let draw = derive_seed(seed, "spread", client) as f64 / u64::MAX as f64;
    Duration::from_secs_f64(draw * joined as f64 / CHECK_INS_PER_SECOND)
}

/// When `of` things will have happened, at the pace the first `done` came since `start`
/// (`None` before the first).
pub fn extrapolate(start: Instant, now: Instant, done: usize, of: usize) -> Option<Instant> {
    let elapsed = now.checked_duration_since(start)?;
    (done > 0).then(|| start + elapsed.mul_f64(of as f64 / done as f64))
}

/// How long to stay away to be back at `target`, a time `trusted` (measured from closed rounds,
/// or the joins' steady pace), or else projected from a round's first updates (half the way
/// there: such a projection can be far off, and a client back too late costs its round time).
/// A guess already past gives half as long as it is late, so a run slower than guessed is
/// asked about less often (each check-in is a connection made, a handshake under TLS) and a
/// client is back within half its lateness of the round that wants it.
pub fn away(target: Instant, trusted: bool, now: Instant) -> Duration {
    let wait = match target.checked_duration_since(now) {
        Some(ahead) if trusted => ahead,
        Some(ahead) => ahead / 2,
        None => now.duration_since(target) / 2,
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
            check_in: true,
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
    fn clients_sent_back_for_the_end_are_spread_over_the_time_the_server_takes_to_see_them() {
        let spreads: Vec<Duration> = (1..=1000).map(|c| spread(5, c, 100_000)).collect();
        let window = Duration::from_secs_f64(100_000.0 / CHECK_INS_PER_SECOND);
        assert!(spreads.iter().all(|&d| d < window));
        // About a tenth of them in each tenth of the window, not all at its start.
        for tenth in 0..10 {
            let (from, to) = (window * tenth / 10, window * (tenth + 1) / 10);
            let n = spreads.iter().filter(|&&d| d >= from && d < to).count();
            assert!((50..=150).contains(&n), "tenth {tenth}: {n} of 1000");
        }
        assert_eq!(
            spread(5, 7, 100_000),
            spread(5, 7, 100_000),
            "drawn, not random"
        );
    }

    #[test]
    fn a_stay_away_ends_at_a_trusted_target_and_halves_a_projected_or_late_one() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(away(t0 + s(12), true, t0 + s(2)), s(10));
        assert_eq!(away(t0 + s(12), false, t0 + s(2)), s(5), "half way");
        assert_eq!(away(t0 + s(4), true, t0 + s(10)), s(3), "6 s late");
        assert_eq!(away(t0 + s(4), true, t0 + s(4)), MIN_AWAY);
        // Four of ten in after 2 s: the tenth at 5 s.
        assert_eq!(extrapolate(t0, t0 + s(2), 4, 10), Some(t0 + s(5)));
        assert_eq!(extrapolate(t0, t0 + s(2), 0, 10), None);
    }
}
