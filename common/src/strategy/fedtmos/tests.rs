//! FedTMOS's steps, server, ensemble and client halves, by the paper's sections.

use std::collections::{BTreeMap, BTreeSet};

use super::super::{Downloads, RoundReport, ServerStrategy};
use crate::ClientId;
use crate::metrics::gini_index;
use crate::model::tm::composite::{CompositeOptions, Normalization};
use crate::model::tm::parts::{ClassParts, IncludeBits, TmParts, TmUpload};
use crate::model::tm::{ExcludedAt, TmHyper};
use crate::rng::derive_rng;
use crate::strategy::robust::RobustHyper;
use crate::wire::{self, TmShape, Update};
use prost::Message;

use super::*;

fn upload(classes: &[(u32, Vec<u32>, u8, u64)]) -> TmUpload {
    let counts: Vec<u64> = classes.iter().map(|c| c.3).collect();
    let classes = classes
        .iter()
        .map(|(c, w, bits, n)| {
            let up = ClassParts {
                weights: w.clone(),
                include: IncludeBits(vec![*bits]),
                samples: *n,
            };
            (*c, up)
        })
        .collect();
    TmUpload {
        parts: TmParts { classes },
        gini_index: gini_index(&counts),
    }
}

#[test]
fn the_gini_index_and_scaling_follow_section_4_2_1() {
    assert_eq!(gini_index(&[10]), 1.0);
    assert_eq!(gini_index(&[5, 5, 5, 5]), 0.25);
    assert!((gini_index(&[3, 1]) - 0.625).abs() < 1e-12);
    // x is the mean Gini index only above σ.
    assert_eq!(scale_factor(&[0.8, 0.6], 0.5), 0.7);
    assert_eq!(scale_factor(&[0.4, 0.5], 0.5), 1.0);
    // ⌊x · θ · n_c / n⌋, truncated once: 0.7 · 10 · 3/4 = 5.25 → 5; 0.7 · 3 · 3/4 = 1.575 → 1.
    assert_eq!(scale(&[10, 3, 1], 3, 4, 0.7), vec![5, 1, 0]);
}

#[test]
fn vectors_are_class_major_and_the_code_filter_drops_minority_classes() {
    let uploads = BTreeMap::from([
        (1, upload(&[(0, vec![8, 8], 1, 99), (1, vec![8, 8], 1, 1)])),
        (2, upload(&[(0, vec![4, 4], 1, 10)])),
    ]);
    let (all, x) = entries(&uploads, 0.5, false, 1);
    // Client 1's Gini index is 0.99² + 0.01² = 0.9802, client 2's 1: x = 0.9901.
    assert!((x - 0.9901).abs() < 1e-12);
    let keys: Vec<(ClientId, u32)> = all.iter().map(|e| (e.client, e.class)).collect();
    assert_eq!(keys, vec![(1, 0), (2, 0), (1, 1)]);
    // Client 1's class 1: 0.9901 · 8 · 1/100 = 0.08 → 0: the filter drops it.
    let (kept, _) = entries(&uploads, 0.5, true, 1);
    let keys: Vec<(ClientId, u32)> = kept.iter().map(|e| (e.client, e.class)).collect();
    assert_eq!(keys, vec![(1, 0), (2, 0)]);
}

/// A table's machine learns weights of a few units, which ⌊θ · n_c / n⌋ floors to
/// 0 when a class is a tenth of the rows (digits: machines with no clauses). In units of 1/R
/// they keep their ratios; the code's filter still reads whole units.
#[test]
fn a_finer_resolution_keeps_the_small_weights_of_a_small_share() {
    let ten_classes: Vec<(u32, Vec<u32>, u8, u64)> =
        (0..10).map(|c| (c, vec![9, 3, 1], 1, 10)).collect();
    let uploads = BTreeMap::from([(1, upload(&ten_classes))]);
    let (truncated, x) = entries(&uploads, 0.5, false, CODE_WEIGHT_RESOLUTION);
    assert_eq!(x, 1.0, "a Gini index of 0.1 is under σ");
    assert!(truncated.iter().all(|e| e.scaled == vec![0, 0, 0]));
    let (fine, _) = entries(&uploads, 0.5, false, 256);
    // 256 · 9 / 10 = 230.4, 256 · 3 / 10 = 76.8, 256 / 10 = 25.6.
    assert!(fine.iter().all(|e| e.scaled == vec![230, 76, 25]));
    let (filtered, _) = entries(&uploads, 0.5, true, 256);
    assert!(filtered.is_empty(), "a mean of 0.43 units floors to 0");
}

