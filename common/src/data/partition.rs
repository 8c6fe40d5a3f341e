//! Splitting a dataset over clients. Every partitioner is a function of (dataset, seed), so each
//! client process computes the same split and keeps its own part.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::Dataset;
use crate::params::{ParamError, ParamResult, at_least_or_unset};
use crate::rng::{FlintRng, derive_rng};
use crate::{FlintError, Result};

/// The longest client name: a certificate's common name holds at most 64 characters (X.509's
/// ub-common-name), and a client's certificate names it.
pub const MAX_CLIENT_NAME: usize = 64;

/// `partition.kind`: how the rows are split over the clients. The section stays one struct so
/// that an error names its key and line; [`PartitionSection::plan`] checks which keys apply.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionKind {
    #[default]
    Iid,
    Explicit,
    Fractions,
    Dirichlet,
    DirichletByClass,
    DirichletFedtmosCode,
    ClassesPerClient,
}

impl std::fmt::Display for PartitionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::params::name_of(self))
    }
}

/// `[partition]` as written; [`PartitionSection::plan`] checks it with the clients' own keys.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartitionSection {
    /// `iid` (default: shuffled, equal shares), `explicit` (each client's `class_counts`),
    /// `fractions` (each client's `fraction` of the shuffled rows), `dirichlet` (TPFL §6.3),
    /// `dirichlet-by-class` or `dirichlet-fedtmos-code` (Dir(α) over the clients per class,
    /// FedTMOS §4.3.1) or `classes-per-client` (FedTMOS's S(β)); images take `dirichlet` or a
    /// split by class (`explicit` counts included).
    pub kind: Option<PartitionKind>,
    /// dirichlet: training rows per client (default 30000).
    #[serde(default, deserialize_with = "at_least_or_unset::<1, _, _>")]
    pub samples: Option<usize>,
    /// dirichlet: α of the IID clients (default 10000).
    pub iid_alpha: Option<f64>,
    /// dirichlet: α of the non-IID clients (default 0.05).
    pub non_iid_alpha: Option<f64>,
    /// dirichlet: how many clients, the first ones by id, are IID (default: all). TPFL's
    /// experiments 1–5 are 100 %, 75 %, 50 %, 25 % and 0 % of the clients.
    #[serde(default, deserialize_with = "at_least_or_unset::<0, _, _>")]
    pub iid_clients: Option<usize>,
    /// dirichlet-by-class, dirichlet-fedtmos-code: α of Dir(α) over the clients, per class
    /// (default 0.1, FedTMOS's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// classes-per-client: β, the classes each client holds (default 2).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_least_or_unset::<0, _, _>"
    )]
    pub beta: Option<usize>,
    /// classes-per-client: each client's classes, given instead of drawn (instead of `beta`),
    /// e.g. the sets the FedTMOS code draws with its fixed `alg_seed` for every seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_sets: Option<Vec<Vec<u32>>>,
    /// dirichlet-fedtmos-code: the clients the code draws over (its J). The ones left without
    /// rows are dropped, as the code drops them, and named in every client's log; the others
    /// become the declared clients in order, so the experiment declares exactly as many
    /// (default: the declared clients, none may be empty).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_least_or_unset::<0, _, _>"
    )]
    pub nominal_clients: Option<usize>,
}

/// One `[[clients]]` entry as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// Unique, at most 64 characters (default `client-<position>`).
    pub name: Option<String>,
    /// Declared compute power; `flint-client --compute-ghz` overrides it for a real machine.
    pub compute_ghz: Option<f64>,
    /// Samples per class, for `partition.kind = "explicit"`.
    pub class_counts: Option<Vec<usize>>,
    /// Share of the rows, for `partition.kind = "fractions"`.
    pub fraction: Option<f64>,
}

/// A declared client, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpec {
    pub name: String,
    pub compute_ghz: f64,
}

/// The clients an experiment declares, one by one (`[[clients]]`) or by number
/// (`client_count`, clients `client-1` … `client-N`), with their entries as written.
/// `needs_ghz`: every client must declare its compute power.
pub fn declare_clients(
    client_count: Option<usize>,
    entries: &[ClientSection],
    needs_ghz: bool,
) -> ParamResult<(Vec<ClientSection>, Vec<ClientSpec>)> {
    let bad = |m: String| Err(ParamError::Inconsistent(m));
    let declared = match (client_count, entries.len()) {
        (Some(_), l) if l > 0 => {
            return bad("give either client_count or [[clients]] entries, not both".into());
        }
        (Some(0), _) | (None, 0) => {
            return bad(
                "at least one client is needed: client_count = N or [[clients]] entries".into(),
            );
        }
        (Some(n), _) => vec![ClientSection::default(); n],
        (None, _) => entries.to_vec(),
    };
    let mut names = BTreeSet::new();
    let mut clients = Vec::with_capacity(declared.len());
    for (i, c) in declared.iter().enumerate() {
        let name = c
            .name
            .clone()
            .unwrap_or_else(|| format!("client-{}", i + 1));
        if name.is_empty()
            || name.len() > MAX_CLIENT_NAME
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
        {
            return bad(format!(
                "client name {name:?} must be 1 to {MAX_CLIENT_NAME} ASCII letters, digits, '-', '_' or '.'"
            ));
        }
        if !names.insert(name.clone()) {
            return bad(format!("client name {name:?} appears twice"));
        }
        let compute_ghz = match c.compute_ghz {
            Some(g) if g.is_finite() && g > 0.0 => g,
            Some(g) => {
                return bad(format!(
                    "client {name:?}: compute_ghz must be positive, got {g}"
                ));
            }
            None if needs_ghz => {
                return bad(format!(
                    "client {name:?} needs compute_ghz: the ahp criterion compute-ghz uses it"
                ));
            }
            None => 1.0,
        };
        clients.push(ClientSpec { name, compute_ghz });
    }
    Ok((declared, clients))
}

impl PartitionSection {
    /// Checks each client's partition keys against `partition.kind`.
    pub fn plan(
        &self,
        files: &[ClientSection],
        clients: &[ClientSpec],
        classes: usize,
    ) -> ParamResult<PartitionPlan> {
        plan(self, files, clients, classes).map_err(ParamError::Inconsistent)
    }
}

