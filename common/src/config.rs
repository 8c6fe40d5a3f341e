//! Experiment files (TOML), validated once into a checked [`Experiment`].
//!
//! Overrides, strongest last: the file, `FLINT_…` environment variables (`FLINT_ROUNDS=3`,
//! `FLINT_SERVER__ROUND_TIMEOUT_SECS=5`: `__` separates sections), then `--set key=value` flags.
//! `FLINT_DATA_DIR`, `FLINT_LOG`, `FLINT_LOG_FORMAT`, the `FLINT_TLS_…` files and the compose
//! file's variables are not experiment keys ([`RESERVED_ENV`]).
//!
//! Each section's type and its check live beside the algorithm it configures; this module only
//! assembles them and checks the rules that tie sections together.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::data::partition::{ClassSplit, declare_clients};
use crate::data::{
    ClientSection, ClientSpec, DataSection, DataSpec, PartitionPlan, PartitionSection, Scaling,
};
use crate::model::fcm::FcmSection;
use crate::model::logreg::LogRegSection;
use crate::model::pso::PsoSection;
use crate::model::tm::TmSection;
use crate::params::ParamError;
use crate::strategy::ahp::AhpSection;
use crate::strategy::fedtmos::FedTmosSection;
use crate::strategy::tpfl::TpflSection;
use crate::strategy::{ModelKind, ModelSpec, Sections, StrategyKind, StrategySpec};
use crate::wire::{Compression, WireSection};
use crate::{FlintError, Result};

fn is_unset<T: Default + PartialEq>(section: &T) -> bool {
    *section == T::default()
}

/// Removes every `FLINT_…` environment variable whose value is empty, so that an empty one
/// counts as unset (a compose file can blank a variable but not remove it).
///
/// # Safety
/// Call it first thing in `main`, before any other thread exists (it changes the environment).
pub unsafe fn drop_empty_env() {
    let empty: Vec<std::ffi::OsString> = std::env::vars_os()
        .filter(|(k, v)| k.to_string_lossy().starts_with("FLINT_") && v.is_empty())
        .map(|(k, _)| k)
        .collect();
    for k in empty {
        // SAFETY: the caller guarantees no other thread reads the environment yet.
        unsafe { std::env::remove_var(k) };
    }
}

/// Environment variables with the `FLINT_` prefix that are not experiment keys: the shells'
/// settings (TLS files) and deploy/docker-compose.yml's.
const RESERVED_ENV: &[&str] = &[
    "DATA_DIR",
    "LOG",
    "LOG_FORMAT",
    "TLS_CERT",
    "TLS_KEY",
    "TLS_CLIENT_CA",
    "TLS_CA",
    "TLS_SERVER_NAME",
    "LINK_BYTES",
    "CLIENTS",
    "EXPERIMENT",
    "RESULTS",
    "IMAGE",
];

/// The experiment file as written; every section but `data` has defaults. Clients are declared
/// one by one (`[[clients]]`) or by number (`client_count`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    pub name: String,
    pub strategy: String,
    /// `logreg`, `fcm` or `tm`; needed by `local` and `central`, implied by the other strategies.
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
    pub tm: TmSection,
    #[serde(default)]
    pub tpfl: TpflSection,
    /// Left out of the resolved file while unset, so that experiments written before FedTMOS
    /// keep their fingerprints.
    #[serde(default, skip_serializing_if = "is_unset")]
    pub fedtmos: FedTmosSection,
    #[serde(default)]
    pub wire: WireSection,
    /// Clients `client-1` … `client-N`, for runs too large to list (instead of `[[clients]]`).
    pub client_count: Option<usize>,
    #[serde(default)]
    pub clients: Vec<ClientSection>,
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
    /// Keep every accepted update as it arrived, `updates/round-R-client-C.pb` (a `Payload`) in
    /// the run directory (default false): what a bench or a later analysis replays.
    pub keep_updates: Option<bool>,
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

impl ServerSection {
    /// The policy of a run of `rounds` rounds over `clients` declared clients.
    pub fn check(&self, rounds: u32, clients: usize) -> Result<RoundPolicy> {
        let bad = |m: String| FlintError::Config(m);
        let policy = RoundPolicy {
            rounds,
            min_clients: self.min_clients.unwrap_or(clients),
            min_updates: self.min_updates.unwrap_or(1),
            round_timeout: secs("server.round_timeout_secs", self.round_timeout_secs, 600.0)?,
            eval_timeout: secs("server.eval_timeout_secs", self.eval_timeout_secs, 60.0)?,
        };
        if policy.min_clients == 0 || policy.min_clients > clients {
            return Err(bad(format!(
                "server.min_clients must be between 1 and the {clients} declared clients, got {}",
                policy.min_clients
            )));
        }
        if policy.min_updates == 0 || policy.min_updates > clients {
            return Err(bad(format!(
                "server.min_updates must be between 1 and the {clients} declared clients, got {}",
                policy.min_updates
            )));
        }
        Ok(policy)
    }
}

