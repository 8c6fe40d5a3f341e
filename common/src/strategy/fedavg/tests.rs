use super::*;
use std::collections::BTreeMap;

use crate::strategy::{Downloads, ServerStrategy};
use crate::wire::Update;
use crate::wire::proto::LinearModel;
use crate::wire::proto::payload::Kind;
use crate::wire::proto::{DataSummary, Payload};
fn summary(counts: [u64; 2], ghz: f64) -> DataSummary {
    DataSummary {
        train_class_counts: counts.to_vec(),
        test_samples: 0,
        features: 1,
        compute_ghz: ghz,
    }
}

fn payload(w: f32, b: f32) -> Payload {
    Payload {
        kind: Some(Kind::LinearModel(LinearModel {
            weights: vec![w],
            bias: b,
            class_biases: Vec::new(),
        })),
    }
}

fn update(w: f32, b: f32) -> Update {
    FedAvgServer::by_size(2)
        .decode(1, 1, &payload(w, b))
        .unwrap()
}

#[test]
fn fedavg_weights_by_training_samples() {
    // §3.5: w = Σ n_k/n w_k; n = (1, 3) gives (¼, ¾).
    let clients = BTreeMap::from([(1, summary([1, 0], 1.0)), (2, summary([2, 1], 1.0))]);
    let updates = BTreeMap::from([(1, update(4.0, 1.0)), (2, update(8.0, -1.0))]);
    let agg = FedAvgServer::by_size(2)
        .aggregate(1, &clients, &updates)
        .unwrap();
    assert_eq!(agg.weights, BTreeMap::from([(1, 0.25), (2, 0.75)]));
    let Downloads::Broadcast(p) = agg.downloads else {
        panic!("fedavg broadcasts")
    };
    assert_eq!(p, payload(7.0, -0.5));
}

#[test]
fn weights_are_renormalised_over_the_clients_that_answered() {
    let clients = BTreeMap::from([
        (1, summary([5, 5], 4.5)),
        (2, summary([9, 1], 1.5)),
        (3, summary([1, 1], 3.0)),
    ]);
    let updates = BTreeMap::from([(1, update(1.0, 0.0)), (3, update(1.0, 0.0))]);
    let server = FedAvgServer::by_ahp(
        crate::strategy::ahp::AhpSection::default().check().unwrap(),
        2,
    );
    let mut s = server;
    let agg = s.aggregate(2, &clients, &updates).unwrap();
    assert_eq!(agg.weights.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
    assert!((agg.weights.values().sum::<f64>() - 1.0).abs() < 1e-12);
    // Client 1 has more compute and as good a balance: it must weigh more.
    assert!(agg.weights[&1] > agg.weights[&3]);
}

#[test]
fn non_linear_updates_are_refused() {
    let server = FedAvgServer::by_size(2);
    let wrong = Payload {
        kind: Some(Kind::GiniIndex(crate::wire::proto::GiniIndex {
            value: 0.5,
        })),
    };
    let err = server.decode(1, 1, &wrong).unwrap_err().to_string();
    assert!(err.contains("expected a linear_model"), "{err}");
    let err = server
        .decode(1, 2, &payload(1.0, 0.0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("1 weights, expected 2"), "{err}");
    let err = server
        .decode(1, 1, &payload(f32::NAN, 0.0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not finite"), "{err}");
}

#[test]
fn under_local_noise_robust_rules_still_combine_and_the_round_is_counted() {
    use crate::strategy::privacy::{DpHyper, Mechanism};
    use crate::strategy::robust::{RobustHyper, Rule};
    let dp = DpHyper {
        mechanism: Mechanism::Local,
        clip: Some(1.0),
        ..DpHyper::default()
    };
    let median = RobustHyper {
        rule: Rule::Median,
        ..RobustHyper::default()
    };
    let clients: BTreeMap<_, _> = (1..=3).map(|id| (id, summary([1, 1], 1.0))).collect();
    // A liar far off: the median leaves it out, as without [dp].
    let updates = BTreeMap::from([
        (1, update(1.0, 0.0)),
        (2, update(2.0, 0.0)),
        (3, update(1000.0, 0.0)),
    ]);
    let mut server = FedAvgServer::by_size(2)
        .with_robust(median)
        .with_privacy(dp, 1);
    let agg = server.aggregate(1, &clients, &updates).unwrap();
    let Downloads::Broadcast(p) = agg.downloads else {
        panic!("fedavg broadcasts")
    };
    assert_eq!(p, payload(2.0, 0.0));
    let spent = agg.privacy.expect("the round is counted");
    assert_eq!(
        (spent.rounds, spent.clipped, spent.secret_noise),
        (1, None, None)
    );
}
