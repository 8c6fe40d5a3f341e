//! The rules that tie an experiment's sections together, each a named check run once by
//! [`super::Experiment::check`] after every section has passed its own.

use super::RoundPolicy;
use crate::data::partition::ClassSplit;
use crate::data::{
    ClientSection, ClientSpec, DataSection, DataSpec, PartitionPlan, PartitionSection, Scaling,
    TableBits,
};
use crate::strategy::model_spec::ModelSpec;
use crate::strategy::{ModelKind, StrategyKind, StrategySpec};
use crate::{FlintError, Result};

fn bad(message: String) -> FlintError {
    FlintError::Config(message)
}

/// A name is a directory under `runs/`.
pub(super) fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty() {
        return Err(bad("name must not be empty".into()));
    }
    if name.contains(['/', '\\']) {
        return Err(bad(format!(
            "name {name:?} must not contain a path separator"
        )));
    }
    Ok(())
}

/// At least one round; exactly one for the one-shot strategies.
pub(super) fn check_rounds(strategy: &StrategySpec, rounds: u32) -> Result<()> {
    if rounds == 0 {
        return Err(bad("rounds must be at least 1".into()));
    }
    if one_shot(strategy) && rounds != 1 {
        return Err(bad(format!(
            "strategy {} is one-shot: set rounds = 1, not {rounds}",
            strategy.name()
        )));
    }
    Ok(())
}

/// A one-shot strategy (FedTMOS, its ensemble) sends one upload and one download.
fn one_shot(strategy: &StrategySpec) -> bool {
    strategy.kind().facts().one_shot
}

/// `rounds` where the file leaves it out: 1 for a one-shot strategy, 10 for the others (the
/// papers' runs take 10 to 20; a run's own file says what it needs).
pub(super) fn default_rounds(strategy: &StrategySpec) -> u32 {
    if one_shot(strategy) { 1 } else { 10 }
}

/// A round that asks some of the clients: not where the strategy's one upload is each
/// client's only say (a one-shot strategy), nor where one client holds all the data.
pub(super) fn check_selection(strategy: &StrategySpec, policy: &RoundPolicy) -> Result<()> {
    if policy.selection.per_round.is_none() {
        return Ok(());
    }
    if one_shot(strategy) || strategy.kind() == StrategyKind::Central {
        return Err(bad(format!(
            "strategy {} asks every client once: server.clients_per_round does not apply",
            strategy.name()
        )));
    }
    Ok(())
}

/// `central` trains one model on all the data.
pub(super) fn check_central(strategy: &StrategySpec, clients: usize) -> Result<()> {
    if strategy.kind() == StrategyKind::Central && clients != 1 {
        return Err(bad(format!(
            "strategy central trains one model on all the data: declare one client, not {clients}"
        )));
    }
    Ok(())
}

/// The data as the strategy's model reads it: scaled by the model's default where the file does
/// not say (FCM concepts live in [0, 1]: min-max; logistic regression: z-scores), a table
/// under a Tsetlin Machine as bits by the thermometer code (FedTMOS's machines then sized by a
/// row's bits), images only under a Tsetlin Machine or a convolutional network.
pub(super) fn data_for_model(
    section: &DataSection,
    strategy: StrategyKind,
    model: ModelKind,
) -> Result<DataSpec> {
    let model_scaling = match model {
        ModelKind::Fcm => Scaling::LocalMinMax,
        _ => Scaling::LocalZScore,
    };
    let mut data = section.check(model_scaling)?;
    match (model == ModelKind::Tm, data.is_images()) {
        (true, false) => table_as_bits(section, &mut data, strategy)?,
        (false, true) if model == ModelKind::Cnn => {}
        (false, false) if data.table_bits.is_some() => {
            return Err(bad(
                "data.booleanize, data.levels and data.cuts apply to model tm".into(),
            ));
        }
        (false, true) => {
            return Err(bad(format!(
                "data source {:?} is images: it needs model = \"tm\" (strategy tpfl) or \"cnn\" (strategy fedavg-cnn)",
                section.source
            )));
        }
        _ => {}
    }
    Ok(data)
}

/// A table becomes bits by the thermometer code, raw values in.
fn table_as_bits(section: &DataSection, data: &mut DataSpec, strategy: StrategyKind) -> Result<()> {
    if section.scaling.is_some() {
        return Err(bad(
            "data.scaling does not apply to model tm: the thermometer code reads raw values".into(),
        ));
    }
    data.scaling = Scaling::None;
    let columns = data.source_columns();
    let bits = data.table_bits.get_or_insert(TableBits::Quantiles {
        levels: crate::data::DataDefaults::default().levels,
    });
    if let (TableBits::Fixed(t), Some(columns)) = (&*bits, columns)
        && t.cuts.len() != columns
    {
        return Err(bad(format!(
            "data.cuts has {} lists, but the data has {columns} features",
            t.cuts.len()
        )));
    }
    // FedTMOS's machines read a whole row as one patch: the server sizes them by the row's
    // bits, which the experiment must fix.
    if strategy.reads_rows_as_patches() && data.features().is_none() {
        return Err(bad(format!(
            "strategy {} on a csv needs data.features (or data.cuts): the server sizes the machines by it",
            strategy.name()
        )));
    }
    Ok(())
}

/// The partition's plan; images are split once over the whole training set, each row to one
/// client, by Dirichlet draws or by class.
pub(super) fn partition_for_data(
    section: &PartitionSection,
    declared: &[ClientSection],
    clients: &[ClientSpec],
    data: &DataSpec,
) -> Result<PartitionPlan> {
    let partition = match section.plan(declared, clients, data.classes().len())? {
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
    Ok(partition)
}

/// The published code's data leak needs a split of the whole image training set by class.
pub(super) fn check_copy_data_epoch(
    asked: bool,
    strategy: &StrategySpec,
    data: &DataSpec,
    partition: &PartitionPlan,
) -> Result<()> {
    let applies = strategy.copy_data_epoch()
        && data.is_images()
        && matches!(partition, PartitionPlan::ByClass { .. });
    if asked && !applies {
        return Err(bad(
            "fedtmos.copy_data_epoch applies to fedtmos and ensemble over a split of the whole training set by class (dirichlet-by-class, dirichlet-fedtmos-code, classes-per-client, explicit)".into(),
        ));
    }
    Ok(())
}

/// A shared test set measures one global model.
pub(super) fn check_global_test(strategy: &StrategySpec, data: &DataSpec) -> Result<()> {
    if data.global_test.is_some() && !strategy.kind().facts().one_model {
        return Err(bad(format!(
            "data.global_test_fraction measures one global model; strategy {} leaves each client its own",
            strategy.name()
        )));
    }
    let cnn = matches!(strategy.model(), ModelSpec::Cnn(c) if c.global_test);
    if cnn && !strategy.kind().facts().one_model {
        return Err(bad(format!(
            "cnn.global_test measures one global model; strategy {} leaves each client its own",
            strategy.name()
        )));
    }
    Ok(())
}
