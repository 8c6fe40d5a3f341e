//! Experiment files (TOML), validated once into a checked [`Experiment`].
//!
//! Overrides, strongest last: the file, `FLINT_…` environment variables (`FLINT_ROUNDS=3`,
//! `FLINT_SERVER__ROUND_TIMEOUT_SECS=5`: `__` separates sections), then `--set key=value` flags.
//! A value is read as TOML (`--set data.cuts=[[0.5],[1.5]]`), a bare word as a string.
//! `FLINT_DATA_DIR`, `FLINT_LOG`, `FLINT_LOG_FORMAT`, the `FLINT_TLS_…` files and the compose
//! file's variables are not experiment keys ([`RESERVED_ENV`]).
//!
//! Each section's type, with its defaults and its check, lives beside the algorithm it
//! configures; this module assembles them and checks the rules that tie sections together. The
//! resolved file a run writes (`experiment.resolved.toml`) is the checked [`ExperimentFile`]
//! serialized: every key of the sections the run reads, with its value (FedTMOS's preset-decided
//! keys only where they differ from the preset's).

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::data::partition::declare_clients;
use crate::data::{ClientSpec, DataSpec, PartitionPlan};
use crate::params::ParamError;
use crate::strategy::robust::RobustHyper;
use crate::strategy::{StrategyKind, StrategySpec};
use crate::wire::Compression;
use crate::{FlintError, Result};

mod churn;
mod file;
pub mod keys;
mod links;
mod overrides;
mod rules;
mod secagg;

pub use churn::ChurnSection;
pub use file::{ExperimentFile, RoundPolicy, Selection, ServerSection};
pub use links::{LinkProfile, LinksSection};
pub use secagg::{MIN_GROUP, SecAggSection};

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
    "DP_NOISE_KEY_FILE",
    "LOG",
    "LOG_FORMAT",
    "TLS_CERT",
    "TLS_KEY",
    "TLS_CLIENT_CA",
    "TLS_CA",
    "TLS_SERVER_NAME",
    "LINK_BYTES",
    "INSECURE",
    "METRICS_LISTEN",
    "METRICS_LINGER",
    "PROMETHEUS_IMAGE",
    "PROMETHEUS_PORT",
    "RETRY_SECS",
    "CLIENTS",
    "EXPERIMENT",
    "RESULTS",
    "IMAGE",
    "ENROLLMENT",
    "OPEN_ENROLLMENT",
    "ENROLL_SECRET",
    "ENROLL_DIR",
    "UID",
    "GID",
    "GIT_REVISION",
];

