use super::*;
use flint_common::model::logreg::LogReg;
use flint_common::strategy::Aggregate;
use flint_common::strategy::fedavg::FedAvgServer;
use flint_common::wire::encode_linear;
use std::time::Duration;

fn policy(rounds: u32, min_clients: usize, min_updates: usize) -> RoundPolicy {
    RoundPolicy {
        rounds,
        min_clients,
        min_updates,
        round_timeout: Duration::from_secs(10),
        eval_timeout: Duration::from_secs(5),
        selection: flint_common::config::Selection::everyone(),
        abandon_short: false,
    }
}

fn summary(n: u64) -> DataSummary {
    DataSummary {
        train_class_counts: vec![n, n],
        test_samples: 4,
        features: 2,
        compute_ghz: 1.0,
    }
}

fn model(w: f64) -> Payload {
    encode_linear(&LogReg::binary(vec![w, w], 0.0))
}

fn rounds(p: RoundPolicy) -> Rounds {
    Rounds::new(p, Box::new(FedAvgServer::by_size(2)), 2)
}

/// An update as the service takes it: a round it completes is aggregated and installed.
fn take(r: &mut Rounds, client: ClientId, round: Round, p: Payload, now: Instant) -> Result<bool> {
    let a = r.accept_update(client, round, &p, now)?;
    if let Some(job) = a.closed {
        r.install(job.run(), now);
    }
    Ok(a.duplicate)
}

/// A tick as the service runs it.
fn tick(r: &mut Rounds, now: Instant) -> bool {
    match r.tick(now) {
        Some(job) => {
            r.install(job.run(), now);
            true
        }
        None => false,
    }
}

#[test]
fn round_one_opens_at_min_clients_and_late_joiners_wait_a_round() {
    let t0 = Instant::now();
    let mut r = rounds(policy(3, 2, 1));
    r.join(1, summary(5), t0).unwrap();
    assert_eq!(r.task_for(1, 0), Task::Wait);
    r.join(2, summary(5), t0).unwrap();
    assert!(matches!(r.task_for(1, 0), Task::Train { round: 1, .. }));
    r.join(3, summary(5), t0).unwrap();
    assert_eq!(r.task_for(3, 0), Task::Wait);
    let err = take(&mut r, 3, 1, model(1.0), t0).unwrap_err();
    assert!(matches!(err, FlintError::Precondition(m) if m.contains("from round 2")));
    take(&mut r, 1, 1, model(1.0), t0).unwrap();
    take(&mut r, 2, 1, model(3.0), t0).unwrap();
    // Round 2 selects everyone who has joined, and carries the average of round 1.
    match r.task_for(3, 0) {
        Task::Train {
            round: 2, download, ..
        } => assert_eq!(download, Some(model(2.0))),
        other => panic!("{other:?}"),
    }
}

fn sampled(rounds: u32, per_round: usize, over_selection: f64, seed: u64) -> RoundPolicy {
    RoundPolicy {
        selection: flint_common::config::Selection {
            seed,
            per_round: Some(per_round),
            over_selection,
            check_in: true,
        },
        abandon_short: true,
        ..policy(rounds, 5, 1)
    }
}

/// The clients `round` asks, as their tasks say.
fn asked(r: &Rounds, round: Round) -> Vec<ClientId> {
    (1..=5)
        .filter(|&c| matches!(r.task_for(c, round - 1), Task::Train { round: t, .. } if t == round))
        .collect()
}

/// Rounds of `policy` with clients 1 to 5 joined at `t0`.
fn five_joined(policy: RoundPolicy, t0: Instant) -> Rounds {
    let mut r = rounds(policy);
    for c in 1..=5 {
        r.join(c, summary(1), t0).unwrap();
    }
    r
}

/// Five clients join; every round's selected clients answer, in id order.
fn selections(policy: RoundPolicy) -> Vec<Vec<ClientId>> {
    let t0 = Instant::now();
    let mut r = five_joined(policy, t0);
    let mut all = Vec::new();
    while let Some((round, _, _)) = r.open_round() {
        let asked = asked(&r, round);
        for &c in &asked {
            take(&mut r, c, round, model(1.0), t0).unwrap();
        }
        all.push(asked);
    }
    all
}

