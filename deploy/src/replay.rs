//! `flint replay`: a round's aggregation again, from the updates a run kept
//! (`server.keep_updates`), under other settings and without training anything: the server half
//! is a pure function of the updates. Where the strategy has a shared test set, the new download
//! is measured on it as its holder would (FedTMOS: the composite, and with `fedtmos.baselines`
//! the ensemble and each client alone). On a table every client is prepared again as the run
//! prepared it and measures the download on its own test rows, beside the run's figure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use flint_common::clients::{Prepared, prepare};
use flint_common::config::{Experiment, parse_override};
use flint_common::data::default_data_dir;
use flint_common::data::images::{BitShard, ImageRows};
use flint_common::metrics::{ConfusionMatrix, Metrics};
use flint_common::strategy::{
    Aggregate, ClientStrategy, Downloads, Predictor, ServerStrategy, StrategyState,
};
use flint_common::wire::Update;
use flint_common::wire::proto::{DataSummary, Payload};
use flint_common::{ClientId, Round};
use flint_server::results::{RoundResult, RunResults};
use prost::Message;

use crate::replayed;

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
    /// the class that took the most of its misses; on a table, also on the clients' test rows
    /// pooled.
    #[arg(long)]
    pub per_class: bool,
    /// Also print, for every machine of the download and each class it holds, its mean class
    /// sum on that class's rows and on the others', and how often it is above 0 and T/2 on the
    /// others (a machine that fires on everything votes for its class on every input). Images
    /// only.
    #[arg(long)]
    pub sums: bool,
    /// Also write the replay's accuracy and bytes per client into the run
    /// (`replays/round-R-<settings>.json`), where `flint grid` draws it beside the trained runs.
    #[arg(long)]
    pub record: bool,
    /// The key the run's server drew its central `[dp]` noise from (`flint server
    /// --dp-noise-key-file`): without it, a replay of such a run draws other noise.
    #[arg(long, env = "FLINT_DP_NOISE_KEY_FILE", value_name = "FILE")]
    pub dp_noise_key_file: Option<PathBuf>,
}

pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let file = args.run_dir.join("experiment.toml");
    let ran_as = Experiment::load(&file, &[])?;
    if ran_as.secagg.is_some() {
        bail!(
            "the run aggregated securely ([secagg]): its server kept masked inputs only, which nothing can aggregate again"
        );
    }
    refuse_row_settings(&args.overrides, ran_as.data.is_images())?;
    let e = Experiment::load(&file, &args.overrides)?;
    let run = run_results(&args.run_dir)?;
    let ran = closed_round(&run, args.round)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    match (e.data.is_images(), e.strategy.model().reads_pixels()) {
        (true, true) => replay_pixels(&args, &e, &run, ran, &data_dir),
        (true, false) => replay_images(&args, &e, &run, ran, &data_dir),
        (false, _) => replay_table(&args, &e, &run, ran, &data_dir),
    }
}

/// Settings that decide the rows a replay measures on: the data's on images (the shared test
/// set; the clients' summaries are the run's, and `seed` only draws the server's k-means
/// again), and on a table also the seed, partition and clients, which draw each client's rows.
fn refuse_row_settings(overrides: &[(String, String)], images: bool) -> anyhow::Result<()> {
    let decides_rows = |key: &str| match images {
        true => key.starts_with("data."),
        false => {
            matches!(key, "seed" | "client_count")
                || ["data.", "partition.", "clients"]
                    .iter()
                    .any(|p| key.starts_with(p))
        }
    };
    match overrides.iter().find(|(key, _)| decides_rows(key)) {
        Some((key, _)) => bail!(
            "--set {key}: a replay measures the run's own clients on the rows they held; this setting changes those rows and needs a run of its own"
        ),
        None => Ok(()),
    }
}