/// A validated experiment: every field is checked and has its final value.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub file: ExperimentFile,
    pub fingerprint: String,
    pub name: String,
    pub seed: u64,
    /// The strategy with exactly the hyper-parameters it uses.
    pub strategy: StrategySpec,
    pub policy: RoundPolicy,
    pub data: DataSpec,
    pub partition: PartitionPlan,
    pub compression: Compression,
    pub clients: Vec<ClientSpec>,
    /// The file left `data.classes` out and they were read from the data
    /// ([`Experiment::load_with_data`]).
    pub classes_from_data: bool,
}

impl From<ParamError> for FlintError {
    fn from(e: ParamError) -> Self {
        FlintError::Config(e.to_string())
    }
}

impl Experiment {
    /// The client that holds the run's shared test set, where it has one (client 1).
    pub fn global_test_holder(&self) -> Option<crate::ClientId> {
        (self.strategy.global_test_rows().is_some() || self.data.global_test.is_some()).then_some(1)
    }

    /// Reads a file and applies `FLINT_…` environment overrides and `key=value` overrides.
    pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<Experiment> {
        Self::load_reading(path, overrides, None)
    }

    /// [`Experiment::load`], reading from the data below `data_dir` what the file leaves to
    /// the data (a CSV's classes): what a launcher does before it writes the resolved file
    /// that its server and clients read.
    pub fn load_with_data(
        path: &Path,
        overrides: &[(String, String)],
        data_dir: &Path,
    ) -> Result<Experiment> {
        Self::load_reading(path, overrides, Some(data_dir))
    }