fn plan(
    section: &PartitionSection,
    files: &[ClientSection],
    clients: &[ClientSpec],
    classes: usize,
) -> std::result::Result<PartitionPlan, String> {
    let planner = Planner {
        section,
        files,
        clients,
        classes,
        kind: section.kind.unwrap_or_default(),
    };
    planner.check_keys()?;
    match planner.kind {
        PartitionKind::Iid => {
            planner.stray("class_counts", |f| f.class_counts.is_some())?;
            planner.stray("fraction", |f| f.fraction.is_some())?;
            Ok(PartitionPlan::Iid {
                clients: clients.len(),
            })
        }
        PartitionKind::Explicit => planner.explicit(),
        PartitionKind::Fractions => planner.fractions(),
        PartitionKind::Dirichlet => planner.dirichlet(),
        PartitionKind::DirichletByClass
        | PartitionKind::DirichletFedtmosCode
        | PartitionKind::ClassesPerClient => planner.by_class(),
    }
}

/// A partition section read beside the clients' own keys, for one kind.
struct Planner<'a> {
    section: &'a PartitionSection,
    files: &'a [ClientSection],
    clients: &'a [ClientSpec],
    classes: usize,
    kind: PartitionKind,
}

impl Planner<'_> {
    /// A key of another kind is refused.
    fn check_keys(&self) -> std::result::Result<(), String> {
        let (section, kind) = (self.section, self.kind);
        use PartitionKind::{ClassesPerClient, Dirichlet, DirichletByClass, DirichletFedtmosCode};
        let given = [
            ("samples", section.samples.is_some(), &[Dirichlet][..]),
            ("iid_alpha", section.iid_alpha.is_some(), &[Dirichlet][..]),
            (
                "non_iid_alpha",
                section.non_iid_alpha.is_some(),
                &[Dirichlet][..],
            ),
            (
                "iid_clients",
                section.iid_clients.is_some(),
                &[Dirichlet][..],
            ),
            (
                "alpha",
                section.alpha.is_some(),
                &[DirichletByClass, DirichletFedtmosCode][..],
            ),
            ("beta", section.beta.is_some(), &[ClassesPerClient][..]),
            (
                "class_sets",
                section.class_sets.is_some(),
                &[ClassesPerClient][..],
            ),
            (
                "nominal_clients",
                section.nominal_clients.is_some(),
                &[DirichletFedtmosCode][..],
            ),
        ];
        if let Some((k, _, kinds)) = given
            .iter()
            .find(|(_, set, kinds)| *set && !kinds.contains(&kind))
        {
            let kinds: Vec<String> = kinds.iter().map(|k| format!("\"{k}\"")).collect();
            return Err(format!(
                "partition.{k} applies to partition.kind = {}, not {kind}",
                kinds.join(" or ")
            ));
        }
        Ok(())
    }

    /// A client key this kind does not read is refused.
    fn stray(
        &self,
        what: &str,
        has: fn(&ClientSection) -> bool,
    ) -> std::result::Result<(), String> {
        match self.files.iter().zip(self.clients).find(|(f, _)| has(f)) {
            Some((_, c)) => Err(format!(
                "client {:?} has {what} but partition.kind is {}",
                c.name, self.kind
            )),
            None => Ok(()),
        }
    }

    /// Each client's `class_counts`, one per class.
    fn explicit(&self) -> std::result::Result<PartitionPlan, String> {
        let (files, clients, classes) = (self.files, self.clients, self.classes);
        self.stray("fraction", |f| f.fraction.is_some())?;
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

    /// Each client's `fraction` of the rows, summing to 1.
    fn fractions(&self) -> std::result::Result<PartitionPlan, String> {
        let (files, clients) = (self.files, self.clients);
        self.stray("class_counts", |f| f.class_counts.is_some())?;
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

    /// TPFL §6.3: per client Dirichlet class proportions, the first `iid_clients` near uniform.
    fn dirichlet(&self) -> std::result::Result<PartitionPlan, String> {
        let (section, clients) = (self.section, self.clients);
        self.stray("class_counts", |f| f.class_counts.is_some())?;
        self.stray("fraction", |f| f.fraction.is_some())?;
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

    /// A split of the whole dataset by class: Dir(α) per class, or β classes per client.
    fn by_class(&self) -> std::result::Result<PartitionPlan, String> {
        let (section, clients, classes, kind) =
            (self.section, self.clients, self.classes, self.kind);
        self.stray("class_counts", |f| f.class_counts.is_some())?;
        self.stray("fraction", |f| f.fraction.is_some())?;
        let alpha = section.alpha.unwrap_or(0.1);
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(format!("partition.alpha must be positive, got {alpha}"));
        }
        let beta = section.beta.unwrap_or(2);
        if beta == 0 || beta > classes {
            return Err(format!(
                "partition.beta must be 1 to the {classes} classes, got {beta}"
            ));
        }
        let split = match kind {
            PartitionKind::DirichletByClass => ClassSplit::DirichletByClass { alpha },
            PartitionKind::DirichletFedtmosCode => {
                let nominal = section.nominal_clients.unwrap_or(clients.len());
                if nominal < clients.len() {
                    return Err(format!(
                        "partition.nominal_clients ({nominal}) is below the {} declared clients",
                        clients.len()
                    ));
                }
                ClassSplit::DirichletFedTmosCode { alpha, nominal }
            }
            _ => match &section.class_sets {
                None => ClassSplit::ClassesPerClient { beta },
                Some(_) if section.beta.is_some() => {
                    return Err(
                        "partition.beta and partition.class_sets: give one, not both".into(),
                    );
                }
                Some(sets) => {
                    ClassSplit::ClassSets(check_class_sets(sets, clients.len(), classes)?)
                }
            },
        };
        Ok(PartitionPlan::ByClass {
            clients: clients.len(),
            split,
        })
    }
}

/// Splits of the whole dataset by its labels, every row to at most one client (FedTMOS §5).
#[derive(Debug, Clone, PartialEq)]
pub enum ClassSplit {
    /// Hsu et al.'s Dir(α): [`dirichlet_by_class`].
    DirichletByClass { alpha: f64 },
    /// The FedTMOS code's variant: [`dirichlet_fedtmos_code`], drawn over `nominal` clients.
    DirichletFedTmosCode { alpha: f64, nominal: usize },
    /// S(β): [`classes_per_client`].
    ClassesPerClient { beta: usize },
    /// S(β) with each client's classes given: [`split_by_sets`].
    ClassSets(Vec<Vec<u32>>),
    /// `partition.kind = "explicit"` on images: [`split_by_counts`].
    Counts(Vec<Vec<usize>>),
}

/// The papers' notation: Dir(α), S(β).
impl std::fmt::Display for ClassSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClassSplit::DirichletByClass { alpha } => write!(f, "Dir({alpha})"),
            ClassSplit::DirichletFedTmosCode { alpha, .. } => write!(f, "Dir({alpha}), the code's"),
            ClassSplit::ClassesPerClient { beta } => write!(f, "S({beta})"),
            ClassSplit::ClassSets(_) => write!(f, "S(β), classes given"),
            ClassSplit::Counts(_) => write!(f, "explicit"),
        }
    }
}

