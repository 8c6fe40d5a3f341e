use std::collections::BTreeMap;

use super::*;
use crate::data::images::PixelShard;
use crate::data::pixels::squares;
use crate::model::cnn::{ArchName, CnnHyper};
use crate::rng::derive_rng;
use crate::strategy::robust::{RobustHyper, Rule};
use crate::strategy::{ClientStrategy, Downloads, ServerStrategy};
use crate::wire::network::{decode_params, encode_params};
use crate::wire::proto::DataSummary;

/// A 28×28-image client holding `samples` training rows (the CNN strategies' tests share it).
pub(crate) fn summary(samples: u64) -> DataSummary {
    DataSummary {
        train_class_counts: vec![samples],
        test_samples: 0,
        features: 784,
        compute_ghz: 1.0,
    }
}

fn server(robust: RobustHyper) -> NetworkMean {
    NetworkMean::new(ArchName::Lenet, 10, 1, "fedavg-cnn").with_robust(robust)
}

fn network(value: f32) -> Vec<f32> {
    vec![value; 431_080]
}

fn global(agg: &crate::strategy::Aggregate) -> Vec<f32> {
    let Downloads::Broadcast(p) = &agg.downloads else {
        panic!("fedavg broadcasts")
    };
    decode_params(p, 431_080).unwrap()
}

/// McMahan et al. 2017, Algorithm 1: w = Σ n_k/n w_k; n = (1, 3) gives (¼, ¾).
#[test]
fn fedavg_weights_networks_by_training_samples() {
    let clients = BTreeMap::from([(1, summary(100)), (2, summary(300))]);
    let mut s = server(RobustHyper::default());
    let decode = |v: f32| s.decode(1, 784, &encode_params(&network(v))).unwrap();
    let updates = BTreeMap::from([(1, decode(4.0)), (2, decode(8.0))]);
    let agg = s.aggregate(1, &clients, &updates).unwrap();
    assert_eq!(agg.weights, BTreeMap::from([(1, 0.25), (2, 0.75)]));
    assert!(global(&agg).iter().all(|&w| w == 7.0));
}

/// `[robust]` applies to the networks too: under the coordinate-wise median, one client's
/// wild (but finite and bounded) network does not move the global one.
#[test]
fn robust_rules_apply_to_networks() {
    let clients = BTreeMap::from([(1, summary(1)), (2, summary(1)), (3, summary(1000))]);
    let median = RobustHyper {
        rule: Rule::Median,
        ..Default::default()
    };
    let mut s = server(median);
    let decode = |v: f32| s.decode(1, 784, &encode_params(&network(v))).unwrap();
    let updates = BTreeMap::from([(1, decode(0.5)), (2, decode(0.25)), (3, decode(9000.0))]);
    let agg = s.aggregate(1, &clients, &updates).unwrap();
    assert!(global(&agg).iter().all(|&w| w == 0.5));
}

