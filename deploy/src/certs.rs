//! `flint certs`: a private PKI for a federation (rcgen): a CA, a server certificate, one
//! certificate per client whose common name is the client's name, and optionally a pool
//! certificate for clients started with `--name auto`.

use std::path::{Path, PathBuf};

use anyhow::bail;
use flint_shell::tls::generate_pki;

#[derive(Debug, Clone, clap::Args)]
pub struct CertsArgs {
    /// Directory to write ca.crt, server.crt/.key and clients/<name>.crt/.key into.
    #[arg(long)]
    pub out: PathBuf,
    /// DNS name or IP address the server is reached at (repeatable; the first is its CN).
    #[arg(long = "server-name", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
    pub server_names: Vec<String>,
    /// The clients: a count N (client-1 … client-N, the experiments' names) or names separated
    /// by commas.
    #[arg(long, default_value = "0")]
    pub clients: String,
    /// Also a pool certificate (clients/pool.crt): it may claim any unclaimed client slot.
    #[arg(long)]
    pub pool: bool,
    /// Also a certificate for health probes (clients/probe.crt, common name `probe`): it passes
    /// the handshake of a server that requires client certificates but names no slot, so it
    /// can take none (the Kubernetes manifests' server probes use it).
    #[arg(long)]
    pub probe: bool,
    /// Also N one-time enrollment secrets (`enroll/<k>.secret`, mode 0600) and their hashes
    /// (`enrollment.sha256`, for `flint server --enrollment`): each lets one client bind one
    /// slot the first time, so strangers holding the experiment file and the pool certificate
    /// (or, on a plaintext server, nothing) can take none.
    #[arg(long, value_name = "N")]
    pub enroll: Option<usize>,
    /// Days the certificates are valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

/// The health probe's certificate: a name no slot of a counted PKI has (they are client-N).
pub const PROBE_NAME: &str = "probe";

pub fn certs(args: CertsArgs) -> anyhow::Result<()> {
    let mut clients = client_names(&args.clients)?;
    if args.probe {
        if clients.iter().any(|c| c == PROBE_NAME) {
            bail!("--probe writes clients/{PROBE_NAME}.crt, but a client is named {PROBE_NAME:?}");
        }
        clients.push(PROBE_NAME.to_string());
    }
    if clients.is_empty() && !args.pool && args.enroll.is_none() {
        bail!("no client certificates asked for: give --clients N|NAMES, --pool or --enroll N");
    }
    if args.days == 0 {
        bail!("--days must be at least 1");
    }
    let pki = generate_pki(
        &args.out,
        &args.server_names,
        &clients,
        args.pool,
        args.days,
    )?;
    if let Some(n) = args.enroll {
        write_enrollment(&args.out, n)?;
    }
    let extras: Vec<&str> = [(args.pool, "a pool"), (args.probe, "a probe")]
        .into_iter()
        .filter_map(|(asked, what)| asked.then_some(what))
        .collect();
    println!(
        "wrote a CA, a server certificate for {:?}, {} client certificate(s){} to {}",
        args.server_names,
        clients.len() - usize::from(args.probe),
        match extras.as_slice() {
            [] => String::new(),
            extras => format!(" and {} certificate", extras.join(" and ")),
        },
        pki.dir.display()
    );
    Ok(())
}

/// `n` enrollment secrets below `out/enroll/`, and their hashes in `out/enrollment.sha256`.
fn write_enrollment(out: &Path, n: usize) -> anyhow::Result<()> {
    if n == 0 {
        bail!("--enroll needs at least one secret");
    }
    let dir = out.join("enroll");
    std::fs::create_dir_all(&dir)?;
    // A new PKI's secrets replace the last one's, taken or not.
    for old in std::fs::read_dir(&dir)?.flatten() {
        if old.file_name().to_string_lossy().contains(".secret") {
            std::fs::remove_file(old.path())?;
        }
    }
    let mut hashes = String::new();
    for k in 1..=n {
        let secret = flint_client::random_secret();
        write_secret(&dir.join(format!("{k}.secret")), &secret)?;
        hashes += &secret_hash_line(&secret)?;
    }
    std::fs::write(out.join("enrollment.sha256"), hashes)?;
    println!(
        "wrote {n} enrollment secret(s) to {} and their hashes to enrollment.sha256",
        dir.display()
    );
    Ok(())
}

/// An enrollment secret in its own file, readable by its owner only.
pub(crate) fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    flint_client::write_private(path, secret)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// A secret's line of an enrollment file (`flint server --enrollment`).
pub(crate) fn secret_hash_line(secret: &str) -> anyhow::Result<String> {
    Ok(format!(
        "{}\n",
        flint_server::identity::secret_hash_hex(secret)?
    ))
}

/// `N` → client-1 … client-N; otherwise the comma-separated names.
pub fn client_names(spec: &str) -> anyhow::Result<Vec<String>> {
    let spec = spec.trim();
    if let Ok(n) = spec.parse::<usize>() {
        return Ok((1..=n).map(|i| format!("client-{i}")).collect());
    }
    let names: Vec<String> = spec.split(',').map(|n| n.trim().to_string()).collect();
    if let Some(bad) = names.iter().find(|n| n.is_empty()) {
        bail!("--clients {spec:?} has an empty name {bad:?}");
    }
    Ok(names)
}
