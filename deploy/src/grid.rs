//! `flint grid PATH…`: runs many experiments one after another (each as `flint run` does, with
//! real processes), optionally over several seeds, and writes one summary table (and the
//! papers' own tables where it ran FedTMOS or FCMs: `tables`).

mod tables;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use flint_common::config::Experiment;
use flint_common::strategy::LocalMetrics;
use flint_common::strategy::tpfl::TpflRound;
use flint_common::text::count;
use flint_common::wire::ledger::Traffic;
use flint_server::results::RunResults;
use flint_shell::logging::escape_controls;

use crate::run::{RunArgs, execute};

#[derive(Debug, Clone, clap::Args)]
pub struct GridArgs {
    /// Experiment files, or directories searched recursively for *.toml.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Run every experiment once per seed, e.g. --seeds 1,2,3 [default: each file's own seed].
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<u64>,
    /// Data directory [default: $FLINT_DATA_DIR or ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Where run directories go.
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
    /// Summary table (markdown; a .csv is written beside it) [default: RUNS_DIR/grid-summary.md].
    #[arg(long)]
    pub summary: Option<PathBuf>,
    /// Keep runs whose results.json exists instead of running them again (resume a grid).
    #[arg(long)]
    pub resume: bool,
    /// Plaintext on loopback instead of mutual TLS, as `flint run --insecure`.
    #[arg(long)]
    pub insecure: bool,
    /// Clients hosted by one client process [default: as `flint run`].
    #[arg(long)]
    pub clients_per_process: Option<usize>,
    /// Override a key in every experiment, e.g. --set rounds=3 (repeatable; a changed key
    /// changes the fingerprint, so --resume runs such experiments again).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = flint_common::config::parse_override)]
    pub overrides: Vec<(String, String)>,
}

/// One experiment's outcome over its seeds.
struct Row {
    name: String,
    strategy: String,
    setting: String,
    partition: String,
    /// Rounds planned: a one-round baseline (a central map's one PSO run) reads as such.
    rounds: u32,
    /// The data as checked: runs over the same data and split compare with each other.
    data: String,
    /// The dataset's name: its strategies are the points of one accuracy-versus-bytes figure.
    dataset: String,
    runs: Vec<Outcome>,
}

struct Outcome {
    before: Option<LocalMetrics>,
    after: Option<LocalMetrics>,
    /// Mean per client per round (rounds 1..), up and down.
    up: Traffic,
    down: Traffic,
    /// Summed over clients and rounds 1.., up and down; the download's paper figure as the
    /// strategy's paper counts it (TPFL: once per cluster).
    up_total: Traffic,
    down_total: Traffic,
    /// Mean clusters per round, for strategies that cluster (TPFL).
    clusters: Option<f64>,
    wall: f64,
    /// Where the run is, and its seed: a `local` run of the same data, split and seed is its
    /// baseline in the accuracy plot.
    dir: PathBuf,
    seed: u64,
    /// The kinds of the last round's warnings (`one-class`, `no-clauses`, …).
    warnings: Vec<String>,
    /// Accuracy on the run's shared test set after its last round, where it has one (FedTMOS).
    global: Option<f64>,
    /// `[dp]`: the ε the run had spent after its last round.
    epsilon: Option<f64>,
    /// What `flint replay --record` left in the run: other settings on the same uploads.
    replays: Vec<crate::replayed::Replayed>,
}