/// At most ten client ids, then how many more.
fn some(ids: &[usize]) -> String {
    let shown: Vec<String> = ids.iter().take(10).map(usize::to_string).collect();
    match ids.len().saturating_sub(10) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

impl ClassSplit {
    /// Row indices per client; a client may get none (see [`empty_clients`]).
    pub fn split(
        &self,
        labels: &[u32],
        classes: usize,
        clients: usize,
        seed: u64,
    ) -> Result<Vec<Vec<usize>>> {
        match self {
            ClassSplit::DirichletByClass { alpha } => {
                dirichlet_by_class(labels, classes, clients, *alpha, seed)
            }
            ClassSplit::DirichletFedTmosCode { alpha, .. } => {
                dirichlet_fedtmos_code(labels, classes, clients, *alpha, seed)
            }
            ClassSplit::ClassesPerClient { beta } => {
                classes_per_client(labels, classes, clients, *beta, seed)
            }
            ClassSplit::ClassSets(sets) => {
                let held: Vec<Vec<usize>> = sets
                    .iter()
                    .map(|s| s.iter().map(|&c| c as usize).collect())
                    .collect();
                let pools = ClassPools::new(labels, classes)?;
                Ok(split_by_sets(
                    &pools,
                    &held,
                    classes,
                    &mut derive_rng(seed, "class-sets", 0),
                ))
            }
            ClassSplit::Counts(counts) => split_by_counts(labels, classes, counts),
        }
    }

    /// [`Self::split`], refusing one that leaves a client without rows: a run waits for every
    /// declared client, so the empty ones are named instead of dropped.
    pub fn split_all_served(
        &self,
        labels: &[u32],
        classes: usize,
        clients: usize,
        seed: u64,
    ) -> Result<Vec<Vec<usize>>> {
        if let ClassSplit::DirichletFedTmosCode { nominal, .. } = *self
            && nominal > clients
        {
            let parts = self.split(labels, classes, nominal, seed)?;
            let empty = empty_clients(&parts);
            let served = nominal - empty.len();
            if served != clients {
                return Err(FlintError::Partition(format!(
                    "{self} with this seed leaves {served} of {nominal} nominal clients with rows (clients {} get none, and the code drops them): declare {served} clients",
                    some(&empty)
                )));
            }
            tracing::info!(
                nominal,
                dropped = ?empty,
                "the code's dirichlet split leaves these nominal clients without rows; dropped as the code does"
            );
            return Ok(parts.into_iter().filter(|p| !p.is_empty()).collect());
        }
        let parts = self.split(labels, classes, clients, seed)?;
        let empty = empty_clients(&parts);
        if !empty.is_empty() && matches!(self, ClassSplit::DirichletFedTmosCode { .. }) {
            return Err(FlintError::Partition(format!(
                "{self} leaves clients {} of {clients} without rows; to drop them as the code does, set partition.nominal_clients = {clients} and declare {} clients",
                some(&empty),
                clients - empty.len()
            )));
        }
        if !empty.is_empty() && matches!(self, ClassSplit::Counts(_)) {
            return Err(FlintError::Partition(format!(
                "class_counts leaves clients {} of {clients} without rows; a run waits for every declared client, so give each some rows or leave it out",
                some(&empty)
            )));
        }
        if !empty.is_empty() {
            return Err(FlintError::Partition(format!(
                "{self} leaves clients {} of {clients} without rows; declare fewer clients{}",
                some(&empty),
                match self {
                    ClassSplit::ClassesPerClient { .. } => ", or another seed",
                    _ => ", another seed or a larger alpha",
                }
            )));
        }
        Ok(parts)
    }
}

/// How the rows are split over the clients, checked against the experiment.
#[derive(Debug, Clone, PartialEq)]
pub enum PartitionPlan {
    /// Shuffled, equal shares (the first `n mod k` clients get one more).
    Iid { clients: usize },
    /// Client k gets exactly `counts[k][c]` samples of class c, drawn without replacement.
    Explicit(Vec<Vec<usize>>),
    /// Client k gets the share `fractions[k]` of the shuffled rows, with no class balancing
    /// (Blind FL's even, random-uneven and sharply uneven splits); the shares sum to 1.
    Fractions(Vec<f64>),
    /// TPFL §6.3: client k draws `samples` rows with class proportions from
    /// Dirichlet(alphas[k]·1); clients may share rows (see [`dirichlet`]).
    Dirichlet { alphas: Vec<f64>, samples: usize },
    /// FedTMOS §5: the whole dataset split by its labels.
    ByClass { clients: usize, split: ClassSplit },
}

impl PartitionPlan {
    pub fn clients(&self) -> usize {
        match self {
            PartitionPlan::Iid { clients } => *clients,
            PartitionPlan::Explicit(c) => c.len(),
            PartitionPlan::Fractions(f) => f.len(),
            PartitionPlan::Dirichlet { alphas, .. } => alphas.len(),
            PartitionPlan::ByClass { clients, .. } => *clients,
        }
    }
}

/// Row indices per client, in client order.
pub fn partition(data: &Dataset, plan: &PartitionPlan, seed: u64) -> Result<Vec<Vec<usize>>> {
    let mut rng = derive_rng(seed, "partition", 0);
    let clients = plan.clients();
    match plan {
        PartitionPlan::Dirichlet { alphas, samples } => {
            dirichlet(&data.y, data.classes.len(), alphas, *samples, seed)
        }
        PartitionPlan::ByClass { split, .. } => {
            split.split_all_served(&data.y, data.classes.len(), clients, seed)
        }
        PartitionPlan::Iid { .. } => {
            if data.len() < clients {
                return Err(FlintError::Partition(format!(
                    "{} rows cannot give each of {clients} clients a sample",
                    data.len()
                )));
            }
            let mut all: Vec<usize> = (0..data.len()).collect();
            all.shuffle(&mut rng);
            let (base, extra) = (data.len() / clients, data.len() % clients);
            let mut parts = Vec::with_capacity(clients);
            let mut start = 0;
            for k in 0..clients {
                let len = base + usize::from(k < extra);
                parts.push(all[start..start + len].to_vec());
                start += len;
            }
            Ok(parts)
        }
        PartitionPlan::Fractions(fractions) => {
            let mut all: Vec<usize> = (0..data.len()).collect();
            all.shuffle(&mut rng);
            // Cumulative rounding: the parts cover every row exactly once.
            let mut parts = Vec::with_capacity(clients);
            let (mut cum, mut start) = (0.0, 0);
            for (k, f) in fractions.iter().enumerate() {
                cum += f;
                let end = if k + 1 == clients {
                    data.len()
                } else {
                    ((cum * data.len() as f64).round() as usize).min(data.len())
                };
                if end <= start {
                    return Err(FlintError::Partition(format!(
                        "client {} gets no row: a fraction of {f} of {} rows",
                        k + 1,
                        data.len()
                    )));
                }
                parts.push(all[start..end].to_vec());
                start = end;
            }
            Ok(parts)
        }
        PartitionPlan::Explicit(class_counts) => {
            let classes = data.classes.len();
            let mut pools: Vec<Vec<usize>> = vec![Vec::new(); classes];
            for (i, &c) in data.y.iter().enumerate() {
                pools[c as usize].push(i);
            }
            for (c, pool) in pools.iter_mut().enumerate() {
                pool.shuffle(&mut rng);
                let wanted = class_counts
                    .iter()
                    .fold(0usize, |sum, counts| sum.saturating_add(counts[c]));
                if wanted > pool.len() {
                    return Err(FlintError::Partition(format!(
                        "clients ask for {wanted} samples of class {:?} but the data has {}",
                        data.classes[c],
                        pool.len()
                    )));
                }
            }
            let mut taken = vec![0usize; classes];
            let mut parts = Vec::with_capacity(clients);
            for counts in class_counts {
                let mut part = Vec::with_capacity(counts.iter().sum());
                for (c, &n) in counts.iter().enumerate() {
                    part.extend_from_slice(&pools[c][taken[c]..taken[c] + n]);
                    taken[c] += n;
                }
                parts.push(part);
            }
            Ok(parts)
        }
    }
}

/// Row indices grouped by class label.
#[derive(Debug, Clone)]
pub struct ClassPools(Vec<Vec<usize>>);

impl ClassPools {
    pub fn new(labels: &[u32], classes: usize) -> Result<ClassPools> {
        let mut pools: Vec<Vec<usize>> = vec![Vec::new(); classes];
        for (i, &c) in labels.iter().enumerate() {
            let c = c as usize;
            if c >= classes {
                return Err(FlintError::Partition(format!(
                    "label {c} of row {i} is not below {classes} classes"
                )));
            }
            pools[c].push(i);
        }
        Ok(ClassPools(pools))
    }

    /// Only the rows for which `keep` is true, grouped as before.
    pub fn filter(&self, keep: impl Fn(usize) -> bool) -> ClassPools {
        ClassPools(
            self.0
                .iter()
                .map(|p| p.iter().copied().filter(|&i| keep(i)).collect())
                .collect(),
        )
    }

    pub fn classes(&self) -> usize {
        self.0.len()
    }

    /// `samples` rows split over the classes in proportion to `p` (largest remainders, so the
    /// counts sum to `samples` exactly), drawn without replacement when the class has enough
    /// rows and with replacement when not. `client` names the client in errors.
    pub fn draw(
        &self,
        p: &[f64],
        samples: usize,
        rng: &mut FlintRng,
        client: usize,
    ) -> Result<Vec<usize>> {
        use rand::RngExt;
        use rand::seq::IndexedRandom;
        let mut part = Vec::with_capacity(samples);
        for (c, n) in apportion(p, samples).into_iter().enumerate() {
            if n == 0 {
                continue;
            }
            let pool = &self.0[c];
            if pool.is_empty() {
                return Err(FlintError::Partition(format!(
                    "client {client} needs {n} samples of class {c}, which has no rows"
                )));
            }
            if n <= pool.len() {
                part.extend(pool.sample(rng, n).copied());
            } else {
                part.extend((0..n).map(|_| pool[rng.random_range(0..pool.len())]));
            }
        }
        Ok(part)
    }
}

/// Integer counts summing to `total`, proportional to `p` (the largest-remainder method; ties
/// go to the lower class).
pub fn apportion(p: &[f64], total: usize) -> Vec<usize> {
    let sum: f64 = p.iter().sum();
    if p.is_empty() || sum <= 0.0 {
        return vec![0; p.len()];
    }
    let exact: Vec<f64> = p.iter().map(|x| x / sum * total as f64).collect();
    let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let short = total - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &c in order.iter().take(short) {
        counts[c] += 1;
    }
    counts
}

/// TPFL §6.3: class proportions p ~ Dirichlet(alpha·1) of one client. Tiny α can underflow
/// every component to 0; the client then holds one class, drawn uniformly.
pub fn dirichlet_proportions(
    classes: usize,
    alpha: f64,
    rng: &mut FlintRng,
    client: usize,
) -> Result<Vec<f64>> {
    use rand::RngExt;
    use rand_distr::multi::Dirichlet;
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(FlintError::Partition(format!(
            "client {client}: alpha must be positive, got {alpha}"
        )));
    }
    let dist = Dirichlet::new(&vec![alpha; classes])
        .map_err(|e| FlintError::Partition(format!("client {client}: {e}")))?;
    let p: Vec<f64> = rng.sample(&dist);
    if p.iter().any(|v| !v.is_finite()) || p.iter().sum::<f64>() <= 0.0 {
        let pick = rng.random_range(0..classes);
        return Ok((0..classes)
            .map(|c| f64::from(u8::from(c == pick)))
            .collect());
    }
    Ok(p)
}

