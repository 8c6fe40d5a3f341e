use std::collections::BTreeSet;

use super::plan::some;
use super::section::check_class_sets;
use super::*;
use crate::data::Dataset;

fn labels(y: Vec<u32>) -> Dataset {
    Dataset {
        features: 1,
        x: vec![0.0; y.len()],
        y,
        classes: vec!["a".into(), "b".into()],
        categorical: Vec::new(),
        feature_names: Vec::new(),
    }
}

#[test]
fn iid_covers_every_row_once_in_near_equal_parts() {
    let d = labels(vec![0; 10]);
    let parts = partition(&d, &PartitionPlan::Iid { clients: 3 }, 1).unwrap();
    assert_eq!(
        parts.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![4, 3, 3]
    );
    let mut all: Vec<usize> = parts.concat();
    all.sort();
    assert_eq!(all, (0..10).collect::<Vec<_>>());
}

#[test]
fn explicit_gives_exact_class_counts_without_overlap() {
    let d = labels(vec![0, 0, 0, 0, 1, 1, 1, 0, 1, 0]);
    let counts = vec![vec![2, 1], vec![3, 2]];
    let parts = partition(&d, &PartitionPlan::Explicit(counts), 5).unwrap();
    for (part, want) in parts.iter().zip([[2, 1], [3, 2]]) {
        let got0 = part.iter().filter(|&&i| d.y[i] == 0).count();
        assert_eq!([got0, part.len() - got0], want);
    }
    let mut all = parts.concat();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 8);
}

fn ten_classes(per_class: usize) -> Vec<u32> {
    (0..10 * per_class).map(|i| (i % 10) as u32).collect()
}

fn fractions(labels: &[u32], part: &[usize]) -> Vec<f64> {
    let mut n = [0usize; 10];
    for &i in part {
        n[labels[i] as usize] += 1;
    }
    n.iter().map(|&c| c as f64 / part.len() as f64).collect()
}

#[test]
fn apportioned_counts_sum_to_the_total() {
    assert_eq!(apportion(&[0.5, 0.5], 3), vec![2, 1]);
    assert_eq!(apportion(&[0.15, 0.15, 0.7], 10), vec![2, 1, 7]);
    assert_eq!(apportion(&[1.0, 0.0], 7), vec![7, 0]);
    assert_eq!(apportion(&[0.0, 0.0], 7), vec![0, 0]);
    let p = [0.333, 0.333, 0.334];
    assert_eq!(apportion(&p, 1500).iter().sum::<usize>(), 1500);
}

#[test]
fn dirichlet_large_alpha_is_near_uniform() {
    let labels = ten_classes(500);
    let parts = dirichlet(&labels, 10, &[10_000.0; 5], 3000, 1).unwrap();
    for part in &parts {
        assert_eq!(part.len(), 3000);
        for f in fractions(&labels, part) {
            assert!((f - 0.1).abs() < 0.02, "{f}");
        }
    }
}

/// Dirichlet(0.05·1) over 10 classes (TPFL's non-IID clients): a client's largest class
/// exceeds 50 % with probability 0.91, and on average 2.0 classes hold more than 5 % (numpy
/// simulation of 100,000 draws), against 10 classes for IID clients.
#[test]
fn dirichlet_small_alpha_concentrates_on_few_classes() {
    let labels = ten_classes(500);
    let parts = dirichlet(&labels, 10, &[0.05; 20], 1000, 2).unwrap();
    let fr: Vec<Vec<f64>> = parts.iter().map(|p| fractions(&labels, p)).collect();
    let majority = fr
        .iter()
        .filter(|f| f.iter().cloned().fold(0.0, f64::max) > 0.5)
        .count();
    assert!(
        majority >= 15,
        "{majority} of 20 clients have a majority class"
    );
    let held: f64 = fr
        .iter()
        .map(|f| f.iter().filter(|&&x| x > 0.05).count() as f64)
        .sum::<f64>()
        / 20.0;
    assert!(held < 3.0, "{held} classes above 5 % per client on average");
    // More rows of a class than it has: drawn with replacement, still from that class.
    let few = dirichlet(&ten_classes(5), 10, &[0.05], 1000, 3).unwrap();
    assert_eq!(few[0].len(), 1000);
}

#[test]
fn dirichlet_is_seeded_per_client_and_checks_its_input() {
    let labels = ten_classes(100);
    let a = dirichlet(&labels, 10, &[1.0, 1.0], 200, 7).unwrap();
    assert_eq!(a, dirichlet(&labels, 10, &[1.0, 1.0], 200, 7).unwrap());
    assert_ne!(a[0], a[1]);
    // Client 1's draw does not depend on how many clients there are.
    assert_eq!(a[0], dirichlet(&labels, 10, &[1.0], 200, 7).unwrap()[0]);
    let err = dirichlet(&labels, 10, &[0.0], 200, 7)
        .unwrap_err()
        .to_string();
    assert!(err.contains("alpha must be positive"), "{err}");
    let err = dirichlet(&[12], 10, &[1.0], 10, 7).unwrap_err().to_string();
    assert!(err.contains("label 12"), "{err}");
}