#[test]
fn a_round_selects_clients_per_round_from_the_seed_the_same_every_time() {
    let once = selections(sampled(6, 2, 0.0, 7));
    assert_eq!(once.len(), 6);
    assert!(once.iter().all(|s| s.len() == 2), "{once:?}");
    assert_eq!(
        once,
        selections(sampled(6, 2, 0.0, 7)),
        "a replay selects alike"
    );
    assert_ne!(
        once,
        selections(sampled(6, 2, 0.0, 8)),
        "another seed, others"
    );
    let distinct: BTreeSet<_> = once.iter().collect();
    assert!(distinct.len() > 1, "rounds draw anew: {once:?}");
    let everyone = selections(policy(2, 5, 1));
    assert_eq!(everyone, vec![vec![1, 2, 3, 4, 5]; 2]);
}

#[test]
fn an_over_selected_round_closes_at_its_target_and_records_the_rest_as_late() {
    let t0 = Instant::now();
    let mut r = five_joined(sampled(2, 2, 0.5, 3), t0);
    let asked = asked(&r, 1);
    assert_eq!(asked.len(), 3, "2 × 1.5 selected");
    take(&mut r, asked[0], 1, model(1.0), t0).unwrap();
    take(&mut r, asked[1], 1, model(3.0), t0).unwrap();
    let record = &r.history()[0];
    assert_eq!(record.closed_by, ClosedBy::TargetReached);
    assert_eq!(record.participants, asked[..2]);
    assert_eq!(r.counts().closed_target, 1);
    let err = take(&mut r, asked[2], 1, model(9.0), t0).unwrap_err();
    assert!(matches!(err, FlintError::Precondition(_)));
    assert!(r.note_late(asked[2], 1));
    assert!(!r.note_late(asked[2], 1), "noted once");
    let unselected = (1..=5).find(|c| !asked.contains(c)).unwrap();
    assert!(
        !r.note_late(unselected, 1),
        "a client not asked is not late"
    );
    assert_eq!(r.late()[&1], BTreeSet::from([asked[2]]));
    assert_eq!(r.counts().late, 1);
    assert_eq!(
        r.counts().missed,
        1,
        "one of three asked was missing at the close"
    );
}

#[test]
fn a_sampled_round_short_of_min_updates_at_its_timeout_is_abandoned_and_the_next_opens() {
    let t0 = Instant::now();
    let mut r = five_joined(
        RoundPolicy {
            min_updates: 2,
            ..sampled(3, 2, 0.0, 3)
        },
        t0,
    );
    let first = asked(&r, 1);
    take(&mut r, first[0], 1, model(1.0), t0).unwrap();
    // The other selected client dropped out: the timeout closes the round anyway.
    assert!(tick(&mut r, t0 + Duration::from_secs(10)));
    let record = &r.history()[0];
    assert_eq!(record.report, RoundReport::plain("abandoned"));
    assert!(record.weights.is_empty(), "nothing aggregated");
    assert_eq!(r.open_round().map(|o| o.0), Some(2));
    assert_eq!(r.counts().closed_timeout, 1);
    // Reports on the model round 1 left (round 0's, unchanged) are taken as round 1's.
    let eval = ConfusionMatrix::from_counts(2, vec![1, 0, 0, 1]).unwrap();
    let second = asked(&r, 2)[0];
    r.report_eval(second, 1, eval, false, Predictor::Model)
        .unwrap();
    // Full participation keeps waiting for min_updates (its clients are asked again).
    let mut full = rounds(policy(2, 2, 2));
    full.join(1, summary(1), t0).unwrap();
    full.join(2, summary(1), t0).unwrap();
    take(&mut full, 1, 1, model(1.0), t0).unwrap();
    assert!(!tick(&mut full, t0 + Duration::from_secs(10)));
}

