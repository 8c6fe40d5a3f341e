//! Experiment files (TOML), validated once into a checked [`Experiment`].
//!
//! Overrides, strongest last: the file, `FLINT_…` environment variables (`FLINT_ROUNDS=3`,
//! `FLINT_SERVER__ROUND_TIMEOUT_SECS=5`: `__` separates sections), then `--set key=value` flags.
//! `FLINT_DATA_DIR`, `FLINT_LOG` and `FLINT_LOG_FORMAT` are not experiment keys.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::data::{DataSpec, PartitionPlan};
use crate::model::fcm::FcmHyper;
use crate::model::logreg::LogRegHyper;
use crate::model::pso::PsoHyper;
use crate::model::tm::{TmHyper, TmParams};
use crate::strategy::ahp::{AhpCriterion, AhpHyper};
use crate::strategy::fcm::Aggregation;
use crate::strategy::tpfl::TpflHyper;
use crate::strategy::{ModelKind, StrategyKind};
use crate::wire::Compression;
use crate::{FlintError, Result};

/// Environment variables with the `FLINT_` prefix that are not experiment keys.
const RESERVED_ENV: &[&str] = &["DATA_DIR", "LOG", "LOG_FORMAT"];

/// The experiment file as written; every section but `data` has defaults. Clients are declared
/// one by one (`[[clients]]`) or by number (`client_count`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    pub name: String,
    pub strategy: String,
    /// `logreg` or `fcm`; needed by `local` and `central`, implied by the other strategies.
    pub model: Option<String>,
    #[serde(default)]
    pub seed: u64,
    pub rounds: u32,
    #[serde(default)]
    pub server: ServerSection,
    pub data: DataSection,
    #[serde(default)]
    pub partition: PartitionSection,
    #[serde(default)]
    pub logreg: LogRegSection,
    #[serde(default)]
    pub ahp: AhpSection,
    #[serde(default)]
    pub fcm: FcmSection,
    #[serde(default)]
    pub pso: PsoSection,
    /// The Tsetlin Machine (`model = "tm"`, TPFL's coalesced machine).
    #[serde(default)]
    pub tm: TmParams,
    #[serde(default)]
    pub tpfl: TpflSection,
    #[serde(default)]
    pub wire: WireSection,
    /// Clients `client-1` … `client-N`, for runs too large to list (instead of `[[clients]]`).
    pub client_count: Option<usize>,
    #[serde(default)]
    pub clients: Vec<ClientSection>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpflSection {
    /// Local training epochs per round (default 10, TPFL Table 2).
    pub local_epochs: Option<u32>,
    /// `disjoint` (default: test and confidence rows never overlap training rows) or
    /// `paper-code` (both are subsets of the client's training rows, as the published code).
    pub evaluation: Option<String>,
    /// Test rows per client (default 15000).
    pub test_samples: Option<usize>,
    /// Confidence rows per client (default 15000).
    pub confidence_samples: Option<usize>,
    /// `weighted` (default: Σ of weighted class sums, the code) or `votes` (Σ of the signs of
    /// the weights of firing clauses, the paper's formula without weights).
    pub confidence: Option<String>,
    /// `members` (default: the paper's mean) or `with-previous` (the code also averages in the
    /// cluster's previous aggregate).
    pub cluster_mean: Option<String>,
    /// How the average becomes integer weights: `nearest` (default) or `truncate` (the code).
    pub rounding: Option<String>,
    /// Upload the weights minus the vector last received for that class (default false).
    pub delta: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireSection {
    /// gRPC message compression both ways: `none` (default), `gzip` or `zstd`.
    pub compression: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Clients that must have joined before round 1 opens (default: all of them).
    pub min_clients: Option<usize>,
    /// Updates a round needs before its timeout may close it (default: 1).
    pub min_updates: Option<usize>,
    /// Seconds after opening at which a round closes without the missing clients (default: 600).
    pub round_timeout_secs: Option<f64>,
    /// Seconds the server waits for the final evaluations after the last round (default: 60).
    pub eval_timeout_secs: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// `synthetic`, `magic`, `breast-cancer`, `adult`, `mnist`, `fashion-mnist` or `csv`.
    pub source: String,
    /// Fraction of each client's shard held out as its test split (default 0.2).
    pub test_fraction: Option<f64>,
    /// `local-zscore` (each client standardises with its own training statistics; the default
    /// for logistic regression), `local-minmax` (to [0, 1] with its own training range; the
    /// default for FCMs) or `none`.
    pub scaling: Option<String>,
    // synthetic
    pub samples: Option<usize>,
    pub features: Option<usize>,
    pub separation: Option<f64>,
    // csv
    pub path: Option<String>,
    pub label_column: Option<usize>,
    pub classes: Option<Vec<String>>,
    pub header: Option<bool>,
    // mnist, fashion-mnist
    /// A pixel becomes 1 when it is above this value (default 75, as TPFL).
    pub threshold: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSection {
    /// `iid` (default: shuffled, equal shares), `explicit` (each client's `class_counts`),
    /// `fractions` (each client's `fraction` of the shuffled rows) or `dirichlet` (TPFL §6.3;
    /// the only one for image data).
    pub kind: Option<String>,
    /// dirichlet: training rows per client (default 30000).
    pub samples: Option<usize>,
    /// dirichlet: α of the IID clients (default 10000).
    pub iid_alpha: Option<f64>,
    /// dirichlet: α of the non-IID clients (default 0.05).
    pub non_iid_alpha: Option<f64>,
    /// dirichlet: how many clients, the first ones by id, are IID (default: all). TPFL's
    /// experiments 1–5 are 100 %, 75 %, 50 %, 25 % and 0 % of the clients.
    pub iid_clients: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRegSection {
    pub learning_rate: Option<f64>,
    /// Full-batch gradient steps per round.
    pub local_epochs: Option<u32>,
    pub l2: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FcmSection {
    /// `tanh` (default) or `sigmoid`.
    pub activation: Option<String>,
    /// λ; default 2 for tanh, 5 for the sigmoid (the paper's two models).
    pub slope: Option<f64>,
    /// The dynamics stop when ‖c(t) − c(t−1)‖ is below this (default 1e-5).
    pub tolerance: Option<f64>,
    /// Iteration cap of the dynamics (default 100).
    pub max_iterations: Option<usize>,
    /// PSO's objective: `jaccard` (default, 1 − Jaccard of the positive class) or
    /// `sample-jaccard` (eq. 7 per sample, averaged: the error rate).
    pub fitness: Option<String>,
    /// Server aggregation of `blind-fcm` / `blended-fcm`: `mean` (default), `accuracy` or `precision`.
    pub aggregation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PsoSection {
    /// Particles (default 10).
    pub swarm: Option<usize>,
    /// Swarm moves per round (default 20).
    pub iterations: Option<usize>,
    /// Cognitive factor bound φ₁ (default 2).
    pub phi1: Option<f64>,
    /// Social factor bound φ₂ (default 2).
    pub phi2: Option<f64>,
    /// Velocity clamp per component (default 0.2).
    pub max_velocity: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AhpSection {
    /// Criteria in the order of the matrix rows; default `["compute-ghz", "gini", "size"]`.
    pub criteria: Option<Vec<String>>,
    /// Pairwise preference matrix (Saaty scale); default: the AHP paper's Figure 1.
    pub preference: Option<Vec<Vec<f64>>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    pub name: Option<String>,
    /// Declared compute power; `flint-client --compute-ghz` overrides it for a real machine.
    pub compute_ghz: Option<f64>,
    /// Samples per class, for `partition.kind = "explicit"`.
    pub class_counts: Option<Vec<usize>>,
    /// Share of the rows, for `partition.kind = "fractions"`.
    pub fraction: Option<f64>,
}

/// When rounds open and close.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundPolicy {
    pub rounds: u32,
    pub min_clients: usize,
    pub min_updates: usize,
    pub round_timeout: Duration,
    pub eval_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpec {
    pub name: String,
    pub compute_ghz: f64,
}

/// A validated experiment: every field is checked and has its final value.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub file: ExperimentFile,
    pub fingerprint: String,
    pub name: String,
    pub seed: u64,
    pub strategy: StrategyKind,
    pub model: ModelKind,
    pub policy: RoundPolicy,
    pub data: DataSpec,
    pub partition: PartitionPlan,
    pub logreg: LogRegHyper,
    pub ahp: AhpHyper,
    pub fcm: FcmHyper,
    pub pso: PsoHyper,
    pub aggregation: Aggregation,
    pub tm: TmHyper,
    pub tpfl: TpflHyper,
    pub compression: Compression,
    pub clients: Vec<ClientSpec>,
}

impl Experiment {
    /// Reads a file and applies `FLINT_…` environment overrides and `key=value` overrides.
    pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<Experiment> {
        let text = std::fs::read_to_string(path).map_err(|e| FlintError::io(path, e))?;
        let env: BTreeMap<String, String> = std::env::vars()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix("FLINT_")?;
                (!RESERVED_ENV.contains(&key)).then(|| (k.clone(), v))
            })
            .collect();
        Self::from_toml_with(&text, env, overrides)
            .map_err(|e| FlintError::Config(format!("{}: {}", path.display(), strip_prefix(e))))
    }

    /// Parses TOML text with no environment overrides.
    pub fn from_toml(text: &str) -> Result<Experiment> {
        Self::from_toml_with(text, BTreeMap::new(), &[])
    }

    fn from_toml_with(
        text: &str,
        env: BTreeMap<String, String>,
        overrides: &[(String, String)],
    ) -> Result<Experiment> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .add_source(
                config::Environment::with_prefix("FLINT")
                    .prefix_separator("_")
                    .separator("__")
                    .try_parsing(true)
                    .source(Some(env.into_iter().collect())),
            );
        for (key, value) in overrides {
            builder = builder
                .set_override(key.as_str(), value.as_str())
                .map_err(|e| FlintError::Config(format!("override {key}: {e}")))?;
        }
        let file: ExperimentFile = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| FlintError::Config(e.to_string()))?;
        Experiment::check(file)
    }

    /// Validates a parsed file into its checked form.
    pub fn check(file: ExperimentFile) -> Result<Experiment> {
        let bad = |m: String| FlintError::Config(m);
        if file.name.trim().is_empty() {
            return Err(bad("name must not be empty".into()));
        }
        if file.name.contains(['/', '\\']) {
            return Err(bad(format!(
                "name {:?} must not contain a path separator",
                file.name
            )));
        }
        let strategy = StrategyKind::parse(&file.strategy).map_err(bad)?;
        let model = strategy.model(file.model.as_deref()).map_err(bad)?;
        if file.rounds == 0 {
            return Err(bad("rounds must be at least 1".into()));
        }
        let declared = match (file.client_count, file.clients.len()) {
            (Some(_), l) if l > 0 => {
                return Err(bad(
                    "give either client_count or [[clients]] entries, not both".into(),
                ));
            }
            (Some(0), _) | (None, 0) => {
                return Err(bad(
                    "at least one client is needed: client_count = N or [[clients]] entries".into(),
                ));
            }
            (Some(n), _) => vec![ClientSection::default(); n],
            (None, _) => file.clients.clone(),
        };
        let n = declared.len();
        let ahp = AhpHyper::from_section(&file.ahp).map_err(bad)?;
        let mut names = BTreeSet::new();
        let mut clients = Vec::with_capacity(n);
        for (i, c) in declared.iter().enumerate() {
            let name = c
                .name
                .clone()
                .unwrap_or_else(|| format!("client-{}", i + 1));
            if name.is_empty()
                || !name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
            {
                return Err(bad(format!(
                    "client name {name:?} must be non-empty ASCII letters, digits, '-', '_' or '.'"
                )));
            }
            if !names.insert(name.clone()) {
                return Err(bad(format!("client name {name:?} appears twice")));
            }
            let needs_ghz = strategy == StrategyKind::FedAvgAhp
                && ahp.criteria.contains(&AhpCriterion::ComputeGhz);
            let compute_ghz = match c.compute_ghz {
                Some(g) if g.is_finite() && g > 0.0 => g,
                Some(g) => {
                    return Err(bad(format!(
                        "client {name:?}: compute_ghz must be positive, got {g}"
                    )));
                }
                None if needs_ghz => {
                    return Err(bad(format!(
                        "client {name:?} needs compute_ghz: the ahp criterion compute-ghz uses it"
                    )));
                }
                None => 1.0,
            };
            clients.push(ClientSpec { name, compute_ghz });
        }
        let policy = RoundPolicy {
            rounds: file.rounds,
            min_clients: file.server.min_clients.unwrap_or(n),
            min_updates: file.server.min_updates.unwrap_or(1),
            round_timeout: secs(
                "server.round_timeout_secs",
                file.server.round_timeout_secs,
                600.0,
            )?,
            eval_timeout: secs(
                "server.eval_timeout_secs",
                file.server.eval_timeout_secs,
                60.0,
            )?,
        };
        if policy.min_clients == 0 || policy.min_clients > n {
            return Err(bad(format!(
                "server.min_clients must be between 1 and the {n} declared clients, got {}",
                policy.min_clients
            )));
        }
        if policy.min_updates == 0 || policy.min_updates > n {
            return Err(bad(format!(
                "server.min_updates must be between 1 and the {n} declared clients, got {}",
                policy.min_updates
            )));
        }
        if strategy == StrategyKind::Central && n != 1 {
            return Err(bad(format!(
                "strategy central trains one model on all the data: declare one client, not {n}"
            )));
        }
        let mut data = DataSpec::from_section(&file.data).map_err(bad)?;
        match (model == ModelKind::Tm, data.is_images()) {
            (true, false) => {
                return Err(bad(format!(
                    "model tm needs image data (mnist or fashion-mnist), not {:?}",
                    file.data.source
                )));
            }
            (false, true) => {
                return Err(bad(format!(
                    "data source {:?} is images: it needs model = \"tm\" (strategy tpfl)",
                    file.data.source
                )));
            }
            _ => {}
        }
        // FCM concepts live in [0, 1]: min-max is their default, z-scores logistic regression's.
        if file.data.scaling.is_none() && model == ModelKind::Fcm {
            data.scaling = crate::data::Scaling::LocalMinMax;
        }
        let partition = partition_plan(&file.partition, &declared, &clients, data.classes().len())
            .map_err(bad)?;
        if data.is_images() && !matches!(partition, PartitionPlan::Dirichlet { .. }) {
            return Err(bad(
                "image data is split over clients by partition.kind = \"dirichlet\"".into(),
            ));
        }
        let logreg = LogRegHyper::from_section(&file.logreg).map_err(bad)?;
        let fcm = FcmHyper::from_section(&file.fcm).map_err(bad)?;
        let pso = PsoHyper::from_section(&file.pso).map_err(bad)?;
        let aggregation = Aggregation::parse(file.fcm.aggregation.as_deref()).map_err(bad)?;
        let tm = TmHyper::from_params(&file.tm).map_err(bad)?;
        let tpfl = TpflHyper::from_section(&file.tpfl).map_err(bad)?;
        let compression = Compression::parse(file.wire.compression.as_deref()).map_err(bad)?;
        let fingerprint = fingerprint(&file);
        Ok(Experiment {
            fingerprint,
            name: file.name.clone(),
            seed: file.seed,
            strategy,
            model,
            policy,
            data,
            partition,
            logreg,
            ahp,
            fcm,
            pso,
            aggregation,
            tm,
            tpfl,
            compression,
            clients,
            file,
        })
    }

    /// The client's id: its 1-based position in `[[clients]]`.
    pub fn client_id(&self, name: &str) -> Option<crate::ClientId> {
        self.clients
            .iter()
            .position(|c| c.name == name)
            .map(|i| i as u32 + 1)
    }

    pub fn client(&self, id: crate::ClientId) -> Option<&ClientSpec> {
        self.clients.get((id as usize).checked_sub(1)?)
    }

    /// The resolved experiment as TOML, so a run directory records exactly what ran.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(&self.file).expect("experiment serialises to toml")
    }
}