pub fn grid(args: GridArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(flint_common::data::default_data_dir);
    let (files, experiments) = load_experiments(&args, &data_dir)?;
    let seeds: Vec<Option<u64>> = if args.seeds.is_empty() {
        vec![None]
    } else {
        args.seeds.iter().copied().map(Some).collect()
    };
    let total = files.len() * seeds.len();
    println!(
        "flint grid: {} experiments × {} seed(s) = {total} runs -> {}",
        files.len(),
        seeds.len(),
        args.runs_dir.display()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut done = 0;
    for (file, e) in files.iter().zip(&experiments) {
        let mut row = Row {
            name: e.name.clone(),
            strategy: e.strategy.name(),
            setting: e.strategy.setting(e.data.is_images(), e.compression),
            partition: partition(e),
            rounds: e.policy.rounds,
            data: format!("{:?}", e.data.source),
            dataset: e.data.name(),
            runs: Vec::new(),
        };
        for seed in &seeds {
            if crate::stop::requested() {
                bail!("stopped by a signal after {done} of {total} runs; --resume goes on");
            }
            done += 1;
            let cell = Cell {
                args: &args,
                file,
                data_dir: &data_dir,
                name: &e.name,
                seed: *seed,
            };
            match cell.run() {
                Ok((run_name, o, kept)) => {
                    println!(
                        "  [{done}/{total}] {run_name}: accuracy {} -> {}, precision {} -> {}, {:.1} s{}",
                        metric(o.before.map(|m| m.accuracy)),
                        metric(o.after.map(|m| m.accuracy)),
                        metric(o.before.map(|m| m.precision)),
                        metric(o.after.map(|m| m.precision)),
                        o.wall,
                        if kept { " (kept)" } else { "" }
                    );
                    row.runs.push(o);
                }
                Err((run_name, err)) => {
                    // A run's error may carry a server's or a file's text: escaped, so the only
                    // line breaks in the list are the list's own.
                    let err = escape_controls(&format!("{err:#}"));
                    println!("  [{done}/{total}] {run_name}: failed: {err}");
                    failures.push(format!("{run_name}: {err}"));
                }
            }
        }
        rows.push(row);
    }
    write_summary(&args, &rows, started)?;
    if !failures.is_empty() {
        bail!("{} run(s) failed:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}

/// Every experiment file below the given paths, loaded; two with one name are refused, since
/// runs are stored by experiment name and would overwrite each other.
fn load_experiments(
    args: &GridArgs,
    data_dir: &Path,
) -> anyhow::Result<(Vec<PathBuf>, Vec<Experiment>)> {
    let mut files = Vec::new();
    for p in &args.paths {
        collect(p, &mut files)?;
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        bail!("no experiment files (*.toml) under {:?}", args.paths);
    }
    let experiments: Vec<Experiment> = files
        .iter()
        .map(|f| {
            Experiment::load_with_data(f, &args.overrides, data_dir)
                .with_context(|| format!("in {}", f.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut names = std::collections::BTreeMap::new();
    for (f, e) in files.iter().zip(&experiments) {
        if let Some(other) = names.insert(e.name.as_str(), f) {
            bail!(
                "{} and {} are both named {:?}; their runs would overwrite each other",
                other.display(),
                f.display(),
                e.name
            );
        }
    }
    Ok((files, experiments))
}

/// One experiment at one seed.
struct Cell<'a> {
    args: &'a GridArgs,
    file: &'a Path,
    data_dir: &'a Path,
    name: &'a str,
    seed: Option<u64>,
}

impl Cell<'_> {
    /// Runs the cell, or keeps its finished run with `--resume`; returns the run's name, its
    /// outcome and whether it was kept.
    fn run(&self) -> Result<(String, Outcome, bool), (String, anyhow::Error)> {
        let mut overrides = self.args.overrides.clone();
        let mut run_name = self.name.to_string();
        if let Some(s) = self.seed {
            run_name = format!("{}-s{s}", self.name);
            overrides.push(("seed".to_string(), s.to_string()));
            overrides.push(("name".to_string(), run_name.clone()));
        }
        let dir = self.args.runs_dir.join(&run_name);
        let kept = match self.args.resume {
            true => self.finished(&dir, &run_name, &overrides),
            false => Ok(false),
        };
        let result = kept.and_then(|kept| {
            let dir = match kept {
                true => dir.clone(),
                false => execute(
                    &RunArgs {
                        experiment: Some(self.file.to_path_buf()),
                        clients_per_process: self.args.clients_per_process,
                        data_dir: self.args.data_dir.clone(),
                        runs_dir: self.args.runs_dir.clone(),
                        overrides,
                        insecure: self.args.insecure,
                        link: None,
                        metrics: Default::default(),
                    },
                    false,
                )?,
            };
            Ok((outcome(&dir)?, kept))
        });
        match result {
            Ok((o, kept)) => Ok((run_name, o, kept)),
            Err(e) => Err((run_name, e)),
        }
    }

    /// Whether `dir` holds a finished run of this very experiment (else it is run again).
    fn finished(
        &self,
        dir: &Path,
        run_name: &str,
        overrides: &[(String, String)],
    ) -> anyhow::Result<bool> {
        let expected = Experiment::load_with_data(self.file, overrides, self.data_dir)?;
        match finished_run(dir, &expected) {
            Ok(()) => Ok(true),
            Err(why) => {
                if dir.join("results.json").exists() {
                    println!("  {run_name}: run again ({why})");
                }
                Ok(false)
            }
        }
    }
}

/// The grid's table (markdown and CSV), its local baselines' plot and its accuracy chart.
fn write_summary(args: &GridArgs, rows: &[Row], started: Instant) -> anyhow::Result<()> {
    let summary = args
        .summary
        .clone()
        .unwrap_or_else(|| args.runs_dir.join("grid-summary.md"));
    if let Some(parent) = summary.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&summary, markdown(rows))
        .with_context(|| format!("cannot write {}", summary.display()))?;
    std::fs::write(summary.with_extension("csv"), csv(rows))?;
    plot_local_baselines(rows);
    let accuracies: Vec<(String, Vec<f64>)> = rows
        .iter()
        .map(|r| {
            let after = r.runs.iter().filter_map(|o| o.after.map(|m| m.accuracy));
            (r.name.clone(), after.collect())
        })
        .collect();
    crate::plot::grid_chart(&summary.with_extension("svg"), &accuracies)?;
    for path in pareto_charts(&summary, rows)? {
        println!("accuracy against bytes: {}", path.display());
    }
    for (kind, table) in [
        ("fedtmos", tables::fedtmos(rows)),
        ("fcm", tables::fcm(rows)),
    ] {
        let Some(table) = table else { continue };
        let stem = summary.file_stem().unwrap_or_default().to_string_lossy();
        let path = summary.with_file_name(format!("{stem}-{kind}.md"));
        std::fs::write(&path, table).with_context(|| format!("cannot write {}", path.display()))?;
        println!("the {kind} tables: {}", path.display());
    }
    println!(
        "\n{}\ngrid done in {:.1} s; summary in {}, {} and {}",
        markdown(rows),
        started.elapsed().as_secs_f64(),
        summary.display(),
        summary.with_extension("csv").display(),
        summary.with_extension("svg").display()
    );
    Ok(())
}

/// Per dataset and partition, every experiment with an accuracy as a point of accuracy
/// against its mean bytes per client per round (`{stem}-pareto-{dataset}-{partition}.svg`),
/// where two or more compare; both means over the runs. A run's recorded replays (`flint
/// replay --record`) are points of their own, and where every point of a figure has a shared
/// test set its accuracy is that one.
fn pareto_charts(summary: &Path, rows: &[Row]) -> anyhow::Result<Vec<PathBuf>> {
    let mut groups: std::collections::BTreeMap<(&str, &str), Vec<Point>> = Default::default();
    for r in rows {
        let group = groups.entry((&r.dataset, &r.partition)).or_default();
        group.extend(points(r));
    }
    let stem = summary.file_stem().unwrap_or_default().to_string_lossy();
    let mut written = Vec::new();
    for ((data, partition), points) in groups {
        let shared = points.iter().all(|p| p.global.is_some());
        let tradeoffs: Vec<crate::plot::Tradeoff> = points
            .into_iter()
            .filter_map(|p| {
                Some(crate::plot::Tradeoff {
                    accuracy: if shared { p.global } else { p.local }?,
                    name: p.name,
                    bytes: p.bytes,
                })
            })
            .collect();
        let name = format!("{stem}-pareto-{}-{}.svg", slug(data), slug(partition));
        let path = summary.with_file_name(name);
        let title = match shared {
            true => format!("{data}, {partition} (shared test set)"),
            false => format!("{data}, {partition}"),
        };
        if crate::plot::pareto_chart(&path, &title, &tradeoffs)? {
            written.push(path);
        }
    }
    Ok(written)
}

/// One point of an accuracy-versus-bytes figure, with both accuracies where measured.
struct Point {
    name: String,
    bytes: f64,
    local: Option<f64>,
    global: Option<f64>,
}

/// A row's point over its runs, and one for each setting its runs replayed; each a mean over
/// the runs that measured it.
fn points(r: &Row) -> Vec<Point> {
    let mut out = Vec::new();
    let own: Vec<(f64, Option<f64>, Option<f64>)> = r
        .runs
        .iter()
        .map(|o| {
            let bytes = (o.up.message + o.down.message) as f64;
            (bytes, o.after.map(|m| m.accuracy), o.global)
        })
        .collect();
    out.extend(point(r.name.clone(), &own));
    let mut labels: Vec<(String, String)> = r
        .runs
        .iter()
        .flat_map(|o| o.replays.iter().map(|x| (x.label(), x.values())))
        .collect();
    labels.sort();
    labels.dedup();
    for (label, values) in labels {
        let replays: Vec<(f64, Option<f64>, Option<f64>)> = r
            .runs
            .iter()
            .flat_map(|o| o.replays.iter().filter(|x| x.label() == label))
            .map(|x| ((x.up.message + x.down.message) as f64, x.mean, x.global))
            .collect();
        // The values first: a figure shortens long names from their end.
        out.extend(point(format!("{values}: {}", r.name), &replays));
    }
    out
}

fn point(name: String, measured: &[(f64, Option<f64>, Option<f64>)]) -> Option<Point> {
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let local = mean(measured.iter().filter_map(|m| m.1).collect());
    let global = mean(measured.iter().filter_map(|m| m.2).collect());
    if local.is_none() && global.is_none() {
        return None;
    }
    let bytes = mean(measured.iter().map(|m| m.0).collect())?;
    Some(Point {
        name,
        bytes,
        local,
        global,
    })
}

/// A file-name piece: lowercase letters, digits and dots, the rest one dash.
fn slug(s: &str) -> String {
    let kept: String = s
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '.' {
            true => c.to_ascii_lowercase(),
            false => '-',
        })
        .collect();
    let parts: Vec<&str> = kept.split('-').filter(|p| !p.is_empty()).collect();
    parts.join("-")
}

fn collect(p: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if p.is_file() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let entries = std::fs::read_dir(p).with_context(|| format!("cannot read {}", p.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "toml") {
            out.push(path);
        }
    }
    Ok(())
}

fn partition(e: &Experiment) -> String {
    use flint_common::data::PartitionPlan;
    match &e.partition {
        PartitionPlan::Iid { clients } => format!("iid × {clients}"),
        PartitionPlan::Explicit(c) => format!("explicit × {}", c.len()),
        PartitionPlan::Fractions(f) => f
            .iter()
            .map(|x| format!("{x}"))
            .collect::<Vec<_>>()
            .join("/"),
        PartitionPlan::ByClass { clients, split } => format!("{split} × {clients}"),
        PartitionPlan::Dirichlet { alphas, samples } => {
            let iid = e.file.partition.iid_clients.unwrap_or(alphas.len());
            format!("dirichlet {iid}/{} iid × {samples}", alphas.len())
        }
    }
}

fn outcome(dir: &Path) -> anyhow::Result<Outcome> {
    let path = dir.join("results.json");
    let r = RunResults::read(
        &std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?,
    )
    .with_context(|| format!("{} is not a flint results file", path.display()))?;
    let before = r
        .rounds
        .iter()
        .find(|rr| rr.round == 1)
        .and_then(|rr| rr.local_mean);
    let after = r
        .rounds
        .iter()
        .rev()
        .find_map(|rr| rr.mean)
        .map(|m| LocalMetrics {
            accuracy: m.accuracy,
            precision: m.precision,
        });
    let (mut up, mut down, mut cells) = (Traffic::default(), Traffic::default(), 0u64);
    for rr in r.rounds.iter().filter(|rr| rr.round >= 1) {
        for (id, flow) in &rr.bytes {
            let mut f = *flow;
            if let Some(c) = r.client_flow(*id, rr.round) {
                f.up.socket = c.up.socket;
                f.down.socket = c.down.socket;
                f.up.link = c.up.link;
                f.down.link = c.down.link;
            }
            up += f.up;
            down += f.down;
            cells += 1;
        }
    }
    let (up_total, mut down_total) = (up, down);
    let tpfl: Vec<TpflRound> = r
        .rounds
        .iter()
        .filter_map(|rr| rr.report.as_ref()?.details())
        .collect();
    let once: Vec<u64> = tpfl.iter().map(|t| t.paper_download_bytes).collect();
    if !once.is_empty() {
        down_total.paper = once.iter().sum();
    }
    let counts: Vec<f64> = tpfl.iter().map(|t| t.cluster_count() as f64).collect();
    let clusters = (!counts.is_empty()).then(|| counts.iter().sum::<f64>() / counts.len() as f64);
    let per = |t: Traffic| Traffic {
        messages: t.messages / cells.max(1),
        payload: t.payload / cells.max(1),
        message: t.message / cells.max(1),
        socket: t.socket / cells.max(1),
        link: t.link / cells.max(1),
        paper: t.paper / cells.max(1),
    };
    let mut warnings: Vec<String> = r
        .final_warnings()
        .map(|w| flint_common::params::name_of(&w.kind))
        .collect();
    warnings.sort_unstable();
    warnings.dedup();
    let global = r
        .rounds
        .iter()
        .rev()
        .find_map(|rr| rr.global_test)
        .map(|m| m.accuracy);
    let replays = crate::replayed::Replayed::read_all(dir)?;
    let epsilon = r
        .rounds
        .iter()
        .rev()
        .find_map(|rr| rr.privacy.as_ref())
        .map(|p| p.epsilon);
    Ok(Outcome {
        warnings,
        global,
        epsilon,
        replays,
        before,
        after,
        up: per(up),
        down: per(down),
        up_total,
        down_total,
        clusters,
        wall: r.wall_seconds,
        dir: dir.to_path_buf(),
        seed: r.seed,
    })
}

/// Draws each run's accuracy again with the mean of the `local` run of the same data, split and
/// seed beside it, where the grid holds one.
fn plot_local_baselines(rows: &[Row]) {
    for row in rows.iter().filter(|r| r.strategy != "local") {
        let Some(local) = rows
            .iter()
            .find(|l| l.strategy == "local" && l.data == row.data && l.partition == row.partition)
        else {
            continue;
        };
        for run in &row.runs {
            let Some(base) = local.runs.iter().find(|l| l.seed == run.seed) else {
                continue;
            };
            let (Ok(r), Ok(b)) = (
                crate::report::load(&run.dir),
                crate::report::load(&base.dir),
            ) else {
                continue;
            };
            if let Err(e) = crate::plot::run_plots_with(&run.dir, &r, Some(&b)) {
                eprintln!("flint grid: no plots for {}: {e:#}", run.dir.display());
            }
        }
    }
}

fn metric(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.4}"))
}

/// Mean and (over more than one seed) standard deviation.
fn stat(values: &[Option<f64>]) -> String {
    mean_sd(&values.iter().flatten().copied().collect::<Vec<_>>(), 4)
}

/// Mean, and ± the sample standard deviation over more than one value, to `digits` places;
/// "-" for none.
fn mean_sd(v: &[f64], digits: usize) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() == 1 {
        return format!("{mean:.digits$}");
    }
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    format!("{mean:.digits$} ± {sd:.digits$}")
}

fn bytes(runs: &[Outcome], pick: fn(&Outcome) -> Traffic) -> String {
    let Some(first) = runs.first() else {
        return "-".into();
    };
    let t = pick(first);
    format!("{} / {} / {}", t.payload, t.message, t.socket)
}

/// The runs whose last round was warned about, and of what: "2/3: one-class, no-clauses".
fn warned(runs: &[Outcome]) -> String {
    let warned = runs.iter().filter(|o| !o.warnings.is_empty()).count();
    if warned == 0 {
        return "-".into();
    }
    let mut kinds: Vec<&str> = runs
        .iter()
        .flat_map(|o| o.warnings.iter().map(String::as_str))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    format!("{warned}/{}: {}", runs.len(), kinds.join(", "))
}

/// The row's setting, and under `[dp]` the ε its runs spent (the largest).
fn setting_cell(r: &Row) -> String {
    let spent = r
        .runs
        .iter()
        .filter_map(|o| o.epsilon)
        .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
    match spent {
        Some(e) => format!("{}; ε {e:.2}", r.setting),
        None => r.setting.clone(),
    }
}

fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| experiment | strategy | setting | partition | runs | rounds | accuracy before | accuracy after | accuracy, shared test set | precision before | precision after | up B/client/round (payload / message / socket) | down B/client/round | s/run | warnings |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let col = |f: fn(&Outcome) -> Option<f64>| -> String {
            stat(&r.runs.iter().map(f).collect::<Vec<_>>())
        };
        let wall = r.runs.iter().map(|o| o.wall).sum::<f64>() / r.runs.len().max(1) as f64;
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |\n",
            r.name,
            r.strategy,
            setting_cell(r),
            r.partition,
            r.runs.len(),
            r.rounds,
            col(|o| o.before.map(|m| m.accuracy)),
            col(|o| o.after.map(|m| m.accuracy)),
            col(|o| o.global),
            col(|o| o.before.map(|m| m.precision)),
            col(|o| o.after.map(|m| m.precision)),
            bytes(&r.runs, |o| o.up),
            bytes(&r.runs, |o| o.down),
            wall,
            warned(&r.runs),
        );
    }
    s += "\nTotals over rounds 1.. summed over clients, MB (payload / message / socket / paper convention; \
          a download's paper figure is counted as its paper does: TPFL once per cluster).\n\n\
          | experiment | accuracy after | up MB | down MB | clusters/round |\n|---|---|---|---|---|\n";
    for r in rows {
        let Some(o) = r.runs.first() else { continue };
        let mb = |t: Traffic| {
            format!(
                "{:.3} / {:.3} / {:.3} / {:.3}",
                t.payload as f64 / 1e6,
                t.message as f64 / 1e6,
                t.socket as f64 / 1e6,
                t.paper as f64 / 1e6
            )
        };
        s += &format!(
            "| {} | {} | {} | {} | {} |\n",
            r.name,
            stat(
                &r.runs
                    .iter()
                    .map(|o| o.after.map(|m| m.accuracy))
                    .collect::<Vec<_>>()
            ),
            mb(o.up_total),
            mb(o.down_total),
            o.clusters.map_or("-".into(), |c| format!("{c:.1}"))
        );
    }
    s
}