#[test]
fn a_client_a_round_passes_over_is_told_so_refused_and_awaited_at_the_end() {
    let t0 = Instant::now();
    let mut r = five_joined(sampled(1, 2, 0.0, 3), t0);
    let asked = asked(&r, 1);
    let idle = (1..=5).find(|c| !asked.contains(c)).unwrap();
    assert!(r.passes_over(idle, 0));
    assert!(!r.passes_over(asked[0], 0));
    let err = take(&mut r, idle, 1, model(1.0), t0).unwrap_err();
    assert!(matches!(&err, FlintError::Precondition(m) if m.contains("did not select")));
    for &c in &asked {
        take(&mut r, c, 1, model(1.0), t0).unwrap();
    }
    assert!(matches!(r.task_for(idle, 0), Task::Finished { .. }));
    let eval = ConfusionMatrix::from_counts(2, vec![1, 0, 0, 1]).unwrap();
    for &c in &asked {
        r.report_eval(c, 1, eval.clone(), false, Predictor::Model)
            .unwrap();
    }
    assert!(!r.completed(), "the clients left out get the model too");
    for c in (1..=5).filter(|c| !asked.contains(c)) {
        r.report_eval(c, 1, eval.clone(), false, Predictor::Model)
            .unwrap();
    }
    assert!(r.completed());
}

/// The first round from `from` that asks `client` among clients 1 to 5.
fn first_asking(policy: &RoundPolicy, client: ClientId, from: Round) -> Option<Round> {
    let ids: Vec<ClientId> = (1..=5).collect();
    (from..=policy.rounds)
        .find(|&r| selection::select(&policy.selection, r, &ids).contains(&client))
}

#[test]
fn a_client_no_round_soon_asks_is_told_when_to_come_back_and_one_asked_next_waits() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let p = RoundPolicy {
        round_timeout: s(30),
        eval_timeout: s(30),
        ..sampled(6, 2, 0.0, 7)
    };
    let mut r = five_joined(p.clone(), t0);
    // A client no round left asks is spread over the time five check-ins take.
    let to_end = |c| selection::spread(p.selection.seed, c, 5);
    // Round 1 is open, nothing in and no round closed: half as long as the round so far.
    let first = asked(&r, 1);
    for c in (1..=5).filter(|c| !first.contains(c)) {
        let away = r.come_back(c, 0, t0 + s(3));
        let half = Duration::from_millis(1500);
        match first_asking(&p, c, 2) {
            Some(2 | 3) => assert_eq!(away, None, "client {c} is asked soon: it waits"),
            Some(_) => assert_eq!(away, Some(half), "client {c}"),
            None => assert_eq!(away, Some(half + to_end(c)), "client {c}"),
        }
    }
    // Half its updates in after 2 s: round 1 should last 4 s, and a client round 4 asks first
    // is back half way to when round 2 should open (a projection).
    take(&mut r, first[0], 1, model(1.0), t0 + s(2)).unwrap();
    for c in (1..=5).filter(|&c| first_asking(&p, c, 2) == Some(4)) {
        assert_eq!(r.come_back(c, 0, t0 + s(2)), Some(s(1)), "client {c}");
    }
    // Round 1 took 4 s: a client is back when the round two before the one asking it opens.
    take(&mut r, first[1], 1, model(1.0), t0 + s(4)).unwrap();
    let period = s(4) + Duration::from_secs_f64(r.history()[0].aggregation_seconds);
    let mut seen = BTreeSet::new();
    let second = asked(&r, 2);
    for c in (1..=5).filter(|c| !second.contains(c)) {
        let away = r.come_back(c, 1, t0 + s(4)).map(|a| a.as_millis());
        let expected = match first_asking(&p, c, 3) {
            Some(3 | 4) => None,
            Some(next) => Some(period * (next - 4)),
            None => Some((period * 5 + to_end(c)).min(s(30))),
        };
        assert_eq!(away, expected.map(|e| e.as_millis()), "client {c}");
        seen.insert(expected.is_some());
    }
    assert!(seen.contains(&true), "some client is told to come back");
    // Every client asked, or clients told to hold their connections: nobody is told to go.
    let mut full = five_joined(policy(3, 5, 1), t0);
    assert_eq!(full.come_back(1, 0, t0 + s(3)), None);
    let mut held = p.clone();
    held.selection.check_in = false;
    let mut held = five_joined(held, t0);
    assert!((1..=5).all(|c| held.come_back(c, 0, t0 + s(3)).is_none()));
}

