//! The papers' own tables from a grid's runs, written beside its summary where the grid holds
//! such runs: FedTMOS (`<summary>-fedtmos.md`: per run, then mean ± std over seeds per
//! experiment) and the Blind FL pivot (`<summary>-fcm.md`: per activation, before federation,
//! the local baseline and each federation × aggregation, by partition).

use std::collections::BTreeMap;

use flint_common::strategy::fedtmos::FedTmosRound;
use flint_server::results::RunResults;

use super::{Outcome, Row, mean_sd};

/// FedTMOS's tables, where the grid ran FedTMOS; a run whose round 1 never closed is skipped.
pub fn fedtmos(rows: &[Row]) -> Option<String> {
    let mut per_run = Vec::new();
    let mut per_experiment = Vec::new();
    for row in rows.iter().filter(|r| r.strategy == "fedtmos") {
        let runs: Vec<FedTmosRun> = row.runs.iter().filter_map(FedTmosRun::read).collect();
        if runs.is_empty() {
            continue;
        }
        per_run.extend(runs.iter().map(FedTmosRun::line));
        per_experiment.push(over_seeds(&row.name, &runs));
    }
    if per_run.is_empty() {
        return None;
    }
    Some(format!(
        "| run | seed | clients | FedTMOS eq. 3 | FedTMOS code | ensemble eq. 3 | ensemble code | clients alone | local rows | x | vectors / k | up kB | up kB (code conv.) | down kB FedTMOS + baselines | aggregation ms | training s mean / max | wall s |\n\
         |{}\n{}\n\n\
         | experiment | seeds | FedTMOS eq. 3 | FedTMOS code | ensemble eq. 3 | ensemble code |\n\
         |---|---|---|---|---|---|\n{}\n",
        "---|".repeat(17),
        per_run.join("\n"),
        per_experiment.join("\n")
    ))
}

/// One FedTMOS run's figures, accuracies in percent.
struct FedTmosRun {
    /// The run's name (the experiment's, with `-s<seed>` under `--seeds`).
    name: String,
    seed: u64,
    clients: usize,
    eq3: f64,
    code: f64,
    ens: f64,
    ens_code: f64,
    alone: f64,
    local: f64,
    scale: f64,
    vectors: usize,
    clusters: usize,
    up_kb: f64,
    paper_up_kb: f64,
    down_kb: (f64, f64),
    aggregation_ms: f64,
    train: (f64, f64),
    wall: f64,
}

impl FedTmosRun {
    fn read(o: &Outcome) -> Option<FedTmosRun> {
        let r = crate::report::load(&o.dir).ok()?;
        let rr = r.rounds.iter().find(|x| x.round == 1)?;
        let rep: FedTmosRound = rr.report.as_ref()?.details()?;
        let pct = |name: &str| {
            rr.baselines
                .get(name)
                .map_or(f64::NAN, |m| m.accuracy * 100.0)
        };
        let alone: Vec<f64> = rr
            .baselines
            .iter()
            .filter(|(k, _)| k.starts_with("client-"))
            .map(|(_, m)| m.accuracy * 100.0)
            .collect();
        let n = rr.bytes.len().max(1) as f64;
        let up = |f: fn(&flint_common::wire::ledger::Traffic) -> u64| {
            rr.bytes.values().map(|b| f(&b.up) as f64).sum::<f64>() / n / 1e3
        };
        Some(FedTmosRun {
            name: r.name.clone(),
            seed: r.seed,
            clients: rr.bytes.len(),
            eq3: rr.global_test.map_or(f64::NAN, |m| m.accuracy * 100.0),
            code: pct("composite:per-batch+clamp"),
            ens: pct("ensemble"),
            ens_code: pct("ensemble:per-batch+clamp"),
            alone: mean(&alone),
            local: rr.mean.map_or(f64::NAN, |m| m.accuracy * 100.0),
            scale: rep.scale,
            vectors: rep.vectors,
            clusters: rep.clusters,
            up_kb: up(|t| t.payload),
            paper_up_kb: up(|t| t.paper),
            down_kb: (
                rep.composite_bytes as f64 / 1e3,
                rep.ensemble_bytes as f64 / 1e3,
            ),
            aggregation_ms: rr.aggregation_seconds.map_or(f64::NAN, |s| s * 1e3),
            train: training_seconds(&r),
            wall: r.wall_seconds,
        })
    }

    fn line(&self) -> String {
        format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {} / {} | {:.1} | {:.1} | {:.1} + {:.1} | {:.2} | {:.0} / {:.0} | {:.0} |",
            self.name,
            self.seed,
            self.clients,
            self.eq3,
            self.code,
            self.ens,
            self.ens_code,
            self.alone,
            self.local,
            self.scale,
            self.vectors,
            self.clusters,
            self.up_kb,
            self.paper_up_kb,
            self.down_kb.0,
            self.down_kb.1,
            self.aggregation_ms,
            self.train.0,
            self.train.1,
            self.wall
        )
    }
}

