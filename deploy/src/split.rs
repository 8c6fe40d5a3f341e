//! `flint split`: each client's rows per class, drawn as its process draws them, without
//! training: to check a split before a long run, or to write it down as an explicit partition.

use std::path::PathBuf;

use anyhow::bail;
use flint_common::clients::ClientClasses;
use flint_common::config::{Experiment, parse_override};
use flint_common::data::{PartitionPlan, default_data_dir};

#[derive(Debug, Clone, clap::Args)]
pub struct SplitArgs {
    /// Experiment file.
    pub experiment: PathBuf,
    /// Data directory [default: $FLINT_DATA_DIR or ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Override an experiment key, e.g. --set seed=20 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override)]
    pub overrides: Vec<(String, String)>,
    /// Print `[[clients]]` entries whose `class_counts` are each client's share of the rows (a
    /// table client's training and test rows, an image client's training rows), for an
    /// experiment with `partition.kind = "explicit"` and the same label skew.
    #[arg(long)]
    pub toml: bool,
}

pub fn split(args: SplitArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    let e = Experiment::load_with_data(&args.experiment, &args.overrides, &data_dir)?;
    e.data.check_files(&data_dir)?;
    if args.toml && matches!(e.partition, PartitionPlan::Dirichlet { .. }) {
        bail!(
            "partition.kind = \"dirichlet\" draws each client's rows on its own (a row may go to several clients), so it has no explicit form: --toml needs a split of the rows"
        );
    }
    let clients = flint_common::clients::client_classes(&e, &data_dir)?;
    match args.toml {
        true => print!("{}", explicit_entries(&e, &clients)),
        false => print!("{}", table(&e, &clients)),
    }
    Ok(())
}

/// Client, training rows, test rows, then the training rows of each class.
fn table(e: &Experiment, clients: &[ClientClasses]) -> String {
    let classes = e.data.classes();
    let name_width = clients
        .iter()
        .map(|c| c.name.len())
        .fold("client".len(), usize::max);
    let width = |k: usize| {
        let widest = clients.iter().map(|c| c.train[k]).max().unwrap_or(0);
        widest.to_string().len().max(classes[k].len())
    };
    let widths: Vec<usize> = (0..classes.len()).map(width).collect();
    let mut out = format!(
        "{} (seed {}): {} clients; training rows per class\n",
        e.name,
        e.seed,
        clients.len()
    );
    out += &format!("{:name_width$}  {:>7}  {:>6} ", "client", "train", "test");
    for (class, w) in classes.iter().zip(&widths) {
        out += &format!(" {class:>w$}");
    }
    out.push('\n');
    for c in clients {
        let (train, test) = (c.train.iter().sum::<u64>(), c.test.iter().sum::<u64>());
        out += &format!("{:name_width$}  {train:>7}  {test:>6} ", c.name);
        for (n, w) in c.train.iter().zip(&widths) {
            out += &format!(" {n:>w$}");
        }
        out.push('\n');
    }
    out
}

/// The split as explicit `[[clients]]` entries: each client's share of the rows per class.
/// The same counts, not the same rows: an explicit split draws its rows again. Names need no
/// escaping: they are checked to be ASCII letters, digits, '-', '_' and '.'.
fn explicit_entries(e: &Experiment, clients: &[ClientClasses]) -> String {
    let mut out = format!(
        "# {} (seed {}): each client's rows per class, as `flint split` drew them; the same data keys\n# (data.test_fraction, data.global_test_fraction) give each client the same counts\n",
        e.name, e.seed
    );
    for c in clients {
        let counts: Vec<String> = c.rows.iter().map(u64::to_string).collect();
        out += &format!(
            "\n[[clients]]\nname = {:?}\nclass_counts = [{}]\n",
            c.name,
            counts.join(", ")
        );
    }
    out
}
