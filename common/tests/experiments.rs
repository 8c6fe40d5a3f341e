//! Every committed experiment file, checked: its checked form (strategy, policy, data, partition,
//! compression, clients) must stay what `tests/experiments/checked.json` records (a digest of its
//! `Debug` text), so a change of how the file is read (such as typing the configuration) is proven
//! to change no experiment; and its resolved file must read back as the same experiment.
//!
//! To re-record after an intended change: `FLINT_RECORD=1 cargo test -p flint-common --test
//! experiments`, and say why in the commit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flint_common::config::Experiment;
use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn experiment_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root().join("experiments"), root().join("tests/behaviour")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What an experiment checks to, as text: the checked parts by their `Debug` form.
fn checked(e: &Experiment) -> String {
    format!(
        "name={:?} seed={} strategy={:?} robust={:?} policy={:?} churn={:?} data={:?} partition={:?} compression={:?} clients={:?} links={:?}",
        e.name,
        e.seed,
        e.strategy,
        e.robust,
        e.policy,
        e.churn,
        e.data,
        e.partition,
        e.compression,
        e.clients,
        e.links
    )
}

#[test]
fn every_committed_experiment_checks_as_recorded() {
    let record = std::env::var_os("FLINT_RECORD").is_some();
    let path = root().join("common/tests/experiments/checked.json");
    let mut now = BTreeMap::new();
    for file in experiment_files() {
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let value = match Experiment::from_toml(&text) {
            Ok(e) => {
                // The resolved file is the same experiment.
                let again = Experiment::from_toml(&e.to_toml()).unwrap();
                assert_eq!(
                    checked(&again),
                    checked(&e),
                    "{name}: resolved file differs"
                );
                assert_eq!(
                    again.fingerprint, e.fingerprint,
                    "{name}: resolved fingerprint"
                );
                assert_eq!(again.to_toml(), e.to_toml(), "{name}: resolved file");
                digest(&checked(&e))
            }
            Err(err) => panic!("{name}: {err}"),
        };
        now.insert(name, value);
    }
    if record {
        let text = serde_json::to_string_pretty(&now).unwrap();
        std::fs::write(&path, text + "\n").unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let was: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        was.len(),
        now.len(),
        "experiment files added or removed: re-record"
    );
    for (name, value) in &now {
        assert_eq!(
            Some(value),
            was.get(name),
            "{name} checks to another experiment"
        );
    }
}
