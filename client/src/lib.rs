//! `flint-client`: joins a run, trains on its shard, uploads, applies downloads, evaluates and
//! reports. One process can host several clients, each with its own connection.

pub mod core;
pub mod progress;
mod resume;
pub mod proto {
    tonic::include_proto!("flint.v1");
}

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flint_common::clients::{BoundHalf, prepare};
use flint_common::config::{Experiment, parse_override};
use flint_common::data::default_data_dir;
use flint_common::degenerate::ModelHealth;
use flint_common::metrics::ConfusionMatrix;
use flint_common::model::kept::{Condition, MACHINES_DIR, ModelFile, StoredMachine};
use flint_common::rng::{FlintRng, derive_rng};
use flint_common::strategy::Predictor;
use flint_common::wire::chunks::{MAX_CARRIED_REPORTS, MAX_CHUNK, split};
use flint_common::wire::ledger::{Direction, Ledger};
use flint_common::wire::proto::{
    ClaimRequest, DataSummary, EvalReport, JoinRequest, Payload, RoundRequest, RoundTask,
    UpdateHeader,
};
use flint_common::wire::{
    CLIENT_HEADER, HOST_HEADER, ROUND_HEADER, TOKEN_HEADER, paper_convention_bytes,
};
use flint_common::{ClientId, Round};
use flint_shell::logging::LogFormat;
use flint_shell::meter::{ConnMeter, CountingIo, LinkMeter, MessageMeterLayer, SharedLedger};
use hyper_util::rt::TokioIo;
use progress::ProgressBook;
use prost::Message;
use serde::{Deserialize, Serialize};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use tracing::Instrument;
use tracing::field::Empty;

use proto::aggregator_client::AggregatorClient;

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

/// The span of one round's work; its `round` is what a JSON line names (the innermost span's).
fn round_span(round: Round) -> tracing::Span {
    tracing::error_span!("round", round)
}

/// The `--name` that asks the server for a slot.
pub const AUTO: &str = "auto";

/// TLS of a client (PEM files, e.g. from `flint certs`); the server address is then https://.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientTls {
    /// CA that signed the server's certificate: the client speaks TLS and trusts only it.
    #[arg(long, env = "FLINT_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate, for a server that requires one (mutual TLS). `{name}` in the
    /// path stands for the client's name, so that each client of a process, or each pod of a
    /// Kubernetes Indexed Job (`--index`), presents its own: `pki/clients/{name}.crt`.
    #[arg(long, env = "FLINT_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (`{name}` as in --tls-cert).
    #[arg(long, env = "FLINT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name to expect in the server's certificate [default: the server address's host].
    #[arg(long, env = "FLINT_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

/// What `{name}` in a certificate or key path stands for.
pub const NAME_PLACEHOLDER: &str = "{name}";

impl ClientTls {
    /// These settings for the client `name`: `{name}` in the certificate and key paths replaced
    /// by it. A client that asks for its slot (`--name auto`) has no name yet to put there.
    pub fn for_client(&self, name: &str) -> anyhow::Result<ClientTls> {
        let templated = |p: &Option<PathBuf>| {
            p.as_ref()
                .is_some_and(|p| p.to_string_lossy().contains(NAME_PLACEHOLDER))
        };
        if !templated(&self.tls_cert) && !templated(&self.tls_key) {
            return Ok(self.clone());
        }
        if name == AUTO {
            bail!(
                "--tls-cert/--tls-key with {NAME_PLACEHOLDER} need the client's name (--name NAME or --index), not --name auto"
            );
        }
        let fill = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| PathBuf::from(p.to_string_lossy().replace(NAME_PLACEHOLDER, name)))
        };
        Ok(ClientTls {
            tls_cert: fill(&self.tls_cert),
            tls_key: fill(&self.tls_key),
            ..self.clone()
        })
    }

    /// The endpoint with TLS when a CA is given; the address's scheme must agree.
    pub fn apply(&self, endpoint: Endpoint) -> anyhow::Result<Endpoint> {
        use flint_shell::tls::read_pem;
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let https = endpoint.uri().scheme_str() == Some("https");
        let Some(ca) = &self.tls_ca else {
            if https {
                bail!(
                    "an https:// server address needs --tls-ca (the CA that signed the server's certificate)"
                );
            }
            return Ok(endpoint);
        };
        if !https {
            bail!("with --tls-ca the server address must start with https://");
        }
        flint_shell::tls::install_provider();
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read_pem(ca, "CA (--tls-ca)")?));
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            config = config.identity(Identity::from_pem(
                read_pem(cert, "client certificate (--tls-cert)")?,
                read_pem(key, "client key (--tls-key)")?,
            ));
        }
        if let Some(name) = &self.tls_server_name {
            config = config.domain_name(name.clone());
        }
        endpoint
            .tls_config(config)
            .context("cannot use the TLS settings")
    }
}

/// This machine's (container's) host name, for the server's record of who holds which slot.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

fn with_host<T>(mut r: Request<T>) -> Request<T> {
    if let Ok(host) = host_name().parse() {
        r.metadata_mut().insert(HOST_HEADER, host);
    }
    r
}

/// A fresh random token (128 bits, hex) that binds one client slot to this process.
fn new_token() -> String {
    random_secret()
}

/// 128 random bits in hex: a token, or an enrollment secret.
pub fn random_secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The secret of an enrollment directory that `token`'s client took before (a client started
/// again), or an unused one, taken: its file `<k>.secret` renamed `<k>.secret.taken-<mark>`,
/// the mark a hash of the token (a rename is atomic, so two clients never take the same one).
fn take_secret(dir: &std::path::Path, token: &str) -> anyhow::Result<String> {
    use sha2::{Digest, Sha256};
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the enrollment directory {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let digest = Sha256::digest(token.as_bytes());
    let mark = flint_common::hex::encode(&digest[..8]);
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .with_context(|| format!("cannot read {}", path.display()))
    };
    let suffix = format!(".secret.taken-{mark}");
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
        let taken = file.with_extension(format!("secret.taken-{mark}"));
        if std::fs::rename(file, &taken).is_ok() {
            return read(&taken);
        }
    }
    bail!(
        "no unused enrollment secret left in {} (flint certs --enroll N writes one per slot)",
        dir.display()
    )
}