/// A validated experiment: every field is checked and has its final value.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub file: ExperimentFile,
    pub fingerprint: String,
    pub name: String,
    pub seed: u64,
    /// The strategy with exactly the hyper-parameters it uses.
    pub strategy: StrategySpec,
    /// How its server averages (`[robust]`; the papers' mean by default).
    pub robust: RobustHyper,
    pub policy: RoundPolicy,
    /// How selected clients drop out and straggle (`[churn]`; none by default).
    pub churn: ChurnSection,
    /// Secure aggregation (`[secagg]`), where it is on.
    pub secagg: Option<SecAggSection>,
    /// The access line each client sits behind where `flint run` emulates them (`[links]`,
    /// `[[clients]] link`; none by default).
    pub links: BTreeMap<crate::ClientId, LinkProfile>,
    pub data: DataSpec,
    pub partition: PartitionPlan,
    pub compression: Compression,
    pub clients: Vec<ClientSpec>,
    /// The file left `data.classes` out and they were read from the data
    /// ([`Experiment::load_with_data`]).
    pub classes_from_data: bool,
    /// The file left `data.header` out: whether its data's first line was read as a header.
    pub header_from_data: Option<bool>,
    /// Each client's id by name: a server of 100,000 clients looks one up at every join.
    client_ids: std::collections::HashMap<String, crate::ClientId>,
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
        let env = env.into_iter().filter_map(|(k, v)| {
            let key = k.strip_prefix("FLINT_")?.to_lowercase().replace("__", ".");
            Some((key, v))
        });
        let overrides: Vec<(String, String)> = env.chain(overrides.iter().cloned()).collect();
        let mut file = overrides::read(text, &overrides)?;
        let inferred = match data_dir {
            Some(dir) => file.data.infer_from_data(dir)?,
            None => Default::default(),
        };
        let mut experiment = Experiment::check(file)?;
        experiment.classes_from_data = inferred.classes;
        experiment.header_from_data = inferred.header;
        Ok(experiment)
    }

    /// Validates a parsed file into its checked form: each section by its own check, then the
    /// rules that tie them together.
    pub fn check(file: ExperimentFile) -> Result<Experiment> {
        rules::check_name(&file.name)?;
        let sections = weight_cap_default(&file, ahp_defaults(&file, file.sections()));
        let model = StrategySpec::model_of(file.strategy, file.model)?;
        let data = rules::data_for_model(&file.data, file.strategy, model)?;
        let strategy = StrategySpec::check(file.strategy, model, &sections, &data.shape())?;
        let rounds = file
            .rounds
            .unwrap_or_else(|| rules::default_rounds(&strategy));
        rules::check_rounds(&strategy, rounds)?;
        if let Some(dp) = &sections.dp {
            dp.check_accountable(rounds)?;
        }
        let (declared, clients) = declare_clients(
            file.client_count,
            &file.clients,
            strategy.needs_compute_ghz(),
        )?;
        let policy = file.server.check(rounds, clients.len(), file.seed)?;
        rules::check_central(&strategy, clients.len())?;
        rules::check_selection(&strategy, &policy)?;
        let churn = file.churn.check()?;
        let secagg = file.secagg.check(strategy.params().secure_bound())?;
        let robust = sections.robust.unwrap_or_default();
        let secure = (&strategy, &robust, &policy, clients.len());
        check_secagg_with(&secagg, &churn, sections.dp.as_ref(), secure)?;
        let links = file.links.check()?.assign(file.seed, &clients);
        let mut policy = policy;
        policy.abandon_short |= churn.dropout > 0.0;
        let partition = rules::partition_for_data(&file.partition, &declared, &clients, &data)?;
        let copy_data_epoch = file.fedtmos.is_some_and(|f| f.copy_data_epoch);
        rules::check_copy_data_epoch(copy_data_epoch, &strategy, &data, &partition)?;
        rules::check_global_test(&strategy, &data)?;
        let compression = file.wire.compression;
        // The file as the run reads it: what `experiment.resolved.toml` shows and the
        // fingerprint covers (the same for a file that leaves a default out and one that writes
        // it).
        let mut file = file;
        file.rounds = Some(rounds);
        if !secagg.is_off() {
            file.secagg = secagg;
        }
        file.set_sections(strategy.resolved_sections(&sections));
        file.server.min_clients = Some(policy.min_clients);
        file.data = file.data.resolved(&data);
        let client_ids = (1..)
            .zip(&clients)
            .map(|(id, c): (crate::ClientId, &ClientSpec)| (c.name.clone(), id))
            .collect();
        Ok(Experiment {
            client_ids,
            fingerprint: fingerprint(&file),
            name: file.name.clone(),
            seed: file.seed,
            strategy,
            robust,
            policy,
            churn,
            secagg: (!secagg.is_off()).then_some(secagg),
            links,
            data,
            partition,
            compression,
            clients,
            file,
            classes_from_data: false,
            header_from_data: None,
        })
    }

    /// The client's id: its 1-based position in `[[clients]]`.
    pub fn client_id(&self, name: &str) -> Option<crate::ClientId> {
        self.client_ids.get(name).copied()
    }

    pub fn client(&self, id: crate::ClientId) -> Option<&ClientSpec> {
        self.clients.get((id as usize).checked_sub(1)?)
    }

    /// A round's degenerate-model warnings ([`crate::degenerate::round_warnings`]), named with
    /// this experiment's classes and clients.
    pub fn round_warnings(
        &self,
        round: crate::Round,
        evals: &BTreeMap<crate::ClientId, crate::metrics::ConfusionMatrix>,
        global: Option<&crate::metrics::ConfusionMatrix>,
    ) -> Vec<crate::degenerate::Warning> {
        let client = |id: crate::ClientId| {
            self.client(id)
                .map_or_else(|| format!("client {id}"), |c| c.name.clone())
        };
        let classes = self.data.classes();
        let names = crate::degenerate::Names {
            classes: &classes,
            client: &client,
        };
        crate::degenerate::round_warnings(round, evals, global, &names)
    }

    /// What is known to go wrong before the run starts: a Fuzzy Cognitive Map on many classes.
    pub fn warnings_before_the_run(&self) -> Vec<crate::degenerate::Warning> {
        let fcm = matches!(self.strategy.model(), crate::strategy::ModelSpec::Fcm(_));
        let classes = self.data.classes().len();
        fcm.then(|| crate::degenerate::fcm_on_many_classes(classes))
            .flatten()
            .into_iter()
            .collect()
    }

    /// The resolved experiment as TOML, so a run directory records exactly what ran.
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.file).expect("experiment serialises to toml")
    }
}