/// Checks each client's partition keys against `partition.kind`.
fn partition_plan(
    section: &PartitionSection,
    files: &[ClientSection],
    clients: &[ClientSpec],
    classes: usize,
) -> std::result::Result<PartitionPlan, String> {
    let kind = section.kind.as_deref().unwrap_or("iid");
    if kind != "dirichlet" {
        let given = [
            ("samples", section.samples.is_some()),
            ("iid_alpha", section.iid_alpha.is_some()),
            ("non_iid_alpha", section.non_iid_alpha.is_some()),
            ("iid_clients", section.iid_clients.is_some()),
        ];
        if let Some((k, _)) = given.iter().find(|(_, set)| *set) {
            return Err(format!(
                "partition.{k} applies to partition.kind = \"dirichlet\", not {kind}"
            ));
        }
    }
    let stray = |what: &str, has: fn(&ClientSection) -> bool| -> std::result::Result<(), String> {
        match files.iter().zip(clients).find(|(f, _)| has(f)) {
            Some((_, c)) => Err(format!(
                "client {:?} has {what} but partition.kind is {kind}",
                c.name
            )),
            None => Ok(()),
        }
    };
    match kind {
        "iid" => {
            stray("class_counts", |f| f.class_counts.is_some())?;
            stray("fraction", |f| f.fraction.is_some())?;
            Ok(PartitionPlan::Iid {
                clients: clients.len(),
            })
        }
        "explicit" => {
            stray("fraction", |f| f.fraction.is_some())?;
            let mut all = Vec::with_capacity(clients.len());
            for (f, c) in files.iter().zip(clients) {
                match &f.class_counts {
                    Some(counts) if counts.len() == classes => all.push(counts.clone()),
                    Some(counts) => {
                        return Err(format!(
                            "client {:?}: class_counts has {} entries but the data has {classes} classes",
                            c.name,
                            counts.len(),
                        ));
                    }
                    None => {
                        return Err(format!(
                            "client {:?} needs class_counts: partition.kind is explicit",
                            c.name
                        ));
                    }
                }
            }
            Ok(PartitionPlan::Explicit(all))
        }
        "fractions" => {
            stray("class_counts", |f| f.class_counts.is_some())?;
            let mut all = Vec::with_capacity(clients.len());
            for (f, c) in files.iter().zip(clients) {
                match f.fraction {
                    Some(x) if x.is_finite() && x > 0.0 && x <= 1.0 => all.push(x),
                    Some(x) => {
                        return Err(format!(
                            "client {:?}: fraction must be in (0, 1], got {x}",
                            c.name
                        ));
                    }
                    None => {
                        return Err(format!(
                            "client {:?} needs a fraction: partition.kind is fractions",
                            c.name
                        ));
                    }
                }
            }
            let sum: f64 = all.iter().sum();
            if (sum - 1.0).abs() > 1e-6 {
                return Err(format!(
                    "the clients' fractions sum to {sum}, expected 1 (every row goes to a client)"
                ));
            }
            Ok(PartitionPlan::Fractions(all))
        }
        "dirichlet" => {
            stray("class_counts", |f| f.class_counts.is_some())?;
            stray("fraction", |f| f.fraction.is_some())?;
            let samples = section.samples.unwrap_or(30_000);
            if samples == 0 {
                return Err("partition.samples must be at least 1".into());
            }
            let iid_alpha = section.iid_alpha.unwrap_or(10_000.0);
            let non_iid_alpha = section.non_iid_alpha.unwrap_or(0.05);
            for (k, a) in [("iid_alpha", iid_alpha), ("non_iid_alpha", non_iid_alpha)] {
                if !(a.is_finite() && a > 0.0) {
                    return Err(format!("partition.{k} must be positive, got {a}"));
                }
            }
            let iid = section.iid_clients.unwrap_or(clients.len());
            if iid > clients.len() {
                return Err(format!(
                    "partition.iid_clients is {iid} but only {} clients are declared",
                    clients.len()
                ));
            }
            let alphas = (0..clients.len())
                .map(|k| if k < iid { iid_alpha } else { non_iid_alpha })
                .collect();
            Ok(PartitionPlan::Dirichlet { alphas, samples })
        }
        other => Err(format!(
            "unknown partition.kind {other:?}; expected iid, explicit, fractions or dirichlet"
        )),
    }
}