/// A server model's sums are R times its weights' units: the code's clamp to [−T, T] is then
/// [−R·T, R·T], the same clamp in the units the weights were scaled to.
#[test]
fn a_server_model_of_resolution_r_clamps_at_r_times_t() {
    let (h, tm) = hyper(false);
    let rebuild = h.rebuild(TmHyper { t: 50, ..tm }, 2);
    let bytes = IncludeBits::bytes_for(tm.clauses, h.shape(&tm, 2).literals);
    let parts = TmParts {
        classes: (0..2)
            .map(|c| {
                let part = ClassParts {
                    weights: vec![1, 1],
                    include: IncludeBits(vec![0; bytes]),
                    samples: 0,
                };
                (c, part)
            })
            .collect(),
    };
    let margin = |m: crate::model::tm::conv::ConvTm| m.hyper().t;
    assert_eq!(margin(rebuild.machine(&parts).unwrap()), 50);
    assert_eq!(margin(rebuild.server_model(&parts, 1).unwrap()), 50);
    assert_eq!(margin(rebuild.server_model(&parts, 256).unwrap()), 12_800);
    // Weights whose class sum would wrap are refused, not rebuilt.
    let mut huge = parts.clone();
    huge.classes.get_mut(&1).unwrap().weights = vec![1 << 30, 1 << 30];
    let err = rebuild.server_model(&huge, 1).unwrap_err().to_string();
    assert!(err.contains("class 1's weights add up past"), "{err}");
}

fn cluster_of(centroid: Vec<f64>, members: &[(ClientId, u32)]) -> Cluster {
    Cluster {
        centroid,
        members: members.to_vec(),
    }
}

#[test]
fn reassignment_maximizes_linkage_and_never_doubles_a_class_while_a_model_lacks_it() {
    // Algorithm 2 on hand-made clusters: class 0 in clusters at 0 and 10, class 1 at 3,
    // class 2 at 100.
    let clusters = vec![
        cluster_of(vec![0.0], &[(1, 0)]),
        cluster_of(vec![10.0], &[(2, 0)]),
        cluster_of(vec![3.0], &[(3, 1)]),
        cluster_of(vec![100.0], &[(4, 2)]),
    ];
    let plans = reassign(&clusters, 2, FillFrom::Holder);
    // Every cluster has one class; they go in index order. (1, 0) → model 0 (both empty,
    // linkage 0, the first). (2, 0) → model 1, the only one without class 0. (3, 1): model
    // 0 gives |3 − 0|² = 9, model 1 |3 − 10|² = 49 → model 1. (4, 2): model 0 gives
    // 100² = 10000, model 1 (7² + 90² + 97²)/3 ≈ 5853 → model 0.
    assert_eq!(plans[0].contributors[&0], vec![1]);
    assert_eq!(plans[1].contributors[&0], vec![2]);
    assert_eq!(plans[1].contributors[&1], vec![3]);
    let with_2: Vec<usize> = (0..2)
        .filter(|&m| plans[m].contributors.contains_key(&2))
        .collect();
    let l0 = linkage(&BTreeMap::from([(0, vec![0.0]), (2, vec![100.0])]));
    let l1 = linkage(&BTreeMap::from([
        (0, vec![10.0]),
        (1, vec![3.0]),
        (2, vec![100.0]),
    ]));
    assert_eq!(with_2, vec![if l1 > l0 { 1 } else { 0 }]);
    for plan in &plans {
        assert!(plan.means.len() >= 2, "every model holds two classes");
    }
}