#[test]
fn before_round_one_a_sampled_client_comes_back_and_after_the_run_it_waits() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut r = rounds(sampled(1, 2, 0.0, 3));
    // Fewer joined than a round asks: each is asked, and waits.
    r.join(1, summary(1), t0).unwrap();
    assert_eq!(r.come_back(1, 0, t0 + s(1)), None);
    for c in 2..=4 {
        r.join(c, summary(1), t0 + s(2)).unwrap();
    }
    // Four joined, two asked in round 1 (the only one): the other two stay away as long as
    // the joins have taken.
    let ids: Vec<ClientId> = (1..=4).collect();
    let soon = selection::select(&r.policy.selection, 1, &ids);
    for c in 1..=4 {
        let away = r.come_back(c, 0, t0 + s(3));
        assert_eq!(away, (!soon.contains(&c)).then_some(s(3)), "client {c}");
    }
    r.join(5, summary(1), t0 + s(5)).unwrap();
    for &c in &asked(&r, 1) {
        take(&mut r, c, 1, model(1.0), t0 + s(6)).unwrap();
    }
    assert!(r.is_finished());
    assert_eq!(r.come_back(1, 0, t0 + s(6)), None);
}

#[test]
fn updates_are_idempotent_and_wrong_rounds_refused() {
    let t0 = Instant::now();
    let mut r = rounds(policy(2, 2, 1));
    r.join(1, summary(1), t0).unwrap();
    r.join(2, summary(1), t0).unwrap();
    assert!(!take(&mut r, 1, 1, model(1.0), t0).unwrap());
    assert!(take(&mut r, 1, 1, model(1.0), t0).unwrap());
    assert_eq!(r.task_for(1, 0), Task::Wait);
    let e = take(&mut r, 2, 2, model(1.0), t0).unwrap_err();
    assert!(matches!(e, FlintError::Precondition(m) if m.contains("round 2 is not open yet")));
    let e = take(&mut r, 9, 1, model(1.0), t0).unwrap_err();
    assert!(matches!(e, FlintError::UnknownClient(m) if m.contains("unknown client id 9")));
    let bad = encode_linear(&LogReg::zeros(3));
    let e = take(&mut r, 2, 1, bad, t0).unwrap_err();
    assert!(matches!(e, FlintError::InvalidUpdate(m) if m.contains("3 weights, expected 2")));
    // The refused update left round 1 open with client 1's update intact.
    assert_eq!(r.open_round(), Some((1, 1, 2)));
}

/// The service reads an update between two holds of the lock: whatever happened to the
/// round meanwhile, the decoded update is checked again as it is taken.
#[test]
fn an_update_read_off_the_lock_is_checked_again_when_taken() {
    let t0 = Instant::now();
    let mut r = rounds(policy(2, 3, 2));
    for id in 1..=3 {
        r.join(id, summary(1), t0).unwrap();
    }
    let read = |r: &Rounds, client| {
        let decoding = r.update_decoding(client, 1).unwrap().unwrap();
        decoding.run(&model(1.0)).unwrap()
    };
    // Client 1's upload is read, and its retry is taken first: the first is a duplicate.
    let first = read(&r, 1);
    assert!(!take(&mut r, 1, 1, model(1.0), t0).unwrap());
    assert!(
        r.update_decoding(1, 1).unwrap().is_none(),
        "nothing to read again"
    );
    let a = r.accept_decoded(first, t0).unwrap();
    assert!(a.duplicate && a.closed.is_none());
    assert_eq!(r.open_round(), Some((1, 1, 3)));
    // Client 3's upload is read, then round 1 closes by its timeout: refused, no change.
    let late = read(&r, 3);
    take(&mut r, 2, 1, model(1.0), t0).unwrap();
    assert!(tick(&mut r, t0 + Duration::from_secs(11)));
    let e = r.accept_decoded(late, t0).err().unwrap();
    assert!(matches!(e, FlintError::Precondition(m) if m.contains("round 1 is closed")));
    assert_eq!(r.open_round(), Some((2, 0, 3)));
    assert_eq!(r.history()[0].participants, vec![1, 2]);
}

