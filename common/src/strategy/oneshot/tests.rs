use std::collections::BTreeMap;

use nalgebra::DMatrix;
use rand::RngExt;

use super::*;
use crate::data::images::PixelShard;
use crate::data::pixels::squares;
use crate::model::cnn::arch::{Layer, Shape};
use crate::model::cnn::statistics::{dense_grams, unpack_grams};
use crate::model::cnn::{ArchName, Architecture, Cnn, CnnHyper, Samples};
use crate::rng::derive_rng;
use crate::strategy::fedavg_cnn::samples;
use crate::strategy::fedavg_cnn::tests::summary;
use crate::strategy::{ClientStrategy, Downloads, ServerStrategy};
use crate::wire::Update;
use crate::wire::network::{NetworkStatistics, decode_networks, encode_statistics};

/// A network of one dense layer without biases on `d` inputs: its logits are W x.
fn linear(d: usize, out: usize) -> Architecture {
    let layers = [Layer::Dense { out, bias: false }];
    Architecture::place(ArchName::Cnn2, Shape::Flat(d), &layers).unwrap()
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = derive_rng(seed, "oneshot-test", 0);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn pixels(n: usize, d: usize, seed: u64) -> Vec<u8> {
    let mut rng = derive_rng(seed, "oneshot-pixels", 0);
    (0..n * d).map(|_| rng.random_range(0..=255u8)).collect()
}

/// RegMean's closed form is the least-squares merge (Jin et al. 2023, Eq. 2): with α = 1 and
/// n_k-weighted mean Grams, the merged layer minimises Σ_k ‖X_k W − X_k W_k‖² over every row
/// of every client, solved here directly on the stacked rows.
#[test]
fn regmean_is_the_least_squares_merge_of_a_layer() {
    let (d, out) = (6, 3);
    let arch = linear(d, out);
    let rows = [40, 15, 25];
    let nets: Vec<Vec<f32>> = (0..3).map(|k| random(d * out, k)).collect();
    let inputs: Vec<Vec<u8>> = (0..3).map(|k| pixels(rows[k], d, 10 + k as u64)).collect();
    let grams: Vec<Vec<Vec<f64>>> = (0..3)
        .map(|k| {
            let labels = vec![0; rows[k]];
            let s = Samples {
                pixels: &inputs[k],
                labels: &labels,
                per: d,
            };
            let cnn = Cnn {
                arch: arch.clone(),
                params: nets[k].clone(),
            };
            unpack_grams(&arch, &dense_grams(&cnn, &s))
        })
        .collect();
    let total: usize = rows.iter().sum();
    let p: Vec<f64> = rows.iter().map(|&n| n as f64 / total as f64).collect();
    let views: Vec<&[f32]> = nets.iter().map(Vec::as_slice).collect();
    let merged = regmean::merge(&arch, &views, &grams, &p, 1.0);

    let x = DMatrix::from_fn(total, d, |r, c| {
        let (k, at) = locate(&rows, r);
        f64::from(inputs[k][at * d + c]) / 255.0
    });
    let y = DMatrix::from_fn(total, out, |r, o| {
        let (k, at) = locate(&rows, r);
        (0..d)
            .map(|c| f64::from(inputs[k][at * d + c]) / 255.0 * f64::from(nets[k][o * d + c]))
            .sum()
    });
    let direct = x.svd(true, true).solve(&y, 1e-12).unwrap();
    for o in 0..out {
        for c in 0..d {
            let (got, want) = (f64::from(merged[o * d + c]), direct[(c, o)]);
            assert!(
                (got - want).abs() < 1e-4,
                "w[{o}][{c}]: {got} against {want}"
            );
        }
    }
    // α < 1 shrinks the off-diagonal terms: another merge, still between the clients'.
    assert_ne!(regmean::merge(&arch, &views, &grams, &p, 0.5), merged);
}

fn locate(rows: &[usize], mut r: usize) -> (usize, usize) {
    for (k, &n) in rows.iter().enumerate() {
        if r < n {
            return (k, r);
        }
        r -= n;
    }
    unreachable!("row within the clients'")
}

/// FedFisher: each parameter leans to the client that is surest of it; where none says
/// anything, the n_k-weighted mean.
#[test]
fn fedfisher_weighs_each_parameter_by_its_information() {
    let a = [1.0f32, 1.0, 1.0];
    let b = [3.0f32, 3.0, 3.0];
    let fa = [9.0f32, 1.0, 0.0];
    let fb = [1.0f32, 1.0, 0.0];
    let merged = fisher::merge(&[&a, &b], &[&fa, &fb], &[0.5, 0.5]);
    assert!((merged[0] - 1.2).abs() < 1e-6, "{merged:?}"); // (9·1 + 1·3) / 10
    assert!((merged[1] - 2.0).abs() < 1e-6, "{merged:?}");
    assert!((merged[2] - 2.0).abs() < 1e-6, "{merged:?}"); // no information: the mean
    let weighted = fisher::merge(&[&a, &b], &[&fa, &fb], &[0.25, 0.75]);
    assert!((weighted[1] - 2.5).abs() < 1e-6, "{weighted:?}");
    assert!((weighted[2] - 2.5).abs() < 1e-6, "{weighted:?}");
}

/// A network whose hidden neurons (channels and units) are shuffled computes the same
/// function; OT-Fusion aligns it back onto the pivot exactly (Singh & Jaggi 2020, §4), so
/// fusing a network with its shuffled copy gives the network.
#[test]
fn ot_fusion_recovers_a_permutation_of_neurons() {
    let arch = Architecture::new(ArchName::Cnn2, 1, 28, 10).unwrap();
    let a = Cnn::init(arch.clone(), &mut derive_rng(7, "cnn-init", 0));
    let b = Cnn {
        arch: arch.clone(),
        params: shuffled(&arch, &a.params, 8),
    };
    assert_ne!(a.params, b.params);
    let rows = squares(3, 10, 1);
    assert_eq!(a.predict(&samples(&rows)), b.predict(&samples(&rows)));
    let (aligned, moved) = ot_fusion::align(&arch, &b.params, &a.params);
    assert_eq!(aligned, a.params);
    assert!(moved > 150, "{moved} of 226 hidden neurons moved"); // 6 + 16 + 120 + 84
    assert_eq!(ot_fusion::align(&arch, &a.params, &a.params).1, 0);
    let (fused, _) = ot_fusion::fuse(&arch, &[&a.params, &b.params], &[0.5, 0.5]);
    for (f, w) in fused.iter().zip(&a.params) {
        assert!((f - w).abs() < 1e-6);
    }
    // Averaged without alignment, the two are another network.
    let plain = crate::strategy::fedavg_cnn::weighted_mean(&[&a.params, &b.params], &[0.5, 0.5]);
    assert!(
        plain
            .iter()
            .zip(&a.params)
            .any(|(p, w)| (p - w).abs() > 1e-3)
    );
}

/// `params` with every hidden layer's neurons in a random order, and the next layer's inputs
/// re-ordered to match.
fn shuffled(arch: &Architecture, params: &[f32], seed: u64) -> Vec<f32> {
    use rand::seq::SliceRandom;
    let mut rng = derive_rng(seed, "shuffle", 0);
    let mut out = params.to_vec();
    let layers: Vec<_> = arch.layers.iter().filter(|l| l.params > 0).collect();
    let mut previous: Option<Vec<usize>> = None;
    for (at, l) in layers.iter().enumerate() {
        let (span, neurons) = (l.split().0, l.neurons());
        let per = span / neurons;
        let mut order: Vec<usize> = (0..neurons).collect();
        if at + 1 < layers.len() {
            order.shuffle(&mut rng);
        }
        for (slot, &from) in order.iter().enumerate() {
            let row = &params[l.offset + from * per..][..per];
            let row: Vec<f32> = match &previous {
                None => row.to_vec(),
                Some(prev) => {
                    let block = per / prev.len();
                    prev.iter()
                        .flat_map(|&p| &row[p * block..(p + 1) * block])
                        .copied()
                        .collect()
                }
            };
            out[l.offset + slot * per..][..per].copy_from_slice(&row);
        }
        previous = Some(order);
    }
    out
}

/// Fed-OneShot: the mean of the logits decides, so one sure network outvotes two unsure ones.
#[test]
fn the_ensemble_decides_by_the_mean_of_the_logits() {
    let arch = linear(1, 2);
    let net = |w0: f32, w1: f32| Cnn {
        arch: arch.clone(),
        params: vec![w0, w1],
    };
    let sure_of_0 = net(10.0, 0.0);
    let unsure_of_1 = net(0.0, 1.0);
    let rows = [255u8];
    let s = Samples {
        pixels: &rows,
        labels: &[0],
        per: 1,
    };
    let trio = [sure_of_0.clone(), unsure_of_1.clone(), unsure_of_1.clone()];
    assert_eq!(unsure_of_1.predict(&s), [1]);
    assert_eq!(ensemble_predict(&trio, &s), [0]);
    let trio = [net(1.0, 0.0), unsure_of_1.clone(), unsure_of_1];
    assert_eq!(ensemble_predict(&trio, &s), [1]);
}

fn shard(seed: u64) -> PixelShard {
    PixelShard {
        train: squares(10, 4, seed),
        test: squares(5, 4, seed + 100),
        confidence: None,
        prefit: None,
    }
}

fn hyper(rule: OneShotRule, uploads: OneShotUploads) -> OneShotHyper {
    OneShotHyper {
        rule,
        uploads,
        ..OneShotHyper::default()
    }
}

fn server(hyper: OneShotHyper) -> OneShotServer {
    OneShotServer {
        arch: ArchName::Cnn2,
        classes: 4,
        seed: 1,
        hyper,
    }
}

/// Three clients train once and upload every statistic; every rule aggregates the same
/// uploads, the ensemble's download holds the three networks in client-id order, and a client
/// measures whichever model it is sent.
#[test]
fn every_rule_aggregates_the_same_uploads_over_its_decoder() {
    let cnn = CnnHyper {
        architecture: ArchName::Cnn2,
        local_epochs: 1,
        ..CnnHyper::default()
    };
    let every = hyper(OneShotRule::Fedavg, OneShotUploads::EveryRule);
    let needs = every.needs();
    let decoder = server(every).decoder();
    let (mut updates, mut clients) = (BTreeMap::new(), BTreeMap::new());
    let mut uploaded = Vec::new();
    for id in 1..=3u32 {
        let mut c = OneShotClient::new(cnn, needs, (784, 4), 1, 3).unwrap();
        let init = server(every).initial_download(784).unwrap();
        c.apply(1, &init).unwrap();
        let up = c
            .train(&shard(id.into()), 1, &mut derive_rng(1, "c", id))
            .unwrap();
        updates.insert(id, decoder.decode(id, 784, &up).unwrap());
        clients.insert(id, summary(10 * u64::from(id)));
        uploaded.push(up);
    }
    let Update::Statistics(first) = &updates[&1] else {
        panic!("statistics")
    };
    assert_eq!(first.fisher.len(), first.params.len());
    assert!(first.fisher.iter().any(|f| *f > 0.0));
    let rules = [
        OneShotRule::Fedavg,
        OneShotRule::Ensemble,
        OneShotRule::Regmean,
        OneShotRule::Fedfisher,
        OneShotRule::OtFusion,
    ];
    let mut downloads = Vec::new();
    for rule in rules {
        let agg = server(hyper(rule, OneShotUploads::EveryRule))
            .aggregate(1, &clients, &updates)
            .unwrap();
        let Downloads::Broadcast(p) = agg.downloads else {
            panic!("one download for all")
        };
        let per = first.params.len();
        let nets = decode_networks(&p, per, 3).unwrap();
        let want = if rule == OneShotRule::Ensemble { 3 } else { 1 };
        assert_eq!(nets.len(), want, "{rule:?}");
        if rule == OneShotRule::Ensemble {
            assert_eq!(nets[0], first.params);
        }
        let mut c = OneShotClient::new(cnn, needs, (784, 4), 1, 3).unwrap();
        c.apply(1, &p).unwrap();
        assert_eq!(c.evaluate(&shard(9)).total(), 20);
        downloads.push(nets.concat());
    }
    // RegMean and FedFisher weigh what FedAvg does not. (OT-Fusion of networks trained one
    // epoch from one initial network finds them aligned already: its matches are the identity.)
    let fedavg = &downloads[0];
    assert!(&downloads[2] != fedavg, "regmean gave fedavg's download");
    assert!(&downloads[3] != fedavg, "fedfisher gave fedavg's download");
}

/// An upload must carry exactly what the run's rule asks for.
#[test]
fn an_upload_without_the_rules_statistics_is_refused() {
    let arch = Architecture::new(ArchName::Cnn2, 1, 28, 10).unwrap();
    let plain = encode_statistics(&NetworkStatistics {
        params: vec![0.0; arch.params],
        ..NetworkStatistics::default()
    });
    let regmean = server(hyper(OneShotRule::Regmean, OneShotUploads::Rule));
    let s = OneShotServer {
        classes: 10,
        ..regmean
    };
    let e = s.decoder().decode(1, 784, &plain).unwrap_err().to_string();
    assert!(e.contains("has 0 gram entries, expected 43726"), "{e}");
    let fedavg = OneShotServer {
        classes: 10,
        ..server(hyper(OneShotRule::Fedavg, OneShotUploads::Rule))
    };
    assert!(fedavg.decoder().decode(1, 784, &plain).is_ok());
    let with_fisher = encode_statistics(&NetworkStatistics {
        params: vec![0.0; arch.params],
        fisher: vec![0.0; arch.params],
        ..NetworkStatistics::default()
    });
    let e = fedavg
        .decoder()
        .decode(1, 784, &with_fisher)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not ask for"), "{e}");
}

/// `[oneshot]` refuses what no rule can run: α outside (0, 1], a DENSE pool beyond its bound.
#[test]
fn the_section_refuses_settings_no_rule_can_run() {
    let bad = |h: OneShotHyper| h.check().unwrap_err().to_string();
    let alpha = bad(OneShotHyper {
        regmean_alpha: 0.0,
        ..OneShotHyper::default()
    });
    assert!(alpha.contains("oneshot.regmean_alpha"), "{alpha}");
    let pool = bad(OneShotHyper {
        distill_epochs: 10_000,
        synthesis_batch: 4_096,
        ..OneShotHyper::default()
    });
    assert!(pool.contains("at most 1,000,000 kept images"), "{pool}");
    assert!(OneShotHyper::default().check().is_ok());
}

/// A replay counts an every-rule upload as the replayed rule's client would have sent it: the
/// network with that rule's statistic alone, byte for byte that client's encoding.
#[test]
fn an_every_rule_upload_is_counted_as_each_rule_would_send_it() {
    use crate::strategy::contract::StrategyParams;
    let stats = |gram: usize, fisher: usize| NetworkStatistics {
        params: vec![0.5; 6],
        gram: vec![1.0; gram],
        fisher: vec![2.0; fisher],
    };
    let kept = encode_statistics(&stats(3, 6));
    for (rule, gram, fisher) in [
        (OneShotRule::Fedavg, 0, 0),
        (OneShotRule::Ensemble, 0, 0),
        (OneShotRule::Regmean, 3, 0),
        (OneShotRule::Fedfisher, 0, 6),
        (OneShotRule::OtFusion, 0, 0),
    ] {
        let spec = OneShotSpec {
            cnn: CnnHyper::default(),
            oneshot: hyper(rule, OneShotUploads::EveryRule),
        };
        let sent = spec.upload_as_sent(&kept);
        assert_eq!(sent, encode_statistics(&stats(gram, fisher)), "{rule:?}");
    }
}