#[test]
fn when_every_model_holds_the_class_it_goes_to_the_fewest_classes_then_fewest_clusters() {
    // Class 0 three times (three clusters), two models: the third copy goes where there
    // are fewer classes; both hold one class, and each took one cluster: the first wins
    // the tie, and its mean becomes the average of the two centroids.
    let clusters = vec![
        cluster_of(vec![0.0], &[(1, 0)]),
        cluster_of(vec![4.0], &[(2, 0)]),
        cluster_of(vec![8.0], &[(3, 0)]),
        cluster_of(vec![50.0], &[(4, 1)]),
    ];
    let plans = reassign(&clusters, 2, FillFrom::Holder);
    assert_eq!(plans[0].contributors[&0], vec![1, 3]);
    assert_eq!(plans[0].means[&0], vec![4.0]);
    assert_eq!(plans[1].contributors[&0], vec![2]);
}

#[test]
fn the_fill_takes_a_class_from_an_untaken_cluster_under_a_client_that_holds_it() {
    // One cluster holds classes 0 and 1 (clients 1 and 2), another class 2 (client 3). With
    // three models, model 2 ends with one class and takes another from the clusters it has
    // not taken, under the client of that cluster holding it.
    let clusters = vec![
        cluster_of(vec![0.0], &[(1, 0), (2, 1)]),
        cluster_of(vec![9.0], &[(3, 2)]),
    ];
    let plans = reassign(&clusters, 3, FillFrom::Holder);
    for plan in &plans {
        for (class, clients) in &plan.contributors {
            for &j in clients {
                let holder = clusters.iter().any(|c| c.members.contains(&(j, *class)));
                assert!(holder, "client {j} does not hold class {class}");
            }
        }
        assert!(plan.means.len() >= 2, "{plan:?}");
    }
}

#[test]
fn the_codes_fill_adds_a_class_under_the_clusters_first_client_as_zeros() {
    // docs/papers/fedtmos.md §10: the code fills under the cluster's first client whether it
    // holds the class or not. The model holds class 0 and takes class 1 from the cluster of
    // (1, 0) and (2, 1): the fixed fill names client 2, the code's client 1, who lacks it.
    let clusters = vec![cluster_of(vec![5.0], &[(1, 0), (2, 1)])];
    let mut plan = ModelPlan::default();
    plan.add(1, 0, 7, &[0.0]);
    let mut fixed = plan.clone();
    fill(&mut fixed, &clusters, FillFrom::Holder);
    assert_eq!(fixed.contributors[&1], vec![2]);
    assert!(fixed.absent.is_empty());
    fill(&mut plan, &clusters, FillFrom::ClusterFirst);
    assert_eq!(plan.contributors[&1], vec![1]);
    assert_eq!(plan.absent, BTreeSet::from([(1, 1)]));
    // Averaged, the absent contributor gives zero weights and no include bits.
    let uploads = BTreeMap::from([
        (1, upload(&[(0, vec![3, 3], 0b0001, 10)])),
        (2, upload(&[(1, vec![4, 4], 0b0010, 10)])),
    ]);
    let scaled = BTreeMap::from([((1, 0), vec![3, 3]), ((2, 1), vec![4, 4])]);
    let model = &average(
        &[plan],
        &uploads,
        &scaled,
        2,
        BitsBy::Samples,
        &RobustHyper::default(),
    )
    .unwrap()[0];
    assert_eq!(model.classes[&0].weights, vec![3, 3]);
    assert_eq!(model.classes[&1].weights, vec![0, 0]);
    // No literal, in the shape every class has, so clients can rebuild the machine.
    assert_eq!(model.classes[&1].include, IncludeBits(vec![0]));
    // A contributor the plan does not know as absent is still refused.
    let mut unknown = ModelPlan::default();
    unknown.add(1, 1, 0, &[0.0]);
    assert!(
        average(
            &[unknown],
            &uploads,
            &scaled,
            2,
            BitsBy::Samples,
            &RobustHyper::default()
        )
        .is_err()
    );
    // The key: `cluster-first` is taken, and only then written into a resolved file.
    let code = FedTmosSection {
        fill_from: FillFrom::ClusterFirst,
        ..Default::default()
    }
    .check()
    .unwrap();
    assert_eq!(code.server.fill_from, FillFrom::ClusterFirst);
    let written = |p: &FedTmosServerParams| serde_json::to_value(p).unwrap();
    assert_eq!(written(&code.server)["fill_from"], "cluster-first");
    let default = FedTmosSection::default().check().unwrap();
    assert!(written(&default.server).get("fill_from").is_none());
    let bad = toml::from_str::<FedTmosSection>("fill_from = \"first\"").unwrap_err();
    assert!(
        bad.message().contains("`holder` or `cluster-first`"),
        "{bad}"
    );
}