#[test]
fn fractions_cover_every_row_once_in_the_declared_shares() {
    let d = labels((0..100).map(|i| u32::from(i % 3 == 0)).collect());
    let plan = PartitionPlan::Fractions(vec![0.5, 0.3, 0.15, 0.04, 0.01]);
    let parts = partition(&d, &plan, 2).unwrap();
    assert_eq!(
        parts.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![50, 30, 15, 4, 1]
    );
    let mut all = parts.concat();
    all.sort();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    assert_eq!(parts, partition(&d, &plan, 2).unwrap());
    let tiny = PartitionPlan::Fractions(vec![0.999, 0.001]);
    let err = partition(&labels(vec![0; 10]), &tiny, 0).unwrap_err();
    assert!(err.to_string().contains("client 2 gets no row"), "{err}");
}

#[test]
fn explicit_refuses_to_overdraw_a_class() {
    let d = labels(vec![0, 1]);
    let err = partition(&d, &PartitionPlan::Explicit(vec![vec![1, 2]]), 0).unwrap_err();
    assert!(
        err.to_string()
            .contains("ask for 2 samples of class \"b\" but the data has 1"),
        "{err}"
    );
}

fn mnist_like(per_class: usize) -> Vec<u32> {
    (0..10 * per_class).map(|i| (i % 10) as u32).collect()
}

fn class_sets(parts: &[Vec<usize>], labels: &[u32]) -> Vec<std::collections::BTreeSet<u32>> {
    parts
        .iter()
        .map(|p| p.iter().map(|&i| labels[i]).collect())
        .collect()
}

