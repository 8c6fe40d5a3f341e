use std::collections::BTreeMap;

use super::*;
use crate::data::pixels::squares;
use crate::model::cnn::{ArchName, CnnHyper};
use crate::strategy::contract::StrategyParams;
use crate::strategy::fedavg_cnn::tests::summary;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{Downloads, ServerStrategy};
use crate::wire::network::{decode_params, encode_params};

const P: usize = 431_080;

/// A LeNet that predicts `class` whatever it reads (its last layer's weights zero, its bias
/// one-hot), every other parameter `v`.
fn always(class: usize, v: f32) -> Vec<f32> {
    let mut params = vec![v; P];
    params[P - 10 - 5000..P - 10].fill(0.0);
    params[P - 10..].fill(0.0);
    params[P - 10 + class] = 1.0;
    params
}

fn server(variant: FlisVariant) -> Box<dyn ServerStrategy> {
    let spec = FlisSpec {
        cnn: CnnHyper::default(),
        flis: FlisHyper {
            variant,
            ..FlisHyper::default()
        },
    };
    spec.server_holding(10, 1, RobustHyper::default(), squares(3, 10, 1))
}

fn round(
    s: &mut dyn ServerStrategy,
    r: u32,
    nets: &[(u32, Vec<f32>, u64)],
) -> crate::Result<crate::strategy::Aggregate> {
    let updates = nets
        .iter()
        .map(|(id, p, _)| (*id, s.decode(*id, 784, &encode_params(p)).unwrap()))
        .collect();
    let clients = nets.iter().map(|(id, _, n)| (*id, summary(*n))).collect();
    s.aggregate(r, &clients, &updates)
}

fn download(agg: &crate::strategy::Aggregate, id: u32) -> Vec<f32> {
    let Downloads::PerClient(d) = &agg.downloads else {
        panic!("flis sends each client its cluster's network")
    };
    decode_params(&d[&id], P).unwrap()
}

/// Morafah et al. 2023: with one-hot predictions, the similarity of two networks is
/// the fraction of the server's images they predict alike.
#[test]
fn similarity_is_the_share_of_images_predicted_alike() {
    let sim = inference_similarity(&[vec![0, 1, 2, 3], vec![0, 1, 9, 9], vec![5, 5, 5, 5]]);
    assert_eq!(sim[0], vec![1.0, 0.5, 0.0]);
    assert_eq!(sim[1][0], 0.5, "symmetric");
    assert_eq!(sim[2][2], 1.0);
}

/// A client's cluster is itself and everyone at least `threshold` alike: clusters overlap and
/// are not transitive (1 ~ 2 and 2 ~ 3, but not 1 ~ 3).
#[test]
fn clusters_are_neighbourhoods_that_may_overlap() {
    let sim = vec![
        vec![1.0, 0.5, 0.1],
        vec![0.5, 1.0, 0.6],
        vec![0.1, 0.6, 1.0],
    ];
    let near = neighbourhoods(&[7, 8, 9], &sim, 0.5);
    assert_eq!(
        near,
        vec![(7, vec![7, 8]), (8, vec![7, 8, 9]), (9, vec![8, 9])]
    );
}

/// FLIS-DC: networks that predict alike share a cluster and download its n_k-weighted mean; a
/// network unlike the others downloads itself. Nothing is kept between rounds.
#[test]
fn dc_averages_each_cluster_of_networks_that_predict_alike() {
    let mut s = server(FlisVariant::Dc);
    let nets = [
        (1, always(3, 0.01), 100),
        (2, always(3, 0.05), 300),
        (3, always(7, 0.02), 50),
    ];
    let agg = round(s.as_mut(), 1, &nets).unwrap();
    let one = download(&agg, 1);
    assert!(
        (one[0] - 0.04).abs() < 1e-6,
        "0.25 × 0.01 + 0.75 × 0.05: {}",
        one[0]
    );
    assert_eq!(download(&agg, 2), one);
    assert_eq!(download(&agg, 3), nets[2].1);
    assert_eq!(
        agg.weights,
        BTreeMap::from([(1, 0.25), (2, 0.75), (3, 1.0)])
    );
    let report: FlisRound = agg.report.details().unwrap();
    assert_eq!(report.sizes, BTreeMap::from([(1, 2), (2, 2), (3, 1)]));
    assert_eq!((report.distinct, report.placed), (2, vec![1, 2, 3]));
    assert!(s.snapshot().is_stateless());
    // The next round's networks cluster afresh.
    let agg = round(
        s.as_mut(),
        2,
        &[(1, always(3, 0.01), 100), (2, always(7, 0.05), 300)],
    )
    .unwrap();
    assert_eq!(download(&agg, 1)[0], 0.01);
}

/// FLIS-HC: the first round's clusters are kept, whatever later networks predict, and a
/// restarted server has them back; a client that missed the first round gets a cluster of its
/// own from the round it first uploads in, and keeps it.
#[test]
fn hc_keeps_the_first_rounds_clusters_and_places_a_late_client_once() {
    let mut s = server(FlisVariant::Hc);
    let first = [(1, always(3, 0.01), 100), (2, always(3, 0.03), 100)];
    round(s.as_mut(), 1, &first).unwrap();
    let mut again = server(FlisVariant::Hc);
    again.restore(s.snapshot()).unwrap();
    let unlike = [
        (1, always(3, 0.01), 100),
        (2, always(7, 0.03), 100),
        (3, always(7, 0.05), 100),
    ];
    for s in [s.as_mut(), again.as_mut()] {
        let agg = round(s, 2, &unlike).unwrap();
        assert!(
            (download(&agg, 1)[0] - 0.02).abs() < 1e-6,
            "1 and 2 stay together"
        );
        assert!(
            (download(&agg, 3)[0] - 0.04).abs() < 1e-6,
            "3 joins 2's predictions"
        );
        let report: FlisRound = agg.report.details().unwrap();
        assert_eq!(report.placed, vec![3]);
        let agg = round(s, 3, &unlike).unwrap();
        let report: FlisRound = agg.report.details().unwrap();
        assert!(report.placed.is_empty(), "placed once");
    }
    assert!(server(FlisVariant::Dc).restore(s.snapshot()).is_err());
    let broken = crate::strategy::StrategyState::of(&FlisState {
        clusters: vec![(1, vec![2])],
    });
    assert!(server(FlisVariant::Hc).restore(broken).is_err());
}

/// The server compares networks on its own images: without them it refuses, and says why.
#[test]
fn a_server_without_images_refuses_to_cluster() {
    let spec = FlisSpec {
        cnn: CnnHyper::default(),
        flis: FlisHyper::default(),
    };
    let mut s = spec.server(10, 1, RobustHyper::default());
    let e = round(s.as_mut(), 1, &[(1, always(3, 0.01), 100)]).unwrap_err();
    assert!(e.to_string().contains("holds no images"), "{e}");
    assert_eq!(spec.server_images_per_class(), Some(250));
    assert_eq!(ArchName::default(), spec.cnn.architecture);
}

#[test]
fn the_threshold_defaults_by_variant_and_is_checked() {
    let hc = FlisHyper {
        variant: FlisVariant::Hc,
        ..FlisHyper::default()
    };
    assert_eq!(
        (FlisHyper::default().threshold(), hc.threshold()),
        (0.4, 0.96)
    );
    let bad = FlisHyper {
        threshold: Some(1.5),
        ..FlisHyper::default()
    };
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("flis.threshold")
    );
}