    fn load_reading(
        path: &Path,
        overrides: &[(String, String)],
        data_dir: Option<&Path>,
    ) -> Result<Experiment> {
        let text = std::fs::read_to_string(path).map_err(|e| FlintError::io(path, e))?;
        let env: BTreeMap<String, String> = std::env::vars()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix("FLINT_")?;
                (!RESERVED_ENV.contains(&key)).then(|| (k.clone(), v))
            })
            .collect();
        Self::from_toml_with(&text, env, overrides, data_dir)
            .map_err(|e| FlintError::Config(format!("{}: {}", path.display(), strip_prefix(e))))
    }

    /// Parses TOML text with no environment overrides.
    pub fn from_toml(text: &str) -> Result<Experiment> {
        Self::from_toml_with(text, BTreeMap::new(), &[], None)
    }

    fn from_toml_with(
        text: &str,
        env: BTreeMap<String, String>,
        overrides: &[(String, String)],
        data_dir: Option<&Path>,
    ) -> Result<Experiment> {
        let read = |overrides: &[(String, String)]| -> Result<ExperimentFile> {
            let mut builder = config::Config::builder()
                .add_source(config::File::from_str(text, config::FileFormat::Toml))
                .add_source(
                    config::Environment::with_prefix("FLINT")
                        .prefix_separator("_")
                        .separator("__")
                        .try_parsing(true)
                        .source(Some(env.clone().into_iter().collect())),
                );
            for (key, value) in overrides {
                builder = builder
                    .set_override(key.as_str(), value.as_str())
                    .map_err(|e| FlintError::Config(format!("override {key}: {e}")))?;
            }
            builder
                .build()
                .and_then(|c| c.try_deserialize())
                .map_err(|e| FlintError::Config(negative_count(e.to_string())))
        };
        let mut file = read(overrides)?;
        // A run's resolved file writes every preset key out: `--set fedtmos.preset` on it
        // must still switch them. A file that sets them by hand keeps what it set.
        if overrides.iter().any(|(k, _)| k == "fedtmos.preset")
            && let Ok(before) = read(&[])
            && before.fedtmos.writes_every_preset_key()
        {
            let kept: Vec<&str> = overrides
                .iter()
                .filter_map(|(k, _)| k.strip_prefix("fedtmos."))
                .collect();
            file.fedtmos.follow_preset(&before.fedtmos, &kept);
        }
        let inferred = match data_dir {
            Some(dir) => file.data.infer_classes(dir)?.is_some(),
            None => false,
        };
        let mut experiment = Experiment::check(file)?;
        experiment.classes_from_data = inferred;
        Ok(experiment)
    }

    /// Validates a parsed file into its checked form: each section by its own check, then the
    /// rules that tie them together.
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
        let strategy = StrategySpec::check(
            &file.strategy,
            file.model.as_deref(),
            Sections {
                logreg: &file.logreg,
                ahp: &file.ahp,
                fcm: &file.fcm,
                pso: &file.pso,
                tm: &file.tm,
                tpfl: &file.tpfl,
                fedtmos: &file.fedtmos,
            },
        )?;
        if file.rounds == 0 {
            return Err(bad("rounds must be at least 1".into()));
        }
        let one_shot = matches!(
            strategy.kind(),
            StrategyKind::FedTmos | StrategyKind::Ensemble
        );
        if one_shot && file.rounds != 1 {
            return Err(bad(format!(
                "strategy {} is one-shot: set rounds = 1, not {}",
                strategy.name(),
                file.rounds
            )));
        }
        let (declared, clients) = declare_clients(
            file.client_count,
            &file.clients,
            strategy.needs_compute_ghz(),
        )?;
        let n = clients.len();
        let policy = file.server.check(file.rounds, n)?;
        if strategy.kind() == StrategyKind::Central && n != 1 {
            return Err(bad(format!(
                "strategy central trains one model on all the data: declare one client, not {n}"
            )));
        }
        let model = strategy.model().kind();
        // FCM concepts live in [0, 1]: min-max is their default, z-scores logistic regression's.
        let model_scaling = match model {
            ModelKind::Fcm => Scaling::LocalMinMax,
            _ => Scaling::LocalZScore,
        };
        let mut data = file.data.check(model_scaling)?;
        let mut strategy = strategy;
        match (model == ModelKind::Tm, data.is_images()) {
            (true, false) => {
                // A table becomes bits by the thermometer code, raw values in.
                if file.data.scaling.is_some() {
                    return Err(bad(
                        "data.scaling does not apply to model tm: the thermometer code reads raw values".into(),
                    ));
                }
                data.scaling = Scaling::None;
                let columns = data.source_columns();
                let bits = data
                    .table_bits
                    .get_or_insert(crate::data::TableBits::Quantiles {
                        levels: crate::data::DEFAULT_LEVELS,
                    });
                if let (crate::data::TableBits::Fixed(t), Some(columns)) = (&*bits, columns)
                    && t.cuts.len() != columns
                {
                    return Err(bad(format!(
                        "data.cuts has {} lists, but the data has {columns} features",
                        t.cuts.len()
                    )));
                }
                if matches!(strategy.model(), ModelSpec::ConvTm(_)) {
                    // FedTMOS's machines read a whole row as one patch: the server sizes them by
                    // the row's bits, which the experiment must fix.
                    let bits = data.features().ok_or_else(|| {
                        bad(format!(
                            "strategy {} on a csv needs data.features (or data.cuts): the server sizes the machines by it",
                            strategy.name()
                        ))
                    })?;
                    strategy.read_table_rows(bits);
                }
            }
            (false, false) if data.table_bits.is_some() => {
                return Err(bad(
                    "data.booleanize, data.levels and data.cuts apply to model tm".into(),
                ));
            }
            (false, true) => {
                return Err(bad(format!(
                    "data source {:?} is images: it needs model = \"tm\" (strategy tpfl)",
                    file.data.source
                )));
            }
            _ => {}
        }
        let partition = match file
            .partition
            .plan(&declared, &clients, data.classes().len())?
        {
            // Images are split once over the whole training set, each row to one client.
            PartitionPlan::Explicit(counts) if data.is_images() => PartitionPlan::ByClass {
                clients: counts.len(),
                split: ClassSplit::Counts(counts),
            },
            plan => plan,
        };
        if data.is_images()
            && !matches!(
                partition,
                PartitionPlan::Dirichlet { .. } | PartitionPlan::ByClass { .. }
            )
        {
            return Err(bad(
                "image data is split over clients by partition.kind = \"dirichlet\" (or a split by class: dirichlet-by-class, dirichlet-fedtmos-code, classes-per-client, explicit)".into(),
            ));
        }
        if file.fedtmos.copy_data_epoch == Some(true)
            && !(strategy.copy_data_epoch()
                && data.is_images()
                && matches!(partition, PartitionPlan::ByClass { .. }))
        {
            return Err(bad(
                "fedtmos.copy_data_epoch applies to fedtmos and ensemble over a split of the whole training set by class (dirichlet-by-class, dirichlet-fedtmos-code, classes-per-client, explicit)".into(),
            ));
        }
        if data.global_test.is_some()
            && !matches!(
                strategy.kind(),
                StrategyKind::FedAvg
                    | StrategyKind::FedAvgAhp
                    | StrategyKind::BlindFcm
                    | StrategyKind::Central
                    | StrategyKind::FedTmos
                    | StrategyKind::Ensemble
                    | StrategyKind::FedTm
            )
        {
            return Err(bad(format!(
                "data.global_test_fraction measures one global model; strategy {} leaves each client its own",
                strategy.name()
            )));
        }
        let compression = file.wire.check()?;
        // The file as the run reads it, every default of the sections it uses written in: what
        // `experiment.resolved.toml` shows and the fingerprint covers (the same for a file that
        // leaves a default out and one that writes it).
        let file = with_defaults(file, &strategy, &policy, &data, compression);
        let fingerprint = fingerprint(&file);
        Ok(Experiment {
            fingerprint,
            name: file.name.clone(),
            seed: file.seed,
            strategy,
            policy,
            data,
            partition,
            compression,
            clients,
            file,
            classes_from_data: false,
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
        toml::to_string(&self.file).expect("experiment serialises to toml")
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

/// `section` with every key it leaves unset taken from the checked settings `used`, where a key
/// of the same name holds a value the section accepts. `used` is the section's part of the
/// strategy's settings (`StrategySpec` as JSON); its nested objects count as its own keys
/// (FedTMOS's `server` and `composite`).
fn fill<S: Serialize + serde::de::DeserializeOwned>(
    section: &S,
    used: &serde_json::Value,
) -> Option<S> {
    let serde_json::Value::Object(mut keys) = serde_json::to_value(section).ok()? else {
        return None;
    };
    let serde_json::Value::Object(used) = used else {
        return None;
    };
    // Every leaf below `used`, the shallower of two of one name first.
    let mut leaves = serde_json::Map::new();
    let mut level: Vec<&serde_json::Map<String, serde_json::Value>> = vec![used];
    while !level.is_empty() {
        let mut next = Vec::new();
        for map in level {
            for (k, v) in map {
                match v {
                    serde_json::Value::Object(inner) => next.push(inner),
                    other => {
                        leaves.entry(k.clone()).or_insert_with(|| other.clone());
                    }
                }
            }
        }
        level = next;
    }
    for (k, v) in keys.iter_mut() {
        if v.is_null()
            && let Some(value) = leaves.get(k)
        {
            *v = value.clone();
        }
    }
    // A key whose checked value does not read back (another type) stays as it was.
    let filled: S = serde_json::from_value(serde_json::Value::Object(keys.clone())).ok()?;
    Some(filled)
}

/// The first object under `name` anywhere in `tree`, depth first.
fn find<'a>(tree: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    let serde_json::Value::Object(map) = tree else {
        return None;
    };
    if let Some(v @ serde_json::Value::Object(_)) = map.get(name) {
        return Some(v);
    }
    map.values().find_map(|v| find(v, name))
}