/// AHP-FedAvg's criteria where the file leaves them out: no compute speed for clients declared
/// by count.
fn ahp_defaults(
    file: &ExperimentFile,
    mut sections: crate::strategy::Sections,
) -> crate::strategy::Sections {
    if file.strategy == StrategyKind::FedAvgAhp
        && sections.ahp.is_none()
        && file.client_count.is_some()
    {
        sections.ahp = Some(crate::strategy::ahp::AhpSection::without_compute_speed());
    }
    sections
}

/// Where a strategy weights each client by what it declares, no client takes over twice the
/// round's equal share by default (a capped client's change clipped too): one client declaring
/// a summary within the caps took 0.483 of five clients' AHP weight. Left to the file where it
/// writes `[robust]` (an empty section is the papers' plain mean), beside central `[dp]` (every
/// change is clipped and the noise follows the largest weight: a clip to the round's median
/// would break the sensitivity bound) and under `[secagg]` (which hides the values the cap
/// compares). The share is of the updates combined: a sampled round's, a cluster's.
fn weight_cap_default(
    file: &ExperimentFile,
    mut sections: crate::strategy::Sections,
) -> crate::strategy::Sections {
    let central_dp = sections
        .dp
        .is_some_and(|d| d.mechanism == crate::strategy::privacy::Mechanism::Central);
    let declared = file.strategy.facts().declared_weights;
    if declared && sections.robust.is_none() && !central_dp && file.secagg.is_off() {
        sections.robust = Some(RobustHyper::capped_at_twice_the_share());
    }
    sections
}

/// `[secagg]` where it is on; else no churn that needs it.
fn check_secagg_with(
    secagg: &SecAggSection,
    churn: &ChurnSection,
    dp: Option<&crate::strategy::privacy::DpHyper>,
    (strategy, robust, policy, clients): (&StrategySpec, &RobustHyper, &RoundPolicy, usize),
) -> Result<()> {
    if !secagg.is_off() {
        return secagg::check_secagg(strategy, robust, dp, policy, clients);
    }
    if churn.masked_dropout > 0.0 {
        return Err(FlintError::Config(
            "churn.masked_dropout drops clients after their masked input: it needs [secagg]".into(),
        ));
    }
    Ok(())
}