#[test]
fn wrong_sizes_nan_and_exploded_networks_are_refused() {
    let s = server(RobustHyper::default());
    let e = s
        .decode(1, 784, &encode_params(&[0.0; 10]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected 431080"), "{e}");
    let mut nan = network(0.0);
    nan[7] = f32::NAN;
    let e = s
        .decode(1, 784, &encode_params(&nan))
        .unwrap_err()
        .to_string();
    assert!(e.contains("parameter 7 is NaN"), "{e}");
    let e = s
        .decode(1, 784, &encode_params(&network(1e9)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("exploded"), "{e}");
    let e = s
        .decode(1, 783, &encode_params(&network(0.0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not one"), "{e}");
}

fn shard(seed: u64) -> PixelShard {
    PixelShard {
        train: squares(20, 4, seed),
        test: squares(10, 4, seed + 100),
        confidence: None,
        prefit: None,
    }
}

/// Two clients learn the squares in a few rounds, and the same seed gives the same bits.
#[test]
fn a_small_federation_learns_and_is_bit_for_bit_reproducible() {
    let hyper = CnnHyper {
        local_epochs: 2,
        batch_size: 8,
        learning_rate: 0.05,
        ..CnnHyper::default()
    };
    let run = || {
        let mut s = server(RobustHyper::default());
        s.classes = 4;
        let mut clients: Vec<CnnClient> = (0..2)
            .map(|_| CnnClient::new(hyper, 784, 4, 1).unwrap())
            .collect();
        let shards = [shard(1), shard(2)];
        let mut download = s.initial_download(784).unwrap();
        let summaries = BTreeMap::from([(1, summary(80)), (2, summary(80))]);
        for round in 1..=3 {
            let mut updates = BTreeMap::new();
            for (k, c) in clients.iter_mut().enumerate() {
                c.apply(round - 1, &download).unwrap();
                let mut rng = derive_rng(1, "train", k as u32 + 1);
                let up = c.train(&shards[k], round, &mut rng).unwrap();
                updates.insert(k as u32 + 1, s.decode(1, 784, &up).unwrap());
            }
            let agg = s.aggregate(round, &summaries, &updates).unwrap();
            let Downloads::Broadcast(p) = agg.downloads else {
                panic!("a broadcast")
            };
            download = p;
        }
        clients[0].apply(3, &download).unwrap();
        let accuracy = clients[0].evaluate(&shards[0]).metrics().accuracy;
        (download, accuracy)
    };
    let (a, accuracy) = run();
    let (b, _) = run();
    assert_eq!(a, b, "the same seed gives the same network, bit for bit");
    assert!(accuracy > 0.9, "accuracy {accuracy}");
}

/// A network has no rules: `flint explain` shows its layers and parameter counts, and the file
/// reads back (its parameters travel beside it as `.params`).
#[test]
fn a_kept_network_explains_its_layers() {
    use crate::model::kept::{KeptModel, ModelFile};
    let client = CnnClient::new(CnnHyper::default(), 784, 10, 1).unwrap();
    let kept = client.export().unwrap();
    assert_eq!(kept.checkpoints()[0].0, ".params");
    assert_eq!(kept.checkpoints()[0].1.len(), 4 * 431_080);
    assert!(kept.is_finite());
    let classes = (0..10).map(|c| c.to_string()).collect();
    let file = ModelFile::new(
        "client-1",
        classes,
        vec!["p".into(); 784],
        "none".into(),
        kept,
    );
    let text = file.explain(10);
    assert!(
        text.contains("431080 parameters (1.644 MiB as float32)"),
        "{text}"
    );
    assert!(text.contains("conv 1→20 5×5"), "{text}");
    assert!(text.contains("dense 800→500"), "{text}");
    let bytes = serde_json::to_vec(&file).unwrap();
    let back = ModelFile::parse(&bytes).unwrap();
    assert!(matches!(back.model, KeptModel::Network { ref layers, .. } if layers.len() == 9));
}

fn dp(
    mechanism: crate::strategy::privacy::Mechanism,
    clip: f64,
) -> crate::strategy::privacy::DpHyper {
    crate::strategy::privacy::DpHyper {
        mechanism,
        clip: Some(clip),
        noise_multiplier: 0.5,
        delta: 1e-5,
    }
}

/// Central `[dp]` over networks (Andrew et al. 2021's fixed clip): round 1's changes are
/// measured from the run's initial network, each clipped to the norm, and the weighted mean
/// noised at multiplier × clip × the largest weight; the base is kept, so a restarted server
/// aggregates the next round as the one that never stopped.
#[test]
fn central_dp_clips_each_network_from_the_initial_one_and_noises_the_mean() {
    use crate::strategy::privacy::Mechanism;
    let clients = BTreeMap::from([(1, summary(100)), (2, summary(300))]);
    let server = || server(RobustHyper::default()).with_privacy(dp(Mechanism::Central, 0.01));
    let mut s = server();
    let initial = decode_params(&s.initial_download(784).unwrap(), 431_080).unwrap();
    let shifted = |by: f32| -> Vec<f32> { initial.iter().map(|w| w + by).collect() };
    // Client 1's change is under the clip (1e-6 × √431080 ≈ 0.00066), client 2's far over it.
    let (near, far) = (shifted(1e-6), shifted(1.0));
    let decode = |s: &NetworkMean, v: &[f32]| s.decode(1, 784, &encode_params(v)).unwrap();
    let updates = BTreeMap::from([(1, decode(&s, &near)), (2, decode(&s, &far))]);
    let agg = s.aggregate(1, &clients, &updates).unwrap();
    let spent = agg.privacy.clone().expect("a privacy record");
    assert_eq!(spent.clipped, Some(1));
    assert_eq!(spent.noise_std, 0.5 * 0.01 * 0.75);
    // Without the noise: ¼ of client 1's change and ¾ of client 2's clipped to norm 0.01.
    let clean = 0.25 * 1e-6 + 0.75 * 0.01 / (431_080f64).sqrt();
    let got = global(&agg);
    let noise: Vec<f64> = got
        .iter()
        .zip(&initial)
        .map(|(g, w)| f64::from(g - w) - clean)
        .collect();
    let mean = noise.iter().sum::<f64>() / noise.len() as f64;
    let std = (noise.iter().map(|n| n * n).sum::<f64>() / noise.len() as f64).sqrt();
    assert!(mean.abs() < 0.01 * spent.noise_std, "noise mean {mean}");
    assert!(
        (std / spent.noise_std - 1.0).abs() < 0.01,
        "noise std {std}"
    );

    let mut restarted = server();
    restarted.restore(s.snapshot()).unwrap();
    let next = BTreeMap::from([(1, decode(&s, &got)), (2, decode(&s, &near))]);
    let (a, b) = (
        s.aggregate(2, &clients, &next).unwrap(),
        restarted.aggregate(2, &clients, &next).unwrap(),
    );
    assert_eq!(global(&a), global(&b), "the base and the noise kept");
    assert_eq!(a.privacy.unwrap().rounds, 2);
}

/// Local `[dp]`: the client uploads the download plus its trained change clipped and noised,
/// the noise drawn from its training stream after the training (no key given): exactly what
/// [`privatize_locally`](crate::strategy::privacy::privatize_locally) makes of the plain
/// client's network.
#[test]
fn a_local_dp_client_uploads_its_change_clipped_and_noised() {
    use crate::strategy::privacy::{Mechanism, privatize_locally};
    let hyper = CnnHyper {
        batch_size: 8,
        learning_rate: 0.05,
        ..CnnHyper::default()
    };
    let dp = dp(Mechanism::Local, 0.05);
    let wide = |v: &[f32]| -> Vec<f64> { v.iter().map(|&x| f64::from(x)).collect() };
    let mut plain = CnnClient::new(hyper, 784, 4, 1).unwrap();
    let start = plain.network().params.clone();
    let mut rng = derive_rng(1, "train", 1);
    let up = plain.train(&shard(1), 1, &mut rng).unwrap();
    let mut trained = wide(&decode_params(&up, start.len()).unwrap());
    let change: f64 = trained
        .iter()
        .zip(&wide(&start))
        .map(|(t, s)| (t - s).powi(2))
        .sum();
    assert!(change.sqrt() > 0.05, "the plain change is over the clip");
    privatize_locally(&dp, &wide(&start), &mut trained, &mut rng).unwrap();
    let expected: Vec<f32> = trained.iter().map(|&x| x as f32).collect();

    let mut private = CnnClient::new(hyper, 784, 4, 1).unwrap().with_dp(dp);
    let up = private
        .train(&shard(1), 1, &mut derive_rng(1, "train", 1))
        .unwrap();
    assert_eq!(decode_params(&up, start.len()).unwrap(), expected);
}