/// The experiment file with the defaults of the sections its strategy uses written in.
fn with_defaults(
    mut file: ExperimentFile,
    strategy: &StrategySpec,
    policy: &RoundPolicy,
    data: &crate::data::DataSpec,
    compression: Compression,
) -> ExperimentFile {
    // `{strategy name: {its settings}}`: the settings, whose sections may share its name.
    let used = match serde_json::to_value(strategy) {
        Ok(serde_json::Value::Object(top)) => top.into_iter().next().map(|(_, v)| v),
        _ => None,
    }
    .unwrap_or_default();
    macro_rules! section {
        ($field:ident, $name:literal) => {
            if let Some(part) = find(&used, $name)
                && let Some(filled) = fill(&file.$field, part)
            {
                file.$field = filled;
            }
        };
    }
    section!(logreg, "logreg");
    section!(fcm, "fcm");
    section!(pso, "pso");
    section!(tm, "tm");
    section!(tpfl, "tpfl");
    section!(fedtmos, "fedtmos");
    if let Some(ahp) = find(&used, "ahp") {
        let preference = ahp.get("matrix").cloned().unwrap_or_default();
        let criteria = ahp.get("criteria").cloned().unwrap_or_default();
        let given = serde_json::json!({ "preference": preference, "criteria": criteria });
        if let Some(filled) = fill(&file.ahp, &given) {
            file.ahp = filled;
        }
    }
    let s = &mut file.server;
    s.min_clients.get_or_insert(policy.min_clients);
    s.min_updates.get_or_insert(policy.min_updates);
    s.round_timeout_secs
        .get_or_insert(policy.round_timeout.as_secs_f64());
    s.eval_timeout_secs
        .get_or_insert(policy.eval_timeout.as_secs_f64());
    s.keep_updates.get_or_insert(false);
    file.wire
        .compression
        .get_or_insert_with(|| crate::params::name_of(&compression));
    let d = &mut file.data;
    match &data.source {
        crate::data::Source::Images { binarize, .. } => match *binarize {
            crate::data::booleanize::Binarize::Threshold(
                crate::data::booleanize::Threshold::Above(t),
            ) => {
                d.binarize.get_or_insert_with(|| "threshold".into());
                d.threshold.get_or_insert(t);
            }
            crate::data::booleanize::Binarize::AdaptiveGaussian { block, c } => {
                d.adaptive_block.get_or_insert(block);
                d.adaptive_c.get_or_insert(c);
            }
            crate::data::booleanize::Binarize::Threshold(_) => {}
        },
        // Images keep the official test split; a table's clients split their own rows.
        _ => {
            d.test_fraction.get_or_insert(data.test_fraction);
        }
    }
    // A Tsetlin Machine's data is bits, not scaled.
    if data.table_bits.is_none() && !data.is_images() {
        d.scaling
            .get_or_insert_with(|| crate::params::name_of(&data.scaling));
    }
    if let Some(crate::data::TableBits::Quantiles { levels }) = &data.table_bits {
        d.booleanize.get_or_insert_with(|| "thermometer".into());
        d.levels.get_or_insert(*levels);
    }
    file
}

