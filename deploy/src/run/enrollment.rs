//! The enrollment secrets `flint run` issues to its own clients where a process cannot prove
//! its slot by a certificate that names it (plaintext, or the pool certificate of a process
//! hosting several clients): its server then admits only its own processes, as any server
//! started by hand without `--open-enrollment` must.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::certs::{secret_hash_line, write_secret};

pub(super) struct OwnEnrollment {
    dir: PathBuf,
    secrets: HashMap<String, String>,
}

impl OwnEnrollment {
    /// A secret per client, in memory; their hashes in `dir/enrollment.sha256` for the server.
    pub(super) fn issue(dir: &Path, names: &[String]) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let secrets: HashMap<String, String> = names
            .iter()
            .map(|n| (n.clone(), flint_client::random_secret()))
            .collect();
        let mut hashes = String::with_capacity(65 * names.len());
        // In the experiment's order, so that the file does not vary with the map's.
        for name in names {
            hashes += &secret_hash_line(&secrets[name])?;
        }
        std::fs::write(dir.join("enrollment.sha256"), hashes)
            .with_context(|| format!("cannot write {}", dir.display()))?;
        Ok(OwnEnrollment {
            dir: dir.to_path_buf(),
            secrets,
        })
    }

    /// The hashes' file, for `flint server --enrollment`.
    pub(super) fn hashes(&self) -> PathBuf {
        self.dir.join("enrollment.sha256")
    }

    /// A folder of its own for one client process (`--enroll-dir`), holding its clients'
    /// secrets only: each process reads no more than it hosts.
    pub(super) fn folder_for(&self, group: &[String]) -> anyhow::Result<PathBuf> {
        let folder = self.dir.join(&group[0]);
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        for (k, name) in group.iter().enumerate() {
            let secret = self
                .secrets
                .get(name)
                .with_context(|| format!("no enrollment secret was issued for {name:?}"))?;
            write_secret(&folder.join(format!("{}.secret", k + 1)), secret)?;
        }
        Ok(folder)
    }
}
