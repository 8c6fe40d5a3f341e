//! What a run leaves behind: `status.json` while it runs (progress), `results.json` and
//! `rounds.csv` at the end. Files are replaced atomically (write, then rename).

use std::collections::BTreeMap;
use std::path::Path;

use flint_common::degenerate::{Warning, WarningKind, few_training_rows};
use flint_common::metrics::Metrics;
use flint_common::strategy::privacy::PrivacySpent;
use flint_common::strategy::tpfl::LegacyDetails;
use flint_common::strategy::{LocalMetrics, Predictor, RoundReport};
use flint_common::wire::ledger::{Flow, Ledger};
use flint_common::{ClientId, Round};
use serde::{Deserialize, Serialize};

use crate::disk::{Disk, HostDisk};
use crate::identity::Holder;
use crate::rounds::Rounds;
use crate::shared::{Refused, Shared};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientRecord {
    pub id: ClientId,
    pub name: String,
    pub train_class_counts: Vec<u64>,
    pub test_samples: u64,
    pub compute_ghz: f64,
    /// The host the client ran on (its container's hostname), as it said at Join.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// The common name of the certificate it proved its identity with (mutual TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundResult {
    pub round: Round,
    /// The clients the round asked (`server.clients_per_round`; every joined client by default).
    #[serde(default)]
    pub selected: Vec<ClientId>,
    /// The clients whose update the round took.
    pub participants: Vec<ClientId>,
    /// Selected clients whose update came after the round closed (recorded, not taken).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<ClientId>,
    /// Selected clients that sent no update for the round: dropped out, or still busy with an
    /// earlier round (a straggler holding its update).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<ClientId>,
    pub closed_by: Option<String>,
    pub seconds: Option<f64>,
    /// The strategy's aggregation alone, within `seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation_seconds: Option<f64>,
    pub weights: BTreeMap<ClientId, f64>,
    /// What the strategy recorded about the round (none for round 0).
    pub report: Option<RoundReport>,
    /// Differential privacy (`[dp]`): the noise added and the most any client has spent so
    /// far, ε at δ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy: Option<PrivacySpent>,
    /// Each client's metrics on its test split with the model it holds after this round.
    pub metrics: BTreeMap<ClientId, Metrics>,
    pub mean: Option<Metrics>,
    /// The model's metrics on the run's shared test set, where the strategy has one (FedTMOS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_test: Option<Metrics>,
    /// Baselines the download also carried, on the shared test set, by predictor name
    /// (`strategy::Predictor`: "ensemble", "client-3", "composite:per-batch+clamp", …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baselines: BTreeMap<String, Metrics>,
    /// What each client's update said about its freshly trained model, before aggregation (Blind
    /// FL: round 1's are the metrics before federation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub local: BTreeMap<ClientId, LocalMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_mean: Option<LocalMetrics>,
    pub bytes: BTreeMap<ClientId, Flow>,
    /// Summed over the clients (client 0's, no client's, apart: [`RunResults::unattributed`]).
    pub bytes_total: Flow,
    /// Files written before the typed report kept it as `details`; [`RunResults::read`]
    /// turns TPFL's into a report.
    #[serde(default, rename = "details", skip_serializing)]
    legacy_details: Option<LegacyDetails>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResults {
    pub run_id: String,
    pub name: String,
    pub strategy: String,
    pub seed: u64,
    pub fingerprint: String,
    pub rounds_planned: u32,
    /// The strategy and every hyper-parameter it ran with (write-only: the experiment file is
    /// the input).
    pub strategy_info: serde_json::Value,
    pub clients: Vec<ClientRecord>,
    /// Round 0 is the join and the initial download; rounds 1.. as run.
    pub rounds: Vec<RoundResult>,
    /// Every client's bytes, summed (client 0's apart: `unattributed`).
    pub totals: Flow,
    pub wall_seconds: f64,
    /// The server's full byte ledger, including bytes by RPC method.
    pub ledger: Ledger,
    /// Each client's own ledger, added by `flint run` when the clients wrote one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_ledgers: BTreeMap<ClientId, Ledger>,
    /// Each client's seconds of local training per round, added by `flint run`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_train_seconds: BTreeMap<ClientId, BTreeMap<Round, f64>>,
    /// The emulated line each client sat behind, by profile name, added by `flint run`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_links: BTreeMap<ClientId, String>,
    /// The network interfaces each client counted at the link level (`--link-bytes`); a client
    /// absent here did not measure it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_link_interfaces: BTreeMap<ClientId, Vec<String>>,
    /// Calls refused before their caller proved which client it is, by `Method/status`; their
    /// message and socket bytes are client 0's in the ledger, their payloads only here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, Refused>,
    /// Whether the run ended as planned: every round closed and every final evaluation in
    /// (false for a run stopped by a signal or cut short by the evaluation timeout; absent in
    /// files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<bool>,
    /// The server process's peak resident memory (VmHWM) when the results were written, in kB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_peak_rss_kb: Option<u64>,
    /// What made these results (absent in files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// `[secagg]`, where the server saw only each round's sum (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secagg: Option<flint_common::config::SecAggSection>,
    /// Bytes of connections that never proved a client (health probes, strangers' refused
    /// calls: client 0 in the ledger), kept out of `totals` and every round's `bytes_total`
    /// since schema 2.
    #[serde(default)]
    pub unattributed: Flow,
    /// The clients' closings (each one's last report and its connection's close; the ledger's
    /// `closing`), kept out of `totals` and the last round's `bytes_total`: no report after
    /// them can carry their link level, so the rounds keep theirs whole (absent in files
    /// written before it was booked apart).
    #[serde(default)]
    pub closing: Flow,
    /// Rounds whose models learned nothing (one class for every row, below the majority class).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// The classes' names, by index (absent in files written before they were recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
}

impl RunResults {
    /// The warnings a summary shows: the last round's, and those known before the run (round
    /// 0); the earlier rounds' stay in `warnings`.
    pub fn final_warnings(&self) -> impl Iterator<Item = &Warning> {
        let last = self.rounds.last().map_or(0, |r| r.round);
        (self.warnings.iter()).filter(move |w| w.round == last || w.round == 0)
    }

    /// Class `index` by its name, where the results record it.
    pub fn class_name(&self, index: u32) -> String {
        self.classes
            .get(index as usize)
            .cloned()
            .unwrap_or_else(|| format!("class {index}"))
    }
}

/// The version of this file's layout: raised when a field changes meaning or goes.
pub const SCHEMA: u32 = 2;

/// What made a results.json: the build, and the data it read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub schema: u32,
    pub flint_version: String,
    /// The git commit the server was built from, where it was built in a git checkout
    /// (uncommitted changes are not shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_revision: Option<String>,
    /// The sha256 of every data file read, by its path as the experiment names it (relative
    /// to the data directory, or absolute), added by `flint run` (the server holds no data).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data_files: BTreeMap<String, String>,
    /// The line every client sat behind (`flint run --link`), added by `flint run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulated_link: Option<EmulatedLink>,
    /// Every emulated line the clients sat behind, by profile (`--link`, or the experiment's
    /// `[links]` and `[[clients]] link`), with what its relay carried; added by `flint run`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub emulated_links: BTreeMap<String, EmulatedLink>,
}