#[test]
fn averaging_truncates_the_mean_and_ors_the_top_two_include_bits() {
    // Algorithm 3: class 0 from clients 1, 2 and 3 with 5, 50 and 20 samples.
    let uploads = BTreeMap::from([
        (1, upload(&[(0, vec![1, 1], 0b0001, 5)])),
        (2, upload(&[(0, vec![1, 1], 0b0010, 50)])),
        (3, upload(&[(0, vec![1, 1], 0b0100, 20)])),
    ]);
    let scaled = BTreeMap::from([
        ((1, 0), vec![9, 1]),
        ((2, 0), vec![2, 2]),
        ((3, 0), vec![4, 1]),
    ]);
    let plan = ModelPlan {
        contributors: BTreeMap::from([(0, vec![1, 2, 3])]),
        ..Default::default()
    };
    let by_samples = average(
        std::slice::from_ref(&plan),
        &uploads,
        &scaled,
        2,
        BitsBy::Samples,
        &RobustHyper::default(),
    )
    .unwrap();
    let class = &by_samples[0].classes[&0];
    // (9 + 2 + 4) / 3 = 5, (1 + 2 + 1) / 3 = 1.33 → 1.
    assert_eq!(class.weights, vec![5, 1]);
    // The trimmed mean of three drops one at each end: 4 and 1.
    let trimmed = crate::strategy::robust::RobustHyper {
        rule: crate::strategy::robust::Rule::TrimmedMean,
        trim: 0.34,
        ..Default::default()
    };
    let robust = average(
        std::slice::from_ref(&plan),
        &uploads,
        &scaled,
        2,
        BitsBy::Samples,
        &trimmed.check().unwrap(),
    )
    .unwrap();
    assert_eq!(robust[0].classes[&0].weights, vec![4, 1]);
    // The most samples: clients 2 and 3.
    assert_eq!(class.include, IncludeBits(vec![0b0110]));
    // By mean scaled weight: client 1 (5), then client 3 (2.5).
    let by_weight = average(
        &[plan],
        &uploads,
        &scaled,
        2,
        BitsBy::MeanWeight,
        &RobustHyper::default(),
    )
    .unwrap();
    assert_eq!(by_weight[0].classes[&0].include, IncludeBits(vec![0b0101]));
}

