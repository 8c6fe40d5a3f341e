//! A secure round through the round state, every message passed by hand (Bonawitz et al. 2017,
//! the protocol of its Figure 4): the download is the fixed-point sum of the survivors' weighted
//! updates, a client gone after sharing its keys has its pairwise masks taken out, a stage under
//! the threshold abandons the round, and what breaks a rule changes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flint_common::config::{RoundPolicy, Selection};
use flint_common::model::logreg::LogReg;
use flint_common::secagg::SecAggClient;
use flint_common::secagg::ring::{self, FixedPoint};
use flint_common::strategy::fedavg::FedAvgServer;
use flint_common::wire::encode_linear;
use flint_common::wire::proto::DataSummary;
use flint_common::{ClientId, FlintError};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::{Rounds, Task};
use super::{Answer, SecureSettings, Step};

const STAGE: Duration = Duration::from_secs(5);

fn rounds() -> Rounds {
    let policy = RoundPolicy {
        rounds: 2,
        min_clients: 3,
        min_updates: 1,
        round_timeout: Duration::from_secs(10),
        eval_timeout: Duration::from_secs(5),
        selection: Selection::everyone(),
        abandon_short: false,
    };
    let settings = SecureSettings {
        bound: 10.0,
        stage_timeout: STAGE,
        nonce: 77,
        degree: None,
    };
    Rounds::new(policy, Box::new(FedAvgServer::by_size(2)), 2)
        .with_features(Some(2))
        .with_secagg(Some(settings))
}

fn joined(t0: Instant) -> Rounds {
    let mut r = rounds();
    for (id, n) in [(1, 10), (2, 20), (3, 30)] {
        let s = DataSummary {
            train_class_counts: vec![n, n],
            test_samples: 4,
            features: 2,
            compute_ghz: 1.0,
        };
        r.join(id, s, t0).unwrap();
    }
    r
}

/// Client `id`'s update: weights (id, −id), bias id / 10.
fn input(id: ClientId) -> Vec<f64> {
    let x = f64::from(id);
    vec![x, -x, x / 10.0]
}

/// Sends `step` and, where its stage closed, reads the answer.
fn send(r: &mut Rounds, id: ClientId, session: u64, step: Step, now: Instant) -> Option<Answer> {
    let stepped = r.secure_step(id, 1, session, step.clone(), now).unwrap();
    if let Some(job) = stepped.closed {
        r.install(job.run(), now);
    }
    r.secure_answer(id, 1, session, &step)
        .unwrap()
        .map(|(_, a)| a)
}

/// A tick as the service runs it: whether a stage closed (a round it closed is installed).
fn tick(r: &mut Rounds, now: Instant) -> bool {
    let stepped = r.tick_secure(now);
    if let Some(job) = stepped.closed {
        r.install(job.run(), now);
    }
    stepped.advanced
}

/// The round's download as a flat vector.
fn download(r: &Rounds) -> Vec<f64> {
    let Task::Train {
        download: Some(p), ..
    } = r.task_for(1, 1)
    else {
        panic!("round 2 opens with a download");
    };
    let m = flint_common::wire::decode_linear(&p, 2, 2).unwrap();
    [&m.weights[..], &m.biases[..]].concat()
}

/// The weighted fixed-point sum of `ids`' inputs over their weights, as float32.
fn expected(ids: &[ClientId], weights: &BTreeMap<ClientId, f64>) -> Vec<f64> {
    let fixed = FixedPoint::for_sums(10.0, 3).unwrap();
    let mut sum = vec![0u32; 3];
    for id in ids {
        let x: Vec<f64> = input(*id).iter().map(|v| v * weights[id]).collect();
        ring::add(&mut sum, &fixed.encode(&x).unwrap());
    }
    let total: f64 = ids.iter().map(|id| weights[id]).sum();
    let model = fixed
        .decode(&sum)
        .iter()
        .map(|v| v / total)
        .collect::<Vec<_>>();
    encode_then_decode(&model)
}

fn encode_then_decode(flat: &[f64]) -> Vec<f64> {
    let m = LogReg::binary(flat[..2].to_vec(), flat[2]);
    let back = flint_common::wire::decode_linear(&encode_linear(&m), 2, 2).unwrap();
    [&back.weights[..], &back.biases[..]].concat()
}