/// An emulated access line, as `flint run --link PROFILE` set it up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmulatedLink {
    pub profile: String,
    pub one_way_ms: f64,
    /// Bits per second each way; `None`: unlimited.
    pub up_bits_per_sec: Option<u64>,
    pub down_bits_per_sec: Option<u64>,
    /// The clients behind it (each over its own line) and the bytes its relay delivered each
    /// way, their connections' whole streams (absent before they were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relayed_up_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relayed_down_bytes: Option<u64>,
}

impl Provenance {
    pub fn of_this_build() -> Provenance {
        Provenance {
            schema: SCHEMA,
            flint_version: env!("CARGO_PKG_VERSION").into(),
            git_revision: option_env!("FLINT_GIT_REVISION")
                .filter(|r| !r.is_empty())
                .map(String::from),
            data_files: BTreeMap::new(),
            emulated_link: None,
            emulated_links: BTreeMap::new(),
        }
    }
}

/// This process's peak resident set (`VmHWM` of /proc/self/status), in kB, where Linux says.
pub fn peak_rss_kb() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

impl RunResults {
    /// Parses a results.json, this version's or an older one.
    pub fn read(bytes: &[u8]) -> serde_json::Result<RunResults> {
        let mut r: RunResults = serde_json::from_slice(bytes)?;
        for rr in &mut r.rounds {
            let old = rr.legacy_details.take().and_then(LegacyDetails::report);
            if rr.report.is_none() {
                rr.report = old.map(|t| RoundReport::of(&t));
            }
        }
        Ok(r)
    }

    /// A client's own count of (client, round), exact per round at the socket level (the
    /// server's socket count is exact per connection).
    pub fn client_flow(&self, id: ClientId, round: Round) -> Option<&Flow> {
        self.client_ledgers
            .get(&id)
            .and_then(|l| l.flows.get(&id)?.get(&round))
    }
}

