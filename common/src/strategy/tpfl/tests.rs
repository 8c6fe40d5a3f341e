//! TPFL's winner, clustering, server and client halves, by the paper's algorithms.

use std::collections::BTreeMap;

use super::*;
use crate::data::booleanize::BitRows;
use crate::data::images::BitShard;
use crate::rng::{FlintRng, derive_rng};
use crate::strategy::robust::RobustHyper;
use crate::strategy::{ClientStrategy, Downloads, ServerStrategy, StrategyState};
use crate::wire::proto::Payload;
use crate::wire::{self, Update, WeightCoding, WinnerUpload};
use crate::{ClientId, FlintError, Round};

#[test]
fn the_winner_is_the_most_confident_class_lowest_on_a_tie() {
    assert_eq!(confidence_winner(&[3, -2, 7, 7]), Some((2, 7)));
    assert_eq!(confidence_winner(&[-5, -1, -3]), Some((1, -1)));
    assert_eq!(confidence_winner(&[]), None);
}

fn uploads(v: &[(ClientId, u32, Vec<i32>)]) -> BTreeMap<ClientId, (u32, Vec<i32>)> {
    v.iter().map(|(id, c, w)| (*id, (*c, w.clone()))).collect()
}

#[test]
fn clients_cluster_by_winning_class_and_get_their_clusters_mean() {
    // Algorithm 2 on hand-made uploads: clients 1 and 3 won class 0, client 2 alone won
    // class 4 (a cluster of one), nobody won the other classes (empty clusters).
    let mut previous = BTreeMap::new();
    let u = uploads(&[
        (1, 0, vec![2, -4, 1]),
        (2, 4, vec![5, 5, -5]),
        (3, 0, vec![4, 0, 2]),
    ]);
    let c = cluster(
        &u,
        &mut previous,
        ClusterMean::Members,
        &RobustHyper::default(),
    )
    .unwrap();
    assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![0, 4]);
    assert_eq!(c[&0].members, vec![1, 3]);
    assert_eq!(c[&0].mean, vec![3.0, -2.0, 1.5]);
    assert_eq!(c[&4].members, vec![2]);
    assert_eq!(c[&4].mean, vec![5.0, 5.0, -5.0]);
    assert_eq!(previous.len(), 2);
}

/// A cluster's members combined by the median, the previous aggregate counted
/// as one more row under the code's variant; one member far out moves nothing.
#[test]
fn a_cluster_under_the_median_ignores_its_outlier() {
    let median = RobustHyper {
        rule: crate::strategy::robust::Rule::Median,
        ..Default::default()
    };
    let u = uploads(&[
        (1, 0, vec![2, -4]),
        (2, 0, vec![3, -3]),
        (3, 0, vec![900, 900]),
    ]);
    let c = cluster(&u, &mut BTreeMap::new(), ClusterMean::Members, &median).unwrap();
    assert_eq!(c[&0].mean, vec![3.0, -3.0]);
    let mut previous = BTreeMap::from([(0, vec![2.0, -4.0])]);
    let c = cluster(&u, &mut previous, ClusterMean::WithPrevious, &median).unwrap();
    assert_eq!(
        c[&0].mean,
        vec![2.5, -3.5],
        "four rows: the two middle ones' mean"
    );
}