fn secs(key: &str, value: Option<f64>, default: f64) -> Result<Duration> {
    let v = value.unwrap_or(default);
    if !(v.is_finite() && v > 0.0) {
        return Err(FlintError::Config(format!(
            "{key} must be a positive number of seconds, got {v}"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

fn fingerprint(file: &ExperimentFile) -> String {
    let json = serde_json::to_vec(file).expect("experiment serialises to json");
    let digest = Sha256::digest(&json);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn strip_prefix(e: FlintError) -> String {
    match e {
        FlintError::Config(m) => m,
        other => other.to_string(),
    }
}

/// Parses `key=value` as given to `--set`.
pub fn parse_override(s: &str) -> std::result::Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected key=value, got {s:?}"))?;
    if k.trim().is_empty() {
        return Err(format!("empty key in {s:?}"));
    }
    Ok((k.trim().to_string(), v.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "t"
strategy = "fedavg"
seed = 3
rounds = 2
[data]
source = "synthetic"
samples = 100
features = 4
[[clients]]
[[clients]]
name = "b"
"#;

    #[test]
    fn defaults_fill_in_and_ids_follow_declaration_order() {
        let e = Experiment::from_toml(BASE).unwrap();
        assert_eq!(e.clients[0].name, "client-1");
        assert_eq!(e.client_id("b"), Some(2));
        assert_eq!(e.policy.min_clients, 2);
        assert_eq!(e.policy.min_updates, 1);
        assert_eq!(e.fingerprint.len(), 16);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = Experiment::from_toml(&BASE.replace("rounds = 2", "rounds = 2\nroundz = 3"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("roundz"), "{err}");
    }

    #[test]
    fn overrides_change_values_and_fingerprint() {
        let a = Experiment::from_toml(BASE).unwrap();
        let b = Experiment::from_toml_with(BASE, BTreeMap::new(), &[("rounds".into(), "5".into())])
            .unwrap();
        assert_eq!(b.policy.rounds, 5);
        assert_ne!(a.fingerprint, b.fingerprint);
        let env = BTreeMap::from([("FLINT_SERVER__MIN_UPDATES".to_string(), "2".to_string())]);
        let c = Experiment::from_toml_with(BASE, env, &[]).unwrap();
        assert_eq!(c.policy.min_updates, 2);
    }

    #[test]
    fn bad_values_say_what_was_expected() {
        let cases = [
            ("rounds = 2", "rounds = 0", "rounds must be at least 1"),
            (
                "strategy = \"fedavg\"",
                "strategy = \"fedprox\"",
                "unknown strategy",
            ),
            ("name = \"b\"", "name = \"client-1\"", "appears twice"),
            (
                "source = \"synthetic\"",
                "source = \"imagenet\"",
                "unknown data source",
            ),
        ];
        for (from, to, want) in cases {
            let err = Experiment::from_toml(&BASE.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{to}: {err}");
        }
    }

    #[test]
    fn baselines_need_a_model_and_central_one_client() {
        let local = BASE.replace("\"fedavg\"", "\"local\"");
        let err = Experiment::from_toml(&local).unwrap_err().to_string();
        assert!(err.contains("strategy local needs a model"), "{err}");
        let e =
            Experiment::from_toml(&local.replace("seed = 3", "seed = 3\nmodel = \"fcm\"")).unwrap();
        assert_eq!(e.model, ModelKind::Fcm);
        assert_eq!(e.data.scaling, crate::data::Scaling::LocalMinMax);
        let central = BASE.replace("\"fedavg\"", "\"central\"\nmodel = \"logreg\"");
        let err = Experiment::from_toml(&central).unwrap_err().to_string();
        assert!(err.contains("declare one client, not 2"), "{err}");
        let wrong = BASE.replace("\"fedavg\"", "\"blind-fcm\"\nmodel = \"logreg\"");
        let err = Experiment::from_toml(&wrong).unwrap_err().to_string();
        assert!(
            err.contains("strategy blind-fcm trains fcm, not model logreg"),
            "{err}"
        );
    }

    #[test]
    fn fractions_must_be_declared_by_every_client_and_sum_to_one() {
        let with = |a: &str, b: &str| {
            BASE.replace(
                "[[clients]]\n[[clients]]",
                &format!("[partition]\nkind = \"fractions\"\n[[clients]]\n{a}\n[[clients]]"),
            )
            .replace("name = \"b\"", &format!("name = \"b\"\n{b}"))
        };
        let e = Experiment::from_toml(&with("fraction = 0.25", "fraction = 0.75")).unwrap();
        assert_eq!(e.partition, PartitionPlan::Fractions(vec![0.25, 0.75]));
        let err = Experiment::from_toml(&with("fraction = 0.25", "fraction = 0.5"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sum to 0.75, expected 1"), "{err}");
        let err = Experiment::from_toml(&with("", "fraction = 1.0"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"client-1\" needs a fraction"), "{err}");
        let err =
            Experiment::from_toml(&BASE.replace("name = \"b\"", "name = \"b\"\nfraction = 0.5"))
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("has fraction but partition.kind is iid"),
            "{err}"
        );
    }

    /// Every experiment the repository ships must load (the FCM grid's files are generated).
    #[test]
    fn every_shipped_experiment_file_is_valid() {
        fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "toml") {
                    out.push(p);
                }
            }
        }
        let mut files = Vec::new();
        walk(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments"),
            &mut files,
        );
        assert!(files.len() > 100, "{} files", files.len());
        let mut names = BTreeSet::new();
        for f in &files {
            let e = Experiment::load(f, &[]).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert!(
                names.insert(e.name.clone()),
                "{}: name {} reused",
                f.display(),
                e.name
            );
        }
    }

    #[test]
    fn ahp_needs_compute_power_of_every_client() {
        let err = Experiment::from_toml(&BASE.replace("\"fedavg\"", "\"fedavg-ahp\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs compute_ghz"), "{err}");
    }

    const TPFL: &str = r#"
name = "t"
strategy = "tpfl"
rounds = 2
client_count = 4
[data]
source = "mnist"
[partition]
kind = "dirichlet"
samples = 100
iid_clients = 1
"#;

    #[test]
    fn tpfl_declares_clients_by_number_and_splits_them_by_dirichlet() {
        let e = Experiment::from_toml(TPFL).unwrap();
        assert_eq!(e.model, ModelKind::Tm);
        assert_eq!(e.clients.len(), 4);
        assert_eq!(e.clients[3].name, "client-4");
        assert_eq!(
            e.partition,
            PartitionPlan::Dirichlet {
                alphas: vec![10_000.0, 0.05, 0.05, 0.05],
                samples: 100
            }
        );
        assert_eq!(e.tpfl.local_epochs, 10);
        assert_eq!(e.tm.clauses, 100);
        let cases = [
            (
                "client_count = 4",
                "client_count = 0",
                "at least one client",
            ),
            (
                "client_count = 4",
                "client_count = 4\n[[clients]]",
                "either client_count or [[clients]]",
            ),
            ("iid_clients = 1", "iid_clients = 5", "only 4 clients"),
            (
                "kind = \"dirichlet\"",
                "kind = \"iid\"",
                "partition.samples applies",
            ),
            (
                "source = \"mnist\"",
                "source = \"magic\"",
                "model tm needs image data",
            ),
            (
                "strategy = \"tpfl\"",
                "strategy = \"fedavg\"",
                "it needs model = \"tm\"",
            ),
            (
                "iid_clients = 1",
                "iid_clients = 1\n[tpfl]\nevaluation = \"peek\"",
                "tpfl.evaluation",
            ),
            (
                "iid_clients = 1",
                "iid_clients = 1\n[wire]\ncompression = \"lz4\"",
                "wire.compression",
            ),
        ];
        for (from, to, want) in cases {
            let err = Experiment::from_toml(&TPFL.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{to}: {err}");
        }
        let mut no_split = TPFL.replace("kind = \"dirichlet\"\nsamples = 100\niid_clients = 1", "");
        no_split = no_split.replace("[partition]\n", "");
        let err = Experiment::from_toml(&no_split).unwrap_err().to_string();
        assert!(err.contains("partition.kind = \"dirichlet\""), "{err}");
    }
}
