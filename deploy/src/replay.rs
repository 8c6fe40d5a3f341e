//! `flint replay`: a round's aggregation again, from the updates a run kept
//! (`server.keep_updates`), under other settings and without training anything: the server half
//! is a pure function of the updates. Where the strategy has a shared test set, the new download
//! is measured on it as its holder would (FedTMOS: the composite, and with `fedtmos.baselines`
//! the ensemble and each client alone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use flint_common::config::{Experiment, parse_override};
use flint_common::data::default_data_dir;
use flint_common::data::images::BitShard;
use flint_common::strategy::{ClientStrategy, Downloads, Predictor, ServerStrategy, StrategyState};
use flint_common::wire::Update;
use flint_common::wire::proto::{DataSummary, Payload};
use flint_common::{ClientId, Round};
use flint_server::results::RunResults;
use prost::Message;

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// A run directory whose server kept its updates (`--set server.keep_updates=true`).
    pub run_dir: PathBuf,
    /// The round to aggregate again (for a strategy that keeps state between rounds, TPFL, the
    /// rounds before it are aggregated again first, under the run's own settings).
    #[arg(long, default_value_t = 1)]
    pub round: Round,
    /// Settings to change, as `flint run --set` (e.g. fedtmos.preset=paper-code).
    #[arg(long = "set", value_parser = parse_override)]
    pub overrides: Vec<(String, String)>,
    /// [default: $FLINT_DATA_DIR or ./data]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Also print the recall on each class of the shared test set, for the model and the
    /// ensemble under each reading (not for the clients alone), and for a class under 0.9
    /// the class that took the most of its misses.
    #[arg(long)]
    pub per_class: bool,
    /// Also print, for every machine of the download and each class it holds, its mean class
    /// sum on that class's rows and on the others', and how often it is above 0 and T/2 on the
    /// others (a machine that fires on everything votes for its class on every input).
    #[arg(long)]
    pub sums: bool,
}

pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let dir = &args.run_dir;
    let e = Experiment::load(&dir.join("experiment.toml"), &args.overrides)?;
    if !e.data.is_images() {
        bail!(
            "flint replay measures image strategies on their shared test set; this run's data is a table"
        );
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    let pool = e.data.load_images(&data_dir)?;
    let (features, classes) = (pool.train.features(), e.data.classes().len());
    let summaries = summaries(dir, features)?;
    let mut server = e.strategy.server(classes, e.seed, e.robust);
    if args.round > 1 && !matches!(server.snapshot(), StrategyState::Stateless) {
        let kept = state_before(dir, args.round, &summaries, features, classes)?;
        server
            .restore(kept)
            .context("the run's state before this round does not fit the changed settings")?;
    }
    let updates = kept_updates(dir, args.round, server.as_ref(), &summaries, features)?;
    let started = Instant::now();
    let agg = server.aggregate(args.round, &summaries, &updates)?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "round {} of {}: {} updates aggregated again in {:.2} ms",
        args.round,
        e.name,
        updates.len(),
        seconds * 1e3
    );
    println!("{}", serde_json::to_string(&agg.report)?);
    let (Some(rows), Downloads::Broadcast(download)) =
        (e.strategy.global_test_rows(), &agg.downloads)
    else {
        if args.per_class || args.sums {
            println!("this strategy has no shared test set: --per-class and --sums show nothing");
        }
        return Ok(());
    };
    let holder = 1;
    let mut half = e
        .strategy
        .bits_client(features, classes, e.seed, holder, e.clients.len())?;
    half.apply(args.round, download)?;
    let shared = pool.shared_test(rows);
    println!("on the shared test set ({} rows):", shared.test.len());
    if args.sums {
        print_sums(half.as_ref(), &shared);
    }
    let mut all = half.evaluate_all(&shared);
    all.sort_by_key(|(p, _)| *p);
    for (p, cm) in all {
        let name = match p {
            Predictor::Model => "the model".to_string(),
            other => other.name(),
        };
        println!("  {name:<26} accuracy {:.4}", cm.metrics().accuracy);
        if args.per_class && !matches!(p, Predictor::Client(_)) {
            println!("    recall per class: {}", recall_per_class(&cm));
        }
    }
    Ok(())
}

