//! Blind FL of FCMs end to end (Blind FL, "Federated learning for FCMs"): a server and five
//! clients as real processes on loopback, on the built-in synthetic data.

mod support;

use support::*;

fn fcm_experiment(name: &str, strategy: &str, rounds: u32, extra: &str) -> String {
    let mut s = format!(
        "name = \"{name}\"\nstrategy = \"{strategy}\"\nseed = 5\nrounds = {rounds}\n{extra}\n\
         [data]\nsource = \"synthetic\"\nsamples = 600\nfeatures = 4\nseparation = 4.0\nscaling = \"local-minmax\"\n\n\
         [fcm]\naggregation = \"accuracy\"\n\n[pso]\nswarm = 10\niterations = 10\n\n\
         [partition]\nkind = \"fractions\"\n"
    );
    for (i, f) in [0.4, 0.3, 0.1, 0.1, 0.1].iter().enumerate() {
        s += &format!("\n[[clients]]\nname = \"p{}\"\nfraction = {f}\n", i + 1);
    }
    s
}

/// Step 1: the server sends no initial model, so round 0's download holds no matrix; every
/// later round's does. Uploads carry the 4 + 2 = 6 concept matrix (36 floats) and the client's
/// metrics, which the results keep as the before-federation figures.
#[test]
fn round_one_carries_no_download_and_later_rounds_do() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "blind.toml",
        &fcm_experiment("blind", "blended-fcm", 3, ""),
    );
    ok(flint()
        .args(["run", "--clients-per-process", "5", "--runs-dir"])
        .arg(dir.path().join("runs"))
        .arg(&exp));
    let r = results(&dir.path().join("runs/blind"));
    assert_eq!(r.rounds.len(), 4);
    let matrix_paper_bytes = 8 * 36;
    for id in 1..=5u32 {
        let flows = &r.ledger.flows[&id];
        assert_eq!(flows[&0].down.paper, 0, "client {id}: no initial model");
        let client = &r.client_ledgers[&id].flows[&id];
        assert_eq!(client[&0].down.paper, 0, "client {id} saw no initial model");
        for round in 1..=3 {
            assert_eq!(
                flows[&round].up.paper, matrix_paper_bytes,
                "client {id} round {round} uploads one matrix"
            );
            assert_eq!(
                client[&round].down.paper, matrix_paper_bytes,
                "client {id} round {round} receives the global matrix"
            );
            // 36 packed floats are 144 bytes of the payload, both ways.
            assert!(flows[&round].up.payload > 144 && client[&round].down.payload > 144);
            assert!(client[&round].down.socket >= client[&round].down.message);
        }
    }
    let first = &r.rounds[1];
    assert_eq!(first.local.len(), 5, "every upload said its metrics");
    let before = first.local_mean.expect("before-federation mean");
    assert!((0.0..=1.0).contains(&before.accuracy));
    // Accuracy-proportional weights over the five uploads.
    let sum: f64 = first.weights.values().sum();
    assert!((sum - 1.0).abs() < 1e-9);
    for (id, w) in &first.weights {
        let expected =
            first.local[id].accuracy / first.local.values().map(|m| m.accuracy).sum::<f64>();
        assert!((w - expected).abs() < 1e-9, "client {id}: weight {w}");
    }
    let last = r.rounds.last().unwrap();
    assert_eq!(
        last.metrics.len(),
        5,
        "every client evaluated after the last round"
    );
    // Clouds 4 standard deviations apart (Bayes accuracy about 0.98): the maps must learn them.
    assert!(last.mean.unwrap().accuracy > 0.85, "{:?}", last.mean);
}