#[test]
fn a_client_whose_winner_changes_moves_cluster_and_the_code_variant_remembers() {
    let mut previous = BTreeMap::new();
    let r1 = uploads(&[(1, 0, vec![2, 2]), (2, 1, vec![6, 0])]);
    cluster(
        &r1,
        &mut previous,
        ClusterMean::WithPrevious,
        &RobustHyper::default(),
    )
    .unwrap();
    // Round 2: client 1 now wins class 1 and joins client 2's cluster; class 0 is empty.
    let r2 = uploads(&[(1, 1, vec![0, 3]), (2, 1, vec![3, 3])]);
    let c = cluster(
        &r2,
        &mut previous,
        ClusterMean::WithPrevious,
        &RobustHyper::default(),
    )
    .unwrap();
    assert_eq!(c.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(c[&1].members, vec![1, 2]);
    // (0 + 3 + previous 6) / 3, (3 + 3 + previous 0) / 3.
    assert_eq!(c[&1].mean, vec![3.0, 2.0]);
    // The empty cluster keeps its aggregate for a later round.
    assert_eq!(previous[&0], vec![2.0, 2.0]);
    let mut fresh = BTreeMap::new();
    let paper = cluster(
        &r2,
        &mut fresh,
        ClusterMean::Members,
        &RobustHyper::default(),
    )
    .unwrap();
    assert_eq!(paper[&1].mean, vec![1.5, 3.0]);
}

#[test]
fn vectors_of_different_lengths_in_one_cluster_are_refused() {
    let u = uploads(&[(1, 0, vec![1, 2]), (2, 0, vec![1])]);
    let e = cluster(
        &u,
        &mut BTreeMap::new(),
        ClusterMean::Members,
        &RobustHyper::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("client 2 sent 1 weights for class 0"), "{e}");
}

#[test]
fn rounding_back_to_integer_weights() {
    let m = [1.5, -1.5, 2.4, -2.6];
    assert_eq!(to_weights(&m, Rounding::Nearest), vec![2, -2, 2, -3]);
    assert_eq!(to_weights(&m, Rounding::Truncate), vec![1, -1, 2, -2]);
}

fn hyper() -> TpflHyper {
    TpflHyper::default().check().unwrap()
}

fn winner(class: u32, weights: Vec<i32>, base: Round) -> Payload {
    let upload = WinnerUpload {
        class,
        confidence: 10.0,
        weights,
        delta_base_round: base,
    };
    wire::encode_winner(&upload, WeightCoding::Varint)
}

/// Decoded as the server decodes every upload.
fn decoded(s: &TpflServer, updates: Vec<(ClientId, Payload)>) -> BTreeMap<ClientId, Update> {
    updates
        .into_iter()
        .map(|(id, p)| (id, s.decode(id, 784, &p).unwrap()))
        .collect()
}

/// What `s` sent client `id`, read as the client reads it.
fn sent(s: &TpflServer, d: &Downloads, id: ClientId) -> Option<(u32, Vec<i32>)> {
    let p = d.for_client(id)?;
    Some(wire::decode_class_weights(p, s.classes, s.clauses).unwrap())
}

/// Algorithm 2, last step: each client gets exactly its cluster's average, and only it.
#[test]
fn the_personalised_download_reaches_exactly_its_clusters_members() {
    let mut s = TpflServer::new(3, 4, hyper());
    let updates = decoded(
        &s,
        vec![
            (1, winner(2, vec![1, 2, 3, 4], 0)),
            (2, winner(0, vec![9, 9, 9, 9], 0)),
            (3, winner(2, vec![3, 2, 1, -4], 0)),
            (5, winner(2, vec![2, 5, 2, 3], 0)),
        ],
    );
    let agg = s.aggregate(1, &BTreeMap::new(), &updates).unwrap();
    // Cluster 2 = {1, 3, 5}: mean (2, 3, 2, 1); cluster 0 = {2}, a cluster of one.
    for id in [1, 3, 5] {
        assert_eq!(sent(&s, &agg.downloads, id), Some((2, vec![2, 3, 2, 1])));
    }
    assert_eq!(sent(&s, &agg.downloads, 2), Some((0, vec![9, 9, 9, 9])));
    // A client that sent nothing (4) gets nothing; class 1 had no winner, so no cluster.
    assert_eq!(sent(&s, &agg.downloads, 4), None);
    let report = agg.report.details::<TpflRound>().unwrap();
    assert_eq!(
        report.clusters,
        BTreeMap::from([(0, vec![2]), (2, vec![1, 3, 5])])
    );
    assert_eq!(report.cluster_count(), 2);
    assert_eq!(report.paper_download_bytes, 2 * 8 * 4);
    assert_eq!(agg.weights[&3], 1.0 / 3.0);
}

/// A server of 3 classes and 2 clauses taking deltas.
fn delta_server() -> TpflServer {
    let h = TpflHyper {
        delta: true,
        ..hyper()
    };
    TpflServer::new(3, 2, h)
}

#[test]
fn a_delta_upload_is_rebuilt_from_what_that_client_was_sent() {
    let mut s = delta_server();
    let r1 = decoded(&s, vec![(1, winner(1, vec![4, 6], 0))]);
    s.aggregate(1, &BTreeMap::new(), &r1).unwrap();
    // Client 1 now holds (4, 6) for class 1 and trained it to (7, 5): it sends (3, -1).
    let delta = winner(1, vec![3, -1], 1);
    let r2 = decoded(&s, vec![(1, delta)]);
    let agg = s.aggregate(2, &BTreeMap::new(), &r2).unwrap();
    assert_eq!(sent(&s, &agg.downloads, 1), Some((1, vec![7, 5])));
    // No base: another client, another class, or a round that sent it nothing.
    for (client, p, held) in [
        (2, winner(1, vec![0, 0], 1), "none"),
        (1, winner(0, vec![0, 0], 1), "none"),
        (1, winner(1, vec![0, 0], 5), "of round 2"),
    ] {
        let e = s.decode(client, 784, &p).unwrap_err();
        assert!(matches!(e, FlintError::NoBase(_)), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("is {held}: send the weights themselves")),
            "{e}"
        );
    }
    // Only the last vector sent is kept: round 1's went with round 2's.
    let e = s.decode(1, 784, &winner(1, vec![0, 0], 1)).unwrap_err();
    assert!(e.to_string().contains("is of round 2"), "{e}");
    let state: TpflState = s.snapshot().expect("tpfl").unwrap();
    assert_eq!(state.sent.len(), 1);
}