#[test]
fn a_whole_aggregation_covers_every_class_in_every_model_it_can() {
    // Ten clients of two classes each over four classes, two server models.
    let mut uploads = BTreeMap::new();
    for j in 0..10u32 {
        let (a, b) = (j % 4, (j + 1) % 4);
        let w = |c: u32| (0..6).map(|i| 10 + c * 7 + i + j % 3).collect::<Vec<u32>>();
        uploads.insert(j + 1, upload(&[(a, w(a), 1, 30), (b, w(b), 2, 10)]));
    }
    let params = FedTmosServerParams {
        models: 2,
        sigma: 0.5,
        k_max: 5,
        top_k: 2,
        bits_by: BitsBy::Samples,
        filter: false,
        weight_resolution: 1,
        fill_from: FillFrom::Holder,
    };
    let steps = server_steps(
        &uploads,
        &params,
        &RobustHyper::default(),
        &mut derive_rng(1, "fedtmos", 0),
    )
    .unwrap();
    let (models, plans, x) = (steps.models.clone(), steps.plans, steps.scale);
    assert!((x - 0.625).abs() < 1e-12, "every client's Gini is 0.625");
    assert_eq!(models.len(), 2);
    let covered: BTreeSet<u32> = models
        .iter()
        .flat_map(|m| m.classes.keys().copied())
        .collect();
    assert_eq!(covered, BTreeSet::from([0, 1, 2, 3]));
    for (m, p) in models.iter().zip(&plans) {
        assert_eq!(
            m.classes.keys().collect::<Vec<_>>(),
            p.contributors.keys().collect::<Vec<_>>()
        );
        assert!(m.classes.values().all(|c| c.weights.len() == 6));
    }
    // The same seed gives the same models.
    let again = server_steps(
        &uploads,
        &params,
        &RobustHyper::default(),
        &mut derive_rng(1, "fedtmos", 0),
    )
    .unwrap();
    assert_eq!(again.models, models);
}

#[test]
fn the_paper_code_preset_sets_the_codes_defaults_and_keys_still_override() {
    let code = FedTmosSection {
        preset: Preset::PaperCode,
        ..Default::default()
    }
    .check()
    .unwrap();
    assert_eq!(code.server.bits_by, BitsBy::MeanWeight);
    assert!(code.server.filter);
    assert_eq!(code.composite, CompositeOptions::CODE);
    assert_eq!(code.excluded_at, ExcludedAt::Zero);
    let paper = FedTmosSection {
        preset: Preset::Paper,
        ..Default::default()
    }
    .check()
    .unwrap();
    assert_eq!(paper.server.bits_by, BitsBy::Samples);
    assert!(!paper.server.filter);
    assert_eq!(paper.composite, CompositeOptions::default());
    assert_eq!(paper.excluded_at, ExcludedAt::LastExclude);
    let mixed = FedTmosSection {
        preset: Preset::PaperCode,
        filter: Some(false),
        ..Default::default()
    }
    .check()
    .unwrap();
    assert!(!mixed.server.filter);
    let e = toml::from_str::<FedTmosSection>("preset = \"code\"").unwrap_err();
    assert!(
        e.message().contains("`recommended`, `paper`, `paper-code`"),
        "{e}"
    );
}

/// `epoch_order`: shuffled by default and in every preset, unwritten unless set (so older
/// runs' fingerprints hold), and `by-class` refused beside `class_streams` (one stream only).
#[test]
fn epoch_order_is_shuffled_unless_asked_and_not_with_class_streams() {
    for preset in [Preset::Recommended, Preset::Paper, Preset::PaperCode] {
        let h = FedTmosSection {
            preset,
            ..Default::default()
        };
        assert_eq!(h.check().unwrap().epoch_order, EpochOrder::Shuffled);
        assert!(!toml::to_string(&h).unwrap().contains("epoch_order"));
    }
    let by_class: FedTmosSection = toml::from_str("epoch_order = \"by-class\"").unwrap();
    assert_eq!(by_class.check().unwrap().epoch_order, EpochOrder::ByClass);
    assert!(
        toml::to_string(&by_class)
            .unwrap()
            .contains("epoch_order = \"by-class\"")
    );
    let both = FedTmosSection {
        class_streams: true,
        ..by_class
    };
    let e = both.check().unwrap_err().to_string();
    assert!(
        e.contains("fedtmos.epoch_order") && e.contains("class_streams"),
        "{e}"
    );
    let two: FedTmosSection = toml::from_str("epoch_order = \"by-class-two-threads\"").unwrap();
    assert_eq!(
        two.check().unwrap().epoch_order,
        EpochOrder::ByClassTwoThreads
    );
}