/// TPFL §6.3 (and its code, docs/papers/tpfl.md §7): for client k, class proportions
/// p ~ Dirichlet(alphas[k]·1), counts ≈ p · samples (summing to `samples`), each class drawn from the rows of that
/// class (without replacement when there are enough, with replacement when not). Clients draw
/// independently, so they may share rows, as in the paper's code. Large α gives near-uniform
/// classes (IID); small α concentrates a client on few classes.
pub fn dirichlet(
    labels: &[u32],
    classes: usize,
    alphas: &[f64],
    samples: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let pools = ClassPools::new(labels, classes)?;
    let mut parts = Vec::with_capacity(alphas.len());
    for (k, &alpha) in alphas.iter().enumerate() {
        let client = k + 1;
        let mut rng = derive_rng(seed, "dirichlet", client as u32);
        let p = dirichlet_proportions(classes, alpha, &mut rng, client)?;
        parts.push(pools.draw(&p, samples, &mut rng, client)?);
    }
    Ok(parts)
}

/// The rows by class, for a split over `clients` (at least one).
fn pools_for(labels: &[u32], classes: usize, clients: usize) -> Result<ClassPools> {
    if clients == 0 {
        return Err(FlintError::Partition("no clients to split over".into()));
    }
    ClassPools::new(labels, classes)
}