/// A state written when every vector sent was kept restores with the last of each.
#[test]
fn an_older_state_keeping_every_vector_restores_the_last_as_base() {
    let mut s = delta_server();
    let vector = |round, weights| SentVector {
        client: 1,
        class: 1,
        round,
        weights,
    };
    let state = TpflState {
        previous: Vec::new(),
        sent: vec![vector(2, vec![7, 5]), vector(1, vec![4, 6])],
        privacy: None,
    };
    s.restore(StrategyState::of(&state)).unwrap();
    let Update::Winner(w) = s.decode(1, 784, &winner(1, vec![1, 1], 2)).unwrap() else {
        panic!("a winner");
    };
    assert_eq!(w.weights, vec![8, 6]);
    assert!(s.decode(1, 784, &winner(1, vec![1, 1], 1)).is_err());
}

/// The shell takes a strategy's decoder once, at the start: it must see the bases sent by
/// every later aggregation, and those a restarted server restores.
#[test]
fn a_decoder_taken_before_the_rounds_sees_every_base_sent_since() {
    let mut s = delta_server();
    let early = s.decoder();
    let r1 = decoded(&s, vec![(1, winner(1, vec![4, 6], 0))]);
    s.aggregate(1, &BTreeMap::new(), &r1).unwrap();
    let delta = winner(1, vec![3, -1], 1);
    let Update::Winner(w) = early.decode(1, 784, &delta).unwrap() else {
        panic!("a winner");
    };
    assert_eq!(w.weights, vec![7, 5]);
    let mut restarted = delta_server();
    let fresh = restarted.decoder();
    assert!(fresh.decode(1, 784, &delta).is_err(), "no base yet");
    restarted.restore(s.snapshot()).unwrap();
    assert_eq!(fresh.decode(1, 784, &delta).unwrap(), Update::Winner(w));
}

