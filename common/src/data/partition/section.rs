//! `[partition]` as written, checked beside the clients' own keys into a [`PartitionPlan`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::clients::{ClientSection, ClientSpec};
use super::plan::{ClassSplit, PartitionPlan};
use crate::params::{ParamError, ParamResult, at_least_or_unset};

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

/// What `[partition]` reads where a key is left out (the clients' counts aside: they follow
/// the declared clients).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionDefaults {
    pub samples: usize,
    pub iid_alpha: f64,
    pub non_iid_alpha: f64,
    pub alpha: f64,
    pub beta: usize,
}

impl Default for PartitionDefaults {
    /// TPFL §6.3's Dirichlet clients; FedTMOS's Dir(0.1) and S(2).
    fn default() -> Self {
        PartitionDefaults {
            samples: 30_000,
            iid_alpha: 10_000.0,
            non_iid_alpha: 0.05,
            alpha: 0.1,
            beta: 2,
        }
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
    #[schemars(extend("default" = 30_000))]
    pub samples: Option<usize>,
    /// dirichlet: α of the IID clients (default 10000).
    #[schemars(extend("default" = 10_000.0))]
    pub iid_alpha: Option<f64>,
    /// dirichlet: α of the non-IID clients (default 0.05).
    #[schemars(extend("default" = 0.05))]
    pub non_iid_alpha: Option<f64>,
    /// dirichlet: how many clients, the first ones by id, are IID (default: all). TPFL's
    /// experiments 1–5 are 100 %, 75 %, 50 %, 25 % and 0 % of the clients.
    #[serde(default, deserialize_with = "at_least_or_unset::<0, _, _>")]
    pub iid_clients: Option<usize>,
    /// dirichlet-by-class, dirichlet-fedtmos-code: α of Dir(α) over the clients, per class
    /// (default 0.1, FedTMOS's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0.1))]
    pub alpha: Option<f64>,
    /// classes-per-client: β, the classes each client holds (default 2).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_least_or_unset::<0, _, _>"
    )]
    #[schemars(extend("default" = 2))]
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
        let d = PartitionDefaults::default();
        let samples = section.samples.unwrap_or(d.samples);
        if samples == 0 {
            return Err("partition.samples must be at least 1".into());
        }
        let iid_alpha = section.iid_alpha.unwrap_or(d.iid_alpha);
        let non_iid_alpha = section.non_iid_alpha.unwrap_or(d.non_iid_alpha);
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
        let d = PartitionDefaults::default();
        let alpha = section.alpha.unwrap_or(d.alpha);
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(format!("partition.alpha must be positive, got {alpha}"));
        }
        let beta = section.beta.unwrap_or(d.beta);
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

/// `partition.class_sets`: one non-empty set of distinct classes of the run per client.
pub(super) fn check_class_sets(
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
