//! `flint explain`: the models a run kept, as text.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use flint_common::model::kept::ModelFile;

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A run directory (holding models/), e.g. runs/quickstart.
    pub run_dir: PathBuf,
    /// Only this client's model [default: every client's, a model shared by several once].
    #[arg(long)]
    pub client: Option<String>,
    /// Coefficients or links to show per class.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

pub fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    print!("{}", text(&args.run_dir, args.client.as_deref(), args.top)?);
    Ok(())
}

/// The models below `run_dir/models`, in client order; clients holding the same model (every
/// FedAvg client after the last round) are listed once, together.
pub fn text(run_dir: &Path, client: Option<&str>, top: usize) -> anyhow::Result<String> {
    let dir = run_dir.join("models");
    if !dir.is_dir() {
        bail!(
            "{} holds no models: the run did not finish, or its clients kept none",
            run_dir.display()
        );
    }
    let mut models: Vec<ModelFile> = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        match ModelFile::parse(&bytes) {
            Ok(model) => models.push(model),
            // One unreadable file hides no other client's model.
            Err(e) => eprintln!("flint explain: skipping {}: {e}", path.display()),
        }
    }
    // client-2 before client-10.
    models.sort_by_key(|m| natural_key(&m.client));
    if let Some(name) = client {
        models.retain(|m| m.client == name);
        if models.is_empty() {
            bail!("no model of client {name:?} in {}", dir.display());
        }
    }
    let mut groups: Vec<(Vec<String>, &ModelFile)> = Vec::new();
    for m in &models {
        // The same model, names and cuts: everything but the client's name.
        let same = |g: &ModelFile| {
            ModelFile {
                client: m.client.clone(),
                ..g.clone()
            } == *m
        };
        match groups.iter_mut().find(|(_, g)| same(g)) {
            Some((names, _)) => names.push(m.client.clone()),
            None => groups.push((vec![m.client.clone()], m)),
        }
    }
    let mut out = String::new();
    for (names, m) in groups {
        // Grouped by their stored machines' ids: each group's machines are read once.
        let mut m = m.clone();
        m.load_machines(&dir)
            .map_err(|e| anyhow::anyhow!("the model of {}: {e}", names.join(", ")))?;
        out += &format!("{}:\n{}\n", names.join(", "), m.explain(top));
    }
    Ok(out)
}

fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem.to_string(), number.parse().unwrap_or(0))
}