/// Proportions q ~ Dirichlet(α·1_n), with TPFL's fallback when tiny α underflows.
fn dirichlet_over(n: usize, alpha: f64, rng: &mut FlintRng, what: usize) -> Result<Vec<f64>> {
    if n == 1 {
        return Ok(vec![1.0]);
    }
    dirichlet_proportions(n, alpha, rng, what)
}

/// FedTMOS §4.3.1 (Hsu et al., 2019): for each class c, proportions over the `clients` from
/// Dirichlet(α·1_J); class c's shuffled rows are split at the cumulative ⌊q·n_c⌋ (the last
/// client takes the remainder). Every row goes to exactly one client. A draw that leaves a
/// client with fewer than 10 rows (fewer than its share when the data are small) is drawn
/// again, as NIID-Bench's implementation of this split does, up to 1,000 times; after that the
/// caller reports the empty clients.
pub fn dirichlet_by_class(
    labels: &[u32],
    classes: usize,
    clients: usize,
    alpha: f64,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let pools = pools_for(labels, classes, clients)?;
    let mut rng = derive_rng(seed, "dirichlet-by-class", 0);
    let least = 10.min(labels.len() / clients).max(1);
    let mut parts = Vec::new();
    for _ in 0..1000 {
        parts = vec![Vec::new(); clients];
        for c in 0..classes {
            let mut rows = pools.0[c].clone();
            rows.shuffle(&mut rng);
            let q = dirichlet_over(clients, alpha, &mut rng, c)?;
            let mut start = 0;
            let mut cum = 0.0;
            for (k, part) in parts.iter_mut().enumerate() {
                cum += q[k];
                let end = if k + 1 == clients {
                    rows.len()
                } else {
                    ((cum * rows.len() as f64).floor() as usize).clamp(start, rows.len())
                };
                part.extend_from_slice(&rows[start..end]);
                start = end;
            }
        }
        if parts.iter().all(|p| p.len() >= least) {
            break;
        }
    }
    Ok(parts)
}

/// The FedTMOS code's Dirichlet split (docs/papers/fedtmos.md §16), kept to show its effect:
/// P = Dirichlet(α·1_J) per class, "balanced" by J rounds of dividing by column then row sums,
/// and client j takes ⌊P[j][c] · total rows⌋ rows of class c as a cumulative slice of the class's
/// rows in dataset order. The counts scale with the whole dataset, not the class, so the first
/// clients take whole classes and later ones often get nothing.
pub fn dirichlet_fedtmos_code(
    labels: &[u32],
    classes: usize,
    clients: usize,
    alpha: f64,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let pools = pools_for(labels, classes, clients)?;
    let mut rng = derive_rng(seed, "dirichlet-fedtmos-code", 0);
    // p[j][c]
    let mut p = vec![vec![0.0; classes]; clients];
    for c in 0..classes {
        let q = dirichlet_over(clients, alpha, &mut rng, c)?;
        for (j, row) in p.iter_mut().enumerate() {
            row[c] = q[j];
        }
    }
    for _ in 0..clients {
        for c in 0..classes {
            let col: f64 = p.iter().map(|row| row[c]).sum();
            if col > 0.0 {
                p.iter_mut().for_each(|row| row[c] /= col);
            }
        }
        for row in p.iter_mut() {
            let sum: f64 = row.iter().sum();
            if sum > 0.0 {
                row.iter_mut().for_each(|v| *v /= sum);
            }
        }
    }
    let total = labels.len() as f64;
    let mut taken = vec![0usize; classes];
    let mut parts = Vec::with_capacity(clients);
    for row in &p {
        let mut part = Vec::new();
        for (c, &share) in row.iter().enumerate() {
            let pool = &pools.0[c];
            let n = (share * total).floor() as usize;
            let end = (taken[c] + n).min(pool.len());
            part.extend_from_slice(&pool[taken[c]..end]);
            taken[c] = end;
        }
        parts.push(part);
    }
    Ok(parts)
}

