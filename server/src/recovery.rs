//! A restarted server's way back: the journal's records replayed, in order, through the same
//! calls that made them ([`Rounds`], [`Identities`]), with closed rounds aggregated again on the
//! spot. Nothing here reads the clock to decide anything: what time decided is in the journal.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, bail};
use flint_common::ClientId;
use flint_common::metrics::ConfusionMatrix;
use flint_common::strategy::{GroupSum, Predictor};
use flint_common::wire::proto::LinkCount;

use crate::identity::{Holder, Identities};
use crate::journal::{Bind, Event, RoundMark, SecureGroupSum, SecureSum};
use crate::rounds::{Aggregated, ClosedBy, Rounds};

/// What a replay found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub records: usize,
    /// A round closed before the crash whose aggregation never came back: aggregated again and
    /// installed by the replay (the caller journals that).
    pub installed_at_end: Option<u32>,
    /// The link counts the replayed reports carried, by client, for the byte ledger (which is
    /// kept beside the journal, not in it).
    pub link: Vec<(ClientId, Vec<LinkCount>)>,
}

/// Replays `events` into a fresh `rounds` and `identities` built from the same experiment.
pub fn replay(
    events: Vec<Event>,
    rounds: &mut Rounds,
    identities: &mut Identities,
    now: Instant,
) -> anyhow::Result<Replayed> {
    let mut pending: Option<Aggregated> = None;
    let mut link = Vec::new();
    // How long the round being aggregated was open, as its `Close` record says.
    let mut open_for: Option<(u32, f64)> = None;
    let records = events.len();
    for (i, event) in events.into_iter().enumerate() {
        let at = || format!("journal record {} of {records}", i + 1);
        match event {
            Event::Start(_) => bail!("{}: a second run record", at()),
            Event::Bind(b) => restore_bind(identities, b, now).with_context(at)?,
            Event::Join(j) => {
                let summary = j
                    .summary
                    .with_context(|| format!("{}: a join without its summary", at()))?;
                rounds.join(j.client_id, summary, now).with_context(at)?;
            }
            Event::Update(u) => {
                let payload = u
                    .payload
                    .with_context(|| format!("{}: an update without payload", at()))?;
                let accepted = rounds
                    .accept_update(u.client_id, u.round, &payload, now)
                    .with_context(at)?;
                if let Some(job) = accepted.closed {
                    pending = Some(job.run());
                }
            }
            Event::Close(c) if c.timed_out => {
                let job = rounds.close_as_timed_out(c.round, now).with_context(at)?;
                pending = Some(job.run());
                open_for = Some((c.round, c.seconds));
            }
            Event::Close(c) => {
                // Closed by its last update, which the replay has just taken.
                if rounds.aggregating() != Some(c.round) {
                    bail!(
                        "{}: round {} closed by its last update, but it is not closed",
                        at(),
                        c.round
                    );
                }
                open_for = Some((c.round, c.seconds));
            }
            Event::Installed(m) => {
                let done = pending.take();
                install(rounds, done, m, now).with_context(at)?;
            }
            Event::Late(l) => {
                rounds.note_late(l.client_id, l.round);
            }
            Event::SecureSum(sum) => {
                let closed_by = match sum.timed_out {
                    true => ClosedBy::Timeout,
                    false => ClosedBy::AllAnswered,
                };
                let round = sum.round;
                let sums = group_sums(sum).with_context(at)?;
                let job = rounds
                    .close_with_sum(round, closed_by, sums, now)
                    .with_context(at)?;
                pending = Some(job.run());
            }
            Event::Eval(e) => {
                let m = ConfusionMatrix::from_counts(e.classes as usize, e.confusion)
                    .with_context(|| format!("{}: a malformed confusion matrix", at()))?;
                let predictor = Predictor::parse(&e.predictor).with_context(at)?;
                rounds
                    .report_eval(e.client_id, e.round, m, e.global_test, predictor)
                    .with_context(at)?;
                if !e.link.is_empty() {
                    link.push((e.client_id, e.link));
                }
            }
        }
    }
    let installed_at_end = pending.map(|done| {
        let (round, aggregation_seconds) = (done.round(), done.seconds());
        rounds.install(done, now);
        if let Some((r, seconds)) = open_for.filter(|(r, _)| *r == round) {
            rounds.restore_timings(r, seconds, aggregation_seconds);
        }
        round
    });
    Ok(Replayed {
        records,
        installed_at_end,
        link,
    })
}

/// A slot's binding as the journal kept it: its token's hash, its holder, and the hash of the
/// enrollment secret that bound it, where the run asks for one.
fn restore_bind(identities: &mut Identities, b: Bind, now: Instant) -> anyhow::Result<()> {
    let hash = |bytes: &[u8], what: &str| -> anyhow::Result<[u8; 32]> {
        bytes
            .try_into()
            .map_err(|_| anyhow::anyhow!("{what} hash of {} bytes", bytes.len()))
    };
    let token = hash(&b.token_hash, "a token")?;
    let holder = Holder {
        host: b.host,
        certificate: b.certificate,
    };
    identities.restore(b.client_id, token, holder, now)?;
    if !b.enrollment_hash.is_empty() {
        let secret = hash(&b.enrollment_hash, "an enrollment")?;
        identities.enroll(b.client_id, Some(secret));
    }
    Ok(())
}

/// The aggregation under way installed where the journal says it was: it must be of the round
/// the record names.
fn install(
    rounds: &mut Rounds,
    pending: Option<Aggregated>,
    mark: RoundMark,
    now: Instant,
) -> anyhow::Result<()> {
    let Some(done) = pending else {
        bail!(
            "round {} installed but no aggregation was under way",
            mark.round
        );
    };
    if done.round() != mark.round {
        bail!(
            "round {} installed but round {} was aggregating",
            mark.round,
            done.round()
        );
    }
    rounds.install(done, now);
    rounds.restore_timings(mark.round, mark.seconds, mark.aggregation_seconds);
    Ok(())
}

/// A [`SecureSum`] record's sums by group (one record of before groups: group 0).
fn group_sums(record: SecureSum) -> anyhow::Result<BTreeMap<u32, GroupSum>> {
    let legacy = SecureGroupSum {
        group: 0,
        clients: record.clients,
        weights: record.weights,
        sum: record.sum,
    };
    let groups = match record.groups.is_empty() {
        true => vec![legacy],
        false => record.groups,
    };
    let mut sums = BTreeMap::new();
    for g in groups {
        if g.clients.len() != g.weights.len() {
            bail!("a secure sum whose clients and weights differ in count");
        }
        let weights = g.clients.into_iter().zip(g.weights).collect();
        let sum = GroupSum {
            weights,
            sum: g.sum,
        };
        if sums.insert(g.group, sum).is_some() {
            bail!("a secure sum with group {} twice", g.group);
        }
    }
    Ok(sums)
}