/// FedTMOS §5, Hsu et al.'s Dir(α): every row of every class goes to exactly one client.
#[test]
fn dirichlet_by_class_splits_every_class_exactly_once() {
    let y = mnist_like(100);
    for alpha in [0.05, 0.3, 1000.0] {
        let parts = dirichlet_by_class(&y, 10, 10, alpha, 7).unwrap();
        let mut all: Vec<usize> = parts.concat();
        all.sort();
        assert_eq!(all, (0..y.len()).collect::<Vec<_>>(), "alpha {alpha}");
        assert_eq!(parts, dirichlet_by_class(&y, 10, 10, alpha, 7).unwrap());
    }
    // Large α: near-equal shares; small α: clients concentrate on few classes.
    let even = dirichlet_by_class(&y, 10, 10, 1000.0, 7).unwrap();
    assert!(
        even.iter().all(|p| (80..=120).contains(&p.len())),
        "{:?}",
        even.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let skewed = dirichlet_by_class(&y, 10, 10, 0.05, 7).unwrap();
    // A draw that starves a client is drawn again (NIID-Bench's rule): at least 10 rows.
    assert!(
        skewed.iter().all(|p| p.len() >= 10),
        "{:?}",
        skewed.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let mean_classes = class_sets(&skewed, &y)
        .iter()
        .map(|s| s.len())
        .sum::<usize>() as f64
        / 10.0;
    assert!(
        mean_classes < 5.0,
        "{mean_classes} classes per client at α = 0.05"
    );
}

/// The published code's variant: counts from the dataset total, so later clients starve.
#[test]
fn the_fedtmos_code_dirichlet_leaves_later_clients_empty() {
    let y = mnist_like(100);
    let parts = dirichlet_fedtmos_code(&y, 10, 10, 0.1, 3).unwrap();
    let mut all: Vec<usize> = parts.concat();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no row twice");
    assert!(
        !empty_clients(&parts).is_empty(),
        "{:?}",
        parts.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(empty_clients(&dirichlet_by_class(&y, 10, 10, 1000.0, 3).unwrap()).is_empty());
}

/// docs/papers/fedtmos.md §17: S(β) with the code's class sets, given: each client holds
/// exactly its set, and every class is split evenly over its holders.
#[test]
fn given_class_sets_are_held_exactly_and_split_evenly() {
    let y = mnist_like(60);
    let sets = vec![vec![0, 3], vec![1, 2], vec![2, 5], vec![1, 3], vec![4, 8]];
    let parts = ClassSplit::ClassSets(sets.clone())
        .split_all_served(&y, 10, 5, 9)
        .unwrap();
    for (i, got) in class_sets(&parts, &y).iter().enumerate() {
        let want: BTreeSet<u32> = sets[i].iter().copied().collect();
        assert_eq!(got, &want, "client {}", i + 1);
    }
    // Class 2 (60 rows) is held by clients 2 and 3: 30 each; class 0 by client 1 alone.
    let count = |i: usize, c: u32| parts[i].iter().filter(|&&r| y[r] == c).count();
    assert_eq!((count(1, 2), count(2, 2), count(0, 0)), (30, 30, 60));
    let bad = [
        (vec![vec![0, 0]], "class 0 twice"),
        (vec![vec![]], "gives client 1 no class"),
        (vec![vec![10]], "class 10 twice or out of the 10 classes"),
    ];
    for (sets, want) in bad {
        let e = check_class_sets(&sets, 1, 10).unwrap_err();
        assert!(e.contains(want), "{e}");
    }
    assert!(
        check_class_sets(&[vec![1]], 2, 10)
            .unwrap_err()
            .contains("1 sets for 2 clients")
    );
}

/// docs/papers/fedtmos.md §16: counts from the code's own numpy draw are taken as its
/// cumulative slices of each class's rows in file order; asking too much is refused.
#[test]
fn explicit_counts_are_the_code_slices_in_file_order() {
    let y: Vec<u32> = (0..30).map(|i| i % 3).collect();
    let counts = vec![vec![2, 0, 10], vec![3, 4, 0]];
    let parts = ClassSplit::Counts(counts.clone())
        .split_all_served(&y, 3, 2, 0)
        .unwrap();
    // Class 0 is rows 0, 3, 6, …: client 1 takes the first two, client 2 the next three.
    assert_eq!(parts[0][..2], [0, 3]);
    assert_eq!(parts[1][..3], [6, 9, 12]);
    assert_eq!(parts[1][3..], [1, 4, 7, 10]);
    assert_eq!(
        parts[0][2..],
        (0..10).map(|k| 2 + 3 * k).collect::<Vec<_>>()
    );
    let e = ClassSplit::Counts(vec![vec![6, 0, 0], vec![5, 0, 0]])
        .split(&y, 3, 2, 0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ask for 11 rows of class 0, which has 10"),
        "{e}"
    );
    let e = ClassSplit::Counts(vec![vec![usize::MAX, 0, 0], vec![2, 0, 0]])
        .split(&y, 3, 2, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more rows of class 0 than a count holds"), "{e}");
    let e = ClassSplit::Counts(vec![vec![1, 0, 0], vec![0, 0, 0]])
        .split_all_served(&y, 3, 2, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("leaves clients 2 of 2 without rows"), "{e}");
}

#[test]
fn a_long_list_of_clients_is_cut_to_ten_and_a_count() {
    assert_eq!(some(&[3, 5]), "3, 5");
    let many: Vec<usize> = (1..=25).collect();
    assert_eq!(some(&many), "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more");
    assert_eq!(ClassSplit::ClassesPerClient { beta: 2 }.to_string(), "S(2)");
    assert_eq!(
        ClassSplit::DirichletByClass { alpha: 0.3 }.to_string(),
        "Dir(0.3)"
    );
}

/// docs/papers/fedtmos.md §16: the code drops the clients its split leaves empty. With nominal
/// clients, Flint does so only when the experiment declares exactly the ones left, and names
/// the dropped ones otherwise; without, an empty client is refused.
#[test]
fn the_code_dirichlet_over_nominal_clients_keeps_exactly_the_served_ones() {
    let y = mnist_like(100);
    let parts = dirichlet_fedtmos_code(&y, 10, 10, 0.1, 3).unwrap();
    let empty = empty_clients(&parts);
    let served = 10 - empty.len();
    let split = ClassSplit::DirichletFedTmosCode {
        alpha: 0.1,
        nominal: 10,
    };
    let kept = split.split_all_served(&y, 10, served, 3).unwrap();
    let want: Vec<Vec<usize>> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    assert_eq!(kept, want);
    let e = split
        .split_all_served(&y, 10, served + 1, 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("leaves {served} of 10 nominal clients"))
            && e.contains(&format!("clients {} get none", some(&empty)))
            && e.contains(&format!("declare {served} clients")),
        "{e}"
    );
    // Drawn over the declared clients only: the empty ones are refused, with the way out.
    let without = ClassSplit::DirichletFedTmosCode {
        alpha: 0.1,
        nominal: 10,
    };
    let e = without
        .split_all_served(&y, 10, 10, 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("without rows")
            && e.contains(&format!(
                "nominal_clients = 10 and declare {served} clients"
            )),
        "{e}"
    );
}

#[test]
fn s_beta_gives_each_client_exactly_beta_classes_including_its_own() {
    let y = mnist_like(60);
    for beta in [1, 2, 3, 4] {
        let parts = classes_per_client(&y, 10, 10, beta, 5).unwrap();
        for (i, set) in class_sets(&parts, &y).iter().enumerate() {
            assert_eq!(set.len(), beta, "client {} with β = {beta}", i + 1);
            assert!(
                set.contains(&(i as u32)),
                "client {} holds its own class",
                i + 1
            );
        }
        let mut all: Vec<usize> = parts.concat();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "no row twice");
    }
    let e = classes_per_client(&y, 10, 10, 11, 5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 to 10 classes, not 11"), "{e}");
}