#[test]
fn timeout_closes_a_round_once_it_has_min_updates() {
    let t0 = Instant::now();
    let mut r = rounds(policy(2, 3, 2));
    for id in 1..=3 {
        r.join(id, summary(1), t0).unwrap();
    }
    take(&mut r, 1, 1, model(1.0), t0).unwrap();
    let late = t0 + Duration::from_secs(11);
    assert!(!tick(&mut r, late), "one update is below min_updates");
    take(&mut r, 2, 1, model(1.0), late).unwrap();
    assert!(tick(&mut r, late));
    assert_eq!(r.history()[0].closed_by, ClosedBy::Timeout);
    assert_eq!(r.history()[0].participants, vec![1, 2]);
    assert_eq!((r.counts().opened, r.counts().closed_timeout), (2, 1));
    // Client 3 missed round 1 and continues with round 2.
    assert!(matches!(r.task_for(3, 0), Task::Train { round: 2, .. }));
    let e = take(&mut r, 3, 1, model(1.0), late).unwrap_err();
    assert!(matches!(e, FlintError::Precondition(m) if m.contains("round 1 is closed")));
}

#[test]
fn finishes_after_the_last_round_and_waits_for_final_evaluations() {
    let t0 = Instant::now();
    let mut r = rounds(policy(1, 1, 1));
    r.join(1, summary(1), t0).unwrap();
    take(&mut r, 1, 1, model(2.0), t0).unwrap();
    assert_eq!(
        r.task_for(1, 1),
        Task::Finished {
            download: Some(model(2.0))
        }
    );
    assert!(!r.is_done(t0));
    let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
    let e = r
        .report_eval(1, 2, cm.clone(), false, Predictor::Model)
        .unwrap_err();
    assert!(matches!(e, FlintError::Precondition(_)));
    assert!(
        !r.report_eval(1, 1, cm.clone(), false, Predictor::Model)
            .unwrap()
    );
    assert!(r.report_eval(1, 1, cm, false, Predictor::Model).unwrap());
    assert!(r.is_done(t0));
}

/// A round whose aggregation fails (here: central `[dp]` at a multiplier whose ε the accountant
/// cannot bound, which a checked experiment refuses) is recorded with why, the model stays, its
/// reports are taken, and the run goes on to its end.
#[test]
fn a_failed_aggregation_is_recorded_and_the_run_reaches_its_end() {
    use flint_common::strategy::privacy::{DpHyper, Mechanism};
    let dp = DpHyper {
        mechanism: Mechanism::Central,
        clip: Some(1.0),
        noise_multiplier: 0.001,
        delta: 1e-5,
    };
    let strategy = FedAvgServer::by_size(2).with_privacy(dp, 1);
    let t0 = Instant::now();
    let mut r = Rounds::new(policy(2, 1, 1), Box::new(strategy), 2);
    r.join(1, summary(1), t0).unwrap();
    take(&mut r, 1, 1, model(2.0), t0).unwrap();
    let record = &r.history()[0];
    let why = record.report.failure().expect("round 1 recorded as failed");
    assert!(why.contains("dp accountant"), "{why}");
    assert!(record.weights.is_empty());
    let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
    assert!(
        !r.report_eval(1, 1, cm.clone(), false, Predictor::Model)
            .unwrap()
    );
    take(&mut r, 1, 2, model(3.0), t0).unwrap();
    assert_eq!(r.history().len(), 2);
    assert!(!r.report_eval(1, 2, cm, false, Predictor::Model).unwrap());
    assert!(r.is_done(t0), "the last round's reports are in");
}