/// Runs round 1 with `shares` sending their shares and `inputs` their masked inputs (the rest
/// stay silent at that stage; the clock passes its deadline); every survivor unmasks.
fn round_one(shares: &[ClientId], inputs: &[ClientId]) -> (Rounds, BTreeMap<ClientId, f64>) {
    let t0 = Instant::now();
    let mut r = joined(t0);
    let mut rng = StdRng::from_seed([1; 32]);
    let mut clients = BTreeMap::new();
    let mut adverts = BTreeMap::new();
    for id in 1..=3 {
        let (c, advert) = SecAggClient::new(id, 1, &mut rng);
        let answer = send(&mut r, id, 0, Step::Advert(advert, 0), t0);
        // Only the last advert finds the roster closed.
        assert_eq!(answer.is_some(), id == 3);
        clients.insert(id, c);
        adverts.insert(id, advert);
    }
    let Ok(Some((session, Answer::Roster(roster)))) =
        r.secure_answer(1, 1, 0, &Step::Advert(adverts[&1], 0))
    else {
        panic!("a roster");
    };
    let mut now = t0;
    for &id in shares {
        let c = clients.get_mut(&id).unwrap();
        let sealed = c
            .share_keys(roster.members.clone(), roster.threshold, &mut rng)
            .unwrap();
        send(&mut r, id, session, Step::Shares(sealed), now);
    }
    if shares.len() < 3 {
        now += STAGE * 2;
        assert!(tick(&mut r, now), "the stage closes at its deadline");
    }
    let mut inboxes = BTreeMap::new();
    for &id in shares {
        let step = Step::Shares(BTreeMap::new());
        if let Some(Answer::Inbox(i)) = r
            .secure_answer(id, 1, session, &step)
            .unwrap()
            .map(|(_, a)| a)
        {
            inboxes.insert(id, i);
        }
    }
    for &id in inboxes
        .keys()
        .filter(|id| inputs.contains(id))
        .collect::<Vec<_>>()
    {
        let x: Vec<f64> = input(id).iter().map(|v| v * roster.weights[&id]).collect();
        let encoded = roster.fixed.encode(&x).unwrap();
        let y = clients
            .get_mut(&id)
            .unwrap()
            .masked_input(inboxes[&id].clone(), &encoded)
            .unwrap();
        // A masked input of another length is refused, and changes nothing.
        let short = Step::Masked(y[..2].to_vec());
        assert!(r.secure_step(id, 1, session, short, now).is_err());
        send(&mut r, id, session, Step::Masked(y), now);
    }
    if inputs.len() < shares.len() {
        now += STAGE * 2;
        assert!(tick(&mut r, now), "the stage closes at its deadline");
    }
    let survivors = match r.secure_answer(inputs[0], 1, session, &Step::Masked(Vec::new())) {
        Ok(Some((_, Answer::Survivors(s)))) => s,
        _ => return (r, roster.weights),
    };
    for &id in &survivors {
        let u = clients.get_mut(&id).unwrap().unmask(&survivors).unwrap();
        send(&mut r, id, session, Step::Unmasking(u), now);
    }
    (r, roster.weights)
}

#[test]
fn the_download_is_the_fixed_point_sum_of_every_weighted_update() {
    let (r, weights) = round_one(&[1, 2, 3], &[1, 2, 3]);
    assert_eq!(download(&r), expected(&[1, 2, 3], &weights));
    assert_eq!(r.history()[0].participants, vec![1, 2, 3]);
}

#[test]
fn a_client_gone_after_sharing_its_keys_has_its_masks_taken_out() {
    let (r, weights) = round_one(&[1, 2, 3], &[1, 2]);
    assert_eq!(download(&r), expected(&[1, 2], &weights));
    assert_eq!(r.history()[0].participants, vec![1, 2]);
    let w = &r.history()[0].weights;
    assert!(
        (w[&1] + w[&2] - 1.0).abs() < 1e-12,
        "the survivors' weights: {w:?}"
    );
}

#[test]
fn a_stage_under_the_threshold_abandons_the_round_and_the_model_stays() {
    let (r, _) = round_one(&[1, 2, 3], &[1]);
    let record = &r.history()[0];
    assert!(record.participants.is_empty());
    assert_eq!(
        record.report,
        flint_common::strategy::RoundReport::plain("abandoned")
    );
    assert_eq!(download(&r), vec![0.0; 3], "the initial model stays");
}

#[test]
fn an_update_in_the_clear_and_a_message_of_an_older_session_are_refused() {
    let t0 = Instant::now();
    let mut r = joined(t0);
    let e = r
        .accept_update(
            1,
            1,
            &encode_linear(&LogReg::binary(vec![1.0, 1.0], 0.0)),
            t0,
        )
        .err()
        .unwrap();
    assert!(e.to_string().contains("aggregates securely"), "{e}");
    let e = r
        .secure_step(1, 1, 12345, Step::Masked(vec![0; 3]), t0)
        .err()
        .unwrap();
    assert!(matches!(e, FlintError::Restarted(_)), "{e}");
}