/// Client k takes the next `counts[k][c]` rows of class c in file order, as the FedTMOS code
/// slices its unshuffled class lists; so counts computed from the code's own draw (numpy's,
/// `scripts/fedtmos-experiments.py`) give exactly its clients. A class asked for more rows than
/// it has is refused, naming it.
pub fn split_by_counts(
    labels: &[u32],
    classes: usize,
    counts: &[Vec<usize>],
) -> Result<Vec<Vec<usize>>> {
    let pools = pools_for(labels, classes, counts.len())?;
    for (c, pool) in pools.0.iter().enumerate() {
        let asked = counts.iter().try_fold(0usize, |sum, k| {
            sum.checked_add(k.get(c).copied().unwrap_or(0))
        });
        match asked {
            Some(asked) if asked <= pool.len() => {}
            Some(asked) => {
                return Err(FlintError::Partition(format!(
                    "the clients' class_counts ask for {asked} rows of class {c}, which has {}",
                    pool.len()
                )));
            }
            None => {
                return Err(FlintError::Partition(format!(
                    "the clients' class_counts ask for more rows of class {c} than a count holds"
                )));
            }
        }
    }
    let mut taken = vec![0usize; classes];
    Ok(counts
        .iter()
        .map(|k| {
            let mut part = Vec::new();
            for (c, &n) in k.iter().enumerate().take(classes) {
                part.extend_from_slice(&pools.0[c][taken[c]..taken[c] + n]);
                taken[c] += n;
            }
            part
        })
        .collect())
}

/// FedTMOS's S(β): client i holds class i mod C and β − 1 other classes drawn from the seed;
/// each class's shuffled rows are split evenly (sizes differ by at most one) over the clients
/// holding it, in client order. Rows of a class nobody holds go to no one.
pub fn classes_per_client(
    labels: &[u32],
    classes: usize,
    clients: usize,
    beta: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    use rand::seq::IndexedRandom;
    if beta == 0 || beta > classes {
        return Err(FlintError::Partition(format!(
            "each client must hold 1 to {classes} classes, not {beta}"
        )));
    }
    let pools = ClassPools::new(labels, classes)?;
    let mut rng = derive_rng(seed, "classes-per-client", 0);
    let held: Vec<Vec<usize>> = (0..clients)
        .map(|i| {
            let own = i % classes;
            let others: Vec<usize> = (0..classes).filter(|&c| c != own).collect();
            let mut set = vec![own];
            set.extend(others.sample(&mut rng, beta - 1).copied());
            set
        })
        .collect();
    Ok(split_by_sets(&pools, &held, classes, &mut rng))
}

/// Every class's rows, shuffled, split evenly over the clients whose set holds it, in client
/// order (the first ones get one more, as numpy's `array_split`).
fn split_by_sets(
    pools: &ClassPools,
    held: &[Vec<usize>],
    classes: usize,
    rng: &mut FlintRng,
) -> Vec<Vec<usize>> {
    let clients = held.len();
    let mut parts = vec![Vec::new(); clients];
    for c in 0..classes {
        let holders: Vec<usize> = (0..clients).filter(|&i| held[i].contains(&c)).collect();
        if holders.is_empty() {
            continue;
        }
        let mut rows = pools.0[c].clone();
        rows.shuffle(rng);
        let (base, extra) = (rows.len() / holders.len(), rows.len() % holders.len());
        let mut start = 0;
        for (k, &i) in holders.iter().enumerate() {
            let len = base + usize::from(k < extra);
            parts[i].extend_from_slice(&rows[start..start + len]);
            start += len;
        }
    }
    parts
}

/// `partition.class_sets`: one non-empty set of distinct classes of the run per client.
fn check_class_sets(
    sets: &[Vec<u32>],
    clients: usize,
    classes: usize,
) -> std::result::Result<Vec<Vec<u32>>, String> {
    if sets.len() != clients {
        return Err(format!(
            "partition.class_sets has {} sets for {clients} clients",
            sets.len()
        ));
    }
    for (i, set) in sets.iter().enumerate() {
        let mut seen = BTreeSet::new();
        if set.is_empty() {
            return Err(format!(
                "partition.class_sets gives client {} no class",
                i + 1
            ));
        }
        if let Some(c) = set
            .iter()
            .find(|&&c| c as usize >= classes || !seen.insert(c))
        {
            return Err(format!(
                "partition.class_sets gives client {} class {c} twice or out of the {classes} classes",
                i + 1
            ));
        }
    }
    Ok(sets.to_vec())
}