/// The run's record of `round`, which it must have closed.
fn closed_round(run: &RunResults, round: Round) -> anyhow::Result<&RoundResult> {
    let closed = run.rounds.iter().map(|r| r.round).filter(|&r| r > 0);
    let Some(last) = closed.max() else {
        bail!("the run closed no round: there is nothing to aggregate again");
    };
    match run.rounds.iter().find(|r| r.round == round && round > 0) {
        Some(ran) => Ok(ran),
        None => bail!("--round {round}: the run closed rounds 1 to {last}"),
    }
}

fn replay_images(
    args: &ReplayArgs,
    e: &Experiment,
    run: &RunResults,
    ran: &RoundResult,
    data_dir: &Path,
) -> anyhow::Result<()> {
    let pool = e.data.load_images(data_dir)?;
    let (features, classes) = (pool.train.features(), e.data.classes().len());
    let summaries = summaries(run, features);
    let replayed = aggregate_again(args, e, data_dir, &summaries, features, classes)?;
    let (Some(rows), Downloads::Broadcast(download)) =
        (e.strategy.global_test_rows(), &replayed.agg.downloads)
    else {
        if args.per_class || args.sums {
            println!("this strategy has no shared test set: --per-class and --sums show nothing");
        }
        return record(args, e, ran, &replayed, (None, None));
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
    let all = half.evaluate_all(&shared);
    let global = model_of(&all);
    print_shared(all, args.per_class, None);
    record(args, e, ran, &replayed, (global.as_ref(), None))
}

/// The download's own figure among a shared test set's predictors.
fn model_of(all: &[(Predictor, ConfusionMatrix)]) -> Option<ConfusionMatrix> {
    all.iter()
        .find(|(p, _)| *p == Predictor::Model)
        .map(|(_, cm)| cm.clone())
}

/// A network's download measured on the shared test set (`cnn.global_test`) by its holder, as
/// in the run, beside the run's figure.
fn replay_pixels(
    args: &ReplayArgs,
    e: &Experiment,
    run: &RunResults,
    ran: &RoundResult,
    data_dir: &Path,
) -> anyhow::Result<()> {
    if args.sums {
        println!("--sums profiles Tsetlin Machine composites only: nothing to show for a network");
    }
    let pool = e.data.load_pixels(data_dir)?;
    let (features, classes) = (pool.train.features(), e.data.classes().len());
    let summaries = summaries(run, features);
    let replayed = aggregate_again(args, e, data_dir, &summaries, features, classes)?;
    let (Some(rows), Downloads::Broadcast(download)) =
        (e.strategy.global_test_rows(), &replayed.agg.downloads)
    else {
        println!("no shared test set (cnn.global_test) measures this run's download here");
        return record(args, e, ran, &replayed, (None, None));
    };
    let holder = 1;
    let mut half = e
        .strategy
        .pixels_client(features, classes, e.seed, holder, e.clients.len())?;
    half.apply(args.round, download)?;
    let shared = pool.shared_test(rows);
    println!("on the shared test set ({} rows):", shared.test.len());
    let all = half.evaluate_all(&shared);
    let global = model_of(&all);
    print_shared(all, args.per_class, Some(ran));
    print_warnings(e, args.round, &BTreeMap::new(), global.as_ref());
    record(args, e, ran, &replayed, (global.as_ref(), None))
}

/// A table's clients prepared again from the data as the run prepared them (the same rows,
/// splits and scaling); each applies the new download and measures it on its own test rows,
/// where the download is the whole model.
fn replay_table(
    args: &ReplayArgs,
    e: &Experiment,
    run: &RunResults,
    ran: &RoundResult,
    data_dir: &Path,
) -> anyhow::Result<()> {
    if args.sums {
        println!("--sums profiles image composites only: nothing to show on a table");
    }
    let ids: Vec<ClientId> = run.clients.iter().map(|c| c.id).collect();
    let mut clients = prepare(e, data_dir, &ids, None)?;
    let summaries = table_summaries(run, &clients)?;
    let Some(features) = clients.first().map(|c| c.summary.features as usize) else {
        bail!("the run has no client to prepare again");
    };
    let replayed = aggregate_again(
        args,
        e,
        data_dir,
        &summaries,
        features,
        e.data.classes().len(),
    )?;
    if !e.strategy.model_is_the_download() {
        println!(
            "a {} client's model is not the download alone (it keeps what it trained): no client measures it here",
            e.strategy.name()
        );
        return record(args, e, ran, &replayed, (None, None));
    }
    let evals = measure_clients(&mut clients, args.round, &replayed.agg.downloads, ran)?;
    let mean = print_means(&evals, ran, args.per_class);
    let shared = clients
        .first()
        .map(|c| c.half.evaluate_global())
        .unwrap_or_default();
    let global = model_of(&shared);
    if let Some(cm) = &global {
        println!("on the shared test set ({} rows):", cm.total());
        print_shared(shared, args.per_class, Some(ran));
    }
    print_warnings(e, args.round, &evals, global.as_ref());
    record(args, e, ran, &replayed, (global.as_ref(), mean))
}

/// Each client applies its download and measures it on its own test rows, printed beside the
/// run's figure.
fn measure_clients(
    clients: &mut [Prepared],
    round: Round,
    downloads: &Downloads,
    ran: &RoundResult,
) -> anyhow::Result<BTreeMap<ClientId, ConfusionMatrix>> {
    println!("on each client's test rows (in parentheses, the run's):");
    let mut evals = BTreeMap::new();
    for c in clients {
        let Some(download) = downloads.for_client(c.id) else {
            continue;
        };
        c.half
            .apply(round, download)
            .with_context(|| format!("{} cannot apply the download", c.name))?;
        let cm = c.half.evaluate();
        let was = ran.metrics.get(&c.id);
        println!("  {:<26} accuracy {}", c.name, beside(&cm.metrics(), was));
        evals.insert(c.id, cm);
    }
    Ok(evals)
}

/// The mean over the clients the run measured (a client that did not report that round is
/// left out of both), and with `per_class` the recall on their test rows pooled; returns the
/// mean accuracy.
fn print_means(
    evals: &BTreeMap<ClientId, ConfusionMatrix>,
    ran: &RoundResult,
    per_class: bool,
) -> Option<f64> {
    let measured: Vec<Metrics> = evals
        .iter()
        .filter(|(id, _)| ran.metrics.contains_key(id))
        .map(|(_, cm)| cm.metrics())
        .collect();
    let mean = Metrics::mean(&measured);
    if let Some(mean) = &mean {
        println!(
            "  {:<26} accuracy {}",
            "mean",
            beside(mean, ran.mean.as_ref())
        );
    }
    if measured.len() < evals.len() {
        println!(
            "  (the mean is over the {} clients the run measured in this round, of {})",
            measured.len(),
            evals.len()
        );
    }
    if let Some(all) = per_class.then(|| pooled(evals)).flatten() {
        println!(
            "  recall per class, the clients' test rows pooled: {}",
            recall_per_class(&all)
        );
    }
    mean.map(|m| m.accuracy)
}

/// Aggregates `args.round` again from the kept updates, as the run's server did (after the
/// rounds before it, for a strategy that keeps state), and prints the time and the report.
fn aggregate_again(
    args: &ReplayArgs,
    e: &Experiment,
    data_dir: &Path,
    summaries: &BTreeMap<ClientId, DataSummary>,
    features: usize,
    classes: usize,
) -> anyhow::Result<AggregatedAgain> {
    let dir = &args.run_dir;
    let mut server = e
        .strategy
        .server(classes, e.seed, e.robust, Some((&e.data, data_dir)))?;
    let key = args.dp_noise_key_file.as_deref();
    keyed(server.as_mut(), key)?;
    if args.round > 1 && !server.snapshot().is_stateless() {
        let before = Before {
            dir,
            data_dir,
            round: args.round,
            key,
        };
        let kept = state_before(&before, summaries, features, classes)?;
        server
            .restore(kept)
            .context("the run's state before this round does not fit the changed settings")?;
    }
    let payloads = kept_payloads(dir, args.round, summaries)?;
    let updates = decode_kept(&payloads, server.as_ref(), features)?;
    let started = Instant::now();
    let agg = server.aggregate(args.round, summaries, &updates)?;
    println!(
        "round {} of {}: {} updates aggregated again in {:.2} ms",
        args.round,
        e.name,
        updates.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    println!("{}", serde_json::to_string(&agg.report)?);
    Ok(AggregatedAgain { agg, payloads })
}

/// A round aggregated again, and the uploads it took as the run kept them.
struct AggregatedAgain {
    agg: Aggregate,
    payloads: BTreeMap<ClientId, Payload>,
}

/// With `--record`, the replay's figures written into the run for `flint grid`.
fn record(
    args: &ReplayArgs,
    e: &Experiment,
    ran: &RoundResult,
    replayed: &AggregatedAgain,
    (global, mean): (Option<&ConfusionMatrix>, Option<f64>),
) -> anyhow::Result<()> {
    if !args.record {
        return Ok(());
    }
    let (up, down) = replayed::bytes(e, ran, &replayed.payloads, &replayed.agg.downloads);
    let r = replayed::Replayed {
        settings: args.overrides.clone(),
        round: args.round,
        global: global.map(|cm| cm.metrics().accuracy),
        mean,
        up,
        down,
    };
    let path = r.write(&args.run_dir)?;
    println!(
        "recorded: {} ({} B up, {} B down per client, message level)",
        path.display(),
        up.message,
        down.message
    );
    Ok(())
}

/// Each predictor's accuracy on the shared test set, the model first, beside the run's where
/// given.
fn print_shared(
    mut all: Vec<(Predictor, ConfusionMatrix)>,
    per_class: bool,
    ran: Option<&RoundResult>,
) {
    all.sort_by_key(|(p, _)| *p);
    for (p, cm) in all {
        let (name, was) = match p {
            Predictor::Model => (
                "the model".to_string(),
                ran.and_then(|r| r.global_test.as_ref()),
            ),
            other => (
                other.name(),
                ran.and_then(|r| r.baselines.get(&other.name())),
            ),
        };
        println!("  {name:<26} accuracy {}", beside(&cm.metrics(), was));
        if per_class && !matches!(p, Predictor::Client(_)) {
            println!("    recall per class: {}", recall_per_class(&cm));
        }
    }
}

/// "0.9123 (0.9041)": the replay's accuracy and the run's, where the run measured it.
fn beside(now: &Metrics, was: Option<&Metrics>) -> String {
    match was {
        Some(w) => format!("{:.4} ({:.4})", now.accuracy, w.accuracy),
        None => format!("{:.4}", now.accuracy),
    }
}

/// The warnings a run gives a degenerate model (one class for every row, under the majority
/// class), for the replayed download.
fn print_warnings(
    e: &Experiment,
    round: Round,
    evals: &BTreeMap<ClientId, ConfusionMatrix>,
    global: Option<&ConfusionMatrix>,
) {
    for w in e.round_warnings(round, evals, global) {
        println!("warning: {}", w.message);
    }
}

/// The clients' confusion matrices added up.
fn pooled(evals: &BTreeMap<ClientId, ConfusionMatrix>) -> Option<ConfusionMatrix> {
    let classes = evals.values().next()?.classes();
    let mut counts = vec![0; classes * classes];
    for cm in evals.values() {
        for (sum, n) in counts.iter_mut().zip(cm.counts()) {
            *sum += n;
        }
    }
    ConfusionMatrix::from_counts(classes, counts)
}

/// The clients' summaries as prepared again, refused where the data no longer gives the run's
/// rows; each client's compute power as the run had it (a `flint client --compute-ghz`).
fn table_summaries(
    run: &RunResults,
    clients: &[Prepared],
) -> anyhow::Result<BTreeMap<ClientId, DataSummary>> {
    let mut summaries = BTreeMap::new();
    for c in clients {
        let Some(was) = run.clients.iter().find(|w| w.id == c.id) else {
            bail!("{} is not among the run's clients", c.name);
        };
        if c.summary.train_class_counts != was.train_class_counts
            || c.summary.test_samples != was.test_samples
        {
            bail!(
                "{} holds other rows than in the run (training rows per class {:?} and {} test rows here, {:?} and {} in the run): the data or its path changed",
                c.name,
                c.summary.train_class_counts,
                c.summary.test_samples,
                was.train_class_counts,
                was.test_samples
            );
        }
        let summary = DataSummary {
            compute_ghz: was.compute_ghz,
            ..c.summary.clone()
        };
        summaries.insert(c.id, summary);
    }
    Ok(summaries)
}

/// Where the rounds before a replayed one are read, and the key of the run's noise.
struct Before<'a> {
    dir: &'a Path,
    data_dir: &'a Path,
    round: Round,
    key: Option<&'a Path>,
}

/// The run's noise key given to a server half again.
fn keyed(server: &mut dyn ServerStrategy, key: Option<&Path>) -> anyhow::Result<()> {
    if let Some(path) = key {
        server.set_noise_key(flint_common::strategy::privacy::NoiseKey::from_file(path)?);
    }
    Ok(())
}

/// What a strategy keeps between rounds (TPFL's aggregates, the bases of its deltas) as the run
/// had it before `round`: its rounds before aggregated again from their kept updates, under the
/// run's own settings (those the clients were sent), a failed one skipped as the server did.
fn state_before(
    before: &Before,
    summaries: &BTreeMap<ClientId, DataSummary>,
    features: usize,
    classes: usize,
) -> anyhow::Result<StrategyState> {
    let Before {
        dir,
        data_dir,
        round,
        key,
    } = *before;
    let run = Experiment::load(&dir.join("experiment.toml"), &[])?;
    let mut server =
        run.strategy
            .server(classes, run.seed, run.robust, Some((&run.data, data_dir)))?;
    keyed(server.as_mut(), key)?;
    for earlier in 1..round {
        let kept = kept_payloads(dir, earlier, summaries)?;
        let updates = decode_kept(&kept, server.as_ref(), features)?;
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
fn summaries(run: &RunResults, features: usize) -> BTreeMap<ClientId, DataSummary> {
    run.clients
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
        .collect()
}

fn run_results(dir: &Path) -> anyhow::Result<RunResults> {
    let path = dir.join("results.json");
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    RunResults::read(&bytes).with_context(|| format!("cannot read {}", path.display()))
}

/// The round's kept updates (`updates/round-R-client-C.pb`) as they arrived; a client whose
/// file is gone is left out.
fn kept_payloads(
    dir: &Path,
    round: u32,
    summaries: &BTreeMap<ClientId, DataSummary>,
) -> anyhow::Result<BTreeMap<ClientId, Payload>> {
    let mut payloads = BTreeMap::new();
    for &id in summaries.keys() {
        let path = dir
            .join("updates")
            .join(format!("round-{round}-client-{id}.pb"));
        if !path.exists() {
            continue;
        }
        let payload = Payload::decode(&std::fs::read(&path)?[..])
            .with_context(|| format!("{} is not a payload", path.display()))?;
        payloads.insert(id, payload);
    }
    if payloads.is_empty() {
        bail!(
            "{} holds no kept update of round {round}; run with --set server.keep_updates=true",
            dir.join("updates").display()
        );
    }
    Ok(payloads)
}

/// The kept updates decoded by the strategy's own `decode`.
fn decode_kept(
    payloads: &BTreeMap<ClientId, Payload>,
    server: &dyn ServerStrategy,
    features: usize,
) -> anyhow::Result<BTreeMap<ClientId, Update>> {
    payloads
        .iter()
        .map(|(&id, payload)| {
            let update = server
                .decode(id, features, payload)
                .with_context(|| format!("the kept update of client {id}"))?;
            Ok((id, update))
        })
        .collect()
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
fn recall_per_class(cm: &ConfusionMatrix) -> String {
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