pub fn collect(shared: &Shared) -> RunResults {
    let holders: BTreeMap<ClientId, Holder> = shared
        .identities
        .lock()
        .expect("identities lock")
        .holders()
        .map(|(id, h)| (id, h.clone()))
        .collect();
    let rounds = shared.rounds();
    let ledger = shared.ledger.snapshot();
    let e = &shared.experiment;
    let clients = rounds
        .joined()
        .iter()
        .map(|(id, s)| {
            let holder = holders.get(id).cloned().unwrap_or_default();
            ClientRecord {
                id: *id,
                name: e.client(*id).map(|c| c.name.clone()).unwrap_or_default(),
                train_class_counts: s.train_class_counts.clone(),
                test_samples: s.test_samples,
                compute_ghz: s.compute_ghz,
                host: holder.host,
                certificate: holder.certificate,
            }
        })
        .collect();
    let last = rounds.history().last().map_or(0, |r| r.round);
    let results: Vec<RoundResult> = (0..=last)
        .map(|r| round_result(&rounds, &ledger, r))
        .collect();
    let warnings = warnings(e, &rounds, last);
    RunResults {
        run_id: shared.run_id.clone(),
        name: e.name.clone(),
        strategy: e.strategy.name(),
        seed: e.seed,
        fingerprint: e.fingerprint.clone(),
        rounds_planned: e.policy.rounds,
        strategy_info: serde_json::to_value(&e.strategy).unwrap_or_else(|err| {
            tracing::error!(error = %err, "cannot record the strategy's settings");
            serde_json::Value::Null
        }),
        clients,
        rounds: results,
        totals: ledger.total(),
        unattributed: ledger.unattributed(),
        closing: ledger.closing_total(),
        wall_seconds: shared.started.elapsed().as_secs_f64(),
        ledger,
        classes: e.data.classes().to_vec(),
        client_ledgers: BTreeMap::new(),
        client_train_seconds: BTreeMap::new(),
        client_link_interfaces: BTreeMap::new(),
        client_links: BTreeMap::new(),
        refused: shared.refused.lock().expect("refused lock").clone(),
        server_peak_rss_kb: peak_rss_kb(),
        completed: Some(rounds.completed()),
        provenance: Some(Provenance::of_this_build()),
        secagg: e.secagg,
        warnings,
    }
}

/// Each round's warnings, logged as the results are written.
fn warnings(e: &flint_common::config::Experiment, rounds: &Rounds, last: Round) -> Vec<Warning> {
    let mut all = e.warnings_before_the_run();
    for round in 1..=last {
        let Some(evals) = rounds.evals().get(&round) else {
            continue;
        };
        let global = rounds
            .global_evals()
            .get(&round)
            .and_then(|g| g.get(&Predictor::Model));
        all.extend(e.round_warnings(round, evals, global));
    }
    let counts = rounds
        .joined()
        .iter()
        .map(|(id, s)| (*id, s.train_class_counts.clone()))
        .collect();
    all.extend(few_training_rows(last, &counts));
    all.extend(rounds.history().iter().filter_map(|r| {
        let why = r.report.failure()?;
        Some(Warning {
            round: r.round,
            kind: WarningKind::AggregationFailed,
            clients: Vec::new(),
            message: format!("the round's aggregation failed ({why}): the model stayed as it was"),
        })
    }));
    all
}

fn round_result(rounds: &Rounds, ledger: &Ledger, round: Round) -> RoundResult {
    let record = rounds.history().iter().find(|r| r.round == round);
    let metrics: BTreeMap<ClientId, Metrics> = rounds
        .evals()
        .get(&round)
        .map(|m| m.iter().map(|(c, cm)| (*c, cm.metrics())).collect())
        .unwrap_or_default();
    let bytes: BTreeMap<ClientId, Flow> = ledger
        .flows
        .iter()
        .filter(|(c, _)| **c != 0)
        .filter_map(|(c, per_round)| per_round.get(&round).map(|f| (*c, *f)))
        .collect();
    let global = rounds.global_evals().get(&round);
    let late: Vec<ClientId> = rounds
        .late()
        .get(&round)
        .map(|l| l.iter().copied().collect())
        .unwrap_or_default();
    let selected = record.map(|r| r.selected.clone()).unwrap_or_default();
    let dropped = record.map_or_else(Vec::new, |r| {
        r.selected
            .iter()
            .filter(|c| !r.participants.contains(c) && !late.contains(c))
            .copied()
            .collect()
    });
    RoundResult {
        round,
        selected,
        participants: record.map(|r| r.participants.clone()).unwrap_or_default(),
        late,
        dropped,
        closed_by: record.map(|r| {
            serde_json::to_value(r.closed_by)
                .unwrap()
                .as_str()
                .unwrap_or("")
                .to_string()
        }),
        seconds: record.map(|r| r.seconds),
        aggregation_seconds: record.map(|r| r.aggregation_seconds),
        weights: record.map(|r| r.weights.clone()).unwrap_or_default(),
        report: record.map(|r| r.report.clone()),
        privacy: record.and_then(|r| r.privacy.clone()),
        mean: Metrics::mean(metrics.values()),
        global_test: global
            .and_then(|g| g.get(&Predictor::Model))
            .map(|m| m.metrics()),
        baselines: global
            .map(|g| {
                g.iter()
                    .filter(|(p, _)| **p != Predictor::Model)
                    .map(|(p, cm)| (p.name(), cm.metrics()))
                    .collect()
            })
            .unwrap_or_default(),
        local_mean: record.and_then(|r| LocalMetrics::mean(r.local.values())),
        local: record.map(|r| r.local.clone()).unwrap_or_default(),
        metrics,
        bytes_total: ledger.round_total(round),
        bytes,
        legacy_details: None,
    }
}