/// The token kept in `path`, or a new one written there (mode 0600).
fn kept_token(path: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
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
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(token.as_bytes()))
        .with_context(|| format!("cannot keep the client token in {}", path.display()))?;
    Ok(token)
}

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

/// [`run`], ended by SIGTERM or SIGINT (a client may be PID 1 in its container).
pub async fn run_until_stopped(args: ClientArgs) -> anyhow::Result<Vec<ClientReport>> {
    tokio::select! {
        done = run(args) => done,
        signal = flint_shell::signal::interrupted() => bail!("stopped by {signal}"),
    }
}

/// Runs every named client of this process to the end of the run.
pub async fn run(args: ClientArgs) -> anyhow::Result<Vec<ClientReport>> {
    flint_shell::logging::init(args.log_format);
    let experiment = Arc::new(Experiment::load(&args.experiment, &args.overrides)?);
    if let Some(g) = args.compute_ghz
        && !(g.is_finite() && g > 0.0)
    {
        bail!("--compute-ghz must be positive, got {g}");
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    experiment.data.check_files(&data_dir)?;
    let threads = match args.train_threads {
        Some(0) => bail!("--train-threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let names = client_names(&args, &experiment)?;
    let link = match (args.link_bytes, names.len()) {
        (false, _) => None,
        (true, 1) => Some(Arc::new(LinkMeter::open().context(
            "--link-bytes: cannot read this network namespace's interface counters",
        )?)),
        (true, n) => bail!(
            "--link-bytes counts a whole network namespace, so it needs a process of one client, not {n}"
        ),
    };
    let shell = Shell {
        server: args.server.clone(),
        tls: args.tls.clone(),
        link,
        experiment: experiment.clone(),
        trainers: Arc::new(tokio::sync::Semaphore::new(threads)),
        retry_for: Duration::from_secs_f64(args.retry_secs.max(0.0)),
        out: args.out.clone(),
        enroll: match (&args.enroll_secret, &args.enroll_dir) {
            (Some(_), _) if names.len() > 1 => bail!(
                "--enroll-secret enrolls one client; this process hosts {} (give --enroll-dir)",
                names.len()
            ),
            (Some(s), _) => Enroll::Secret(s.trim().to_string()),
            (None, Some(dir)) => Enroll::Dir(dir.clone()),
            (None, None) => Enroll::None,
        },
    };
    let mut slots = shell.slots(&names, args.out.as_deref()).await?;
    let ids: Vec<ClientId> = slots.keys().copied().collect();
    // Loading and booleanizing can take seconds: off the async threads.
    let setup = (experiment.clone(), data_dir.clone(), ids);
    let compute_ghz = args.compute_ghz;
    let prepared = tokio::task::spawn_blocking(move || {
        let (e, dir, ids) = setup;
        prepare(&e, &dir, &ids, compute_ghz)
    })
    .await
    .context("loading the data panicked")?
    .with_context(|| {
        format!(
            "loading the data of {:?} (data directory {})",
            experiment.name,
            data_dir.display()
        )
    })?;
    let progress = ProgressBook::start(args.out.as_deref(), prepared.first().map(|p| p.id));
    let mut tasks = tokio::task::JoinSet::new();
    for p in prepared {
        let (_, creds, conn) = slots.remove(&p.id).expect("prepared for a slot");
        let name = p.name.clone();
        let client = shell.client(
            p.name,
            p.id,
            p.summary,
            creds,
            conn,
            progress.as_ref().map(|(b, _)| b),
        );
        let conditions = p
            .bits
            .iter()
            .map(|&(feature, above)| Condition { feature, above })
            .collect();
        let run = client.run(p.half, p.feature_names, conditions);
        // Its JSON log lines carry its run and round (recorded as they are known); an error
        // span, so that no level filter drops it.
        let span = tracing::error_span!("client", client_name = %name, run = Empty, round = Empty);
        let run = run.instrument(span);
        tasks.spawn(async move { run.await.with_context(|| format!("client {name:?}")) });
    }
    let finished = finish_all(tasks, args.fail_fast).await;
    if let Some((book, writer)) = progress {
        book.finish(writer).await;
    }
    let (reports, failed) = finished?;
    if let Some(out) = &args.out {
        write_reports(out, &reports)?;
    }
    process_outcome(&failed, reports.is_empty())?;
    Ok(reports)
}

/// The process's end: a failure if any of its clients failed (a process of one client fails
/// with its client's own error).
fn process_outcome(failed: &[String], no_reports: bool) -> anyhow::Result<()> {
    match (failed.len(), no_reports) {
        (0, _) => {}
        // A process of one client fails with its client's own error.
        (1, true) => bail!("{}", failed[0]),
        (n, all) => bail!(
            "{n} of this process's clients failed{}: {}",
            if all { "" } else { " (the others finished)" },
            failed.join("; ")
        ),
    }
    Ok(())
}

/// Every client's end: its report, or why it failed. With `fail_fast` the first failure ends
/// them all at once (the others may be waiting for a round that needs it).
async fn finish_all(
    mut tasks: tokio::task::JoinSet<anyhow::Result<ClientReport>>,
    fail_fast: bool,
) -> anyhow::Result<(Vec<ClientReport>, Vec<String>)> {
    let (mut reports, mut failed) = (Vec::new(), Vec::new());
    while let Some(done) = tasks.join_next().await {
        let done = done
            .context("client task panicked")
            .and_then(std::convert::identity);
        match done {
            Ok(report) => reports.push(report),
            Err(e) if fail_fast => {
                tracing::error!(error = format!("{e:#}"), "client failed; the process ends");
                return Err(e);
            }
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "client failed; the others go on");
                failed.push(format!("{e:#}"));
            }
        }
    }
    reports.sort_by_key(|r| r.client_id);
    Ok((reports, failed))
}

/// The names this process hosts: `--name`s (each declared, or `auto`), or the experiment's
/// client at `--index`.
fn client_names(args: &ClientArgs, experiment: &Experiment) -> anyhow::Result<Vec<String>> {
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

/// Each client's report (`client-<name>.json`) and kept model (`models/<name>.json` and its
/// checkpoints) in `out`.
fn write_reports(out: &std::path::Path, reports: &[ClientReport]) -> anyhow::Result<()> {
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

type Slots = BTreeMap<ClientId, (String, Credentials, Conn)>;

/// What binds a slot to this process: its token, and the enrollment secret it first binds
/// with (empty where the server asks for none).
struct Credentials {
    token: String,
    enrollment: String,
}

type Grpc =
    AggregatorClient<flint_shell::meter::MessageMeter<flint_shell::end_stream::EndStream<Channel>>>;

/// What every client of this process shares.
struct Shell {
    server: String,
    tls: ClientTls,
    link: Option<Arc<LinkMeter>>,
    experiment: Arc<Experiment>,
    /// Limits how many clients train at once, so many clients share the cores without
    /// thrashing them.
    trainers: Arc<tokio::sync::Semaphore>,
    retry_for: Duration,
    /// `--out`, where each client's bytes so far go after every round it reports on.
    out: Option<std::path::PathBuf>,
    enroll: Enroll,
}

/// Where this process's clients get their enrollment secrets.
enum Enroll {
    None,
    Secret(String),
    Dir(PathBuf),
}

/// One client's connection (every reconnect counted by one meter) and its byte ledger.
struct Conn {
    grpc: Grpc,
    ledger: Arc<SharedLedger>,
}

struct Client {
    experiment: Arc<Experiment>,
    name: String,
    id: ClientId,
    summary: DataSummary,
    /// Binds this client's slot to this process (see `Join`).
    token: String,
    /// The enrollment secret its first Join binds the slot with (empty without one).
    enrollment: String,
    /// Whether it speaks TLS (for the hint when a handshake fails).
    tls: bool,
    /// The interfaces counted at the link level, if any.
    link_interfaces: Vec<String>,
    grpc: Grpc,
    ledger: Arc<SharedLedger>,
    /// The link counts its reports have sent, by round (each report sends what changed).
    link_sent: std::sync::Mutex<BTreeMap<Round, (u64, u64)>>,
    trainers: Arc<tokio::sync::Semaphore>,
    retry_for: Duration,
    out: Option<std::path::PathBuf>,
    progress: Option<Arc<ProgressBook>>,
}

impl Shell {
    /// Every client's connection and token, by id; an `auto` one asks for its slot, since which
    /// data it loads depends on it. Tokens are kept in `out`, so that a client started again is
    /// still itself (an `auto` one by host and position: containers may share `out`).
    async fn slots(
        &self,
        names: &[String],
        out: Option<&std::path::Path>,
    ) -> anyhow::Result<Slots> {
        let mut slots = BTreeMap::new();
        let mut autos = 0;
        for name in names {
            let conn = self.connect(name)?;
            let stem = if name == AUTO {
                autos += 1;
                format!("auto-{}-{autos}", host_name())
            } else {
                format!("client-{name}")
            };
            let token = match out {
                Some(dir) => kept_token(&dir.join(format!("{stem}.token")))?,
                None => new_token(),
            };
            let creds = Credentials {
                enrollment: self.enrollment(&token)?,
                token,
            };
            let (name, id) = if name == AUTO {
                self.claim(&conn, &creds).await?
            } else {
                let id = self
                    .experiment
                    .client_id(name)
                    .expect("checked by client_names");
                (name.clone(), id)
            };
            if slots.insert(id, (name.clone(), creds, conn)).is_some() {
                bail!("client {name:?} is named twice");
            }
        }
        Ok(slots)
    }

    /// The enrollment secret of the client holding `token`: none, the one given, or the one
    /// it takes (or took before) from the directory.
    fn enrollment(&self, token: &str) -> anyhow::Result<String> {
        match &self.enroll {
            Enroll::None => Ok(String::new()),
            Enroll::Secret(s) => Ok(s.clone()),
            Enroll::Dir(dir) => take_secret(dir, token),
        }
    }

    /// A connection for the client `name` (`auto` for one that asks for its slot).
    fn connect(&self, name: &str) -> anyhow::Result<Conn> {
        let server = &self.server;
        let endpoint = Endpoint::from_shared(server.to_string()).with_context(|| {
            format!("bad server address {server:?}; expected e.g. http://host:50051")
        })?;
        let endpoint = self
            .tls
            .for_client(name)?
            .apply(endpoint)?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            // A ping after 30 s without a frame from the server (a dead server is noticed within
            // 50 s); at 10 s, a client waiting out its peers' training pinged in most rounds.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        // Every connection this client makes (reconnects too) is counted by one meter.
        let meter = ConnMeter::default();
        let conn_meter = meter.clone();
        let connector = tower::service_fn(move |uri: http::Uri| {
            let meter = conn_meter.clone();
            async move {
                let host = uri
                    .host()
                    .unwrap_or("127.0.0.1")
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string();
                let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
                    Some("https") => 443,
                    _ => 80,
                });
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                Ok::<_, std::io::Error>(TokioIo::new(CountingIo::new(tcp, meter)))
            }
        });
        let channel = endpoint.connect_with_connector_lazy(connector);
        let ledger = Arc::new(SharedLedger::default());
        let svc = tower::ServiceBuilder::new()
            .layer(MessageMeterLayer::client(ledger.clone(), meter).with_link(self.link.clone()))
            .layer(flint_shell::end_stream::EndStreamLayer)
            .service(channel);
        let mut grpc =
            AggregatorClient::new(svc).max_decoding_message_size(self.max_download_bytes());
        if let Some(enc) = flint_shell::compression::encoding(self.experiment.compression) {
            grpc = grpc.send_compressed(enc).accept_compressed(enc);
        }
        Ok(Conn { grpc, ledger })
    }

    /// The largest download this run can send, from the experiment (an ensemble's grows with
    /// its clients); where a CSV's features are not in it, a generous 1 GiB.
    fn max_download_bytes(&self) -> usize {
        let e = &self.experiment;
        let largest = e.data.features().map_or(1 << 30, |f| {
            e.strategy
                .max_download_bytes(f, e.data.classes().len(), e.clients.len())
        });
        usize::try_from(largest)
            .unwrap_or(usize::MAX)
            .max(2 * MAX_CHUNK)
    }

    /// Asks the server which slot this token may hold (`--name auto`).
    async fn claim(&self, conn: &Conn, creds: &Credentials) -> anyhow::Result<(String, ClientId)> {
        let ask = ClaimRequest {
            experiment_fingerprint: self.experiment.fingerprint.clone(),
            token: creds.token.clone(),
            enrollment: creds.enrollment.clone(),
        };
        let reply = retry_bounded(self.retry_for, Some(JOIN_ATTEMPT), "claim", || {
            let mut g = conn.grpc.clone();
            let req = with_host(Request::new(ask.clone()));
            async move { g.claim(req).await }
        })
        .await
        .map_err(|s| anyhow::anyhow!("cannot claim a client slot: {}", s.message()))?;
        let name = &reply.client_name;
        if self.experiment.client_id(name) != Some(reply.client_id) {
            bail!(
                "the server gave slot {} named {name:?}, which this experiment does not declare",
                reply.client_id
            );
        }
        conn.ledger.with(|l| {
            l.payload(reply.client_id, 0, Direction::Up, ask.encoded_len(), 0);
            l.payload(reply.client_id, 0, Direction::Down, reply.encoded_len(), 0);
        });
        tracing::info!(client = reply.client_id, name = %name, "client slot claimed");
        Ok((reply.client_name, reply.client_id))
    }

    fn client(
        &self,
        name: String,
        id: ClientId,
        summary: DataSummary,
        creds: Credentials,
        conn: Conn,
        progress: Option<&Arc<ProgressBook>>,
    ) -> Client {
        Client {
            experiment: self.experiment.clone(),
            name,
            id,
            summary,
            token: creds.token,
            enrollment: creds.enrollment,
            tls: self.tls.tls_ca.is_some(),
            link_interfaces: self
                .link
                .as_ref()
                .map_or_else(Vec::new, |l| l.interfaces().to_vec()),
            grpc: conn.grpc,
            ledger: conn.ledger,
            link_sent: Default::default(),
            trainers: self.trainers.clone(),
            retry_for: self.retry_for,
            out: self.out.clone(),
            progress: progress.cloned(),
        }
    }
}

impl Client {
    fn request<T>(&self, msg: T, round: Option<Round>) -> Request<T> {
        let mut r = Request::new(msg);
        r.metadata_mut().insert(CLIENT_HEADER, self.id.into());
        if let Ok(token) = self.token.parse() {
            r.metadata_mut().insert(TOKEN_HEADER, token);
        }
        if let Some(round) = round {
            r.metadata_mut().insert(ROUND_HEADER, round.into());
        }
        r
    }

    /// The run's classes (one count per class in the data summary), for the papers' byte
    /// convention.
    fn classes(&self) -> usize {
        self.summary.train_class_counts.len()
    }

    /// Records a request's payload once the server answered (so it reached the handler).
    fn count(&self, round: Round, d: Direction, len: usize, paper: u64) {
        self.ledger
            .with(|l| l.payload(self.id, round, d, len, paper));
    }

    async fn run(
        self,
        half: Box<dyn BoundHalf>,
        feature_names: Vec<String>,
        conditions: Vec<Condition>,
    ) -> anyhow::Result<ClientReport> {
        let run_id = self.join().await?;
        let (mut half, mut progress, mut rng, mut pending) = self.resume(half, &run_id).await?;
        let mut train_seconds = BTreeMap::new();
        // The server said the run is over (not guessed from a server gone away).
        let mut finished = false;
        // The next task, when the last push's answer carried it.
        let mut carried: Option<Carried> = None;
        loop {
            // Each round's lines in a span of their own: recording the round into the client's
            // span would append to its text at every round.
            let asking = round_span(progress.after_round());
            let next = self
                .next_task(&run_id, &progress, carried.take())
                .instrument(asking);
            let uploading = pending.as_ref().map(|t| t.round);
            let (task, step) = match next.await {
                Ok(t) => t,
                Err(e) if self.ended_without_me(&progress, uploading, &e) => {
                    if let Some(t) = pending.take() {
                        progress.trained(t.round);
                    }
                    break;
                }
                Err(e) => return Err(e),
            };
            let span = round_span(task.round);
            let restarted = self.settle_pending(&run_id, &mut progress, pending.take(), step);
            match restarted.instrument(span.clone()).await? {
                Some(AfterPush::GoOn(next)) => {
                    carried = next;
                    continue;
                }
                Some(AfterPush::End) => break,
                None => {}
            }
            let (h, reports) = self
                .apply_and_evaluate(half, task, step)
                .instrument(span.clone())
                .await?;
            half = h;
            if step.evaluate {
                progress.reported(step.ledger_round);
            }
            let core::Next::Train(round) = step.next else {
                let sent = self.send_reports(&run_id, reports, &progress);
                sent.instrument(span).await?;
                finished = true;
                break;
            };
            let reports = self.to_carry(&run_id, reports, &progress);
            let reports = reports.instrument(span.clone()).await?;
            let (h, r, trained, seconds) = self
                .train(half, rng, round, reports)
                .instrument(span.clone())
                .await?;
            (half, rng) = (h, r);
            train_seconds.insert(round, seconds);
            half = self
                .keep_checkpoint(half, &run_id, &progress, &rng, &trained)
                .await?;
            let on = self.push_or_end(&run_id, &mut progress, &trained);
            match on.instrument(span).await? {
                AfterPush::GoOn(next) => carried = next,
                AfterPush::End => break,
            }
        }
        let trained = progress.rounds_trained().to_vec();
        tracing::info!(client = self.id, rounds = trained.len(), "run finished");
        // A finished run needs no checkpoint (as the server's journal, it goes with the run);
        // a server only presumed gone may come back and still need the saved update.
        if let Some(out) = self.out.as_ref().filter(|_| finished) {
            resume::remove(&resume::path(out, &self.name));
        }
        let (model, model_health) = self.kept_model(half.as_ref(), feature_names, conditions);
        Ok(ClientReport {
            model,
            model_health,
            client_id: self.id,
            name: self.name.clone(),
            rounds_trained: trained,
            train_seconds,
            ledger: self.ledger.snapshot(),
            link_interfaces: self.link_interfaces.clone(),
        })
    }

    /// A round trained before a restart: the server still waits for its update, which goes up
    /// as it was (`Some`: what followed the push); or it has moved on, and the saved state
    /// meets its download (the update's reports go up on their own: they may never have
    /// reached it).
    async fn settle_pending(
        &self,
        run_id: &str,
        progress: &mut core::Progress,
        pending: Option<Trained>,
        step: core::Step,
    ) -> anyhow::Result<Option<AfterPush>> {
        let Some(t) = pending else {
            return Ok(None);
        };
        if step.next == core::Next::Train(t.round) {
            return self.push_or_end(run_id, progress, &t).await.map(Some);
        }
        progress.trained(t.round);
        self.send_reports(run_id, t.reports, progress).await?;
        Ok(None)
    }

    /// The reports that ride on this round's update (one call a round); sent now instead
    /// where there are more than a header carries.
    async fn to_carry(
        &self,
        run_id: &str,
        reports: Vec<EvalReport>,
        progress: &core::Progress,
    ) -> anyhow::Result<Vec<EvalReport>> {
        if reports.len() <= MAX_CARRIED_REPORTS {
            return Ok(reports);
        }
        self.send_reports(run_id, reports, progress).await?;
        Ok(Vec::new())
    }

    /// Pushes `round`'s update; [`AfterPush::End`] where the server finished the run without
    /// it (see [`core::Progress::ended_without_me`]).
    async fn push_or_end(
        &self,
        run_id: &str,
        progress: &mut core::Progress,
        trained: &Trained,
    ) -> anyhow::Result<AfterPush> {
        let round = trained.round;
        let pushed = self.push(run_id, trained, self.retry_for).await;
        self.book_progress();
        match pushed {
            Err(e) if !self.ended_without_me(progress, Some(round), &e) => Err(e),
            pushed => {
                progress.trained(round);
                Ok(pushed.map_or(AfterPush::End, AfterPush::GoOn))
            }
        }
    }

    /// Where this client starts: its checkpoint in `--out` of this run, if it has one (a
    /// restart), else the first round with the run's stream. Also the round the checkpoint
    /// trained, with its update.
    async fn resume(
        &self,
        half: Box<dyn BoundHalf>,
        run_id: &str,
    ) -> anyhow::Result<(
        Box<dyn BoundHalf>,
        core::Progress,
        FlintRng,
        Option<Trained>,
    )> {
        let fresh = derive_rng(self.experiment.seed, "train", self.id);
        let Some(out) = &self.out else {
            return Ok((half, core::Progress::default(), fresh, None));
        };
        let path = resume::path(out, &self.name);
        let Some(c) = resume::read(&path, &self.experiment.fingerprint, run_id)? else {
            return Ok((half, core::Progress::default(), fresh, None));
        };
        let (half, restored) = blocking(half, move |h| h.restore(&c.state)).await?;
        restored.with_context(|| format!("restoring {}", path.display()))?;
        let h = c.header;
        tracing::info!(
            client = self.id,
            round = h.round,
            "resumed from its checkpoint"
        );
        let progress = core::Progress::resumed(h.trained, h.reported);
        let trained = Trained {
            round: h.round,
            update: c.update,
            reports: c.reports,
            whole: c.whole,
        };
        Ok((half, progress, h.rng, Some(trained)))
    }

    /// Writes this client's checkpoint after training `round`, before its update goes up
    /// (see [`resume`]); a strategy that carries nothing writes none. A checkpoint that cannot
    /// be written ends the client: a restart would not go on exactly.
    async fn keep_checkpoint(
        &self,
        half: Box<dyn BoundHalf>,
        run_id: &str,
        progress: &core::Progress,
        rng: &FlintRng,
        trained: &Trained,
    ) -> anyhow::Result<Box<dyn BoundHalf>> {
        let Some(out) = self.out.clone() else {
            return Ok(half);
        };
        let header = resume::Header {
            fingerprint: self.experiment.fingerprint.clone(),
            run_id: run_id.to_string(),
            round: trained.round,
            trained: progress.rounds_trained().to_vec(),
            reported: progress.reported_round(),
            rng: rng.clone(),
            update: resume::encode(&trained.update),
            reports: trained.reports.iter().map(Message::encode_to_vec).collect(),
            whole: trained.whole.as_ref().map_or_else(Vec::new, resume::encode),
        };
        let path = resume::path(&out, &self.name);
        let (half, written) = blocking(half, move |h| match h.checkpoint() {
            Some(state) => resume::write(&path, &header, &state),
            None => Ok(()),
        })
        .await?;
        written.context("writing the client's checkpoint")?;
        Ok(half)
    }

    /// Joins the run under this client's slot (retried within the window) and returns the
    /// run id; its log lines carry the run from here on.
    async fn join(&self) -> anyhow::Result<String> {
        let join = JoinRequest {
            client_name: self.name.clone(),
            experiment_fingerprint: self.experiment.fingerprint.clone(),
            summary: Some(self.summary.clone()),
            token: self.token.clone(),
            enrollment: self.enrollment.clone(),
        };
        let reply = retry_bounded(self.retry_for, Some(JOIN_ATTEMPT), "join", || {
            let mut g = self.grpc.clone();
            let req = with_host(Request::new(join.clone()));
            async move { g.join(req).await }
        })
        .await
        .map_err(|s| {
            let status = s.to_string();
            let why = core::join_refused(&self.name, s.code(), &status, s.message(), self.tls);
            anyhow::anyhow!(why)
        })?;
        if reply.client_id != self.id {
            bail!(
                "server gave client {} id {} but the experiment says {}",
                self.name,
                reply.client_id,
                self.id
            );
        }
        self.count(0, Direction::Up, join.encoded_len(), 0);
        self.count(0, Direction::Down, reply.encoded_len(), 0);
        let run_id = reply.run_id;
        // Round 0 is the join, as in the byte ledger. Every client of a process is in one run.
        flint_shell::logging::set_run(&run_id);
        tracing::Span::current()
            .record("run", run_id.as_str())
            .record("round", 0);
        tracing::info!(client = self.id, name = %self.name, run = %run_id, "joined");
        Ok(run_id)
    }

    /// One round's local training in a training slot, off the async threads: the half and the
    /// generator back, the update (with the `reports` that ride on it), and the seconds it took.
    async fn train(
        &self,
        half: Box<dyn BoundHalf>,
        mut rng: FlintRng,
        round: Round,
        reports: Vec<EvalReport>,
    ) -> anyhow::Result<(Box<dyn BoundHalf>, FlintRng, Trained, f64)> {
        let permit = self
            .trainers
            .clone()
            .acquire_owned()
            .await
            .context("training slots closed")?;
        let started = std::time::Instant::now();
        let (h, (r, update)) = blocking(half, move |h| {
            let update = h.train(round, &mut rng).map(|u| {
                let whole = h.without_base(&u);
                (u, whole)
            });
            (rng, update)
        })
        .await?;
        let (update, whole) = update?;
        let seconds = started.elapsed().as_secs_f64();
        drop(permit);
        tracing::info!(client = self.id, round, seconds, "trained");
        let trained = Trained {
            round,
            update,
            reports,
            whole,
        };
        Ok((h, r, trained, seconds))
    }

    /// Whether `e`, a call that failed after the retry window, means the server finished the
    /// run without this client's last word (see [`core::Progress::ended_without_me`]); said
    /// in the log when it does.
    fn ended_without_me(
        &self,
        progress: &core::Progress,
        uploading: Option<Round>,
        e: &anyhow::Error,
    ) -> bool {
        // The transport's own UNAVAILABLE (no connection, reset): not the server's answer,
        // which may say UNAVAILABLE of a run that stops without finishing (a journal it
        // cannot write).
        let code = e
            .chain()
            .find_map(|c| c.downcast_ref::<Status>())
            .filter(|s| std::error::Error::source(*s).is_some())
            .map(Status::code);
        let rounds = self.experiment.policy.rounds;
        let ended = code.is_some_and(|c| progress.ended_without_me(uploading, rounds, c));
        if ended {
            tracing::warn!(
                client = self.id,
                error = format!("{e:#}"),
                "the server is gone after the run's last round: it finished without this client's last word; the client ends with its ledger"
            );
        }
        ended
    }

    /// The model as it ends the run, with its features' names, for `models/<name>.json`, and
    /// its health; not kept if any of its weights is not finite (training diverged).
    fn kept_model(
        &self,
        half: &dyn BoundHalf,
        feature_names: Vec<String>,
        conditions: Vec<Condition>,
    ) -> (Option<ModelFile>, Option<ModelHealth>) {
        let Some(model) = half.export() else {
            return (None, None);
        };
        let health = model.health();
        if health.not_finite {
            tracing::error!(
                client = self.id,
                "the model has non-finite weights (training diverged?); it is not kept"
            );
            return (None, Some(health));
        }
        if health.empty_machines > 0 {
            tracing::warn!(
                client = self.id,
                machines = health.machines,
                empty = health.empty_machines,
                "machines with no clauses: they vote nothing"
            );
        }
        let file = ModelFile::new(
            &self.name,
            self.experiment.data.classes(),
            feature_names,
            flint_common::params::name_of(&self.experiment.data.scaling),
            model,
        );
        (Some(file.with_conditions(conditions)), Some(health))
    }

    /// This client's bytes so far into its process's progress file (written by a task of its
    /// own, so the round goes on at once).
    fn book_progress(&self) {
        let Some(book) = &self.progress else {
            return;
        };
        self.ledger.with(|l| {
            if let Some(rounds) = l.flows.get(&self.id) {
                book.book(self.id, rounds);
            }
        });
    }

    /// The next task: `carried` by the last push's answer, or asked for (a long-poll); books
    /// its bytes under the round its download belongs to, and says what to do with it.
    async fn next_task(
        &self,
        run_id: &str,
        progress: &core::Progress,
        carried: Option<Carried>,
    ) -> anyhow::Result<(RoundTask, core::Step)> {
        let ask = RoundRequest {
            client_id: self.id,
            run_id: run_id.to_string(),
            after_round: progress.after_round(),
        };
        let (task, asked, around) = match carried {
            Some(c) => (c.task, 0, c.around),
            None => {
                let task = retry(self.retry_for, "get round", || {
                    let mut g = self.grpc.clone();
                    let req = self.request(ask.clone(), None);
                    async move { g.get_round(req).await }
                })
                .await?;
                (task, ask.encoded_len(), 0)
            }
        };
        let answer = core::Answer {
            round: task.round,
            finished: task.finished,
        };
        let step = progress
            .step(answer)
            .map_err(|why| anyhow::anyhow!("client {}: {why}", self.name))?;
        let paper = task.download.as_ref().map_or(0, |d| {
            paper_convention_bytes(d, self.classes(), self.experiment.strategy.clauses())
        });
        if asked > 0 {
            self.count(step.ledger_round, Direction::Up, asked, 0);
        }
        self.count(
            step.ledger_round,
            Direction::Down,
            task.encoded_len() + around,
            paper,
        );
        Ok((task, step))
    }

    /// Applies the task's download, the aggregate of `step.ledger_round`, and evaluates it
    /// where the step says, off the async threads (a composite of many machines takes
    /// seconds). Returns the evaluations' reports, to send: the shared test set's first, if
    /// this client holds it (baselines before the model: the server waits for the model's).
    async fn apply_and_evaluate(
        &self,
        half: Box<dyn BoundHalf>,
        mut task: RoundTask,
        step: core::Step,
    ) -> anyhow::Result<(Box<dyn BoundHalf>, Vec<EvalReport>)> {
        let download = task.download.take();
        let round = step.ledger_round;
        let evaluate = step.evaluate;
        let (half, evaluations) = blocking(half, move |h| -> anyhow::Result<_> {
            if let Some(d) = &download {
                h.apply(round, d)
                    .context("applying the server's download")?;
            }
            Ok(evaluate.then(|| (h.evaluate_global(), h.evaluate())))
        })
        .await?;
        let Some((global, local)) = evaluations? else {
            return Ok((half, Vec::new()));
        };
        let reports = global
            .into_iter()
            .map(|(p, cm)| self.eval_report(round, cm, Some(p)))
            .chain([self.eval_report(round, local, None)])
            .collect();
        Ok((half, reports))
    }

    /// Sends evaluation reports with ReportEval, in order; the run's end without them is not
    /// a failure (see [`core::Progress::ended_without_me`]).
    async fn send_reports(
        &self,
        run_id: &str,
        reports: Vec<EvalReport>,
        progress: &core::Progress,
    ) -> anyhow::Result<()> {
        for report in reports {
            let report = EvalReport {
                run_id: run_id.to_string(),
                ..report
            };
            match self.report_eval(report, self.retry_for).await {
                Err(e) if self.ended_without_me(progress, None, &e) => break,
                other => other?,
            }
        }
        self.book_progress();
        Ok(())
    }

    /// Pushes `round`'s update; the next task where the answer carried it (the server answers
    /// once it knows it: one call less per round). A delta whose base the server no longer
    /// holds goes again as the weights themselves.
    async fn push(
        &self,
        run_id: &str,
        trained: &Trained,
        retry_for: Duration,
    ) -> anyhow::Result<Option<Carried>> {
        let round = trained.round;
        let why = match self
            .push_as(run_id, trained, &trained.update, retry_for)
            .await?
        {
            Pushed::Answered(next) => return Ok(next),
            Pushed::NoBase(why) => why,
        };
        let Some(whole) = &trained.whole else {
            bail!("update of round {round} refused: {why}");
        };
        tracing::warn!(
            client = self.id,
            round,
            reason = %why,
            "the server no longer holds the delta's base: the weights themselves go instead"
        );
        match self.push_as(run_id, trained, whole, retry_for).await? {
            Pushed::Answered(next) => Ok(next),
            Pushed::NoBase(why) => bail!("update of round {round} refused: {why}"),
        }
    }

    /// Pushes `update` as `trained`'s (with its reports).
    async fn push_as(
        &self,
        run_id: &str,
        trained: &Trained,
        update: &Payload,
        retry_for: Duration,
    ) -> anyhow::Result<Pushed> {
        let round = trained.round;
        let header = UpdateHeader {
            client_id: self.id,
            run_id: run_id.to_string(),
            round,
            payload_len: 0,
            payload_crc32: 0,
            wait_next: true,
            reports: trained.reports.clone(),
        };
        let chunks = split(header, update, MAX_CHUNK);
        let outcome = retry(retry_for, "push update", || {
            let mut g = self.grpc.clone();
            let req = self.request(tokio_stream::iter(chunks.clone()), Some(round));
            async move { g.push_update(req).await }
        })
        .await;
        let counted = |s: &Self| {
            for c in &chunks {
                s.count(round, Direction::Up, c.encoded_len(), 0);
            }
            s.ledger.with(|l| {
                l.at(s.id, round).up.paper +=
                    paper_convention_bytes(update, s.classes(), s.experiment.strategy.clauses())
            });
        };
        let refusal = outcome.as_ref().err();
        match core::pushed(outcome.as_ref().map(|_| ()).map_err(Status::code)) {
            core::Pushed::Taken => {
                counted(self);
                let ack = outcome.ok().unwrap_or_default();
                let len = ack.encoded_len();
                let Some(task) = ack.next else {
                    self.count(round, Direction::Down, len, 0);
                    return Ok(Pushed::Answered(None));
                };
                // One message, booked with the task it carries (`next_task`).
                let around = len - task.encoded_len();
                Ok(Pushed::Answered(Some(Carried { task, around })))
            }
            core::Pushed::NotTaken => {
                counted(self);
                tracing::warn!(
                    client = self.id,
                    round,
                    reason = refusal.map(Status::message),
                    "update not taken; continuing with the next round"
                );
                Ok(Pushed::Answered(None))
            }
            core::Pushed::NoBase => {
                counted(self);
                let why = refusal.map_or_else(String::new, |s| s.message().to_string());
                Ok(Pushed::NoBase(why))
            }
            core::Pushed::Refused => Err(match refusal {
                Some(s) => anyhow::Error::new(s.clone())
                    .context(format!("update of round {round} refused: {}", s.message())),
                None => anyhow::anyhow!("update of round {round} refused"),
            }),
        }
    }

    /// The report of one evaluation of the aggregate of `round` (said in the log), its run id
    /// left to the call that carries it.
    fn eval_report(
        &self,
        round: Round,
        cm: ConfusionMatrix,
        global_test: Option<Predictor>,
    ) -> EvalReport {
        let m = cm.metrics();
        let predictor = global_test.map_or_else(String::new, Predictor::name);
        tracing::info!(
            client = self.id,
            round,
            accuracy = m.accuracy,
            f1 = m.f1,
            global_test = global_test.is_some(),
            predictor = predictor.as_str(),
            "evaluated"
        );
        EvalReport {
            client_id: self.id,
            run_id: String::new(),
            round,
            classes: cm.classes() as u32,
            confusion: cm.counts().to_vec(),
            global_test: global_test.is_some(),
            predictor,
            link: self.link_counts(),
        }
    }

    async fn report_eval(&self, report: EvalReport, retry_for: Duration) -> anyhow::Result<()> {
        let round = report.round;
        let ack = retry(retry_for, "report evaluation", || {
            let mut g = self.grpc.clone();
            let req = self.request(report.clone(), Some(round));
            async move { g.report_eval(req).await }
        })
        .await
        .with_context(|| format!("client {} cannot report round {round}", self.name))?;
        self.count(round, Direction::Up, report.encoded_len(), 0);
        self.count(round, Direction::Down, ack.encoded_len(), 0);
        Ok(())
    }
}

impl Client {
    /// The link level its meter booked since its last report, for the server's results (empty
    /// where it does not measure it).
    fn link_counts(&self) -> Vec<flint_common::wire::proto::LinkCount> {
        if self.link_interfaces.is_empty() {
            return Vec::new();
        }
        let mut sent = self.link_sent.lock().expect("link_sent lock");
        self.ledger
            .with(|l| l.link_counts_since(self.id, &mut sent))
    }
}

/// A push's answer: the update taken or not (with the next task where it came), or refused
/// for want of its delta's base (why).
enum Pushed {
    Answered(Option<Carried>),
    NoBase(String),
}

/// What follows a push.
enum AfterPush {
    /// The run goes on; with the next task where the push's answer carried it.
    GoOn(Option<Carried>),
    /// The server finished the run without this client's update.
    End,
}

/// A trained round on its way up: its update, and the evaluation reports that ride on it.
struct Trained {
    round: Round,
    update: Payload,
    reports: Vec<EvalReport>,
    /// Where the update is a delta, the weights themselves, sent if the server no longer
    /// holds its base.
    whole: Option<Payload>,
}

/// The next task as a push's answer carried it, and the answer's other bytes.
struct Carried {
    task: RoundTask,
    around: usize,
}

/// How long one Join attempt may take before it is tried again (the server answers a Join at
/// once; only a lost connection takes longer).
const JOIN_ATTEMPT: Duration = Duration::from_secs(10);

/// `work` on the client's half off the async threads, so keep-alives and the other clients of
/// the process keep moving.
async fn blocking<T: Send + 'static>(
    mut half: Box<dyn BoundHalf>,
    work: impl FnOnce(&mut dyn BoundHalf) -> T + Send + 'static,
) -> anyhow::Result<(Box<dyn BoundHalf>, T)> {
    tokio::task::spawn_blocking(move || {
        let out = work(half.as_mut());
        (half, out)
    })
    .await
    .context("the client's model panicked")
}