/// `train_locally` trains in the run's `epoch_order` (the leak's `prefit` goes through the same
/// `FedTmosHyper::fit_epoch`): the same machine as the matching `ConvTm` epoch, `local_epochs`
/// times.
#[test]
fn local_training_follows_the_epoch_order() {
    use crate::data::booleanize::BitRows;
    use crate::model::tm::FeedbackMasks;
    use crate::model::tm::conv::ConvTm;
    use rand::RngExt;
    let mut r = derive_rng(3, "epoch-order", 0);
    let mut data = BitRows::new(6, 2);
    for _ in 0..200 {
        let bits: Vec<bool> = (0..6).map(|_| r.random_bool(0.5)).collect();
        let label = u32::from(bits[0] && bits[1]);
        data.push(&bits, label);
    }
    let tm = crate::model::tm::testing::hyper(10, 8, 3.0);
    for order in [
        EpochOrder::Shuffled,
        EpochOrder::ByClass,
        EpochOrder::ByClassTwoThreads,
    ] {
        let mut hyper = FedTmosSection {
            epoch_order: order,
            local_epochs: 2,
            ..Default::default()
        }
        .check()
        .unwrap();
        hyper.table_bits = Some(6);
        let fresh = || {
            let mut rng = derive_rng(4, "epoch-order-fit", 0);
            let masks = FeedbackMasks::new(3.0, &mut rng);
            let machine = ConvTm::new(tm, hyper.patch_spec(), 2).unwrap();
            (machine, masks, rng)
        };
        let (mut got, mut masks, mut rng) = fresh();
        hyper.train_locally(&mut got, &data, &mut masks, &mut rng);
        let (mut want, mut masks, mut rng) = fresh();
        for _ in 0..2 {
            match order {
                EpochOrder::Shuffled => want.fit_epoch(&data, &mut masks, &mut rng),
                EpochOrder::ByClass => want.fit_epoch_by_class(&data, &mut masks, &mut rng, 1),
                EpochOrder::ByClassTwoThreads => {
                    want.fit_epoch_by_class(&data, &mut masks, &mut rng, 2)
                }
            }
        }
        let (a, b) = (got.multiclass().unwrap(), want.multiclass().unwrap());
        for c in 0..2 {
            assert_eq!(a.include_bits(c), b.include_bits(c), "{order:?}");
            assert_eq!(a.class_weights(c), b.class_weights(c), "{order:?}");
        }
    }
}

/// What each preset decides, pinned; the default is `recommended`, the paper's
/// reading with the largest holder's include bits (docs/RESULTS.md, "FedTMOS's presets").
#[test]
fn each_preset_decides_its_settings() {
    let decided = |preset: Preset| {
        let h = FedTmosSection {
            preset,
            ..Default::default()
        }
        .check()
        .unwrap();
        let s = h.server;
        (
            (s.top_k, s.bits_by, s.filter, s.weight_resolution),
            (h.composite, h.excluded_at),
            (s.models, s.sigma, s.k_max, s.fill_from),
        )
    };
    let paper_server = (4, 0.5, 30, FillFrom::Holder);
    assert_eq!(FedTmosSection::default().preset, Preset::Recommended);
    assert_eq!(
        decided(Preset::Recommended),
        (
            (1, BitsBy::Samples, false, 1),
            (CompositeOptions::default(), ExcludedAt::LastExclude),
            paper_server
        )
    );
    assert_eq!(
        decided(Preset::Paper),
        (
            (2, BitsBy::Samples, false, 1),
            (CompositeOptions::default(), ExcludedAt::LastExclude),
            paper_server
        )
    );
    assert_eq!(
        decided(Preset::PaperCode),
        (
            (2, BitsBy::MeanWeight, true, 1),
            (CompositeOptions::CODE, ExcludedAt::Zero),
            paper_server
        )
    );
    let eq_3 = CompositeOptions::default();
    assert_eq!(
        (eq_3.normalization, eq_3.clamp),
        (Normalization::PerSample, false)
    );
    let code = CompositeOptions::CODE;
    assert_eq!(
        (code.normalization, code.clamp),
        (Normalization::PerBatch, true)
    );
}

