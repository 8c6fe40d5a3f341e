use super::*;
use std::collections::BTreeMap;

use crate::model::fcm::Activation;
use crate::model::fcm::{Fcm, FcmHyper};
use crate::model::pso::PsoHyper;
use crate::strategy::{ClientStrategy, Downloads, LocalMetrics, ServerStrategy};
use crate::wire::proto::AdjacencyMatrix;
use crate::wire::proto::payload::Kind;
use crate::wire::proto::{DataSummary, Payload};
use crate::wire::{self, Update};

fn m(accuracy: f64, precision: f64) -> LocalMetrics {
    LocalMetrics {
        accuracy,
        precision,
    }
}

#[test]
fn weights_follow_eq_9_11_and_13() {
    let locals = [m(0.9, 0.5), m(0.6, 0.0), m(0.5, 0.5)];
    let (w, fb) = Aggregation::Mean.weights(&locals);
    assert_eq!((w, fb), (vec![1.0 / 3.0; 3], false));
    let (w, _) = Aggregation::Accuracy.weights(&locals);
    assert_eq!(w, vec![0.9 / 2.0, 0.6 / 2.0, 0.5 / 2.0]);
    let (w, _) = Aggregation::Precision.weights(&locals);
    assert_eq!(w, vec![0.5, 0.0, 0.5]);
    let (w, fb) = Aggregation::Precision.weights(&[m(0.7, 0.0), m(0.8, 0.0)]);
    assert_eq!((w, fb), (vec![0.5, 0.5], true));
}

fn summary(features: u32) -> DataSummary {
    DataSummary {
        train_class_counts: vec![1, 1],
        test_samples: 1,
        features,
        compute_ghz: 1.0,
    }
}

fn upload(params: Vec<f64>, accuracy: f64, precision: f64) -> Payload {
    let map = Fcm::from_parameters(1, 2, params).unwrap();
    wire::encode_map(&map, Some(m(accuracy, precision)))
}

fn decoded(p: &Payload) -> Update {
    FcmServer::new(2, Aggregation::Mean)
        .decode(1, 1, p)
        .unwrap()
}

fn params_of(p: &Payload) -> Vec<f64> {
    wire::decode_map(p, 1, 2).unwrap().0.parameters().to_vec()
}

#[test]
fn server_sends_nothing_first_then_the_weighted_average() {
    let mut s = FcmServer::new(2, Aggregation::Accuracy);
    assert_eq!(s.initial_download(1), None);
    let clients = BTreeMap::from([(1, summary(1)), (2, summary(1))]);
    let updates = BTreeMap::from([
        (1, decoded(&upload(vec![1.0, 0.5, -1.0, 0.0], 0.75, 0.5))),
        (2, decoded(&upload(vec![0.0, -0.5, 1.0, 0.25], 0.25, 0.5))),
    ]);
    let agg = s.aggregate(1, &clients, &updates).unwrap();
    assert_eq!(agg.weights, BTreeMap::from([(1, 0.75), (2, 0.25)]));
    assert_eq!(agg.local[&1], m(0.75, 0.5));
    let Downloads::Broadcast(p) = &agg.downloads else {
        panic!("blind fl broadcasts")
    };
    assert_eq!(params_of(p), vec![0.75, 0.25, -0.5, 0.0625]);
    // The download carries no client's metrics.
    assert_eq!(wire::decode_map(p, 1, 2).unwrap().1.accuracy, 0.0);
}

fn hyper() -> FcmHyper {
    FcmHyper {
        activation: Activation::Tanh,
        fitness: crate::model::fcm::Fitness::Jaccard,
        slope: 2.0,
        tolerance: 1e-5,
        max_iterations: 100,
    }
}

#[test]
fn blind_takes_the_global_map_and_blended_averages_it_with_the_local_one() {
    let local = Fcm::from_parameters(1, 2, vec![1.0, 0.5, -1.0, 0.0]).unwrap();
    let global = upload(vec![0.0, -0.5, 1.0, 0.5], 0.0, 0.0);
    for (blend, want) in [
        (Blend::Replace, vec![0.0, -0.5, 1.0, 0.5]),
        (Blend::Average, vec![0.5, 0.0, 0.0, 0.25]),
    ] {
        let mut c = FcmClient::new(1, 2, hyper(), PsoHyper::default(), blend);
        c.model = Some(local.clone());
        c.apply(1, &global).unwrap();
        assert_eq!(c.model().unwrap().parameters(), &want[..], "{blend:?}");
    }
    // A blended client without a local map yet takes the global one.
    let mut c = FcmClient::new(1, 2, hyper(), PsoHyper::default(), Blend::Average);
    c.apply(1, &global).unwrap();
    assert_eq!(c.model().unwrap().parameters(), &[0.0, -0.5, 1.0, 0.5]);
}

