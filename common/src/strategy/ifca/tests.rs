use std::collections::BTreeMap;

use super::*;
use crate::data::images::PixelShard;
use crate::data::pixels::squares;
use crate::model::cnn::{ArchName, CnnHyper};
use crate::rng::derive_rng;
use crate::strategy::fedavg_cnn::architecture;
use crate::strategy::fedavg_cnn::tests::summary;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{ClientStrategy, Downloads, ServerStrategy};
use crate::wire::network::{decode_params, encode_cluster_params, encode_params};

const P: usize = 431_080;

fn server(k: usize) -> IfcaServer {
    IfcaServer::new(ArchName::Lenet, k, 10, 1, RobustHyper::default())
}

/// Ghosh et al. 2020, Algorithm 2, steps 6–7: each cluster's model is the n_k-weighted mean of
/// the uploads that chose it; a cluster no client chose keeps its model.
#[test]
fn each_cluster_averages_its_own_uploads_and_an_empty_one_keeps_its_model() {
    let mut s = server(3);
    let initial = initial_models(ArchName::Lenet, 3, 784, 10, 1).unwrap();
    let up = |cluster, v: f32| {
        let payload = encode_cluster_params(cluster, &vec![v; P]);
        s.decode(1, 784, &payload).unwrap()
    };
    let updates = BTreeMap::from([(1, up(0, 4.0)), (2, up(0, 8.0)), (3, up(2, 1.0))]);
    let clients = BTreeMap::from([(1, summary(100)), (2, summary(300)), (3, summary(50))]);
    let agg = s.aggregate(1, &clients, &updates).unwrap();
    assert_eq!(
        agg.weights,
        BTreeMap::from([(1, 0.25), (2, 0.75), (3, 1.0)])
    );
    let Downloads::Broadcast(p) = &agg.downloads else {
        panic!("ifca broadcasts its k models")
    };
    let all = decode_params(p, 3 * P).unwrap();
    assert!(all[..P].iter().all(|&w| w == 7.0));
    assert_eq!(&all[P..2 * P], &initial[1][..], "cluster 1 had no member");
    assert!(all[2 * P..].iter().all(|&w| w == 1.0));
    let report: IfcaRound = agg.report.details().unwrap();
    assert_eq!(
        report.clusters,
        BTreeMap::from([(0, vec![1, 2]), (2, vec![3])])
    );
    // The next round starts from these models, and a restored server too.
    let mut again = server(3);
    again.restore(s.snapshot()).unwrap();
    assert_eq!(again.initial_download(784), s.initial_download(784));
    assert!(server(2).restore(s.snapshot()).is_err());
}

#[test]
fn uploads_name_a_cluster_of_the_run() {
    let s = server(2);
    let e = s
        .decode(1, 784, &encode_cluster_params(2, &vec![0.0; P]))
        .unwrap_err();
    assert!(e.to_string().contains("the run has 2"), "{e}");
    let e = s.decode(1, 784, &encode_params(&vec![0.0; P])).unwrap_err();
    assert!(e.to_string().contains("names no cluster"), "{e}");
}

/// Algorithm 2, step 4: a client takes the model of lowest loss on its own data, here the one
/// trained on it over one drawn at random.
#[test]
fn a_client_chooses_the_model_that_fits_its_data() {
    let hyper = CnnHyper {
        local_epochs: 3,
        batch_size: 8,
        learning_rate: 0.05,
        ..CnnHyper::default()
    };
    let shard = PixelShard {
        train: squares(20, 4, 1),
        test: squares(5, 4, 2),
        confidence: None,
        prefit: None,
    };
    let mut client = IfcaClient::new(hyper, 3, 784, 4, 1).unwrap();
    let mut rng = derive_rng(1, "train", 1);
    // Trained from cluster 0's model (the models' losses are alike at first: the first wins).
    let up = client.train(&shard, 1, &mut rng).unwrap();
    let (cluster, trained) = crate::wire::network::decode_cluster_params(
        &up,
        architecture(ArchName::Lenet, 784, 4).unwrap().params,
        3,
    )
    .unwrap();
    assert_eq!(cluster, client.choose(&shard).0);
    let mut models = initial_models(ArchName::Lenet, 3, 784, 4, 1).unwrap();
    models[2] = trained;
    client.apply(1, &encode_params(&models.concat())).unwrap();
    assert_eq!(client.choose(&shard).0, 2);
    assert!(client.evaluate(&shard).metrics().accuracy > 0.9);
}

/// Central `[dp]` per cluster: each member's change from its cluster's network is clipped, and
/// each chosen cluster's mean noised at multiplier × clip × its largest weight from its own
/// stream; a cluster nobody chose keeps its network unnoised; a restored server carries on.
#[test]
fn central_dp_noises_each_chosen_cluster_from_its_own_network() {
    use crate::strategy::privacy::{DpHyper, Mechanism};
    let dp = DpHyper {
        mechanism: Mechanism::Central,
        clip: Some(0.01),
        noise_multiplier: 0.5,
        delta: 1e-5,
    };
    let fresh = || server(3).with_privacy(dp);
    let mut s = fresh();
    let initial = initial_models(ArchName::Lenet, 3, 784, 10, 1).unwrap();
    let up = |s: &IfcaServer, cluster: u32, by: f32| {
        let params: Vec<f32> = initial[cluster as usize].iter().map(|w| w + by).collect();
        s.decode(1, 784, &encode_cluster_params(cluster, &params))
            .unwrap()
    };
    let updates = BTreeMap::from([
        (1, up(&s, 0, 1.0)),
        (2, up(&s, 0, 1.0)),
        (3, up(&s, 2, 1.0)),
    ]);
    let clients = BTreeMap::from([(1, summary(100)), (2, summary(300)), (3, summary(50))]);
    let agg = s.aggregate(1, &clients, &updates).unwrap();
    let spent = agg.privacy.clone().expect("a privacy record");
    assert_eq!(spent.clipped, Some(3));
    assert_eq!(spent.noise_std, 0.5 * 0.01 * 1.0, "cluster 2's one member");
    let Downloads::Broadcast(p) = &agg.downloads else {
        panic!("ifca broadcasts its k models")
    };
    let all = decode_params(p, 3 * P).unwrap();
    // Every change is (1, …, 1) clipped to norm 0.01: each coordinate 0.01 / √P, plus noise.
    let clean = 0.01 / (P as f64).sqrt();
    let noise_std = |j: usize| {
        let sq: f64 = all[j * P..(j + 1) * P]
            .iter()
            .zip(&initial[j])
            .map(|(g, w)| (f64::from(g - w) - clean).powi(2))
            .sum();
        (sq / P as f64).sqrt()
    };
    assert!((noise_std(0) / (0.5 * 0.01 * 0.75) - 1.0).abs() < 0.01);
    assert!((noise_std(2) / (0.5 * 0.01) - 1.0).abs() < 0.01);
    assert_eq!(&all[P..2 * P], &initial[1][..], "cluster 1 had no member");

    let mut again = fresh();
    again.restore(s.snapshot()).unwrap();
    let (a, b) = (
        s.aggregate(2, &clients, &updates).unwrap(),
        again.aggregate(2, &clients, &updates).unwrap(),
    );
    assert_eq!(a.downloads, b.downloads);
    assert_eq!(a.privacy.unwrap().rounds, 2);
}