fn shape() -> TmShape {
    let (h, tm) = hyper(false);
    h.shape(&tm, 4)
}

/// Three clients' uploads in the shape of 2 clauses over 1×1 patches of 28×28 images.
fn updates() -> BTreeMap<ClientId, Update> {
    let bytes = IncludeBits::bytes_for(2, shape().literals);
    let up = |classes: &[(u32, Vec<u32>, u8, u64)]| {
        let mut u = upload(classes);
        u.parts
            .classes
            .values_mut()
            .for_each(|c| c.include.0.resize(bytes, 0));
        Update::Tm(u)
    };
    BTreeMap::from([
        (
            1,
            up(&[(0, vec![3, 1], 0b0011, 7), (2, vec![5, 5], 0b0101, 3)]),
        ),
        (
            2,
            up(&[(1, vec![2, 8], 0b1010, 4), (3, vec![1, 4], 0b0001, 4)]),
        ),
        (
            3,
            up(&[(0, vec![6, 2], 0b1100, 9), (3, vec![2, 2], 0b0110, 1)]),
        ),
    ])
}

fn hyper(baselines: bool) -> (FedTmosHyper, TmHyper) {
    let section = FedTmosSection {
        models: 2,
        k_max: 3,
        patch: 1,
        baselines,
        ..Default::default()
    };
    let tm = crate::model::tm::TmHyper {
        clauses: 2,
        ..Default::default()
    };
    (section.check().unwrap(), tm.check().unwrap())
}

/// The ensemble baseline (docs/papers/fedtmos.md §14): every client's machine as it uploaded it,
/// unscaled, in client-id order, without its counts.
#[test]
fn the_ensemble_sends_every_clients_own_machine_unscaled_without_counts() {
    let (h, tm) = hyper(false);
    let mut server = EnsembleServer::new(h, &tm, 4);
    let agg = server.aggregate(1, &BTreeMap::new(), &updates()).unwrap();
    let Downloads::Broadcast(p) = &agg.downloads else {
        panic!("one download for all");
    };
    let d = wire::decode_tm_composite(p, shape(), 3, 0).unwrap();
    assert_eq!(d.models.len(), 3);
    let Update::Tm(first) = &updates()[&1] else {
        unreachable!()
    };
    assert_eq!(
        d.models[0].classes[&0].weights,
        first.parts.classes[&0].weights
    );
    assert_eq!(
        d.models[0].classes[&2].include,
        first.parts.classes[&2].include
    );
    assert!(
        d.models
            .iter()
            .flat_map(|m| m.classes.values())
            .all(|c| c.samples == 0)
    );
    assert_eq!(
        agg.report,
        RoundReport::of(&EnsembleRound {
            clients: vec![1, 2, 3]
        })
    );
}

#[test]
fn with_baselines_the_fedtmos_download_also_carries_the_clients_machines() {
    let mut sizes = Vec::new();
    for baselines in [false, true] {
        let (h, tm) = hyper(baselines);
        let mut server = FedTmosServer::new(h, &tm, 4, 7);
        let agg = server.aggregate(1, &BTreeMap::new(), &updates()).unwrap();
        let Downloads::Broadcast(p) = &agg.downloads else {
            panic!("one download for all");
        };
        let d = wire::decode_tm_composite(p, shape(), 2, 3).unwrap();
        let report = agg.report.details::<FedTmosRound>().unwrap().clone();
        assert_eq!(
            report.composite_bytes + report.ensemble_bytes,
            p.encoded_len() as u64
        );
        let ids: Vec<ClientId> = d.ensemble.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, if baselines { vec![1, 2, 3] } else { vec![] });
        sizes.push((d.models, report.composite_bytes));
    }
    assert_eq!(sizes[0], sizes[1], "the server models do not change");
}
