//! `flint report RUN_DIR`: a run's tables from its results.json.

use std::path::Path;

use anyhow::Context;
use flint_common::degenerate::ModelHealth;
use flint_common::metrics::Metrics;
use flint_common::strategy::Predictor;
use flint_common::strategy::tpfl::TpflRound;
use flint_common::text::count;
use flint_common::wire::ledger::{Flow, Traffic};
use flint_server::results::RunResults;

/// `flint report`: the tables, and the plots drawn again.
pub fn print(dir: &Path) -> anyhow::Result<()> {
    print_tables(dir, true)
}

/// The tables of a run; with `draw`, its plots drawn again (`flint run` has just drawn them).
pub fn print_tables(dir: &Path, draw: bool) -> anyhow::Result<()> {
    let r = load(dir)?;
    print!("{}", render(&r));
    // Pictures are a convenience: a run directory that cannot take them (read-only, say)
    // still gets its tables.
    let drawn = match draw {
        true => crate::plot::run_plots(dir, &r),
        false => Ok(vec![dir.join("plots")]),
    };
    match drawn {
        Ok(plots) if !plots.is_empty() && dir.join("plots").is_dir() => {
            println!("\nPlots: {}", dir.join("plots").display())
        }
        Ok(_) => {}
        Err(e) => eprintln!("flint report: no plots: {e:#}"),
    }
    Ok(())
}

/// A run's results.json with the ledgers and training times its clients wrote beside it
/// (clients/client-<name>.json), where results.json does not hold them yet: a federation of
/// containers leaves them there, `flint run` merges them itself.
pub fn load(dir: &Path) -> anyhow::Result<RunResults> {
    let path = dir.join("results.json");
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut results = RunResults::read(&bytes)
        .with_context(|| format!("{} is not a flint results file", path.display()))?;
    let Ok(entries) = std::fs::read_dir(dir.join("clients")) else {
        return Ok(results);
    };
    let mut health = Vec::new();
    for entry in entries.flatten() {
        let p = entry.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let r: flint_client::ClientReport = serde_json::from_slice(&std::fs::read(&p)?)
            .with_context(|| format!("cannot read {}", p.display()))?;
        results
            .client_ledgers
            .entry(r.client_id)
            .or_insert(r.ledger);
        results
            .client_train_seconds
            .entry(r.client_id)
            .or_insert(r.train_seconds);
        if !r.link_interfaces.is_empty() {
            results
                .client_link_interfaces
                .entry(r.client_id)
                .or_insert(r.link_interfaces);
        }
        if let Some(h) = r.model_health {
            health.push((r.name, r.client_id, h));
        }
    }
    add_model_warnings(&mut results, health);
    Ok(results)
}

/// The clients' final models' warnings, where results.json does not hold them yet.
fn add_model_warnings(
    results: &mut RunResults,
    mut health: Vec<(String, flint_common::ClientId, ModelHealth)>,
) {
    use flint_common::degenerate::WarningKind::{NoClauses, NotFinite};
    if results
        .warnings
        .iter()
        .any(|w| matches!(w.kind, NoClauses | NotFinite))
    {
        return;
    }
    health.sort_by_key(|(_, id, _)| *id);
    let last = results.rounds.last().map_or(0, |r| r.round);
    results
        .warnings
        .extend(flint_common::degenerate::model_warnings(last, &health));
}