#[test]
fn the_status_sums_count_each_report_once() {
    let t0 = Instant::now();
    let mut r = rounds(policy(1, 2, 2));
    for id in 1..=2 {
        r.join(id, summary(1), t0).unwrap();
    }
    take(&mut r, 1, 1, model(2.0), t0).unwrap();
    take(&mut r, 2, 1, model(2.0), t0).unwrap();
    let right = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
    let half = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 0]);
    r.report_eval(1, 1, right.clone(), false, Predictor::Model)
        .unwrap();
    r.report_eval(1, 1, right, false, Predictor::Model).unwrap();
    r.report_eval(2, 1, half.clone(), false, Predictor::Model)
        .unwrap();
    let all: Vec<_> = r.evals()[&1].values().map(|m| m.metrics()).collect();
    let mean = flint_common::metrics::Metrics::mean(&all).unwrap();
    let (n, accuracy, f1) = r.eval_sums()[&1].means();
    assert_eq!((n, accuracy, f1), (2, mean.accuracy, mean.f1));
    assert_eq!(accuracy, 0.75);
}

#[test]
fn final_evaluations_are_not_awaited_forever() {
    let t0 = Instant::now();
    let mut r = rounds(policy(1, 1, 1));
    r.join(1, summary(1), t0).unwrap();
    take(&mut r, 1, 1, model(2.0), t0).unwrap();
    assert!(!r.is_done(t0 + Duration::from_secs(4)));
    assert!(r.is_done(t0 + Duration::from_secs(5)));
}

#[test]
fn joins_with_inconsistent_data_are_refused() {
    let t0 = Instant::now();
    let mut r = rounds(policy(1, 2, 1));
    r.join(1, summary(1), t0).unwrap();
    let mut other = summary(1);
    other.features = 3;
    assert!(
        matches!(r.join(2, other, t0), Err(FlintError::InvalidRequest(m)) if m.contains("3 features"))
    );
    assert!(matches!(
        r.join(1, summary(2), t0),
        Err(FlintError::Precondition(_))
    ));
    assert!(r.join(1, summary(1), t0).is_ok());
}

/// The experiment fixes the shape; a Join cannot size an allocation, lock the
/// others out with another shape, or overflow the counts that weight aggregation.
#[test]
fn a_join_cannot_declare_a_shape_or_counts_out_of_bounds() {
    let t0 = Instant::now();
    let refused = |r: &mut Rounds, s: DataSummary, says: &str| {
        let e = r.join(1, s, t0).unwrap_err();
        assert!(
            matches!(&e, FlintError::InvalidRequest(m) if m.contains(says)),
            "{e}"
        );
    };
    let mut declared = rounds(policy(1, 1, 1)).with_features(Some(2));
    let mut huge = summary(1);
    huge.features = u32::MAX;
    refused(&mut declared, huge.clone(), "the experiment's data has 2");
    let mut undeclared = rounds(policy(1, 1, 1));
    refused(&mut undeclared, huge, "takes 1 to 65536");
    let mut wraps = summary(1);
    wraps.train_class_counts = vec![u64::MAX, 2];
    refused(&mut declared, wraps, "more than");
    let mut fast = summary(1);
    fast.compute_ghz = 1e9;
    refused(&mut declared, fast, "compute_ghz must be in");
    assert!(declared.joined().is_empty() && undeclared.joined().is_empty());
    declared.join(1, summary(1), t0).unwrap();
}

/// A strategy that panics in aggregation: the server keeps running.
struct Panics;

impl ServerStrategy for Panics {
    fn initial_download(&self, _features: usize) -> Option<Payload> {
        None
    }
    fn decoder(&self) -> Arc<dyn UpdateDecoder> {
        FedAvgServer::by_size(2).decoder()
    }
    fn aggregate(
        &mut self,
        _round: Round,
        _clients: &BTreeMap<ClientId, DataSummary>,
        _updates: &BTreeMap<ClientId, Update>,
    ) -> Result<Aggregate> {
        panic!("a bug in a strategy")
    }
    fn snapshot(&self) -> StrategyState {
        StrategyState::stateless()
    }
    fn restore(&mut self, _state: StrategyState) -> Result<()> {
        Ok(())
    }
}