fn fingerprint(file: &ExperimentFile) -> String {
    let json = serde_json::to_vec(file).expect("experiment serialises to json");
    let digest = Sha256::digest(&json);
    crate::hex::encode(&digest[..8])
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
    use crate::data::Scaling;
    use crate::data::partition::ClassSplit;
    use crate::strategy::ModelKind;
    use crate::strategy::fcm::BlindSpec;
    use crate::strategy::fedavg::FedAvgSpec;

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

    /// `[robust]` is checked with the strategy, written back only where it changes
    /// something (the papers' mean leaves a file's fingerprint as it was), and refused where
    /// nothing is averaged.
    #[test]
    fn robust_averaging_is_read_resolved_and_refused_where_nothing_is_averaged() {
        let plain = Experiment::from_toml(BASE).unwrap();
        let written_plain =
            Experiment::from_toml(&format!("{BASE}[robust]\nrule = \"mean\"\n")).unwrap();
        assert_eq!(plain.fingerprint, written_plain.fingerprint);
        assert!(!plain.to_toml().contains("[robust]"));

        let median =
            Experiment::from_toml(&format!("{BASE}[robust]\nrule = \"median\"\n")).unwrap();
        assert_eq!(median.robust.rule, crate::strategy::robust::Rule::Median);
        assert_ne!(median.fingerprint, plain.fingerprint);
        let again = Experiment::from_toml(&median.to_toml()).unwrap();
        assert_eq!(
            (again.robust, again.fingerprint),
            (median.robust, median.fingerprint)
        );

        let ensemble = BASE.replace(
            "strategy = \"fedavg\"",
            "strategy = \"local\"\nmodel = \"logreg\"",
        );
        let err = Experiment::from_toml(&format!("{ensemble}[robust]\nrule = \"median\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("strategy local averages none"), "{err}");
        let err = Experiment::from_toml(&format!("{BASE}[robust]\nclip = \"norm\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs robust.clip_norm"), "{err}");
    }

    /// `label_column` (and `skip_columns`) by index or by header name; a name
    /// implies the header, and contradicts `header = false`.
    #[test]
    fn a_csv_label_named_in_the_header_implies_the_header() {
        let csv = r#"
name = "t"
strategy = "fedavg"
rounds = 1
[data]
source = "csv"
path = "t.csv"
classes = ["a", "b"]
features = 2
label_column = "species"
skip_columns = [0, "id"]
[[clients]]
"#;
        let e = Experiment::from_toml(csv).unwrap();
        let crate::data::Source::Csv(spec) = &e.data.source else {
            panic!("a csv source")
        };
        assert!(spec.header && !spec.detect_header);
        assert_eq!(spec.named.label.as_deref(), Some("species"));
        assert_eq!(
            (spec.skip_columns.clone(), spec.named.skip.clone()),
            (vec![0], vec!["id".to_string()])
        );
        let again = Experiment::from_toml(&e.to_toml()).unwrap();
        assert_eq!(again.fingerprint, e.fingerprint);
        let headless = csv.replace("features = 2", "features = 2\nheader = false");
        let err = Experiment::from_toml(&headless).unwrap_err().to_string();
        assert!(err.contains("data.header = false"), "{err}");
        let negative = csv.replace("\"species\"", "-1");
        let err = Experiment::from_toml(&negative).unwrap_err().to_string();
        assert!(
            err.contains("a column counts from 0 (or is named), got -1"),
            "{err}"
        );
    }

    /// A round asks `server.clients_per_round` of the declared clients, drawn from the run's
    /// seed; what cannot hold is refused by its key, and a file without it reads as before.
    #[test]
    fn clients_per_round_and_churn_are_checked_and_left_out_where_unset() {
        let plain = Experiment::from_toml(BASE).unwrap();
        assert_eq!(plain.policy.selection.per_round, None);
        assert!(plain.churn.is_none());
        assert!(!plain.to_toml().contains("over_selection"));
        assert!(!plain.to_toml().contains("churn"));
        let with = |server: &str| {
            Experiment::from_toml(&BASE.replace("[data]", &format!("[server]\n{server}\n[data]")))
        };
        let e = with("clients_per_round = 1\nover_selection = 0.5").unwrap();
        assert_eq!(e.policy.selection.seed, 3);
        assert_eq!(e.policy.selection.selected(2), 2, "1 × 1.5, rounded up");
        assert_eq!(e.policy.selection.target(2), 1);
        assert_ne!(e.fingerprint, plain.fingerprint);
        let cases = [
            (
                "clients_per_round = 3",
                "between 1 and the 2 declared clients, got 3",
            ),
            (
                "clients_per_round = 0",
                "between 1 and the 2 declared clients, got 0",
            ),
            (
                "clients_per_round = 1\nmin_updates = 2",
                "server.min_updates (2) must be at most server.clients_per_round (1)",
            ),
            (
                "over_selection = 0.3",
                "server.over_selection needs server.clients_per_round",
            ),
            (
                "clients_per_round = 1\nover_selection = -1",
                "server.over_selection must be a fraction between 0 and 10",
            ),
        ];
        for (server, said) in cases {
            let err = with(server).unwrap_err().to_string();
            assert!(err.contains(said), "{server}: {err}");
        }
        let churned = BASE.replace("[data]", "[churn]\ndropout = 0.1\n[data]");
        let e = Experiment::from_toml(&churned).unwrap();
        assert_eq!(e.churn.dropout, 0.1);
        assert!(
            e.policy.abandon_short,
            "a dropped client never answers its round"
        );
        assert!(!plain.policy.abandon_short);
        assert!(e.to_toml().contains("[churn]"));
        let err = Experiment::from_toml(&BASE.replace("[data]", "[churn]\ndropout = 1.5\n[data]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("churn.dropout must be a probability"), "{err}");
        let one_shot = "name = \"x\"\nstrategy = \"fedtmos\"\n[server]\nclients_per_round = 1\n[data]\nsource = \"mnist\"\n[partition]\nkind = \"explicit\"\n[[clients]]\nclass_counts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
        let err = Experiment::from_toml(one_shot).unwrap_err().to_string();
        assert!(err.contains("asks every client once"), "{err}");
    }

    /// `rounds` left out is 1 for the one-shot strategies and 10 for the others,
    /// and the resolved file writes it (a file that writes the default has the same
    /// fingerprint).
    #[test]
    fn rounds_left_out_take_the_strategys_default() {
        let without = BASE.replace("rounds = 2\n", "");
        let e = Experiment::from_toml(&without).unwrap();
        assert_eq!(e.policy.rounds, 10);
        assert!(e.to_toml().contains("rounds = 10"));
        let written = Experiment::from_toml(&BASE.replace("rounds = 2", "rounds = 10")).unwrap();
        assert_eq!(e.fingerprint, written.fingerprint);
        let one_shot = "name = \"x\"\nstrategy = \"fedtmos\"\n[data]\nsource = \"mnist\"\n[partition]\nkind = \"explicit\"\n[[clients]]\nclass_counts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
        assert_eq!(Experiment::from_toml(one_shot).unwrap().policy.rounds, 1);
    }

    /// On a table the keys a section leaves out are sized by its classes, the resolved file
    /// writes the values chosen, a written key stays, and images keep the papers'.
    #[test]
    fn a_table_sizes_the_defaults_by_its_classes() {
        let table = |strategy: &str, classes: usize, extra: &str| {
            let names: Vec<String> = (0..classes).map(|c| format!("\"c{c}\"")).collect();
            let text = format!(
                "name = \"x\"\nstrategy = \"{strategy}\"\nclient_count = 2\n[data]\nsource = \"csv\"\npath = \"t.csv\"\nfeatures = 4\nclasses = [{}]\n{extra}",
                names.join(", ")
            );
            Experiment::from_toml(&text).unwrap()
        };
        let StrategySpec::Tpfl(t) = table("tpfl", 10, "").strategy else {
            panic!("tpfl")
        };
        assert_eq!(
            (t.tm.clauses, t.tm.t, t.tm.s, t.tm.weighted),
            (1000, 250, 5.0, true)
        );
        let e = table("fedtmos", 3, "[tm]\nclauses = 40\n");
        let StrategySpec::FedTmos(f) = &e.strategy else {
            panic!("fedtmos")
        };
        assert_eq!((f.tm.clauses, f.tm.t), (40, 20));
        assert_eq!(f.fedtmos.server.top_k, 1);
        assert_eq!(f.fedtmos.server.weight_resolution, 256);
        let fedtm = table("fedtm", 3, "[fedtmos]\ntop_k = 2\n");
        let StrategySpec::FedTm(f) = &fedtm.strategy else {
            panic!("fedtm")
        };
        assert_eq!(f.0.fedtmos.server.top_k, 2);
        // FedTM scales nothing: its file has no R.
        assert!(!fedtm.to_toml().contains("weight_resolution"));
        let resolved = e.to_toml();
        assert!(
            resolved.contains("clauses = 40\nt = 20\ns = 5.0"),
            "{resolved}"
        );
        assert!(resolved.contains("weight_resolution = 256"), "{resolved}");
        // The code's truncation chosen on a table is written, so it reads back as it ran.
        let truncated = table("fedtmos", 3, "[fedtmos]\nweight_resolution = 1\n");
        let back = Experiment::from_toml(&truncated.to_toml()).unwrap();
        let StrategySpec::FedTmos(f) = &back.strategy else {
            panic!("fedtmos")
        };
        assert_eq!(f.fedtmos.server.weight_resolution, 1);
        assert_eq!(back.fingerprint, truncated.fingerprint);
        assert_eq!(
            Experiment::from_toml(&resolved).unwrap().fingerprint,
            e.fingerprint
        );
        let StrategySpec::FedAvg(FedAvgSpec { logreg, .. }) = table("fedavg", 26, "").strategy
        else {
            panic!("fedavg")
        };
        assert_eq!(logreg.local_epochs, 78);
        let StrategySpec::FedAvg(FedAvgSpec { logreg, .. }) = table("fedavg", 3, "").strategy
        else {
            panic!("fedavg")
        };
        assert_eq!(logreg.local_epochs, 10);
        let StrategySpec::BlindFcm(BlindSpec(f)) = table("blind-fcm", 26, "").strategy else {
            panic!("blind-fcm")
        };
        assert_eq!(f.fcm.max_iterations, 10);
        let StrategySpec::BlindFcm(BlindSpec(f)) = table("blind-fcm", 2, "").strategy else {
            panic!("blind-fcm")
        };
        assert_eq!(f.fcm.max_iterations, 100);
        let StrategySpec::Tpfl(t) = Experiment::from_toml(TPFL).unwrap().strategy else {
            panic!("tpfl")
        };
        assert_eq!(t.tm, crate::model::tm::TmHyper::default());
        let images = TPFL.replace("strategy = \"tpfl\"", "strategy = \"fedtm\"");
        let StrategySpec::FedTm(f) = Experiment::from_toml(&images).unwrap().strategy else {
            panic!("fedtm")
        };
        assert_eq!(f.0.fedtmos.server.top_k, 1, "the default preset's K");
        let paper = images + "[fedtmos]\npreset = \"paper\"\n";
        let StrategySpec::FedTm(f) = Experiment::from_toml(&paper).unwrap().strategy else {
            panic!("fedtm")
        };
        assert_eq!(f.0.fedtmos.server.top_k, 2);
        // Images keep the code's truncation, and their resolved files are as they were.
        let mnist = include_str!("../../../experiments/fedtmos/mnist-dir0.1.toml");
        let e = Experiment::from_toml(mnist).unwrap();
        let StrategySpec::FedTmos(f) = &e.strategy else {
            panic!("fedtmos")
        };
        assert_eq!(f.fedtmos.server.weight_resolution, 1);
        assert!(!e.to_toml().contains("weight_resolution"));
    }

    /// Every `FLINT_…` variable the shells read or the deployment files set is reserved, so that
    /// none is read as an experiment key (FLINT_ENROLLMENT once was: `unknown field enrollment`).
    #[test]
    fn every_flint_variable_of_the_shells_and_deployments_is_reserved() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        for dir in [
            "client/src",
            "server/src",
            "deploy/src",
            "shell/src",
            "deploy",
            "deploy/k8s/base",
        ] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
                let p = entry.path();
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
                if ["rs", "yml", "yaml", "sh"].contains(&ext) {
                    files.push(p);
                }
            }
        }
        let mut unreserved = BTreeSet::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (at, _) in text.match_indices("FLINT_") {
                let name: String = text[at + 6..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() && !RESERVED_ENV.contains(&name.as_str()) {
                    unreserved.insert(format!("FLINT_{name} ({})", file.display()));
                }
            }
        }
        assert!(files.len() > 20, "{files:?}");
        assert!(
            unreserved.is_empty(),
            "read as experiment keys: {unreserved:?}"
        );
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
                "strategy = \"fedsgd\"",
                "strategy: unknown variant `fedsgd`, expected one of `fedavg`",
            ),
            ("name = \"b\"", "name = \"client-1\"", "appears twice"),
            (
                "source = \"synthetic\"",
                "source = \"imagenet\"",
                "data.source: unknown variant `imagenet`, expected one of `synthetic`",
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
            // The resolved file, every key the run reads written in, reads back as the same
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

    /// AHP with clients declared by count takes the paper's criteria without
    /// compute speed (Gini over size, 9: priorities 0.9 and 0.1), written into the resolved
    /// file; criteria given by hand that need it still need it.
    #[test]
    fn ahp_with_client_count_weighs_by_gini_and_size() {
        let text = "name = \"a\"\nstrategy = \"fedavg-ahp\"\nrounds = 2\nclient_count = 3\n[data]\nsource = \"synthetic\"\n";
        let e = Experiment::from_toml(text).unwrap();
        let resolved = e.to_toml();
        assert!(
            resolved.contains("criteria = [\n    \"gini\",\n    \"size\",\n]")
                || resolved.contains("criteria = [\"gini\", \"size\"]"),
            "{resolved}"
        );
        let again = Experiment::from_toml(&resolved).unwrap();
        assert_eq!(again.fingerprint, e.fingerprint);
        let info = serde_json::to_value(&e.strategy).unwrap();
        let weights = &info["fedavg-ahp"]["ahp"]["priorities"]["weights"];
        for (got, want) in weights.as_array().unwrap().iter().zip([0.9, 0.1]) {
            assert!((got.as_f64().unwrap() - want).abs() < 1e-12, "{info}");
        }
        let by_hand = format!("{text}[ahp]\ncriteria = [\"compute-ghz\", \"gini\", \"size\"]\n");
        let err = Experiment::from_toml(&by_hand).unwrap_err().to_string();
        assert!(err.contains("needs compute_ghz"), "{err}");
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
        // The resolved file shows every key of the sections the run reads, and
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
        // A negative count says which rule it breaks, from a file or an override.
        for (text, overrides, want) in [
            (
                TPFL.replace("rounds = ", "rounds = -"),
                vec![],
                "rounds: must be a whole number of at least 1, got -",
            ),
            (
                TPFL.to_string(),
                vec![("rounds".to_string(), "-3".to_string())],
                "rounds: must be a whole number of at least 1, got -3",
            ),
            (
                TPFL.to_string(),
                vec![("seed".to_string(), "-1".to_string())],
                "seed: must be a whole number of at least 0, got -1",
            ),
            (
                TPFL.to_string(),
                vec![("tm.clauses".to_string(), "-5".to_string())],
                "tm.clauses: must be a whole number of at least 2, got -5",
            ),
            (
                TPFL.to_string(),
                vec![("data.adaptive_block".to_string(), "-7".to_string())],
                "data.adaptive_block: must be a whole number of at least 3, got -7",
            ),
        ] {
            let err = Experiment::from_toml_with(&text, BTreeMap::new(), &overrides, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err}");
        }
        // A table trains a tsetlin machine through its thermometer code: 8 cuts
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
                "fedtmos.normalization: unknown variant `max`, expected `per-sample` or `per-batch`",
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

    /// docs/papers/fedtmos.md §2: Fashion-MNIST is booleanized by OpenCV's adaptive Gaussian
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
            (
                "binarize = \"otsu\"",
                "data.binarize: unknown variant `otsu`, expected `threshold` or `adaptive-gaussian`",
            ),
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

    /// A run's resolved file leaves the keys a preset decides to the preset, so `flint replay
    /// --set fedtmos.preset=paper-code` on it switches them; a key written by hand stays.
    #[test]
    fn a_preset_set_on_a_resolved_file_decides_its_keys() {
        let written = include_str!("../../../experiments/fedtmos/mnist-dir0.1.toml");
        let resolved = Experiment::from_toml(written).unwrap().to_toml();
        assert!(resolved.contains("preset = \"paper\""), "{resolved}");
        assert!(!resolved.contains("filter ="), "{resolved}");
        assert!(!resolved.contains("top_k ="), "{resolved}");
        let with = |text: &str, sets: &[(&str, &str)]| {
            let sets: Vec<(String, String)> = sets
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let e = Experiment::from_toml_with(text, BTreeMap::new(), &sets, None).unwrap();
            match e.strategy {
                StrategySpec::FedTmos(spec) => spec.fedtmos,
                other => panic!("{other:?}"),
            }
        };
        use crate::model::tm::ExcludedAt;
        use crate::model::tm::composite::CompositeOptions;
        use crate::strategy::fedtmos::BitsBy;
        let code = with(&resolved, &[("fedtmos.preset", "paper-code")]);
        assert!(code.server.filter);
        assert_eq!(code.composite, CompositeOptions::CODE);
        assert_eq!(code.excluded_at, ExcludedAt::Zero);
        assert_eq!(code.server.bits_by, BitsBy::MeanWeight);
        // K too: the paper's two, the default preset's one.
        assert_eq!(with(&resolved, &[]).server.top_k, 2);
        let recommended = with(&resolved, &[("fedtmos.preset", "recommended")]);
        assert_eq!(recommended.server.top_k, 1);
        assert_eq!(recommended.composite, CompositeOptions::default());
        // Keys unrelated to the preset keep the run's values.
        assert_eq!((code.server.models, code.server.k_max), (4, 30));
        let mixed = with(
            &resolved,
            &[
                ("fedtmos.preset", "paper-code"),
                ("fedtmos.filter", "false"),
            ],
        );
        assert!(!mixed.server.filter);
        assert_eq!(mixed.composite, CompositeOptions::CODE);
        assert_eq!(with(&resolved, &[]).composite, CompositeOptions::default());
        // And back: a paper-code run's resolved file replayed under the paper's preset.
        let code_run = Experiment::from_toml(
            &written.replace("preset = \"paper\"", "preset = \"paper-code\""),
        )
        .unwrap()
        .to_toml();
        assert!(code_run.contains("preset = \"paper-code\""), "{code_run}");
        let back = with(&code_run, &[("fedtmos.preset", "paper")]);
        assert!(!back.server.filter);
        assert_eq!(back.composite, CompositeOptions::default());
        assert_eq!(back.excluded_at, ExcludedAt::LastExclude);
        // A file that sets a preset key by hand keeps it, in its resolved file too.
        let by_hand = Experiment::from_toml(
            &written.replace("[fedtmos]\n", "[fedtmos]\nbits_by = \"mean-weight\"\n"),
        )
        .unwrap()
        .to_toml();
        assert!(by_hand.contains("bits_by = \"mean-weight\""), "{by_hand}");
        let paper = with(&by_hand, &[]);
        assert!(!paper.server.filter && !paper.composite.clamp);
        assert_eq!(paper.server.bits_by, BitsBy::MeanWeight);
        let code = with(&by_hand, &[("fedtmos.preset", "paper-code")]);
        assert!(code.server.filter && code.composite.clamp);
        assert_eq!(code.server.bits_by, BitsBy::MeanWeight);
        // A resolved file written before the preset's keys were left to it holds them all, at
        // its preset's values: a new preset still decides them, and writing a preset's value
        // out is the same experiment as leaving it.
        let old = resolved.replace(
            "[fedtmos]\n",
            "[fedtmos]\nbits_by = \"samples\"\nfilter = false\nnormalization = \"per-sample\"\nclamp = false\nexcluded_at = \"last-exclude\"\n",
        );
        assert_ne!(old, resolved);
        let code = with(&old, &[("fedtmos.preset", "paper-code")]);
        assert!(code.server.filter && code.composite.clamp);
        assert_eq!(code.server.bits_by, BitsBy::MeanWeight);
        assert_eq!(code.excluded_at, ExcludedAt::Zero);
        let kept = with(
            &old,
            &[
                ("fedtmos.preset", "paper-code"),
                ("fedtmos.filter", "false"),
            ],
        );
        assert!(!kept.server.filter && kept.composite.clamp);
        assert_eq!(
            Experiment::from_toml(&old).unwrap().fingerprint,
            Experiment::from_toml(&resolved).unwrap().fingerprint
        );
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

    /// A server that holds images (FLIS) says where it looked for them, and that it needs them.
    #[test]
    fn a_server_holding_images_says_where_it_looked() {
        let e = Experiment::from_toml(
            "name = \"f\"\nstrategy = \"flis\"\nclient_count = 2\n[data]\nsource = \"mnist\"\n\
             [partition]\nkind = \"dirichlet\"\nsamples = 100\n",
        )
        .unwrap();
        let robust = crate::strategy::robust::RobustHyper::default();
        let nowhere = std::path::Path::new("/nonexistent/flint-data");
        let err = e
            .strategy
            .server(10, 1, robust, Some((&e.data, nowhere)))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("--data-dir") && err.contains("/nonexistent/flint-data"),
            "{err}"
        );
        let err = e.strategy.server(10, 1, robust, None).err().unwrap();
        assert!(err.to_string().contains("no data directory"), "{err}");
    }

    /// FedTMOS's global test set measures one global network: fedavg-cnn takes it, ifca (a
    /// network per cluster) is refused.
    #[test]
    fn a_networks_global_test_set_is_for_one_global_model() {
        let text = |strategy: &str| {
            format!(
                "name = \"g\"\nstrategy = \"{strategy}\"\nclient_count = 2\n[data]\nsource = \"mnist\"\n\
                 [partition]\nkind = \"dirichlet\"\nsamples = 100\n[cnn]\nglobal_test = true\n"
            )
        };
        let e = Experiment::from_toml(&text("fedavg-cnn")).unwrap();
        assert_eq!(e.strategy.global_test_rows(), Some(4992..10_000));
        assert_eq!(e.global_test_holder(), Some(1));
        let err = Experiment::from_toml(&text("ifca"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cnn.global_test measures one global model"),
            "{err}"
        );
    }
}
