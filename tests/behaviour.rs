//! Behaviour pinned across refactorings: each run here must give exactly the metrics, aggregation
//! weights, payload bytes (server ledger, payload and paper levels) and TPFL clusters recorded in
//! `tests/behaviour/*.json` from commit 5c4bab7 (before the strategy-shape change) by
//! `tests/oracles/behaviour-figures.py`. A difference in any model shows up as a different
//! number. The last round's payload bytes hold each client's closing (its last report), as the
//! ledger booked them before closings were kept apart; they were recorded again when that report
//! gained its `last` flag (2 bytes a client, nothing else changed). `tpfl-mnist.json` was recorded
//! again when the coalesced machine's kept Type I feedback became Binomial counts (the same machine
//! in distribution, another random stream).
//!
//! To re-record after an intended change of behaviour, run the experiment with `flint run`, then
//!
//! ```sh
//! python3 tests/oracles/behaviour-figures.py runs/NAME/results.json > tests/behaviour/FILE.json
//! ```
//!
//! and say why in the commit (tests/oracles/README.md lists each file's experiment).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flint_common::metrics::{LocalMetrics, Metrics};
use flint_common::strategy::tpfl::TpflRound;
use flint_server::results::RunResults;
use serde::Deserialize;
use support::*;

#[derive(Debug, PartialEq, Deserialize)]
struct Figures {
    name: String,
    strategy: String,
    rounds: Vec<RoundFigures>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct RoundFigures {
    round: u32,
    participants: Vec<u32>,
    weights: BTreeMap<u32, f64>,
    metrics: BTreeMap<u32, Metrics>,
    local: BTreeMap<u32, LocalMetrics>,
    /// Per client: up payload, down payload, up paper, down paper.
    payload: BTreeMap<u32, [u64; 4]>,
    clusters: Option<BTreeMap<u32, Vec<u32>>>,
}

fn figures(r: &RunResults) -> Figures {
    let last = r.rounds.last().map_or(0, |rr| rr.round);
    let rounds = r
        .rounds
        .iter()
        .map(|rr| RoundFigures {
            round: rr.round,
            participants: rr.participants.clone(),
            weights: rr.weights.clone(),
            metrics: rr.metrics.clone(),
            local: rr.local.clone(),
            payload: r
                .ledger
                .flows
                .iter()
                .filter_map(|(id, per)| {
                    let mut f = *per.get(&rr.round)?;
                    if rr.round == last
                        && let Some(closing) = r.ledger.closing.get(id)
                    {
                        f += *closing;
                    }
                    Some((
                        *id,
                        [f.up.payload, f.down.payload, f.up.paper, f.down.paper],
                    ))
                })
                .collect(),
            clusters: rr
                .report
                .as_ref()
                .and_then(|t| t.details::<TpflRound>())
                .map(|t| t.clusters.clone()),
        })
        .collect();
    Figures {
        name: r.name.clone(),
        strategy: r.strategy.clone(),
        rounds,
    }
}

fn recorded(file: &str) -> Figures {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/behaviour")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `flint run FILE ARGS` into a temporary directory; its figures against the recorded ones.
/// Returns the directory, which holds the run.
fn same_as_recorded(
    experiment: &Path,
    args: &[&str],
    figures_file: &str,
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = flint();
    cmd.arg("run").arg("--runs-dir").arg(dir.path()).args(args);
    if let Some(data) = std::env::var_os("FLINT_DATA_DIR") {
        cmd.arg("--data-dir").arg(data);
    }
    ok(cmd.arg(experiment));
    let want = recorded(figures_file);
    let got = figures(&results(&dir.path().join(&want.name)));
    assert_eq!((&got.name, &got.strategy), (&want.name, &want.strategy));
    assert_eq!(got.rounds.len(), want.rounds.len(), "rounds");
    for (g, w) in got.rounds.iter().zip(&want.rounds) {
        assert_eq!(g, w, "round {} differs from {figures_file}", w.round);
    }
    let run = dir.path().join(&want.name);
    (dir, run)
}

#[test]
fn the_quickstart_runs_exactly_as_recorded() {
    same_as_recorded(&repo("experiments/quickstart.toml"), &[], "quickstart.json");
}

#[test]
#[ignore = "needs FLINT_DATA_DIR with MAGIC; CI runs it"]
fn ahp_magic_runs_exactly_as_recorded() {
    same_as_recorded(&repo("experiments/ahp-magic.toml"), &[], "ahp-magic.json");
}

#[test]
#[ignore = "needs FLINT_DATA_DIR with Breast Cancer Wisconsin; CI runs it"]
fn a_blind_fl_breast_cancer_run_is_exactly_as_recorded() {
    same_as_recorded(
        &repo("experiments/fcm/breast-cancer/blended-accuracy-tanh-uneven.toml"),
        &[],
        "fcm-breast-cancer.json",
    );
}

#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn a_ten_client_tpfl_mnist_run_is_exactly_as_recorded() {
    let (_dir, run) = same_as_recorded(
        &repo("tests/behaviour/tpfl-mnist.toml"),
        &["--clients-per-process", "5"],
        "tpfl-mnist.json",
    );
    // Each client keeps its personalized machine, as rules over named pixels and as
    // a checkpoint, and the run its pictures.
    let kept = flint_common::model::kept::ModelFile::parse(
        &std::fs::read(run.join("models/client-1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(kept.features.len(), 784);
    assert_eq!(kept.features[28 * 12 + 7], "pixel(12,7)");
    assert!(run.join("models/client-10.tm").is_file());
    for plot in ["accuracy.svg", "bytes.svg", "clusters.svg"] {
        assert!(run.join("plots").join(plot).is_file(), "{plot}");
    }
}