#[test]
fn malformed_winners_are_refused_with_the_reason() {
    use crate::wire::proto::payload::Kind;
    let s = TpflServer::new(3, 2, hyper());
    let mut mismatched = winner(1, vec![1, 1], 0);
    if let Some(Kind::ConfidenceWinner(w)) = &mut mismatched.kind {
        w.weights.as_mut().unwrap().class_index = 2;
    }
    let with_confidence = |confidence: f64| {
        let mut p = winner(1, vec![1, 1], 0);
        if let Some(Kind::ConfidenceWinner(w)) = &mut p.kind {
            w.confidence = confidence;
        }
        p
    };
    let nan = with_confidence(f64::NAN);
    // Weights (1, 1) over at most 15,000 rows: a row's class sum is at most 2.
    let rows = hyper().confidence_samples as f64;
    assert!(s.decode(1, 784, &with_confidence(-2.0 * rows)).is_ok());
    let cases = [
        (winner(3, vec![1, 1], 0), "class 3 of 3 classes"),
        (
            winner(1, vec![1, 1, 1], 0),
            "3 weights for class 1, expected one per clause (2)",
        ),
        (mismatched, "class 1 with the weights of class 2"),
        (nan, "confidence NaN is not finite"),
        (
            with_confidence(-1e308),
            "confidence -1e308 is not a sum of class sums",
        ),
        (with_confidence(2.0 * rows + 1.0), "over at most 15000 rows"),
        (with_confidence(0.5), "is not a sum of class sums"),
        (
            wire::encode_class_weights(1, &[1, 1], WeightCoding::Varint),
            "expected a confidence_winner",
        ),
    ];
    for (p, want) in cases {
        let e = s.decode(1, 784, &p).unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}

/// Three classes; class c sets bit c, plus nine random bits.
fn one_hot(n: usize, rng: &mut FlintRng) -> BitRows {
    use rand::RngExt;
    let mut rows = BitRows::new(12, 3);
    for i in 0..n {
        let c = (i % 3) as u32;
        let mut bits: Vec<bool> = (0..12).map(|_| rng.random::<bool>()).collect();
        for (b, bit) in bits.iter_mut().take(3).enumerate() {
            *bit = b as u32 == c;
        }
        rows.push(&bits, c);
    }
    rows
}

fn client(delta: bool) -> TpflClient {
    let tm = crate::model::tm::testing::hyper(20, 15, 3.0);
    let h = TpflHyper {
        local_epochs: 3,
        delta,
        ..hyper()
    };
    TpflClient::new(tm, h, 12, 3, 7, 1)
}

#[test]
fn a_client_uploads_its_most_confident_class_and_applies_only_that_class() {
    let mut rng = derive_rng(3, "test", 0);
    let all = one_hot(600, &mut rng);
    // The confidence split holds class 2 only, so the client is surest of class 2.
    let only_2: Vec<usize> = (0..all.len()).filter(|&i| all.labels[i] == 2).collect();
    let shard = BitShard {
        train: all.clone(),
        test: all.clone(),
        confidence: Some(all.select(&only_2)),
        prefit: None,
    };
    let mut c = client(false);
    let up = c.train(&shard, 1, &mut rng).unwrap();
    let w = wire::decode_winner(&up, 3, 20).unwrap();
    let conf = c.machine().confidence(shard.confidence.as_ref().unwrap());
    assert_eq!(
        Some((w.class, w.confidence as i64)),
        confidence_winner(&conf)
    );
    assert_eq!(w.class, 2);
    assert_eq!(w.weights, c.machine().class_weights(2));
    assert!(c.evaluate(&shard).metrics().accuracy > 0.9);
    let before: Vec<Vec<i32>> = (0..3)
        .map(|k| c.machine().class_weights(k).to_vec())
        .collect();
    c.apply(
        1,
        &wire::encode_class_weights(2, &[5; 20], WeightCoding::Arithmetic),
    )
    .unwrap();
    assert_eq!(c.machine().class_weights(2), &[5; 20][..]);
    assert_eq!(c.machine().class_weights(0), &before[0][..]);
    assert_eq!(c.machine().class_weights(1), &before[1][..]);
    let e = c
        .apply(
            2,
            &wire::encode_class_weights(2, &[5; 19], WeightCoding::Varint),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("19 weights for class 2, expected one per clause (20)"),
        "{e}"
    );
    let e = c
        .apply(
            2,
            &wire::encode_class_weights(2, &[5; 19], WeightCoding::Arithmetic),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("download: coded weights of class 2"), "{e}");
}

#[test]
fn with_delta_a_client_sends_its_weights_minus_what_it_received() {
    let mut rng = derive_rng(4, "test", 0);
    let all = one_hot(300, &mut rng);
    let only_2: Vec<usize> = (0..all.len()).filter(|&i| all.labels[i] == 2).collect();
    let shard = BitShard {
        train: all.clone(),
        test: all.clone(),
        confidence: Some(all.select(&only_2)),
        prefit: None,
    };
    let mut c = client(true);
    let first = c.train(&shard, 1, &mut rng).unwrap();
    let w1 = wire::decode_winner(&first, 3, 20).unwrap();
    assert_eq!(w1.class, 2);
    assert_eq!(
        w1.delta_base_round, 0,
        "nothing received yet: absolute weights"
    );
    // The server sends back the client's own vector (a cluster of one).
    let base = w1.weights;
    c.apply(
        1,
        &wire::encode_class_weights(2, &base, WeightCoding::Arithmetic),
    )
    .unwrap();
    let second = c.train(&shard, 2, &mut rng).unwrap();
    let w2 = wire::decode_winner(&second, 3, 20).unwrap();
    assert_eq!((w2.class, w2.delta_base_round), (2, 1));
    let rebuilt: Vec<i32> = base.iter().zip(&w2.weights).map(|(b, d)| b + d).collect();
    assert_eq!(rebuilt, c.machine().class_weights(2));
    assert_ne!(rebuilt, base, "training moved the weights");
    // Refused for want of its base, the delta goes again as the weights themselves.
    let whole = wire::decode_winner(&c.without_base(&second).unwrap(), 3, 20).unwrap();
    assert_eq!((whole.class, whole.delta_base_round), (2, 0));
    assert_eq!(whole.weights, rebuilt);
    assert_eq!(whole.confidence, w2.confidence);
    assert!(c.without_base(&first).is_none(), "no delta");
}

/// Central `[dp]` per cluster: each member's change from its class's previous aggregate (zero
/// before the first) is clipped, and each cluster's mean gets noise of std
/// `noise_multiplier × clip / members`; every member spends one round of the accountant's.
#[test]
fn each_clusters_mean_is_clipped_and_noised_at_its_own_weight() {
    use crate::strategy::privacy::{Accountant, DpHyper, Mechanism, PrivateMean};
    let dp = DpHyper {
        mechanism: Mechanism::Central,
        clip: Some(1.0),
        noise_multiplier: 0.5,
        delta: 1e-5,
    }
    .check()
    .unwrap();
    let len = 20_000;
    let uploads: BTreeMap<ClientId, (u32, Vec<i32>)> = [
        (1, (0, vec![3; len])),
        (2, (0, vec![0; len])),
        (3, (2, vec![0; len])),
    ]
    .into();
    let mut previous = BTreeMap::new();
    let mut privacy = PrivateMean::new(dp, 9);
    let (clusters, spent) = super::private::private_clusters(
        1,
        &uploads,
        &mut previous,
        ClusterMean::Members,
        &mut privacy,
    )
    .unwrap();
    assert_eq!(
        spent.clipped,
        Some(1),
        "only client 1's change is over the clip"
    );
    assert_eq!(
        spent.noise_std, 0.5,
        "the lone member's cluster: 0.5 × 1 / 1"
    );
    assert_eq!(spent.epsilon, Accountant::new(dp).spent(1).unwrap().1);
    let std_of = |values: &[f64], clean: f64| {
        let n = values.len() as f64;
        (values.iter().map(|v| (v - clean).powi(2)).sum::<f64>() / n).sqrt()
    };
    // Client 1's change clipped to norm 1, over 2 members; noise 0.5 × 1 / 2.
    let clean = 0.5 / (len as f64).sqrt();
    let s0 = std_of(&clusters[&0].mean, clean);
    assert!((s0 / 0.25 - 1.0).abs() < 0.03, "{s0}");
    let s2 = std_of(&clusters[&2].mean, 0.0);
    assert!((s2 / 0.5 - 1.0).abs() < 0.03, "{s2}");
    assert_eq!(clusters[&0].members, vec![1, 2]);
    assert_eq!(previous[&0], clusters[&0].mean, "the next round's base");
}

/// Local `[dp]` on a TPFL client: the winner's weights leave as the base (the class's initial
/// weights, from the seed, before any download; the download after one) plus the change
/// clipped to `clip` and noised at `noise_multiplier × clip`, rounded to integers.
#[test]
fn a_local_dp_client_sends_its_base_plus_a_clipped_noised_change() {
    use crate::strategy::privacy::{DpHyper, Mechanism};
    let dp = |z: f64| DpHyper {
        mechanism: Mechanism::Local,
        clip: Some(3.0),
        noise_multiplier: z,
        delta: 1e-5,
    };
    let base: Vec<i32> = client(false).machine().class_weights(1).to_vec();
    let own: Vec<i32> = base.iter().map(|w| w + 40).collect();
    let mut rng = derive_rng(1, "test", 0);
    // No noise to speak of: the change of norm 40 √20 is cut to 3, spread evenly.
    let quiet = client(false).with_dp(dp(1e-9));
    let sent = quiet.privatized(1, &own, 1, &mut rng).unwrap();
    let step = (3.0 / (20f64).sqrt()).round() as i32;
    assert!(
        sent.iter().zip(&base).all(|(s, b)| s - b == step),
        "{sent:?}"
    );
    // After a download the change is measured from it.
    let mut downloaded = client(false).with_dp(dp(1e-9));
    let received = vec![100; 20];
    downloaded
        .apply(
            2,
            &wire::encode_class_weights(1, &received, WeightCoding::Varint),
        )
        .unwrap();
    let sent = downloaded.privatized(1, &received, 3, &mut rng).unwrap();
    assert_eq!(sent, received, "no change, nothing but the noise");
    // A client without local noise sends its weights as they are.
    assert_eq!(client(false).privatized(1, &own, 1, &mut rng).unwrap(), own);
}
