//! What makes a client itself to the server: its token (kept in `--out`, so a client started
//! again is the same client), its enrollment secret, and its host's name.

use std::path::PathBuf;

use anyhow::{Context, bail};
use flint_common::wire::HOST_HEADER;
use tonic::Request;

/// The `--name` that asks the server for a slot.
pub const AUTO: &str = "auto";

/// This machine's (container's) host name, for the server's record of who holds which slot.
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn with_host<T>(mut r: Request<T>) -> Request<T> {
    if let Ok(host) = host_name().parse() {
        r.metadata_mut().insert(HOST_HEADER, host);
    }
    r
}

/// A fresh random token (128 bits, hex) that binds one client slot to this process.
pub(crate) fn new_token() -> String {
    random_secret()
}

/// 128 random bits in hex: a token, or an enrollment secret.
pub fn random_secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The secret of an enrollment directory that `token`'s client took before (a client started
/// again), or an unused one, taken: its file `<k>.secret` renamed `<k>.secret.taken-<mark>`,
/// the mark a hash of the token (a rename is atomic, so two clients never take the same one).
pub(crate) fn take_secret(dir: &std::path::Path, token: &str) -> anyhow::Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the enrollment directory {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .with_context(|| format!("cannot read {}", path.display()))
    };
    let suffix = taken_suffix(token);
    if let Some(mine) = files
        .iter()
        .find(|p| p.to_string_lossy().ends_with(&suffix))
    {
        return read(mine);
    }
    for file in files
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "secret"))
    {
        let taken = PathBuf::from(format!("{}{suffix}", file.with_extension("").display()));
        if std::fs::rename(file, &taken).is_ok() {
            return read(&taken);
        }
    }
    bail!(
        "no unused enrollment secret left in {} (flint certs --enroll N writes one per slot)",
        dir.display()
    )
}

/// Gives back the secret [`take_secret`] marked for `token` (its client was refused before it
/// joined), so that another client of the folder can take it; a secret never taken is left.
pub(crate) fn give_back_secret(dir: &std::path::Path, token: &str) {
    let suffix = taken_suffix(token);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()) {
        let name = path.to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(&suffix) {
            let _ = std::fs::rename(&path, format!("{stem}.secret"));
        }
    }
}

/// How a secret taken by the client holding `token` is renamed: `.secret.taken-` and the first
/// 8 bytes of the token's SHA-256, so that a client started again finds its own.
fn taken_suffix(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(token.as_bytes());
    format!(".secret.taken-{}", flint_common::hex::encode(&digest[..8]))
}

/// The token kept in `path`, or a new one written there (mode 0600).
pub(crate) fn kept_token(path: &std::path::Path) -> anyhow::Result<String> {
    if let Ok(kept) = std::fs::read_to_string(path) {
        let kept = kept.trim();
        if kept.len() >= 32 && kept.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(kept.to_string());
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let token = new_token();
    write_private(path, &token)
        .with_context(|| format!("cannot keep the client token in {}", path.display()))?;
    Ok(token)
}

/// `text` in a new file at `path` (one there is replaced) that only its owner can read: a
/// token or an enrollment secret.
pub fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
}

/// What binds a slot to this process: its token, and the enrollment secret it first binds
/// with (empty where the server asks for none).
pub(crate) struct Credentials {
    pub token: String,
    pub enrollment: String,
}

/// Where this process's clients get their enrollment secrets.
pub(crate) enum Enroll {
    None,
    Secret(String),
    Dir(PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret taken is the client's own when it starts again, and once given back is another
    /// client's to take.
    #[test]
    fn a_secret_taken_and_given_back_is_free_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("1.secret"), "s1\n").unwrap();
        let (a, b) = ("a".repeat(32), "b".repeat(32));
        assert_eq!(take_secret(dir.path(), &a).unwrap(), "s1");
        assert_eq!(take_secret(dir.path(), &a).unwrap(), "s1", "its own again");
        assert!(take_secret(dir.path(), &b).is_err(), "none left");
        give_back_secret(dir.path(), &a);
        assert!(dir.path().join("1.secret").exists());
        assert_eq!(take_secret(dir.path(), &b).unwrap(), "s1");
    }
}