/// Retries while the server is unreachable, with exponential backoff up to `total`.
async fn retry<T, F, Fut>(total: Duration, what: &str, call: F) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
{
    retry_bounded(total, None, what, call).await
}

/// [`retry`], each attempt given at most `attempt` (for calls that answer at once): in a burst
/// of connections a call can wait on a connection the server never saw, forever; bounded, it
/// is tried again on a new one.
async fn retry_bounded<T, F, Fut>(
    total: Duration,
    attempt: Option<Duration>,
    what: &str,
    mut call: F,
) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
{
    let mut backoff = core::Backoff::new(total);
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        let outcome = match attempt {
            None => call().await,
            Some(limit) => tokio::time::timeout(limit, call())
                .await
                .unwrap_or_else(|_| {
                    Err(Status::unavailable(format!(
                        "no answer within {} s",
                        limit.as_secs_f64()
                    )))
                }),
        };
        let s = match outcome {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) => s,
        };
        let failing_for = failing_since
            .get_or_insert_with(std::time::Instant::now)
            .elapsed();
        let Some(wait) = backoff.next(s.code(), failing_for) else {
            return Err(s);
        };
        tracing::debug!(what, code = ?s.code(), error = %s.message(), ?wait, "server unreachable; retrying");
        tokio::time::sleep(wait).await;
    }
}

/// `flint health`: whether a server answers the gRPC health check (a container's healthcheck:
/// the image has no shell).
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// Server address.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 3.0)]
    pub timeout_secs: f64,
    #[command(flatten)]
    pub tls: ClientTls,
}

/// Ok when the server reports the aggregator as serving.
pub async fn health(args: HealthArgs) -> anyhow::Result<()> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let limit = Duration::from_secs_f64(args.timeout_secs.max(0.1));
    let server = &args.server;
    let endpoint = Endpoint::from_shared(server.to_string())
        .with_context(|| format!("bad server address {server:?}; expected e.g. http://host:50051"))?
        .connect_timeout(limit)
        .timeout(limit);
    let channel = args
        .tls
        .apply(endpoint)?
        .connect()
        .await
        .with_context(|| format!("cannot reach {server}"))?;
    let service = "flint.v1.Aggregator".to_string();
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest { service })
        .await
        .map_err(|s| anyhow::anyhow!("health check failed: {}", s.message()))?
        .into_inner();
    match reply.status() {
        ServingStatus::Serving => Ok(()),
        other => bail!("the aggregator is {}", other.as_str_name()),
    }
}