#[test]
fn a_panicking_aggregation_ends_the_run_with_what_it_has() {
    let t0 = Instant::now();
    let mut r = Rounds::new(policy(3, 1, 1), Box::new(Panics), 2);
    r.join(1, summary(1), t0).unwrap();
    take(&mut r, 1, 1, model(1.0), t0).unwrap();
    assert!(r.is_finished(), "no round runs on a strategy that panicked");
    assert!(r.history().is_empty());
    // The metrics still count the round that opened and closed.
    let counts = RoundCounts {
        opened: 1,
        closed_all_answered: 1,
        ..RoundCounts::default()
    };
    assert_eq!(r.counts(), counts);
    assert!(r.strategy_state().is_some(), "the strategy came back");
}

/// Clients 1 and 2, client 1 holding the shared test set, through one round's updates.
fn one_round_of_two_held_by_1(t0: Instant) -> Rounds {
    let mut r = rounds(policy(1, 2, 1)).with_global_test_holder(Some(1));
    r.join(1, summary(1), t0).unwrap();
    r.join(2, summary(1), t0).unwrap();
    take(&mut r, 1, 1, model(1.0), t0).unwrap();
    take(&mut r, 2, 1, model(1.0), t0).unwrap();
    r
}

#[test]
fn only_the_holder_reports_on_the_shared_test_set() {
    let t0 = Instant::now();
    let mut r = one_round_of_two_held_by_1(t0);
    let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
    let e = r
        .report_eval(2, 1, cm.clone(), true, Predictor::Model)
        .unwrap_err();
    assert!(matches!(e, FlintError::InvalidRequest(m) if m.contains("does not hold")));
    assert!(
        !r.report_eval(1, 1, cm.clone(), true, Predictor::Model)
            .unwrap()
    );
    assert!(
        r.report_eval(1, 1, cm.clone(), true, Predictor::Model)
            .unwrap(),
        "a repeat"
    );
    assert_eq!(r.global_evals().len(), 1);
}

#[test]
fn baselines_are_taken_on_the_shared_test_set_for_clients_of_the_run_only() {
    let t0 = Instant::now();
    let mut r = one_round_of_two_held_by_1(t0);
    let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
    let wrong = ConfusionMatrix::from_predictions(2, &[0, 1], &[1, 1]);
    let e = r
        .report_eval(1, 1, cm.clone(), false, Predictor::Ensemble)
        .unwrap_err();
    assert!(matches!(e, FlintError::InvalidRequest(m) if m.contains("shared test set only")));
    let e = r
        .report_eval(1, 1, cm.clone(), true, Predictor::Client(9))
        .unwrap_err();
    assert!(matches!(e, FlintError::InvalidRequest(m) if m.contains("client-9 names no client")));
    for p in [Predictor::Ensemble, Predictor::Client(2)] {
        assert!(!r.report_eval(1, 1, cm.clone(), true, p).unwrap());
        // The first report of a predictor stands.
        assert!(r.report_eval(1, 1, wrong.clone(), true, p).unwrap());
    }
    let reports = &r.global_evals()[&1];
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[&Predictor::Ensemble], cm);
    assert!(!r.is_done(t0), "baselines are not the model's report");
}

#[test]
fn the_run_waits_for_the_holders_report_on_the_shared_test_set() {
    let t0 = Instant::now();
    let mut r = rounds(policy(1, 1, 1)).with_global_test_holder(Some(1));
    r.join(1, summary(1), t0).unwrap();
    take(&mut r, 1, 1, model(1.0), t0).unwrap();
    let cm = ConfusionMatrix::from_predictions(2, &[0, 1], &[0, 1]);
    r.report_eval(1, 1, cm.clone(), false, Predictor::Model)
        .unwrap();
    assert!(!r.is_done(t0), "the shared test set is not reported yet");
    r.report_eval(1, 1, cm, true, Predictor::Model).unwrap();
    assert!(r.is_done(t0));
}
