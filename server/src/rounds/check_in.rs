//! Checking in (docs/PROTOCOL.md §Checking in): how long a client no round soon asks stays
//! away, guessed from the pace of the rounds so far.

use std::time::{Duration, Instant};

use flint_common::{ClientId, Round};

use super::{Phase, Rounds, selection};

impl Rounds {
    /// How long `client`, which has seen rounds up to `after_round` and has no task now, stays
    /// away before it asks again, where rounds sample their clients; `None`: it waits on its
    /// call, as every client does in a run that asks them all. It waits where one of the next
    /// [`selection::WAIT_AHEAD`] rounds asks it; otherwise it is told to come back when the
    /// round that many before the one asking it opens (then it waits), or when the run should
    /// end.
    pub fn come_back(
        &mut self,
        client: ClientId,
        after_round: Round,
        now: Instant,
    ) -> Option<Duration> {
        let selection = self.policy.selection;
        if !selection.check_in {
            return None;
        }
        let current = match &self.phase {
            Phase::Finished { .. } => return None,
            Phase::WaitingForClients => return self.away_before_round_one(client, now),
            Phase::Open { round, .. } | Phase::Aggregating { round, .. } => *round,
        };
        let last = self.policy.rounds;
        let from = current.max(after_round) + 1;
        let next = self
            .ahead
            .next_asking(&selection, client, (from, last), &self.joined)
            .unwrap_or(last + 1);
        if next <= current + selection::WAIT_AHEAD && next <= last {
            return None;
        }
        if next > last {
            return Some(self.away_to_the_end(client, current, now));
        }
        let back_for = next - selection::WAIT_AHEAD;
        let (target, measured) = self.opens(back_for - current, now, Self::period);
        Some(self.cap(selection::away(target, measured, now)))
    }

    /// A client no round left asks comes back for the final model: back early it would only be
    /// sent away again, a connection wasted, so the guess is the run's end at the pace of the
    /// slowest recent round, and the clients are spread over the time the server takes to see
    /// them all ([`selection::spread`]).
    fn away_to_the_end(&self, client: ClientId, current: Round, now: Instant) -> Duration {
        let rounds = self.policy.rounds + 1 - current;
        let (target, measured) = self.opens(rounds, now, Self::slowest_period);
        let spread = selection::spread(self.policy.selection.seed, client, self.joined.len());
        self.cap(selection::away(target, measured, now) + spread)
    }

    /// Before round 1: a client the first rounds ask (as far as the clients joined so far
    /// decide) waits on its call, so round 1 finds its clients connected; the others stay away
    /// as long as the joins have taken so far. (Sent instead to round 1's opening as the joins'
    /// pace projects it, the clients of later rounds came back together near it, thousands at
    /// once, and a server of 100,000 ran out of sockets before the last joins.)
    fn away_before_round_one(&mut self, client: ClientId, now: Instant) -> Option<Duration> {
        let selection = self.policy.selection;
        let soon = (1, selection::WAIT_AHEAD.min(self.policy.rounds));
        if self
            .ahead
            .next_asking(&selection, client, soon, &self.joined)
            .is_some()
        {
            return None;
        }
        let since = self.waiting_since.unwrap_or(now);
        let waited = now.saturating_duration_since(since);
        Some(self.cap(waited.max(selection::MIN_AWAY)))
    }

    /// When the `rounds`-th round after the current one should open: each as long as the last
    /// closed round was (measured), or before any closed, as the current one goes (its updates
    /// so far at the pace they came); unknown, when the current one opened.
    fn opens(
        &self,
        rounds: u32,
        now: Instant,
        period: fn(&Self) -> Option<Duration>,
    ) -> (Instant, bool) {
        let (opened, length) = match &self.phase {
            Phase::Open {
                opened_at,
                selected,
                updates,
                ..
            } => {
                let target = self.policy.selection.target(selected.len());
                let closes = selection::extrapolate(*opened_at, now, updates.len(), target);
                (*opened_at, closes.map(|c| c.duration_since(*opened_at)))
            }
            Phase::Aggregating {
                opened_at,
                closed_at,
                ..
            } => (*opened_at, Some(closed_at.duration_since(*opened_at))),
            _ => (now, None),
        };
        match (period(self), length) {
            (Some(period), _) => (opened + period * rounds, true),
            (None, Some(length)) => (opened + length * rounds, false),
            (None, None) => (opened, false),
        }
    }

    /// A stay away no longer than a round may last, nor than the final evaluations are awaited.
    fn cap(&self, wait: Duration) -> Duration {
        let longest = self.policy.round_timeout.min(self.policy.eval_timeout);
        wait.min(longest.max(selection::MIN_AWAY))
    }

    /// How long a round takes from its opening to the next one's: the shortest of the last
    /// eight closed (a round kept waiting for clients that came back late is no measure; a
    /// client back early only waits on its call).
    fn period(&self) -> Option<Duration> {
        let shortest = self.recent_periods().min_by(f64::total_cmp)?;
        Duration::try_from_secs_f64(shortest).ok()
    }

    /// The longest of the last eight closed rounds, for a client better back late than early.
    fn slowest_period(&self) -> Option<Duration> {
        let longest = self.recent_periods().max_by(f64::total_cmp)?;
        Duration::try_from_secs_f64(longest).ok()
    }

    fn recent_periods(&self) -> impl Iterator<Item = f64> + '_ {
        self.history
            .iter()
            .rev()
            .take(8)
            .map(|r| r.seconds + r.aggregation_seconds)
    }
}