/// Progress for `flint run` and anyone watching: written after every state change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub run_id: String,
    pub rounds_planned: u32,
    pub joined: usize,
    pub clients: usize,
    pub open_round: Option<Round>,
    /// The round whose aggregation is running.
    #[serde(default)]
    pub aggregating: Option<Round>,
    pub updates: usize,
    pub waiting_for: usize,
    pub closed_rounds: Round,
    pub finished: bool,
    /// Per round: evaluations received and their mean accuracy and F1.
    pub evals: BTreeMap<Round, (usize, f64, f64)>,
    pub bytes: BTreeMap<Round, Flow>,
}

pub fn status(shared: &Shared) -> Status {
    let rounds = shared.rounds();
    let (open_round, updates, waiting_for) = match rounds.open_round() {
        Some((r, u, s)) => (Some(r), u, s),
        None => (None, 0, 0),
    };
    let closed = rounds.history().last().map_or(0, |r| r.round);
    let evals = rounds
        .eval_sums()
        .iter()
        .map(|(r, sums)| (*r, sums.means()))
        .collect();
    Status {
        run_id: shared.run_id.clone(),
        rounds_planned: shared.experiment.policy.rounds,
        joined: rounds.joined().len(),
        clients: shared.experiment.clients.len(),
        open_round,
        aggregating: rounds.aggregating(),
        updates,
        waiting_for,
        closed_rounds: closed,
        finished: rounds.is_finished(),
        evals,
        // Totals read in place, in one pass: a copy of the whole ledger on every change cost
        // thousands of clients dearly.
        bytes: shared.ledger.with(|l| l.round_totals(closed)),
    }
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let disk = HostDisk;
    let tmp = path.with_extension("tmp");
    disk.write_synced(&tmp, bytes)?;
    disk.rename(&tmp, path)?;
    // The rename itself is durable only once the directory is synced.
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => disk.sync_dir(dir),
        _ => Ok(()),
    }
}

