//! How the rows are split over the clients, checked against the experiment, and the split it
//! makes of a dataset.

use rand::seq::SliceRandom;

use super::split::{
    ClassPools, classes_per_client, dirichlet, dirichlet_by_class, dirichlet_fedtmos_code,
    empty_clients, split_by_counts, split_by_sets,
};
use crate::data::Dataset;
use crate::rng::derive_rng;
use crate::{FlintError, Result};

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
pub(super) fn some(ids: &[usize]) -> String {
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