/// A CSV field, quoted when it holds a comma, quote or line break (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "experiment,strategy,setting,partition,run,accuracy_before,accuracy_after,accuracy_global_test,precision_before,precision_after,\
up_payload,up_message,up_socket,up_paper,down_payload,down_message,down_socket,down_paper,\
up_total_payload,up_total_message,up_total_socket,up_total_paper,\
down_total_payload,down_total_message,down_total_socket,down_total_paper,clusters_per_round,wall_seconds,rounds,warnings,epsilon\n",
    );
    let num = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    for r in rows {
        for (i, o) in r.runs.iter().enumerate() {
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{}\n",
                field(&r.name),
                r.strategy,
                field(&r.setting),
                field(&r.partition),
                i + 1,
                num(o.before.map(|m| m.accuracy)),
                num(o.after.map(|m| m.accuracy)),
                num(o.global),
                num(o.before.map(|m| m.precision)),
                num(o.after.map(|m| m.precision)),
                o.up.payload,
                o.up.message,
                o.up.socket,
                o.up.paper,
                o.down.payload,
                o.down.message,
                o.down.socket,
                o.down.paper,
                o.up_total.payload,
                o.up_total.message,
                o.up_total.socket,
                o.up_total.paper,
                o.down_total.payload,
                o.down_total.message,
                o.down_total.socket,
                o.down_total.paper,
                o.clusters.map_or(String::new(), |c| format!("{c}")),
                o.wall,
                r.rounds,
                field(&o.warnings.join(" ")),
                num(o.epsilon)
            );
        }
    }
    s
}

/// Whether `dir` holds a run of exactly `expected` that ran to its end, for `--resume`; if
/// not, why (an interrupted run, or one of an experiment file changed since, is run again).
fn finished_run(dir: &Path, expected: &Experiment) -> Result<(), String> {
    let bytes = std::fs::read(dir.join("results.json")).map_err(|_| "no results".to_string())?;
    let r = RunResults::read(&bytes).map_err(|e| format!("results.json does not parse: {e}"))?;
    if r.fingerprint != expected.fingerprint {
        return Err("its experiment has changed since".into());
    }
    let closed = r.rounds.last().map_or(0, |rr| rr.round);
    if closed < r.rounds_planned {
        return Err(format!(
            "it stopped after {closed} of {}",
            count(r.rounds_planned, "round")
        ));
    }
    if r.completed == Some(false) {
        return Err("its final evaluations are missing".into());
    }
    Ok(())
}