/// Strategies that cluster (TPFL): each round's clusters as class: size, and the paper's
/// download figure (one vector per cluster).
fn clusters(r: &RunResults) -> String {
    let rows: Vec<String> = r
        .rounds
        .iter()
        .filter_map(|rr| {
            let t = rr.report.as_ref()?.details::<TpflRound>()?;
            let sizes: Vec<String> = t
                .clusters
                .iter()
                .map(|(class, m)| format!("{}:{}", r.class_name(*class), m.len()))
                .collect();
            Some(format!(
                "{:>5} {:>8}  {:>10.4}  {}\n",
                rr.round,
                t.cluster_count(),
                t.paper_download_bytes as f64 / 1e6,
                sizes.join(" ")
            ))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let once: u64 = r
        .rounds
        .iter()
        .filter_map(|rr| {
            Some(
                rr.report
                    .as_ref()?
                    .details::<TpflRound>()?
                    .paper_download_bytes,
            )
        })
        .sum();
    format!(
        "Clusters per round (class:members); the paper counts one download per cluster:\n\
         round clusters  paper down MB  sizes\n{}total paper download, once per cluster: {:.4} MB\n\n",
        rows.concat(),
        once as f64 / 1e6
    )
}

fn fmt(m: Option<&Metrics>) -> String {
    match m {
        Some(m) => format!(
            "{:>8.4} {:>9.4} {:>8.4} {:>8.4}",
            m.accuracy, m.precision, m.recall, m.f1
        ),
        None => format!("{:>8} {:>9} {:>8} {:>8}", "-", "-", "-", "-"),
    }
}

/// The run's tables as `flint report` prints them.
pub fn render(r: &RunResults) -> String {
    [
        per_round(r),
        link_level(r),
        clusters(r),
        shared_test(r),
        privacy(r),
        secure_aggregation(r),
        training_time(r),
        before_federation(r),
        per_client(r),
        warnings(r),
    ]
    .concat()
}

/// The last round's warnings in full, the earlier rounds' counted: a model that learned
/// nothing is said last, where the eye lands.
fn warnings(r: &RunResults) -> String {
    if r.warnings.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nWarnings (results.json lists every round's):\n");
    for w in r.final_warnings() {
        out += &format!("  warning: {}\n", w.message);
    }
    let earlier = r.warnings.len() - r.final_warnings().count();
    if earlier > 0 {
        out += &format!("  {earlier} in earlier rounds\n");
    }
    out
}

/// The header, and per round the mean metrics and the bytes at each level; the totals.
fn per_round(r: &RunResults) -> String {
    let mut s = String::new();
    s += &format!(
        "run {} ({}, seed {}, fingerprint {}): {} of {}, {}, {:.1} s\n\n",
        r.name,
        r.strategy,
        r.seed,
        r.fingerprint,
        r.rounds.len().saturating_sub(1),
        count(r.rounds_planned, "round"),
        count(r.clients.len() as u64, "client"),
        r.wall_seconds
    );
    s += "Per round: mean over clients of the metrics after the round; bytes summed over clients\n";
    s += "(round 0 = join and initial model; up = client to server).\n";
    s += &format!(
        "{:>5} {:>7} {:>8} {:>9} {:>8} {:>8} | {:>10} {:>10} {:>10} {:>10} | {:>10} {:>10} {:>10} {:>10}\n",
        "round",
        "clients",
        "accuracy",
        "precision",
        "recall",
        "f1",
        "up pay",
        "up msg",
        "up sock",
        "up paper",
        "down pay",
        "down msg",
        "down sock",
        "down paper"
    );
    for rr in &r.rounds {
        s += &format!(
            "{:>5} {:>7} {} | {} | {}\n",
            rr.round,
            rr.metrics.len(),
            fmt(rr.mean.as_ref()),
            columns(&rr.bytes_total.up),
            columns(&rr.bytes_total.down)
        );
    }
    let t = r.totals;
    s += &format!(
        "total bytes: up {} MB, down {} MB (payload / message / socket); paper convention up {:.4} MB, down {:.4} MB\n\n",
        levels(&t.up, mb),
        levels(&t.down, mb),
        t.up.paper as f64 / 1e6,
        t.down.paper as f64 / 1e6
    );
    s += &kept_apart(
        "closing (each client's last report and its connection's close; kept out of the totals)",
        &r.closing,
    );
    for cut in &r.ledger.resumed {
        s += &format!(
            "the server started again in round {}: the bytes of rounds {} to {} may lack what the stopped process counted after the ledger it kept (the link level, which the clients report, is whole)\n\n",
            cut.to, cut.from, cut.to
        );
    }
    s + &kept_apart(
        "not any client's (health probes, refused callers; kept out of the totals)",
        &r.unattributed,
    )
}

/// A line for bytes booked apart from the totals, where there are any.
fn kept_apart(what: &str, f: &Flow) -> String {
    if f.up.socket + f.down.socket == 0 {
        return String::new();
    }
    format!(
        "{what}: up {} MB, down {} MB\n\n",
        levels(&f.up, mb),
        levels(&f.down, mb)
    )
}

/// Per round, the model and its baselines on the shared test set.
fn shared_test(r: &RunResults) -> String {
    let mut s = String::new();
    for rr in &r.rounds {
        if let Some(g) = &rr.global_test {
            s += &format!(
                "Round {} on the shared test set ({} rows): accuracy {:.4}, f1 {:.4}\n",
                rr.round, g.samples, g.accuracy, g.f1
            );
            // In predictor order (client-2 before client-10), unknown names last.
            let mut baselines: Vec<_> = rr.baselines.iter().collect();
            baselines.sort_by_key(|(name, _)| {
                Predictor::parse(name)
                    .ok()
                    .map_or((1, None), |p| (0, Some(p)))
            });
            for (name, b) in baselines {
                s += &format!("  {name:<26} accuracy {:.4}, f1 {:.4}\n", b.accuracy, b.f1);
            }
            let singles: Vec<f64> = rr
                .baselines
                .iter()
                .filter(|(name, _)| name.starts_with("client-"))
                .map(|(_, b)| b.accuracy)
                .collect();
            if !singles.is_empty() {
                s += &format!(
                    "  {:<26} accuracy {:.4}\n",
                    "mean of the clients alone",
                    singles.iter().sum::<f64>() / singles.len() as f64
                );
            }
            if let Some(a) = rr.aggregation_seconds {
                s += &format!("  server aggregation {:.2} ms\n", a * 1e3);
            }
            s += "\n";
        }
    }
    s
}

/// `[dp]`: the noise and what the run spent, as of its last round.
fn privacy(r: &RunResults) -> String {
    let Some(p) = r.rounds.iter().rev().find_map(|x| x.privacy.as_ref()) else {
        return String::new();
    };
    let mechanism = serde_json::to_value(p.mechanism).unwrap_or_default();
    let clipped: u32 = r
        .rounds
        .iter()
        .filter_map(|x| x.privacy.as_ref()?.clipped)
        .sum();
    let clipped = match mechanism.as_str() {
        Some("central") => format!(", {clipped} changes clipped"),
        _ => String::new(),
    };
    format!(
        "Differential privacy ({}): clip {}, noise multiplier {}, noise σ {:.4}{clipped}; \
         ε = {:.2} at δ = {} after {} rounds (ρ = {:.3}), no sampling amplification\n\n",
        mechanism.as_str().unwrap_or("?"),
        p.clip,
        p.noise_multiplier,
        p.noise_std,
        p.epsilon,
        p.delta,
        p.rounds,
        p.rho
    )
}

/// `[secagg]`: what the server saw, and how many inputs each round summed.
fn secure_aggregation(r: &RunResults) -> String {
    let Some(s) = &r.secagg else {
        return String::new();
    };
    let rounds: Vec<_> = r.rounds.iter().filter(|x| x.round > 0).collect();
    let summed: usize = rounds.iter().map(|x| x.participants.len()).sum();
    let asked: usize = rounds.iter().map(|x| x.selected.len()).sum();
    format!(
        "Secure aggregation (Bonawitz et al. 2017): the server saw each round's weighted sum, no \
         update; {summed} of {asked} asked clients' inputs summed over {} rounds (values within \
         ±{}, stages of {} s)\n\n",
        rounds.len(),
        s.bound(),
        s.stage_secs
    )
}

/// Local training time over every client and round.
fn training_time(r: &RunResults) -> String {
    let mut s = String::new();
    let trained: Vec<f64> = r
        .client_train_seconds
        .values()
        .flat_map(|per_round| per_round.values().copied())
        .collect();
    if !trained.is_empty() {
        let mean = trained.iter().sum::<f64>() / trained.len() as f64;
        let max = trained.iter().copied().fold(0.0, f64::max);
        s += &format!(
            "Local training: {mean:.2} s per client and round on average, {max:.2} s at most ({} trainings)\n\n",
            trained.len()
        );
    }
    s
}

/// Round 1's uploads: each client's own model on its test split.
fn before_federation(r: &RunResults) -> String {
    let mut s = String::new();
    if let Some(first) = r.rounds.iter().find(|rr| rr.round == 1)
        && let Some(before) = first.local_mean
    {
        s += "Before federation (round 1 uploads: each client's own model on its test split):\n";
        for c in &r.clients {
            if let Some(m) = first.local.get(&c.id) {
                s += &format!(
                    "{:<12} accuracy {:.4} precision {:.4}\n",
                    c.name, m.accuracy, m.precision
                );
            }
        }
        s += &format!(
            "{:<12} accuracy {:.4} precision {:.4}\n\n",
            "mean", before.accuracy, before.precision
        );
    }
    s
}

/// Per client after the last evaluated round; its compute speed and its aggregation weight only
/// where they tell the clients apart (a FedTMOS run's equal 1/n weights and default speeds say
/// nothing).
fn per_client(r: &RunResults) -> String {
    let mut s = String::new();
    let Some(last) = r.rounds.iter().rev().find(|rr| !rr.metrics.is_empty()) else {
        return s;
    };
    let classes = r.clients.first().map_or(2, |c| c.train_class_counts.len());
    let of = if classes == 2 {
        "of class 1"
    } else {
        "macro over the classes a client's test rows hold or its model predicts"
    };
    s += &format!(
        "Per client after round {} (precision/recall/F1 {of}):\n",
        last.round
    );
    let weight = |id: u32| {
        r.rounds
            .iter()
            .rev()
            .find_map(|rr| rr.weights.get(&id).copied())
    };
    let weights: Vec<Option<f64>> = r.clients.iter().map(|c| weight(c.id)).collect();
    let show_weight = weights.iter().any(|w| *w != weights[0]);
    let show_ghz = r
        .clients
        .iter()
        .any(|c| c.compute_ghz != r.clients[0].compute_ghz);
    let cell = |show: bool, text: String| {
        if show {
            format!(" {text:>8}")
        } else {
            String::new()
        }
    };
    s += &format!(
        "{:<12}{} {:>8} {:>9} {:>8} {:>8}{}\n",
        "client",
        cell(show_ghz, "ghz".into()),
        "accuracy",
        "precision",
        "recall",
        "f1",
        cell(show_weight, "weight".into())
    );
    for (c, w) in r.clients.iter().zip(&weights) {
        let w = w.map_or("-".into(), |w| format!("{w:.4}"));
        s += &format!(
            "{:<12}{} {}{}\n",
            c.name,
            cell(show_ghz, format!("{:.2}", c.compute_ghz)),
            fmt(last.metrics.get(&c.id)),
            cell(show_weight, w)
        );
    }
    s += &format!(
        "{:<12}{} {}\n",
        "mean",
        cell(show_ghz, String::new()),
        fmt(last.mean.as_ref())
    );
    s
}

fn mb(bytes: u64) -> String {
    format!("{:.4}", bytes as f64 / 1e6)
}

/// One direction's four figures as table columns.
fn columns(t: &Traffic) -> String {
    format!(
        "{:>10} {:>10} {:>10} {:>10}",
        kb(t.payload),
        kb(t.message),
        kb(t.socket),
        kb(t.paper)
    )
}

/// "payload / message / socket" in the given unit.
/// Per round, the four levels as the clients counted them, where they measured the link level;
/// otherwise a line saying it was not measured.
fn link_level(r: &RunResults) -> String {
    let Some(p) = r.provenance.as_ref() else {
        return measured_link_level(r);
    };
    let rate =
        |b: Option<u64>| b.map_or("unlimited".into(), |b| format!("{} Mbit/s", b as f64 / 1e6));
    let line = |l: &flint_server::results::EmulatedLink| {
        format!(
            "{} up, {} down, {} ms one way",
            rate(l.up_bits_per_sec),
            rate(l.down_bits_per_sec),
            l.one_way_ms
        )
    };
    let emulated = match (&p.emulated_link, p.emulated_links.is_empty()) {
        (Some(l), _) => format!(
            "Emulated link (flint run --link {}): {}, each client behind its own.\n\n",
            l.profile,
            line(l)
        ),
        (None, false) => {
            let mix: Vec<String> = p
                .emulated_links
                .values()
                .map(|l| format!("{} × {} ({})", l.clients.unwrap_or(0), l.profile, line(l)))
                .collect();
            format!(
                "Emulated links ([links]), each client behind its own: {}.\n\n",
                mix.join("; ")
            )
        }
        (None, true) => String::new(),
    };
    emulated + &measured_link_level(r)
}

fn measured_link_level(r: &RunResults) -> String {
    if r.client_ledgers.is_empty() {
        return reported_link_level(r);
    }
    if r.client_link_interfaces.is_empty() {
        return "Link level: not measured (the clients did not run alone in their network namespaces; \
                `flint client --link-bytes` in its own container measures it).\n\n"
            .into();
    }
    let mut interfaces: Vec<&str> = r
        .client_link_interfaces
        .values()
        .flatten()
        .map(String::as_str)
        .collect();
    interfaces.sort_unstable();
    interfaces.dedup();
    let mut s = format!(
        "Bytes as the clients counted them, summed over the {} of {} clients that measured the link \
         level (their own interfaces: {}; IP + TCP + TLS + gRPC):\n",
        r.client_link_interfaces.len(),
        r.clients.len(),
        interfaces.join(", ")
    );
    s += &format!(
        "{:>5} | {:>42} | {:>42}\n",
        "round", "up: payload / message / socket / link", "down: payload / message / socket / link"
    );
    for rr in &r.rounds {
        let mut f = Flow::default();
        for id in r.client_link_interfaces.keys() {
            if let Some(c) = r.client_flow(*id, rr.round) {
                f += *c;
            }
        }
        let four = |t: &Traffic| format!("{} / {}", levels(t, kb), kb(t.link));
        s += &format!(
            "{:>5} | {:>42} | {:>42}\n",
            rr.round,
            four(&f.up),
            four(&f.down)
        );
    }
    s + "\n"
}

/// Where the clients' own files are not at hand (clients on other hosts): the link level as
/// they reported it to the server with their evaluations, from the server's ledger.
fn reported_link_level(r: &RunResults) -> String {
    if r.totals.up.link + r.totals.down.link == 0 {
        return String::new();
    }
    let mut s = "Link level as the clients reported it with their evaluations (each report's own \
                 bytes come with the next; the last one's are the client's closing, in its own \
                 ledger only):\n"
        .to_string();
    s += &format!("{:>5} | {:>12} | {:>12}\n", "round", "up", "down");
    for rr in &r.rounds {
        let f = r.ledger.round_total(rr.round);
        s += &format!(
            "{:>5} | {:>12} | {:>12}\n",
            rr.round,
            kb(f.up.link),
            kb(f.down.link)
        );
    }
    s + "\n"
}

/// Bytes as kilobytes, one decimal.
pub fn kb(bytes: u64) -> String {
    format!("{:.1} kB", bytes as f64 / 1000.0)
}

pub fn levels(t: &Traffic, unit: fn(u64) -> String) -> String {
    format!(
        "{} / {} / {}",
        unit(t.payload),
        unit(t.message),
        unit(t.socket)
    )
}