#[test]
fn updates_are_checked_against_the_run() {
    let s = FcmServer::new(2, Aggregation::Mean);
    let good = upload(vec![0.1, 0.2, 0.3, 0.4], 0.5, 0.5);
    s.decode(1, 1, &good).unwrap();
    let e = s.decode(1, 2, &good).unwrap_err().to_string();
    assert!(e.contains("expected 4×4"), "{e}");
    let bad = upload(vec![0.1, 0.2, 0.3, 0.4], 1.5, 0.5);
    let e = s.decode(1, 1, &bad).unwrap_err().to_string();
    assert!(e.contains("local_accuracy is 1.5"), "{e}");
    let nan = Payload {
        kind: Some(Kind::AdjacencyMatrix(AdjacencyMatrix {
            concepts: 3,
            weights: vec![0.0, 0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            local_accuracy: 0.5,
            local_precision: 0.5,
        })),
    };
    let e = s.decode(1, 1, &nan).unwrap_err().to_string();
    assert!(e.contains("not finite"), "{e}");
    let wrong = wire::encode_linear(&crate::model::logreg::LogReg::zeros(1));
    let e = s.decode(1, 1, &wrong).unwrap_err().to_string();
    assert!(e.contains("expected an adjacency_matrix"), "{e}");
}

/// Central `[dp]`: round 1's changes are measured from the zero map and clipped, the mean
/// gets N(0, (z × clip / n)²), the map stays in [−1, 1], and round 2 measures from the map
/// broadcast; a server restored from its snapshot noises round 2 as the uninterrupted one.
#[test]
fn central_dp_clips_from_the_last_map_and_noises_the_mean() {
    use crate::strategy::privacy::{DpHyper, Mechanism};
    let dp = DpHyper {
        mechanism: Mechanism::Central,
        clip: Some(0.5),
        noise_multiplier: 0.8,
        delta: 1e-5,
    };
    let clients = BTreeMap::from([(1, summary(1)), (2, summary(1))]);
    let updates = BTreeMap::from([
        (1, decoded(&upload(vec![1.0, 0.5, -1.0, 0.0], 0.75, 0.5))),
        (2, decoded(&upload(vec![0.0, -0.5, 1.0, 0.25], 0.25, 0.5))),
    ]);
    let mut s = FcmServer::new(2, Aggregation::Mean).with_privacy(dp, 7);
    let first = s.aggregate(1, &clients, &updates).unwrap();
    let spent = first.privacy.clone().unwrap();
    assert_eq!(
        spent.clipped,
        Some(2),
        "both maps are farther than 0.5 from zero"
    );
    assert!((spent.noise_std - 0.8 * 0.5 / 2.0).abs() < 1e-12);
    let Downloads::Broadcast(p) = &first.downloads else {
        panic!("blind fl broadcasts")
    };
    let global = params_of(p);
    assert!(global.iter().all(|w| (-1.0..=1.0).contains(w)));
    let kept = s.snapshot();
    let second = s.aggregate(2, &clients, &updates).unwrap();
    let mut restored = FcmServer::new(2, Aggregation::Mean).with_privacy(dp, 7);
    restored.restore(kept).unwrap();
    let again = restored.aggregate(2, &clients, &updates).unwrap();
    assert_eq!(second.downloads, again.downloads);
    assert_eq!(second.privacy.unwrap().rounds, 2);
}

/// Local `[dp]`: the upload is the global map plus the clipped, noised change, in [−1, 1];
/// the client keeps its own map unnoised.
#[test]
fn local_dp_noises_the_upload_not_the_kept_map() {
    use crate::strategy::privacy::{DpHyper, Mechanism};
    let dp = DpHyper {
        mechanism: Mechanism::Local,
        clip: Some(0.1),
        noise_multiplier: 1.0,
        delta: 1e-5,
    };
    let c = FcmClient::new(1, 2, hyper(), PsoHyper::default(), Blend::Replace).with_dp(dp);
    let trained = Fcm::from_parameters(1, 2, vec![0.9, -0.9, 0.3, 0.0]).unwrap();
    let mut rng = crate::rng::derive_rng(3, "test", 1);
    let sent = c.noised(&trained, 1, &mut rng).unwrap().unwrap();
    assert_ne!(sent.parameters(), trained.parameters());
    assert!(sent.parameters().iter().all(|w| (-1.0..=1.0).contains(w)));
    let plain = FcmClient::new(1, 2, hyper(), PsoHyper::default(), Blend::Replace);
    assert_eq!(plain.noised(&trained, 1, &mut rng).unwrap(), None);
}