/// The local baseline: same training, nothing sent back. Same seed, so round 1 (before any
/// federation could act) is the same as the federated run's.
#[test]
fn local_baseline_sends_nothing_back_and_matches_round_one() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let fed = write(
        dir.path(),
        "fed.toml",
        &fcm_experiment("fed", "blind-fcm", 2, ""),
    );
    let local = write(
        dir.path(),
        "local.toml",
        &fcm_experiment("local", "local", 2, "model = \"fcm\""),
    );
    ok(flint()
        .args(["grid", "--runs-dir"])
        .arg(&runs)
        .arg(&fed)
        .arg(&local));
    let (f, l) = (results(&runs.join("fed")), results(&runs.join("local")));
    assert_eq!(f.rounds[1].local, l.rounds[1].local);
    for id in 1..=5u32 {
        for round in 0..=2 {
            assert_eq!(
                l.client_ledgers[&id].flows[&id][&round].down.paper, 0,
                "client {id} round {round}: nothing sent back"
            );
        }
    }
    let summary = std::fs::read_to_string(runs.join("grid-summary.md")).unwrap();
    assert!(
        summary.contains("| fed | blind-fcm | accuracy tanh λ=2 | 0.4/0.3/0.1/0.1/0.1 | 1 | 2 |"),
        "{summary}"
    );
    assert!(
        summary.contains("| local | local | tanh λ=2 |"),
        "{summary}"
    );
    assert!(runs.join("grid-summary.csv").exists());
    // The federated run's accuracy is drawn beside the local baseline of the same split.
    let plot = std::fs::read_to_string(runs.join("fed/plots/accuracy.svg")).unwrap();
    assert!(plot.contains("local (local baseline), mean"), "{plot}");
    let chart = std::fs::read_to_string(runs.join("grid-summary.svg")).unwrap();
    assert!(
        chart.contains("\nfed\n") && chart.contains("\nlocal\n"),
        "{chart}"
    );

    // --resume keeps finished runs and still writes the table.
    let out = ok(flint()
        .args(["grid", "--resume", "--runs-dir"])
        .arg(&runs)
        .arg(&fed)
        .arg(&local));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("(kept)").count(), 2, "{stdout}");
    assert_eq!(results(&runs.join("fed")).run_id, f.run_id);

    // --resume once kept a run that had been interrupted. One that stopped short of its
    // rounds runs again, and says why.
    let path = runs.join("local/results.json");
    let mut cut: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cut["rounds"].as_array_mut().unwrap().pop();
    std::fs::write(&path, serde_json::to_vec(&cut).unwrap()).unwrap();
    let out = ok(flint()
        .args(["grid", "--resume", "--runs-dir"])
        .arg(&runs)
        .arg(&fed)
        .arg(&local));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("(kept)").count(), 1, "{stdout}");
    assert!(
        stdout.contains("local: run again (it stopped after 1 of 2 rounds)"),
        "{stdout}"
    );
    assert_ne!(results(&runs.join("local")).run_id, l.run_id);

    // `grid --set` overrides a key in every experiment; the changed experiments run again.
    let out = ok(flint()
        .args(["grid", "--resume", "--set", "rounds=3", "--runs-dir"])
        .arg(&runs)
        .arg(&fed)
        .arg(&local));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("(kept)").count(), 0, "{stdout}");
    assert_eq!(
        stdout
            .matches("run again (its experiment has changed since)")
            .count(),
        2,
        "{stdout}"
    );
    assert_eq!(results(&runs.join("fed")).rounds_planned, 3);

    let twin = write(
        dir.path(),
        "twin.toml",
        &fcm_experiment("fed", "blended-fcm", 2, ""),
    );
    let out = flint()
        .args(["grid", "--runs-dir"])
        .arg(&runs)
        .arg(&fed)
        .arg(&twin)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("are both named \"fed\""), "{err}");
}

/// `flint grid` writes the Blind FL pivot beside its summary (what
/// `scripts/fcm-pivot.py` printed): per activation, before federation, the local baseline and
/// each federation × aggregation, by partition, from experiments named as `experiments/fcm/`.
#[test]
fn a_grid_of_fcms_writes_the_papers_pivot() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let fed = write(
        dir.path(),
        "fed.toml",
        &fcm_experiment("s-blind-mean-tanh-even", "blind-fcm", 2, ""),
    );
    let local = write(
        dir.path(),
        "local.toml",
        &fcm_experiment("s-local-tanh-even", "local", 2, "model = \"fcm\""),
    );
    let out = ok(flint()
        .args(["grid", "--runs-dir"])
        .arg(&runs)
        .arg(&fed)
        .arg(&local));
    let path = runs.join("grid-summary-fcm.md");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&path.display().to_string()),
        "the grid names its table"
    );
    let pivot = std::fs::read_to_string(&path).unwrap();
    let (f, l) = (
        results(&runs.join("s-blind-mean-tanh-even")),
        results(&runs.join("s-local-tanh-even")),
    );
    let cell = |m: &flint_common::strategy::LocalMetrics| {
        format!("{:.4} / {:.4}", m.accuracy, m.precision)
    };
    let after = |r: &flint_server::results::RunResults| {
        let m = r.rounds.last().unwrap().mean.unwrap();
        format!("{:.4} / {:.4}", m.accuracy, m.precision)
    };
    for want in [
        "tanh — central (one map, all data): accuracy / precision - (0 runs)".to_string(),
        format!(
            "| before federation (round-1 local maps) | {} | - | - | - |",
            cell(&l.rounds[1].local_mean.unwrap())
        ),
        format!("| local, alone | {} | - | - | - |", after(&l)),
        format!("| blind, mean | {} | - | - | - |", after(&f)),
        "| blended, mean | - | - | - | - |".to_string(),
    ] {
        assert!(pivot.contains(&want), "{want}\n{pivot}");
    }
    assert!(!runs.join("grid-summary-fedtmos.md").exists());
}
