//! `flint certs`: a private PKI for a federation (rcgen): a CA, a server certificate, one
//! certificate per client whose common name is the client's name, and optionally a pool
//! certificate for clients started with `--name auto`.

use std::path::PathBuf;

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
    /// Days the certificates are valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

pub fn certs(args: CertsArgs) -> anyhow::Result<()> {
    let clients = client_names(&args.clients)?;
    if clients.is_empty() && !args.pool {
        bail!("no client certificates asked for: give --clients N|NAMES or --pool");
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
    println!(
        "wrote a CA, a server certificate for {:?}, {} client certificate(s){} to {}",
        args.server_names,
        clients.len(),
        if args.pool {
            " and a pool certificate"
        } else {
            ""
        },
        pki.dir.display()
    );
    Ok(())
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
