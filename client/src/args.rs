//! The command line of `flint-client` (and `flint client`), and which clients a process hosts.

use std::path::PathBuf;

use anyhow::bail;
use flint_common::config::{Experiment, parse_override};
use flint_shell::logging::LogFormat;

use crate::identity::AUTO;
use crate::tls::ClientTls;

/// Command-line options of `flint-client` (and `flint client`).
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Server address.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// Experiment file (TOML): the same one the server runs.
    #[arg(long, short)]
    pub experiment: PathBuf,
    /// Client name as declared in the experiment, or `auto` for the next slot the server has
    /// not given out (under mutual TLS: the slot the certificate names); repeat to host several
    /// clients in this process.
    #[arg(long = "name", required_unless_present = "index")]
    pub names: Vec<String>,
    /// The experiment's client at this 0-based position, e.g. a Kubernetes Indexed Job's
    /// completion index (instead of --name).
    #[arg(long, env = "JOB_COMPLETION_INDEX", conflicts_with = "names")]
    pub index: Option<usize>,
    /// Data directory [default: $FLINT_DATA_DIR or ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Compute power to declare instead of the experiment's (GHz).
    #[arg(long)]
    pub compute_ghz: Option<f64>,
    /// Directory to write client-<name>.json (this client's byte ledger) into.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Give up on an unreachable server after this many seconds.
    #[arg(long, env = "FLINT_RETRY_SECS", default_value_t = 60.0)]
    pub retry_secs: f64,
    /// Override an experiment key, e.g. --set rounds=3 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override)]
    pub overrides: Vec<(String, String)>,
    /// Log format on stderr: text, or json (one object per line, with each client's run and
    /// round).
    #[arg(long, env = "FLINT_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Clients of this process that train at the same time [default: the machine's cores].
    #[arg(long)]
    pub train_threads: Option<usize>,
    #[command(flatten)]
    pub tls: ClientTls,
    /// This process is alone in its network namespace (its own container): count the bytes on
    /// its network interfaces as the link level. Only for a process of one client.
    #[arg(long, env = "FLINT_LINK_BYTES", value_parser = clap::builder::FalseyValueParser::new())]
    pub link_bytes: bool,
    /// A file of secret bytes (at least 16) only this process holds: under `dp.mechanism =
    /// "local"` each of its clients draws its noise from a stream keyed by it (and the client's
    /// id), which the run's seed, known to the server, cannot draw.
    #[arg(long, env = "FLINT_DP_NOISE_KEY_FILE", value_name = "FILE")]
    pub dp_noise_key_file: Option<PathBuf>,
    /// An enrollment secret (from `flint certs --enroll`), for a server started with
    /// `--enrollment`: this process's one client binds its slot with it.
    #[arg(long, env = "FLINT_ENROLL_SECRET", conflicts_with = "enroll_dir")]
    pub enroll_secret: Option<String>,
    /// A directory of enrollment secrets (`flint certs --enroll`'s `enroll/`), shared by the
    /// clients of several processes or containers: each client takes one unused secret by
    /// renaming its file with a mark of its token, so that started again with the same token
    /// (its `--out`) it finds the same one.
    #[arg(long, env = "FLINT_ENROLL_DIR")]
    pub enroll_dir: Option<PathBuf>,
    /// End the whole process at the first of its clients that fails (`flint run` does: its
    /// run then fails at once instead of waiting out round timeouts). Without it a client that
    /// fails, say refused at Join because a stranger holds its slot, ends alone: the others go
    /// on, and the process names every failure and exits non-zero at the end.
    #[arg(long)]
    pub fail_fast: bool,
}

/// The names this process hosts: `--name`s (each declared, or `auto`), or the experiment's
/// client at `--index`.
pub(crate) fn client_names(
    args: &ClientArgs,
    experiment: &Experiment,
) -> anyhow::Result<Vec<String>> {
    if let Some(i) = args.index {
        let Some(c) = experiment.clients.get(i) else {
            bail!(
                "--index {i} but the experiment has {} clients (0 to {})",
                experiment.clients.len(),
                experiment.clients.len().saturating_sub(1)
            );
        };
        return Ok(vec![c.name.clone()]);
    }
    for name in args.names.iter().filter(|n| *n != AUTO) {
        if experiment.client_id(name).is_none() {
            let names: Vec<&str> = experiment.clients.iter().map(|c| c.name.as_str()).collect();
            bail!("client {name:?} is not declared in the experiment; it declares {names:?}");
        }
    }
    Ok(args.names.clone())
}