/// The 1-based ids of the clients a split left without rows, to report (never to drop
/// silently).
pub fn empty_clients(parts: &[Vec<usize>]) -> Vec<usize> {
    (0..parts.len())
        .filter(|&k| parts[k].is_empty())
        .map(|k| k + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(y: Vec<u32>) -> Dataset {
        Dataset {
            features: 1,
            x: vec![0.0; y.len()],
            y,
            classes: vec!["a".into(), "b".into()],
            categorical: Vec::new(),
            feature_names: Vec::new(),
        }
    }

    #[test]
    fn iid_covers_every_row_once_in_near_equal_parts() {
        let d = labels(vec![0; 10]);
        let parts = partition(&d, &PartitionPlan::Iid { clients: 3 }, 1).unwrap();
        assert_eq!(
            parts.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 3, 3]
        );
        let mut all: Vec<usize> = parts.concat();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn explicit_gives_exact_class_counts_without_overlap() {
        let d = labels(vec![0, 0, 0, 0, 1, 1, 1, 0, 1, 0]);
        let counts = vec![vec![2, 1], vec![3, 2]];
        let parts = partition(&d, &PartitionPlan::Explicit(counts), 5).unwrap();
        for (part, want) in parts.iter().zip([[2, 1], [3, 2]]) {
            let got0 = part.iter().filter(|&&i| d.y[i] == 0).count();
            assert_eq!([got0, part.len() - got0], want);
        }
        let mut all = parts.concat();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 8);
    }

    fn ten_classes(per_class: usize) -> Vec<u32> {
        (0..10 * per_class).map(|i| (i % 10) as u32).collect()
    }

    fn fractions(labels: &[u32], part: &[usize]) -> Vec<f64> {
        let mut n = [0usize; 10];
        for &i in part {
            n[labels[i] as usize] += 1;
        }
        n.iter().map(|&c| c as f64 / part.len() as f64).collect()
    }

    #[test]
    fn apportioned_counts_sum_to_the_total() {
        assert_eq!(apportion(&[0.5, 0.5], 3), vec![2, 1]);
        assert_eq!(apportion(&[0.15, 0.15, 0.7], 10), vec![2, 1, 7]);
        assert_eq!(apportion(&[1.0, 0.0], 7), vec![7, 0]);
        assert_eq!(apportion(&[0.0, 0.0], 7), vec![0, 0]);
        let p = [0.333, 0.333, 0.334];
        assert_eq!(apportion(&p, 1500).iter().sum::<usize>(), 1500);
    }

    #[test]
    fn dirichlet_large_alpha_is_near_uniform() {
        let labels = ten_classes(500);
        let parts = dirichlet(&labels, 10, &[10_000.0; 5], 3000, 1).unwrap();
        for part in &parts {
            assert_eq!(part.len(), 3000);
            for f in fractions(&labels, part) {
                assert!((f - 0.1).abs() < 0.02, "{f}");
            }
        }
    }

    /// Dirichlet(0.05·1) over 10 classes (TPFL's non-IID clients): a client's largest class
    /// exceeds 50 % with probability 0.91, and on average 2.0 classes hold more than 5 % (numpy
    /// simulation of 100,000 draws), against 10 classes for IID clients.
    #[test]
    fn dirichlet_small_alpha_concentrates_on_few_classes() {
        let labels = ten_classes(500);
        let parts = dirichlet(&labels, 10, &[0.05; 20], 1000, 2).unwrap();
        let fr: Vec<Vec<f64>> = parts.iter().map(|p| fractions(&labels, p)).collect();
        let majority = fr
            .iter()
            .filter(|f| f.iter().cloned().fold(0.0, f64::max) > 0.5)
            .count();
        assert!(
            majority >= 15,
            "{majority} of 20 clients have a majority class"
        );
        let held: f64 = fr
            .iter()
            .map(|f| f.iter().filter(|&&x| x > 0.05).count() as f64)
            .sum::<f64>()
            / 20.0;
        assert!(held < 3.0, "{held} classes above 5 % per client on average");
        // More rows of a class than it has: drawn with replacement, still from that class.
        let few = dirichlet(&ten_classes(5), 10, &[0.05], 1000, 3).unwrap();
        assert_eq!(few[0].len(), 1000);
    }

    #[test]
    fn dirichlet_is_seeded_per_client_and_checks_its_input() {
        let labels = ten_classes(100);
        let a = dirichlet(&labels, 10, &[1.0, 1.0], 200, 7).unwrap();
        assert_eq!(a, dirichlet(&labels, 10, &[1.0, 1.0], 200, 7).unwrap());
        assert_ne!(a[0], a[1]);
        // Client 1's draw does not depend on how many clients there are.
        assert_eq!(a[0], dirichlet(&labels, 10, &[1.0], 200, 7).unwrap()[0]);
        let err = dirichlet(&labels, 10, &[0.0], 200, 7)
            .unwrap_err()
            .to_string();
        assert!(err.contains("alpha must be positive"), "{err}");
        let err = dirichlet(&[12], 10, &[1.0], 10, 7).unwrap_err().to_string();
        assert!(err.contains("label 12"), "{err}");
    }

    #[test]
    fn fractions_cover_every_row_once_in_the_declared_shares() {
        let d = labels((0..100).map(|i| u32::from(i % 3 == 0)).collect());
        let plan = PartitionPlan::Fractions(vec![0.5, 0.3, 0.15, 0.04, 0.01]);
        let parts = partition(&d, &plan, 2).unwrap();
        assert_eq!(
            parts.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![50, 30, 15, 4, 1]
        );
        let mut all = parts.concat();
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        assert_eq!(parts, partition(&d, &plan, 2).unwrap());
        let tiny = PartitionPlan::Fractions(vec![0.999, 0.001]);
        let err = partition(&labels(vec![0; 10]), &tiny, 0).unwrap_err();
        assert!(err.to_string().contains("client 2 gets no row"), "{err}");
    }

    #[test]
    fn explicit_refuses_to_overdraw_a_class() {
        let d = labels(vec![0, 1]);
        let err = partition(&d, &PartitionPlan::Explicit(vec![vec![1, 2]]), 0).unwrap_err();
        assert!(
            err.to_string()
                .contains("ask for 2 samples of class \"b\" but the data has 1"),
            "{err}"
        );
    }

    fn mnist_like(per_class: usize) -> Vec<u32> {
        (0..10 * per_class).map(|i| (i % 10) as u32).collect()
    }

    fn class_sets(parts: &[Vec<usize>], labels: &[u32]) -> Vec<std::collections::BTreeSet<u32>> {
        parts
            .iter()
            .map(|p| p.iter().map(|&i| labels[i]).collect())
            .collect()
    }

    /// FedTMOS §5, Hsu et al.'s Dir(α): every row of every class goes to exactly one client.
    #[test]
    fn dirichlet_by_class_splits_every_class_exactly_once() {
        let y = mnist_like(100);
        for alpha in [0.05, 0.3, 1000.0] {
            let parts = dirichlet_by_class(&y, 10, 10, alpha, 7).unwrap();
            let mut all: Vec<usize> = parts.concat();
            all.sort();
            assert_eq!(all, (0..y.len()).collect::<Vec<_>>(), "alpha {alpha}");
            assert_eq!(parts, dirichlet_by_class(&y, 10, 10, alpha, 7).unwrap());
        }
        // Large α: near-equal shares; small α: clients concentrate on few classes.
        let even = dirichlet_by_class(&y, 10, 10, 1000.0, 7).unwrap();
        assert!(
            even.iter().all(|p| (80..=120).contains(&p.len())),
            "{:?}",
            even.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let skewed = dirichlet_by_class(&y, 10, 10, 0.05, 7).unwrap();
        // A draw that starves a client is drawn again (NIID-Bench's rule): at least 10 rows.
        assert!(
            skewed.iter().all(|p| p.len() >= 10),
            "{:?}",
            skewed.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let mean_classes = class_sets(&skewed, &y)
            .iter()
            .map(|s| s.len())
            .sum::<usize>() as f64
            / 10.0;
        assert!(
            mean_classes < 5.0,
            "{mean_classes} classes per client at α = 0.05"
        );
    }

    /// The published code's variant: counts from the dataset total, so later clients starve.
    #[test]
    fn the_fedtmos_code_dirichlet_leaves_later_clients_empty() {
        let y = mnist_like(100);
        let parts = dirichlet_fedtmos_code(&y, 10, 10, 0.1, 3).unwrap();
        let mut all: Vec<usize> = parts.concat();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "no row twice");
        assert!(
            !empty_clients(&parts).is_empty(),
            "{:?}",
            parts.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(empty_clients(&dirichlet_by_class(&y, 10, 10, 1000.0, 3).unwrap()).is_empty());
    }

    /// docs/papers/fedtmos.md §17: S(β) with the code's class sets, given: each client holds
    /// exactly its set, and every class is split evenly over its holders.
    #[test]
    fn given_class_sets_are_held_exactly_and_split_evenly() {
        let y = mnist_like(60);
        let sets = vec![vec![0, 3], vec![1, 2], vec![2, 5], vec![1, 3], vec![4, 8]];
        let parts = ClassSplit::ClassSets(sets.clone())
            .split_all_served(&y, 10, 5, 9)
            .unwrap();
        for (i, got) in class_sets(&parts, &y).iter().enumerate() {
            let want: BTreeSet<u32> = sets[i].iter().copied().collect();
            assert_eq!(got, &want, "client {}", i + 1);
        }
        // Class 2 (60 rows) is held by clients 2 and 3: 30 each; class 0 by client 1 alone.
        let count = |i: usize, c: u32| parts[i].iter().filter(|&&r| y[r] == c).count();
        assert_eq!((count(1, 2), count(2, 2), count(0, 0)), (30, 30, 60));
        let bad = [
            (vec![vec![0, 0]], "class 0 twice"),
            (vec![vec![]], "gives client 1 no class"),
            (vec![vec![10]], "class 10 twice or out of the 10 classes"),
        ];
        for (sets, want) in bad {
            let e = check_class_sets(&sets, 1, 10).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert!(
            check_class_sets(&[vec![1]], 2, 10)
                .unwrap_err()
                .contains("1 sets for 2 clients")
        );
    }

    /// docs/papers/fedtmos.md §16: counts from the code's own numpy draw are taken as its
    /// cumulative slices of each class's rows in file order; asking too much is refused.
    #[test]
    fn explicit_counts_are_the_code_slices_in_file_order() {
        let y: Vec<u32> = (0..30).map(|i| i % 3).collect();
        let counts = vec![vec![2, 0, 10], vec![3, 4, 0]];
        let parts = ClassSplit::Counts(counts.clone())
            .split_all_served(&y, 3, 2, 0)
            .unwrap();
        // Class 0 is rows 0, 3, 6, …: client 1 takes the first two, client 2 the next three.
        assert_eq!(parts[0][..2], [0, 3]);
        assert_eq!(parts[1][..3], [6, 9, 12]);
        assert_eq!(parts[1][3..], [1, 4, 7, 10]);
        assert_eq!(
            parts[0][2..],
            (0..10).map(|k| 2 + 3 * k).collect::<Vec<_>>()
        );
        let e = ClassSplit::Counts(vec![vec![6, 0, 0], vec![5, 0, 0]])
            .split(&y, 3, 2, 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ask for 11 rows of class 0, which has 10"),
            "{e}"
        );
        let e = ClassSplit::Counts(vec![vec![usize::MAX, 0, 0], vec![2, 0, 0]])
            .split(&y, 3, 2, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more rows of class 0 than a count holds"), "{e}");
        let e = ClassSplit::Counts(vec![vec![1, 0, 0], vec![0, 0, 0]])
            .split_all_served(&y, 3, 2, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("leaves clients 2 of 2 without rows"), "{e}");
    }

    #[test]
    fn a_long_list_of_clients_is_cut_to_ten_and_a_count() {
        assert_eq!(some(&[3, 5]), "3, 5");
        let many: Vec<usize> = (1..=25).collect();
        assert_eq!(some(&many), "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more");
        assert_eq!(ClassSplit::ClassesPerClient { beta: 2 }.to_string(), "S(2)");
        assert_eq!(
            ClassSplit::DirichletByClass { alpha: 0.3 }.to_string(),
            "Dir(0.3)"
        );
    }

    /// docs/papers/fedtmos.md §16: the code drops the clients its split leaves empty. With nominal
    /// clients, Flint does so only when the experiment declares exactly the ones left, and names
    /// the dropped ones otherwise; without, an empty client is refused.
    #[test]
    fn the_code_dirichlet_over_nominal_clients_keeps_exactly_the_served_ones() {
        let y = mnist_like(100);
        let parts = dirichlet_fedtmos_code(&y, 10, 10, 0.1, 3).unwrap();
        let empty = empty_clients(&parts);
        let served = 10 - empty.len();
        let split = ClassSplit::DirichletFedTmosCode {
            alpha: 0.1,
            nominal: 10,
        };
        let kept = split.split_all_served(&y, 10, served, 3).unwrap();
        let want: Vec<Vec<usize>> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        assert_eq!(kept, want);
        let e = split
            .split_all_served(&y, 10, served + 1, 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("leaves {served} of 10 nominal clients"))
                && e.contains(&format!("clients {} get none", some(&empty)))
                && e.contains(&format!("declare {served} clients")),
            "{e}"
        );
        // Drawn over the declared clients only: the empty ones are refused, with the way out.
        let without = ClassSplit::DirichletFedTmosCode {
            alpha: 0.1,
            nominal: 10,
        };
        let e = without
            .split_all_served(&y, 10, 10, 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("without rows")
                && e.contains(&format!(
                    "nominal_clients = 10 and declare {served} clients"
                )),
            "{e}"
        );
    }

    #[test]
    fn s_beta_gives_each_client_exactly_beta_classes_including_its_own() {
        let y = mnist_like(60);
        for beta in [1, 2, 3, 4] {
            let parts = classes_per_client(&y, 10, 10, beta, 5).unwrap();
            for (i, set) in class_sets(&parts, &y).iter().enumerate() {
                assert_eq!(set.len(), beta, "client {} with β = {beta}", i + 1);
                assert!(
                    set.contains(&(i as u32)),
                    "client {} holds its own class",
                    i + 1
                );
            }
            let mut all: Vec<usize> = parts.concat();
            let n = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), n, "no row twice");
        }
        let e = classes_per_client(&y, 10, 10, 11, 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 10 classes, not 11"), "{e}");
    }
}