/// What a strategy keeps between rounds (TPFL's aggregates, the bases of its deltas) as the run
/// had it before `round`: its rounds before aggregated again from their kept updates, under the
/// run's own settings (those the clients were sent), a failed one skipped as the server did.
fn state_before(
    dir: &Path,
    round: Round,
    summaries: &BTreeMap<ClientId, DataSummary>,
    features: usize,
    classes: usize,
) -> anyhow::Result<StrategyState> {
    let run = Experiment::load(&dir.join("experiment.toml"), &[])?;
    let mut server = run.strategy.server(classes, run.seed, run.robust);
    for earlier in 1..round {
        let updates = kept_updates(dir, earlier, server.as_ref(), summaries, features)?;
        if let Err(e) = server.aggregate(earlier, summaries, &updates) {
            println!("round {earlier} aggregated again failed as it may have in the run: {e}");
        }
    }
    println!(
        "rounds 1 to {} aggregated again for what the strategy keeps",
        round - 1
    );
    Ok(server.snapshot())
}

/// Each client's data summary as the run's results hold it.
fn summaries(dir: &Path, features: usize) -> anyhow::Result<BTreeMap<ClientId, DataSummary>> {
    let results = RunResults::read(&std::fs::read(dir.join("results.json"))?)
        .with_context(|| format!("cannot read {}", dir.join("results.json").display()))?;
    Ok(results
        .clients
        .iter()
        .map(|c| {
            let summary = DataSummary {
                train_class_counts: c.train_class_counts.clone(),
                test_samples: c.test_samples,
                features: features as u32,
                compute_ghz: c.compute_ghz,
            };
            (c.id, summary)
        })
        .collect())
}

/// The round's kept updates (`updates/round-R-client-C.pb`), decoded by the strategy's own
/// `decode`; a client whose file is gone is left out.
fn kept_updates(
    dir: &Path,
    round: u32,
    server: &dyn ServerStrategy,
    summaries: &BTreeMap<ClientId, DataSummary>,
    features: usize,
) -> anyhow::Result<BTreeMap<ClientId, Update>> {
    let mut updates = BTreeMap::new();
    for &id in summaries.keys() {
        let path = dir
            .join("updates")
            .join(format!("round-{round}-client-{id}.pb"));
        if !path.exists() {
            continue;
        }
        let payload = Payload::decode(&std::fs::read(&path)?[..])
            .with_context(|| format!("{} is not a payload", path.display()))?;
        let update = server
            .decode(id, features, &payload)
            .with_context(|| format!("{}", path.display()))?;
        updates.insert(id, update);
    }
    if updates.is_empty() {
        bail!(
            "{} holds no kept update of round {round}; run with --set server.keep_updates=true",
            dir.join("updates").display()
        );
    }
    Ok(updates)
}

/// `--sums`: each composite machine's class sums on its class's rows and on the others'.
fn print_sums(half: &dyn ClientStrategy<BitShard>, shared: &BitShard) {
    let profiles = half.class_sum_profiles(shared);
    if profiles.is_empty() {
        println!("  --sums: this download has no composite of machines to show");
    }
    for (name, profiles) in profiles {
        for p in profiles {
            println!(
                "  {name:<16} class {}: mean sum {:.0} on its rows, {:.0} on the others'; others above 0: {:.3}, at least T/2: {:.3}",
                p.class,
                p.mean_on_class,
                p.mean_on_others,
                p.others_positive,
                p.others_above_half_t
            );
        }
    }
}

/// "class: recall" for each class with test rows, and which class took the most of a weak
/// class's misses, e.g.
/// `0: 0.991  7: 0.054 (→9)`.
fn recall_per_class(cm: &flint_common::metrics::ConfusionMatrix) -> String {
    (0..cm.classes())
        .filter_map(|c| {
            let recall = cm.class_recall(c)?;
            let missed = (0..cm.classes())
                .filter(|&p| p != c && cm.get(c, p) > 0)
                .max_by_key(|&p| (cm.get(c, p), std::cmp::Reverse(p)));
            // Compared as printed, so a recall shown as 0.900 never names a class.
            Some(match missed {
                Some(p) if (recall * 1e3).round() < 900.0 => format!("{c}: {recall:.3} (→{p})"),
                _ => format!("{c}: {recall:.3}"),
            })
        })
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_common::metrics::ConfusionMatrix;

    #[test]
    fn a_weak_class_names_where_its_misses_went() {
        // Class 0 right 9 times in 10 (no arrow at 0.9); class 1 right once, twice taken for 2,
        // once for 0; class 2 has no rows.
        let truth = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1];
        let predicted = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 0];
        let cm = ConfusionMatrix::from_predictions(3, &truth, &predicted);
        assert_eq!(recall_per_class(&cm), "0: 0.900  1: 0.250 (→2)");
    }

    #[test]
    fn a_tie_between_misses_names_the_lower_class() {
        let cm = ConfusionMatrix::from_predictions(3, &[0, 0, 0], &[0, 2, 1]);
        assert_eq!(recall_per_class(&cm), "0: 0.333 (→1)");
    }
}