/// The clients' local training, mean and most, in seconds.
fn training_seconds(r: &RunResults) -> (f64, f64) {
    let all: Vec<f64> = r
        .client_train_seconds
        .values()
        .flat_map(|per| per.values().copied())
        .collect();
    (mean(&all), all.iter().copied().fold(f64::NAN, f64::max))
}

fn over_seeds(name: &str, runs: &[FedTmosRun]) -> String {
    let seeds: Vec<String> = runs.iter().map(|r| r.seed.to_string()).collect();
    let col = |f: fn(&FedTmosRun) -> f64| mean_sd(&runs.iter().map(f).collect::<Vec<_>>(), 2);
    format!(
        "| {name} | {} | {} | {} | {} | {} |",
        seeds.join(","),
        col(|r| r.eq3),
        col(|r| r.code),
        col(|r| r.ens),
        col(|r| r.ens_code)
    )
}

/// The Blind FL pivot, where the grid ran FCMs: experiments named as `experiments/fcm/` names
/// them (`…-{blind|blended}-{aggregation}-{activation}-{partition}`, `…-local-{activation}-
/// {partition}`, `…-central-{activation}`); cells are mean accuracy / mean precision over seeds.
pub fn fcm(rows: &[Row]) -> Option<String> {
    let fcm = |s: &str| matches!(s, "blind-fcm" | "blended-fcm" | "local" | "central");
    let rows: Vec<&Row> = rows.iter().filter(|r| fcm(&r.strategy)).collect();
    if !rows.iter().any(|r| r.strategy.ends_with("-fcm")) {
        return None;
    }
    let mut cells = Cells::new();
    let mut central: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for row in rows {
        pivot_row(row, &mut cells, &mut central);
    }
    let mut out = String::new();
    for act in ["tanh", "sigmoid"] {
        out += &activation_table(act, &cells, central.get(act).map_or(&[][..], Vec::as_slice));
    }
    Some(out)
}

const PARTS: [&str; 4] = ["even", "uneven", "sharp1", "sharp2"];

/// (activation, row label, partition) → (accuracy, precision) of every run.
type Cells = BTreeMap<(String, String, String), Vec<(f64, f64)>>;
const BEFORE: &str = "before federation (round-1 local maps)";
const LOCAL: &str = "local, alone";

fn pivot_row(row: &Row, cells: &mut Cells, central: &mut BTreeMap<String, Vec<(f64, f64)>>) {
    let parts: Vec<&str> = row.name.split('-').collect();
    let pair =
        |m: Option<flint_common::strategy::LocalMetrics>| m.map(|m| (m.accuracy, m.precision));
    let [.., fed, agg, act, part] = parts[..] else {
        if let (Some(act), "central") = (parts.last(), row.strategy.as_str()) {
            let all = row.runs.iter().filter_map(|o| pair(o.after));
            central.entry(act.to_string()).or_default().extend(all);
        }
        return;
    };
    if row.strategy == "central" {
        let all = row.runs.iter().filter_map(|o| pair(o.after));
        central.entry(part.to_string()).or_default().extend(all);
        return;
    }
    let mut add = |label: String, act: &str, v: Vec<(f64, f64)>| {
        cells
            .entry((act.to_string(), label, part.to_string()))
            .or_default()
            .extend(v)
    };
    if row.strategy == "local" {
        add(
            BEFORE.into(),
            act,
            row.runs.iter().filter_map(|o| pair(o.before)).collect(),
        );
        add(
            LOCAL.into(),
            act,
            row.runs.iter().filter_map(|o| pair(o.after)).collect(),
        );
        return;
    }
    add(
        format!("{fed}, {agg}"),
        act,
        row.runs.iter().filter_map(|o| pair(o.after)).collect(),
    );
}

fn activation_table(act: &str, cells: &Cells, central: &[(f64, f64)]) -> String {
    let mut out = format!(
        "\n{act} — central (one map, all data): accuracy / precision {} ({} runs)\n\n| | {} |\n|---|{}\n",
        cell(central),
        central.len(),
        PARTS.join(" | "),
        "---|".repeat(PARTS.len())
    );
    let labels = [BEFORE.to_string(), LOCAL.to_string()].into_iter().chain(
        ["blind", "blended"]
            .iter()
            .flat_map(|f| ["mean", "accuracy", "precision"].map(|a| format!("{f}, {a}"))),
    );
    for label in labels {
        let row: Vec<String> = PARTS
            .iter()
            .map(|p| {
                let key = (act.to_string(), label.clone(), p.to_string());
                cell(cells.get(&key).map_or(&[][..], Vec::as_slice))
            })
            .collect();
        out += &format!("| {label} | {} |\n", row.join(" | "));
    }
    out
}

fn cell(v: &[(f64, f64)]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let acc: Vec<f64> = v.iter().map(|p| p.0).collect();
    let prec: Vec<f64> = v.iter().map(|p| p.1).collect();
    format!("{:.4} / {:.4}", mean(&acc), mean(&prec))
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}