fn fingerprint(file: &ExperimentFile) -> String {
    let json = serde_json::to_vec(file).expect("experiment serialises to json");
    let digest = Sha256::digest(&json);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Whole-number keys whose least value is not 1 (their own check says the rest of the rule).
const LEAST: &[(&str, u64)] = &[
    ("seed", 0),
    ("data.label_column", 0),
    ("partition.iid_clients", 0),
    ("tm.clauses", 2),
    ("tm.state_bits", 2),
    ("data.adaptive_block", 3),
];

/// The deserializer's word for a negative number given for a count ("invalid type: string
/// \"-3\"", "64-bit integer `-3`, expected an unsigned …") as the rule it breaks.
fn negative_count(message: String) -> String {
    let number = |m: &str| -> Option<i64> {
        let at = m.find(['"', '`'])?;
        let rest = &m[at + 1..];
        rest[..rest.find(['"', '`'])?].parse().ok()
    };
    let key = message
        .rsplit_once(" for key `")
        .and_then(|(_, k)| k.strip_suffix('`'));
    match (number(&message), key) {
        (Some(n), Some(key))
            if n < 0
                && (message.contains("expected an integer")
                    || message.contains("expected an unsigned")
                    || message.contains("expected u")) =>
        {
            let least = LEAST
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(1, |&(_, least)| least);
            format!("{key} must be a whole number of at least {least}, got {n}")
        }
        _ => message,
    }
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
    use std::collections::BTreeSet;

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
        let b = Experiment::from_toml_with(
            BASE,
            BTreeMap::new(),
            &[("rounds".into(), "5".into())],
            None,
        )
        .unwrap();
        assert_eq!(b.policy.rounds, 5);
        assert_ne!(a.fingerprint, b.fingerprint);
        let env = BTreeMap::from([("FLINT_SERVER__MIN_UPDATES".to_string(), "2".to_string())]);
        let c = Experiment::from_toml_with(BASE, env, &[], None).unwrap();
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
        assert_eq!(e.strategy.model().kind(), ModelKind::Fcm);
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
            // Issue 18 §6: the resolved file, every default written in, reads back as the same
            // experiment, with the same fingerprint.
            let again = Experiment::from_toml(&e.to_toml())
                .unwrap_or_else(|err| panic!("{} resolved: {err}\n{}", f.display(), e.to_toml()));
            assert_eq!(again.fingerprint, e.fingerprint, "{}", f.display());
            assert_eq!(again.to_toml(), e.to_toml(), "{}", f.display());
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
        assert_eq!(e.strategy.model().kind(), ModelKind::Tm);
        assert_eq!(e.clients.len(), 4);
        assert_eq!(e.clients[3].name, "client-4");
        assert_eq!(
            e.partition,
            PartitionPlan::Dirichlet {
                alphas: vec![10_000.0, 0.05, 0.05, 0.05],
                samples: 100
            }
        );
        let StrategySpec::Tpfl(tm) = &e.strategy else {
            panic!("{:?}", e.strategy)
        };
        assert_eq!(tm.tpfl.local_epochs, 10);
        assert_eq!(tm.tm.clauses, 100);
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
                "source = \"mnist\"\nlevels = 4",
                "apply to tables; images are booleanized by data.binarize",
            ),
            (
                "source = \"mnist\"",
                "source = \"magic\"\nscaling = \"local-zscore\"",
                "the thermometer code reads raw values",
            ),
            (
                "source = \"mnist\"",
                "source = \"magic\"\ncuts = [[1.0], [2.0, 1.0]]",
                "data.cuts[1] must be ascending",
            ),
            (
                "source = \"mnist\"",
                "source = \"magic\"\nlevels = 0",
                "data.levels must be between 1 and 64",
            ),
            (
                "source = \"mnist\"",
                "source = \"magic\"\ncuts = [[1.0], [2.0], [3.0]]",
                "data.cuts has 3 lists, but the data has 10 features",
            ),
            (
                "iid_clients = 1",
                "iid_clients = 1\n[fedtmos]\ncopy_data_epoch = true",
                "fedtmos.copy_data_epoch applies to fedtmos and ensemble",
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
        // Issue 18 §6: the resolved file shows every default of the sections the run uses, and
        // a file that writes the defaults out is the same experiment as one that leaves them.
        let resolved = e.to_toml();
        for key in [
            "state_bits = 8",
            "confidence = \"weighted\"",
            "round_timeout_secs = 600.0",
            "compression = \"none\"",
            "threshold = 75.0",
        ] {
            assert!(resolved.contains(key), "{key}: {resolved}");
        }
        let written = format!(
            "{TPFL}[tm]\nstate_bits = 8\nboost_true_positive = true\n[server]\nround_timeout_secs = 600\n"
        );
        assert_ne!(written, TPFL);
        assert_eq!(
            Experiment::from_toml(&written).unwrap().fingerprint,
            e.fingerprint
        );
        let other = format!("{TPFL}[tm]\nstate_bits = 7\n");
        assert_ne!(
            Experiment::from_toml(&other).unwrap().fingerprint,
            e.fingerprint
        );
        // Issue 18 §8: a negative count says which rule it breaks, from a file or an override.
        for (text, overrides, want) in [
            (
                TPFL.replace("rounds = ", "rounds = -"),
                vec![],
                "rounds must be a whole number of at least 1, got -",
            ),
            (
                TPFL.to_string(),
                vec![("rounds".to_string(), "-3".to_string())],
                "rounds must be a whole number of at least 1, got -3",
            ),
            (
                TPFL.to_string(),
                vec![("seed".to_string(), "-1".to_string())],
                "seed must be a whole number of at least 0, got -1",
            ),
            (
                TPFL.to_string(),
                vec![("tm.clauses".to_string(), "-5".to_string())],
                "tm.clauses must be a whole number of at least 2, got -5",
            ),
            (
                TPFL.to_string(),
                vec![("data.adaptive_block".to_string(), "-7".to_string())],
                "data.adaptive_block must be a whole number of at least 3, got -7",
            ),
        ] {
            let err = Experiment::from_toml_with(&text, BTreeMap::new(), &overrides, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err}");
        }
        // Issue 18 §4: a table trains a tsetlin machine through its thermometer code: 8 cuts
        // for each of MAGIC's 10 features unless the experiment says otherwise.
        let magic =
            Experiment::from_toml(&TPFL.replace("source = \"mnist\"", "source = \"magic\""))
                .unwrap();
        assert_eq!(magic.data.features(), Some(80));
        assert_eq!(magic.data.scaling, Scaling::None);
        let fixed = Experiment::from_toml(&TPFL.replace(
            "source = \"mnist\"",
            &format!("source = \"magic\"\ncuts = {:?}", vec![vec![0.5, 1.5]; 10]),
        ))
        .unwrap();
        assert_eq!(fixed.data.features(), Some(20));
        let mut no_split = TPFL.replace("kind = \"dirichlet\"\nsamples = 100\niid_clients = 1", "");
        no_split = no_split.replace("[partition]\n", "");
        let err = Experiment::from_toml(&no_split).unwrap_err().to_string();
        assert!(err.contains("partition.kind = \"dirichlet\""), "{err}");
    }

    #[test]
    fn fedtmos_is_one_shot_on_images_with_its_own_section() {
        let fedtmos = TPFL
            .replace("strategy = \"tpfl\"", "strategy = \"fedtmos\"")
            .replace("rounds = 2", "rounds = 1");
        let e = Experiment::from_toml(&fedtmos).unwrap();
        let StrategySpec::FedTmos(f) = &e.strategy else {
            panic!("{:?}", e.strategy)
        };
        assert_eq!((f.fedtmos.server.models, f.fedtmos.server.k_max), (4, 30));
        assert_eq!(f.fedtmos.patch, 10);
        let cases = [
            (
                "rounds = 1",
                "rounds = 3",
                "fedtmos is one-shot: set rounds = 1, not 3",
            ),
            (
                "iid_clients = 1",
                "iid_clients = 1\n[fedtmos]\nnormalization = \"max\"",
                "unknown fedtmos.normalization \"max\"; expected per-sample or per-batch",
            ),
            (
                "iid_clients = 1",
                "iid_clients = 1\n[fedtmos]\nmodels = 0",
                "fedtmos.models must be at least 1, got 0",
            ),
        ];
        for (from, to, want) in cases {
            let err = Experiment::from_toml(&fedtmos.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{to}: {err}");
        }
    }

    /// FEDTMOS-CODE-NOTES §1: Fashion-MNIST is booleanized by OpenCV's adaptive Gaussian
    /// threshold (window 11, C = 2), MNIST by a fixed one.
    #[test]
    fn images_are_booleanized_by_a_threshold_or_the_adaptive_gaussian_one() {
        use crate::data::Source;
        use crate::data::booleanize::{Binarize, Threshold};
        let with = |extra: &str| {
            Experiment::from_toml(&TPFL.replace(
                "source = \"mnist\"",
                &format!("source = \"fashion-mnist\"\n{extra}"),
            ))
        };
        let binarize = |e: Experiment| match e.data.source {
            Source::Images { binarize, .. } => binarize,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            binarize(with("").unwrap()),
            Binarize::Threshold(Threshold::Above(75.0))
        );
        assert_eq!(
            binarize(with("binarize = \"adaptive-gaussian\"").unwrap()),
            Binarize::AdaptiveGaussian { block: 11, c: 2.0 }
        );
        assert_eq!(
            binarize(with("binarize = \"adaptive-gaussian\"\nadaptive_block = 5").unwrap()),
            Binarize::AdaptiveGaussian { block: 5, c: 2.0 }
        );
        let cases = [
            ("binarize = \"otsu\"", "unknown data.binarize \"otsu\""),
            (
                "binarize = \"adaptive-gaussian\"\nthreshold = 10",
                "data.threshold applies to binarize = \"threshold\"",
            ),
            (
                "adaptive_c = 3",
                "apply to binarize = \"adaptive-gaussian\"",
            ),
            (
                "binarize = \"adaptive-gaussian\"\nadaptive_block = 4",
                "data.adaptive_block must be odd, 3 to 27, got 4",
            ),
        ];
        for (extra, want) in cases {
            let err = with(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }

    /// A run's resolved file writes every default out, so `flint replay --set
    /// fedtmos.preset=paper-code` must still switch the keys the preset decides.
    #[test]
    fn a_preset_set_on_a_resolved_file_decides_its_keys() {
        let written = include_str!("../../experiments/fedtmos/mnist-dir0.1.toml");
        let resolved = Experiment::from_toml(written).unwrap().to_toml();
        assert!(resolved.contains("filter = false"), "{resolved}");
        let with = |sets: &[(&str, &str)]| {
            let sets: Vec<(String, String)> = sets
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let e = Experiment::from_toml_with(&resolved, BTreeMap::new(), &sets, None).unwrap();
            match e.strategy {
                StrategySpec::FedTmos(spec) => spec.fedtmos,
                other => panic!("{other:?}"),
            }
        };
        use crate::model::tm::ExcludedAt;
        use crate::model::tm::composite::CompositeOptions;
        use crate::strategy::fedtmos::BitsBy;
        let code = with(&[("fedtmos.preset", "paper-code")]);
        assert!(code.server.filter);
        assert_eq!(code.composite, CompositeOptions::CODE);
        assert_eq!(code.excluded_at, ExcludedAt::Zero);
        assert_eq!(code.server.bits_by, BitsBy::MeanWeight);
        // Keys unrelated to the preset keep the run's values.
        assert_eq!((code.server.models, code.server.k_max), (4, 30));
        let mixed = with(&[
            ("fedtmos.preset", "paper-code"),
            ("fedtmos.filter", "false"),
        ]);
        assert!(!mixed.server.filter);
        assert_eq!(mixed.composite, CompositeOptions::CODE);
        assert_eq!(with(&[]).composite, CompositeOptions::default());
        // And back: a paper-code run's resolved file replayed under the paper's preset.
        let code_run = Experiment::from_toml(
            &written.replace("[fedtmos]\n", "[fedtmos]\npreset = \"paper-code\"\n"),
        )
        .unwrap()
        .to_toml();
        assert!(code_run.contains("filter = true"), "{code_run}");
        let sets = vec![("fedtmos.preset".to_string(), "paper".to_string())];
        let e = Experiment::from_toml_with(&code_run, BTreeMap::new(), &sets, None).unwrap();
        let StrategySpec::FedTmos(back) = e.strategy else {
            panic!("fedtmos")
        };
        assert!(!back.fedtmos.server.filter);
        assert_eq!(back.fedtmos.composite, CompositeOptions::default());
        assert_eq!(back.fedtmos.excluded_at, ExcludedAt::LastExclude);
        // A file that sets a preset key by hand keeps it.
        let by_hand = resolved.clone();
        let by_hand = by_hand
            .lines()
            .filter(|l| !l.starts_with("bits_by") && !l.starts_with("normalization"))
            .collect::<Vec<_>>()
            .join("\n");
        let sets = vec![("fedtmos.preset".to_string(), "paper-code".to_string())];
        let e = Experiment::from_toml_with(&by_hand, BTreeMap::new(), &sets, None).unwrap();
        let StrategySpec::FedTmos(spec) = e.strategy else {
            panic!("fedtmos")
        };
        assert!(!spec.fedtmos.server.filter && !spec.fedtmos.composite.clamp);
        assert_eq!(spec.fedtmos.server.bits_by, BitsBy::MeanWeight);
    }

    /// Explicit counts on images split the whole training set once, by class: how the FedTMOS
    /// code's own draws are run (`experiments/fedtmos-code/numpy/`).
    #[test]
    fn explicit_counts_on_images_are_a_split_by_class() {
        let text = "name = \"x\"\nstrategy = \"fedtmos\"\nrounds = 1\n[data]\nsource = \"mnist\"\n[partition]\nkind = \"explicit\"\n[[clients]]\nclass_counts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n[[clients]]\nclass_counts = [10, 0, 0, 0, 0, 0, 0, 0, 0, 1]\n";
        let e = Experiment::from_toml(text).unwrap();
        assert_eq!(
            e.partition,
            PartitionPlan::ByClass {
                clients: 2,
                split: ClassSplit::Counts(vec![
                    vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                    vec![10, 0, 0, 0, 0, 0, 0, 0, 0, 1]
                ])
            }
        );
        let short = text.replace("[10, 0, 0, 0, 0, 0, 0, 0, 0, 1]", "[10, 1]");
        let err = Experiment::from_toml(&short).unwrap_err().to_string();
        assert!(
            err.contains("class_counts has 2 entries but the data has 10 classes"),
            "{err}"
        );
    }

    #[test]
    fn splits_by_class_take_alpha_or_beta_and_nothing_else() {
        let by_class = |kind: &str, extra: &str| {
            TPFL.replace(
                "kind = \"dirichlet\"\nsamples = 100\niid_clients = 1",
                &format!("kind = \"{kind}\"\n{extra}"),
            )
        };
        let e = Experiment::from_toml(&by_class("dirichlet-by-class", "alpha = 0.3")).unwrap();
        assert_eq!(
            e.partition,
            PartitionPlan::ByClass {
                clients: 4,
                split: crate::data::partition::ClassSplit::DirichletByClass { alpha: 0.3 }
            }
        );
        let e = Experiment::from_toml(&by_class("classes-per-client", "")).unwrap();
        assert_eq!(
            e.partition,
            PartitionPlan::ByClass {
                clients: 4,
                split: crate::data::partition::ClassSplit::ClassesPerClient { beta: 2 }
            }
        );
        let cases = [
            (
                by_class("classes-per-client", "alpha = 0.3"),
                "partition.alpha applies to partition.kind = \"dirichlet-by-class\" or \"dirichlet-fedtmos-code\", not classes-per-client",
            ),
            (
                by_class("classes-per-client", "beta = 11"),
                "partition.beta must be 1 to the 10 classes, got 11",
            ),
            (
                by_class(
                    "classes-per-client",
                    "beta = 2\nclass_sets = [[0], [1], [2], [3]]",
                ),
                "partition.beta and partition.class_sets: give one, not both",
            ),
            (
                by_class("classes-per-client", "class_sets = [[0], [1]]"),
                "partition.class_sets has 2 sets for 4 clients",
            ),
            (
                by_class("dirichlet-by-class", "samples = 10"),
                "partition.samples applies to partition.kind = \"dirichlet\"",
            ),
        ];
        for (text, want) in cases {
            let err = Experiment::from_toml(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
