//! What a client leaves in `--out` at the end: its report (`client-<name>.json`: its own view
//! of the bytes it exchanged) and its model (`models/<name>.json` and its machines).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use flint_common::degenerate::ModelHealth;
use flint_common::model::kept::{MACHINES_DIR, ModelFile, StoredMachine};
use flint_common::wire::ledger::Ledger;
use flint_common::{ClientId, Round};
use serde::{Deserialize, Serialize};

use crate::identity::random_secret;

/// What a client leaves in `--out`: its own view of the bytes it exchanged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientReport {
    pub client_id: ClientId,
    pub name: String,
    pub rounds_trained: Vec<Round>,
    /// Seconds of local training per round (the training call alone, on one thread).
    #[serde(default)]
    pub train_seconds: BTreeMap<Round, f64>,
    pub ledger: Ledger,
    /// The interfaces whose bytes are the link level; empty where it was not measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_interfaces: Vec<String>,
    /// The model at the end of the run, written to `models/<name>.json` beside this report.
    #[serde(skip)]
    pub model: Option<ModelFile>,
    /// What that model says about itself: machines without clauses, weights not finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_health: Option<ModelHealth>,
}

/// Each client's report (`client-<name>.json`) and kept model (`models/<name>.json` and its
/// checkpoints) in `out`.
pub(crate) fn write_reports(out: &std::path::Path, reports: &[ClientReport]) -> anyhow::Result<()> {
    let write = |path: PathBuf, bytes: &[u8]| {
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))
    };
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for r in reports {
        write(
            out.join(format!("client-{}.json", r.name)),
            &serde_json::to_vec_pretty(r)?,
        )?;
        let Some(model) = &r.model else {
            continue;
        };
        let dir = out.join("models");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // The machines first: a reader of the client's file finds every machine it names.
        let (file, machines) = model.for_disk();
        store_machines(&dir.join(MACHINES_DIR), &machines)?;
        write(
            dir.join(format!("{}.json", r.name)),
            &serde_json::to_vec_pretty(&file)?,
        )?;
        for (suffix, bytes) in file.model.checkpoints() {
            write(dir.join(format!("{}{suffix}", r.name)), bytes)?;
        }
    }
    Ok(())
}

/// Each machine once, by content: a file already there (another client's, or another
/// process's or container's) is the same machine and is kept. Written under a random name
/// (containers sharing the directory all run as PID 1), then renamed, so a reader never sees
/// half a file; a rename that loses to another writer of the same machine is no failure.
fn store_machines(dir: &std::path::Path, machines: &[StoredMachine]) -> anyhow::Result<()> {
    if machines.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for m in machines {
        for (ext, bytes) in [("json", &m.rules), ("tm", &m.checkpoint)] {
            let path = dir.join(format!("{}.{ext}", m.id));
            if path.exists() {
                continue;
            }
            let partial = dir.join(format!(".{}.{ext}.{}", m.id, random_secret()));
            let written =
                std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, &path));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&partial);
                if !path.exists() {
                    return Err(e).with_context(|| format!("cannot write {}", path.display()));
                }
            }
        }
    }
    Ok(())
}