/// One row per (round, client) and one `all` row per round (mean metrics, summed bytes).
pub fn rounds_csv(r: &RunResults) -> String {
    let mut out = String::from(
        "round,client,accuracy,precision,recall,f1,\
up_payload,up_message,up_socket,up_paper,down_payload,down_message,down_socket,down_paper,\
up_socket_client,down_socket_client,up_link_client,down_link_client\n",
    );
    // The link level is empty where it was not measured, not 0.
    let link = |n: u64| {
        if r.client_link_interfaces.is_empty() {
            String::new()
        } else {
            n.to_string()
        }
    };
    let client_socket = |id: ClientId, round: Round| -> String {
        match r.client_flow(id, round) {
            Some(f) => format!(
                "{},{},{},{}",
                f.up.socket,
                f.down.socket,
                link(f.up.link),
                link(f.down.link)
            ),
            None => ",,,".into(),
        }
    };
    let name = |id: ClientId| {
        r.clients
            .iter()
            .find(|c| c.id == id)
            .map_or_else(|| id.to_string(), |c| c.name.clone())
    };
    let row = |out: &mut String,
               round: Round,
               who: &str,
               m: Option<&Metrics>,
               f: &Flow,
               client: String| {
        let metrics = m.map_or(",,,".to_string(), |m| {
            format!(
                "{:.6},{:.6},{:.6},{:.6}",
                m.accuracy, m.precision, m.recall, m.f1
            )
        });
        out.push_str(&format!(
            "{round},{who},{metrics},{},{},{},{},{},{},{},{},{client}\n",
            f.up.payload,
            f.up.message,
            f.up.socket,
            f.up.paper,
            f.down.payload,
            f.down.message,
            f.down.socket,
            f.down.paper
        ));
    };
    for rr in &r.rounds {
        let ids: std::collections::BTreeSet<ClientId> =
            rr.bytes.keys().chain(rr.metrics.keys()).copied().collect();
        for id in ids {
            let f = rr.bytes.get(&id).copied().unwrap_or_default();
            row(
                &mut out,
                rr.round,
                &name(id),
                rr.metrics.get(&id),
                &f,
                client_socket(id, rr.round),
            );
        }
        let all: Option<Flow> =
            r.client_ledgers
                .iter()
                .try_fold(Flow::default(), |mut acc, (id, l)| {
                    acc += *l.flows.get(id)?.get(&rr.round)?;
                    Some(acc)
                });
        let all = match all {
            Some(f) if !r.client_ledgers.is_empty() => format!(
                "{},{},{},{}",
                f.up.socket,
                f.down.socket,
                link(f.up.link),
                link(f.down.link)
            ),
            _ => ",,,".into(),
        };
        row(
            &mut out,
            rr.round,
            "all",
            rr.mean.as_ref(),
            &rr.bytes_total,
            all,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_common::strategy::tpfl::TpflRound;

    fn run(rounds: Vec<RoundResult>) -> RunResults {
        RunResults {
            run_id: "r".into(),
            name: "n".into(),
            strategy: "tpfl".into(),
            seed: 1,
            fingerprint: "f".into(),
            rounds_planned: 1,
            strategy_info: serde_json::Value::Null,
            clients: Vec::new(),
            rounds,
            totals: Flow::default(),
            wall_seconds: 0.0,
            ledger: Ledger::default(),
            client_ledgers: BTreeMap::new(),
            client_train_seconds: BTreeMap::new(),
            client_link_interfaces: BTreeMap::new(),
            client_links: BTreeMap::new(),
            refused: BTreeMap::new(),
            server_peak_rss_kb: None,
            completed: None,
            provenance: None,
            secagg: None,
            unattributed: Flow::default(),
            closing: Flow::default(),
            warnings: Vec::new(),
            classes: Vec::new(),
        }
    }

    fn round(report: Option<RoundReport>) -> RoundResult {
        RoundResult {
            round: 1,
            selected: vec![1, 2],
            participants: vec![1, 2],
            late: vec![],
            dropped: vec![],
            closed_by: None,
            seconds: None,
            aggregation_seconds: None,
            weights: BTreeMap::new(),
            report,
            privacy: None,
            metrics: BTreeMap::new(),
            mean: None,
            global_test: None,
            baselines: BTreeMap::new(),
            local: BTreeMap::new(),
            local_mean: None,
            bytes: BTreeMap::new(),
            bytes_total: Flow::default(),
            legacy_details: None,
        }
    }

    /// A results.json of an earlier version kept TPFL's round as untyped `details`; it still
    /// reads, as the typed report.
    #[test]
    fn an_older_results_file_reads_with_its_tpfl_report() {
        let mut old = serde_json::to_value(run(vec![round(None)])).unwrap();
        let details = serde_json::json!({
            "clusters": {"3": [1, 2]},
            "cluster_count": 1,
            "paper_download_bytes": 800,
            "winners": {"1": {"class": 3, "confidence": 5.0}, "2": {"class": 3, "confidence": 2.0}},
        });
        old["rounds"][0]["details"] = details;
        old["rounds"][0].as_object_mut().unwrap().remove("report");
        let r = RunResults::read(&serde_json::to_vec(&old).unwrap()).unwrap();
        let t = r.rounds[0]
            .report
            .as_ref()
            .unwrap()
            .details::<TpflRound>()
            .unwrap();
        assert_eq!(t.clusters, BTreeMap::from([(3, vec![1, 2])]));
        assert_eq!(t.paper_download_bytes, 800);
        assert_eq!(t.winners[&2].class, 3);
        // Other strategies' old details (here Blind FL's) leave no report.
        old["rounds"][0]["details"] =
            serde_json::json!({"aggregation": "mean", "equal_weights_fallback": false});
        let r = RunResults::read(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(r.rounds[0].report, None);
        // This version's files never write `details`.
        let new =
            serde_json::to_value(run(vec![round(Some(RoundReport::plain("fedavg")))])).unwrap();
        assert!(new["rounds"][0].get("details").is_none());
    }
}
