//! `flint-server`: the aggregator. A thin shell that moves bytes, keeps time and writes results;
//! the round logic is [`rounds::Rounds`] and the algorithms are in `flint-common`.

pub mod accept;
pub mod disk;
pub mod exporter;
pub mod identity;
pub mod journal;
pub mod recovery;
pub mod results;
pub mod rounds;
pub mod scrape_listener;
mod secure_call;
pub mod service;
pub mod shared;
pub mod state;
pub mod telemetry;

pub mod proto {
    tonic::include_proto!("flint.v1");
}

/// The encoded descriptor of the wire contract, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/flint_descriptor.bin"));

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use flint_common::config::{Experiment, parse_override};
use flint_common::strategy::ServerStrategy;
use flint_shell::logging::LogFormat;
use flint_shell::meter::{ConnMeter, MessageMeterLayer, SharedLedger, Side};
use tokio::net::TcpListener;

use proto::aggregator_server::AggregatorServer;
use results::RunResults;
use service::AggregatorService;
use shared::Shared;

/// Command-line options of `flint-server` (and `flint server`).
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Experiment file (TOML).
    #[arg(long, short)]
    pub experiment: PathBuf,
    /// Address to listen on; port 0 picks a free port (see --ready-file).
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory for status.json, results.json and rounds.csv [default: runs/<experiment name>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Written with the bound address once the server accepts connections.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Override an experiment key, e.g. --set rounds=3 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override)]
    pub overrides: Vec<(String, String)>,
    /// Log format on stderr: text, or json (one object per line, with the run and round).
    #[arg(long, env = "FLINT_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Serve plaintext on an address other than loopback. Without TLS, anyone who reaches the
    /// server and holds the experiment file can take a free client slot, and a client's token
    /// crosses the network in clear.
    #[arg(long, env = "FLINT_INSECURE", value_parser = clap::builder::FalseyValueParser::new())]
    pub insecure: bool,
    #[command(flatten)]
    pub options: ServeOptions,
}

impl ServerArgs {
    /// Plaintext is for loopback, or asked for by name.
    fn check_exposure(&self) -> anyhow::Result<()> {
        if self.listen.ip().is_loopback() || self.options.tls.tls_cert.is_some() || self.insecure {
            return Ok(());
        }
        anyhow::bail!(
            "refusing to serve plaintext on {}: anyone who reaches it with the experiment file could take a client's slot. Give --tls-cert, --tls-key and --tls-client-ca (flint certs writes them), listen on loopback, or pass --insecure",
            self.listen
        )
    }
}

/// How the server listens: TLS, and the limits of its accept loop.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeOptions {
    #[command(flatten)]
    pub tls: ServerTls,
    /// Connections open at once; a newcomer past it takes the place of the oldest connection
    /// that holds no client yet, or is closed [default: 2 per client + 64].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Connections open at once from one remote address, so that one host's silent sockets
    /// leave room for the others [default: 1 per client + 16: a process hosting every client
    /// fits].
    #[arg(long)]
    pub max_connections_per_address: Option<usize>,
    /// The enrollment secrets' hashes (`enrollment.sha256` from `flint certs --enroll`): a
    /// client binds a slot the first time only with one of them, each once, unless its own
    /// certificate names the slot; strangers holding the experiment file (and the pool
    /// certificate, or no certificate on a plaintext server) can then take none.
    #[arg(long, env = "FLINT_ENROLLMENT", value_name = "FILE")]
    pub enrollment: Option<PathBuf>,
    /// Let any caller bind a free slot without an enrollment secret: on bearer tokens alone (no
    /// --tls-client-ca) or with the pool certificate, anyone who reaches the server holding the
    /// experiment file can then take one. For a network whose every host is trusted; without
    /// it, such a server needs --enrollment.
    #[arg(long, env = "FLINT_OPEN_ENROLLMENT", value_parser = clap::builder::FalseyValueParser::new(), conflicts_with = "enrollment")]
    pub open_enrollment: bool,
    /// Seconds a slot claimed without a name (`flint client --name auto`) stays its claimer's
    /// before the claimer joins; then the next claimer may take it [default: 120].
    #[arg(long)]
    pub claim_lease_secs: Option<f64>,
    /// Where the run's journal is kept; a server started again with the same experiment and
    /// state directory resumes the run there [default: <out>/state].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Fault injection for the recovery tests: each aggregation is installed this many
    /// milliseconds late, so that a test can kill the server while a round aggregates.
    #[arg(long, hide = true)]
    pub hold_aggregation_ms: Option<u64>,
    /// KiB of uploads the server buffers at once, across all clients; an upload beyond it is
    /// refused with RESOURCE_EXHAUSTED and tried again by its client [default: 262144 (256 MiB),
    /// or room for two of the run's largest updates if more].
    #[arg(long)]
    pub upload_budget_kib: Option<u32>,
    /// Serve gRPC reflection (the wire contract, for grpcurl and the like); off by default, since
    /// it tells any caller what the server speaks. `flint run` turns it on.
    #[arg(long)]
    pub reflection: bool,
    /// Where a strategy whose server holds images (FLIS) reads them [default: $FLINT_DATA_DIR
    /// or ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// A file of secret bytes (at least 16) only this server holds: under `dp.mechanism =
    /// "central"` its noise is drawn from a stream keyed by it, which the run's seed (held by
    /// every client) cannot draw. Give the same file to a restarted server.
    #[arg(long, env = "FLINT_DP_NOISE_KEY_FILE", value_name = "FILE")]
    pub dp_noise_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub metrics: exporter::MetricsOptions,
}

impl ServeOptions {
    /// Who may bind a slot the first time: the enrolled, anyone where asked by name, else only
    /// a certificate naming its slot, which needs mutual TLS.
    fn check_admission(&self) -> anyhow::Result<()> {
        if self.enrollment.is_some() || self.open_enrollment || self.tls.tls_client_ca.is_some() {
            return Ok(());
        }
        anyhow::bail!(
            "refusing to start without enrollment: on bearer tokens alone, anyone who reaches the server with the experiment file can take a free client slot, on loopback too. Give --enrollment (flint certs --enroll N writes the secrets and their hashes), or --tls-client-ca with a certificate per client, or pass --open-enrollment where every host is trusted"
        )
    }

    fn admission(&self) -> anyhow::Result<identity::Admission> {
        Ok(match (&self.enrollment, self.open_enrollment) {
            (Some(path), _) => identity::Admission::Enrolled(state::enrollment_hashes(path)?),
            (None, true) => identity::Admission::Open,
            (None, false) => identity::Admission::Certificates,
        })
    }
}

/// TLS of the server (PEM files, e.g. from `flint certs`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerTls {
    /// Server certificate; with --tls-key the server speaks TLS only.
    #[arg(long, env = "FLINT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server certificate's private key.
    #[arg(long, env = "FLINT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA of the client certificates: every client must then present one (mutual TLS), and a
    /// certificate's common name is the only client it may act as.
    #[arg(long, env = "FLINT_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

impl ServerTls {
    /// The rustls settings these files give, or none for plaintext.
    fn config(&self) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
        use flint_shell::tls::read_pem;
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            if self.tls_client_ca.is_some() {
                anyhow::bail!("--tls-client-ca needs --tls-cert and --tls-key");
            }
            return Ok(None);
        };
        flint_shell::tls::install_provider();
        let client_ca = match &self.tls_client_ca {
            Some(ca) => Some(read_pem(ca, "client CA (--tls-client-ca)")?),
            None => None,
        };
        let config = flint_shell::tls::server::server_config(
            &read_pem(cert, "server certificate (--tls-cert)")?,
            &read_pem(key, "server key (--tls-key)")?,
            client_ca.as_deref(),
        )?;
        Ok(Some(config))
    }
}

/// Loads the experiment and serves until the run is done; returns what it wrote.
pub async fn run(args: ServerArgs) -> anyhow::Result<RunResults> {
    flint_shell::logging::init(args.log_format);
    args.check_exposure()?;
    // Before the data is read: a refusal at start must not wait minutes for it.
    args.options.check_admission()?;
    let experiment = Experiment::load(&args.experiment, &args.overrides)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("runs").join(&experiment.name));
    let listener =
        listen(args.listen).with_context(|| format!("cannot listen on {}", args.listen))?;
    serve(
        experiment,
        listener,
        &out,
        args.ready_file.as_deref(),
        &args.options,
    )
    .await
}

/// Connections the kernel queues before the server accepts them: a burst of a thousand clients
/// joining at once must not overflow it (the kernel caps it at `net.core.somaxconn`).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`], reusable at once after a restart.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves one run on `listener`, writing progress and results below `out`.
pub async fn serve(
    experiment: Experiment,
    listener: TcpListener,
    out: &Path,
    ready_file: Option<&Path>,
    options: &ServeOptions,
) -> anyhow::Result<RunResults> {
    let data_dir = options
        .data_dir
        .clone()
        .unwrap_or_else(flint_common::data::default_data_dir);
    let mut strategy = experiment.strategy.server(
        experiment.data.classes().len(),
        experiment.seed,
        experiment.robust,
        Some((&experiment.data, &data_dir)),
    )?;
    if let Some(path) = &options.dp_noise_key_file {
        let key = flint_common::strategy::privacy::NoiseKey::from_file(path)?;
        if !strategy.set_noise_key(key) {
            tracing::warn!(
                file = %path.display(),
                "a dp noise key was given, and this run's server adds no noise (dp.mechanism is not \"central\")"
            );
        }
    }
    serve_with(experiment, strategy, listener, out, ready_file, options).await
}

/// [`serve`] with a given server half instead of the experiment's own (tests use it to watch
/// the server while an aggregation is held up).
pub async fn serve_with(
    experiment: Experiment,
    strategy: Box<dyn ServerStrategy>,
    listener: TcpListener,
    out: &Path,
    ready_file: Option<&Path>,
    options: &ServeOptions,
) -> anyhow::Result<RunResults> {
    // Listening from the start: a signal during the run also cuts the metrics linger short.
    let mut stop = flint_shell::signal::Stop::listen();
    options.check_admission()?;
    let tls_config = options.tls.config()?;
    let limits = connection_limits(&experiment, options)?;
    let metrics_listener = options.metrics.bind().await?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let addr = listener.local_addr()?;
    let state_dir = options
        .state_dir
        .clone()
        .unwrap_or_else(|| out.join("state"));
    for w in experiment.warnings_before_the_run() {
        tracing::warn!(kind = ?w.kind, "{}", w.message);
    }
    let shared = start_or_resume(experiment, strategy, out, &state_dir, options)?;
    let run_id = shared.run_id.clone();
    flint_shell::logging::set_run(&run_id);
    flint_shell::logging::set_round(shared.rounds().counts().opened);
    let ledger = shared.ledger.clone();

    let gate = accept::Gate::new(&limits);
    let (incoming, connections) =
        metered_incoming(listener, limits, gate.clone(), ledger.clone(), tls_config);
    let metrics = options.metrics.start(metrics_listener, &shared, &gate)?;
    if let Some(m) = &metrics {
        results::write_atomic(&out.join(METRICS_ADDR_FILE), m.addr.to_string().as_bytes())?;
    }
    let mut ticker = tokio::spawn(tick_until_done(
        shared.clone(),
        connections.clone(),
        out.to_path_buf(),
        state_dir.clone(),
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (health, reflection) = health_and_reflection(options.reflection).await?;
    let server = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        // As the clients' (30 s): round deadlines, not pings, decide when a client is late.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .layer(MessageMeterLayer::server(ledger.clone()))
        .add_service(health)
        .add_optional_service(reflection)
        .add_service(aggregator(&shared))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        });
    if let Some(path) = ready_file {
        results::write_atomic(path, addr.to_string().as_bytes())?;
    }
    let tls = &options.tls;
    tracing::info!(%addr, run = %run_id, tls = tls.tls_cert.is_some(), mutual_tls = tls.tls_client_ca.is_some(), "listening");
    let serving = tokio::spawn(server);
    let completed = tokio::select! {
        _ = &mut ticker => shared.journal_failure().is_none(),
        signal = stop.received() => {
            tracing::warn!(signal, "interrupted; writing results so far");
            ticker.abort();
            false
        }
    };
    // A round being aggregated when the run stops is waited for (briefly), so that the results
    // hold it.
    wait_for_aggregation(&shared, Duration::from_secs(30)).await;
    let _ = stop_tx.send(());
    // Connections that stay open after the run must not keep the results from being written.
    let _ = tokio::time::timeout(Duration::from_secs(5), serving).await;
    for c in connections.lock().expect("connections lock").iter() {
        c.flush_to_label(&*ledger, Side::Server);
    }
    if !completed {
        // Started again, the run goes on from here: every byte so far is kept.
        let closed_rounds = shared.rounds().history().len();
        keep_ledger(&shared, &connections, &state_dir, closed_rounds);
    }
    let results = write_results(&shared, out)?;
    let closed = close_state(&shared, &state_dir, completed);
    if let Some(metrics) = metrics {
        metrics.stop(stop).await;
    }
    closed.map(|()| results)
}

/// The connection limits: `--max-connections`, or two per client and 64 more.
fn connection_limits(
    experiment: &Experiment,
    options: &ServeOptions,
) -> anyhow::Result<accept::Limits> {
    let clients = experiment.clients.len();
    let limits = accept::Limits {
        connections: options.max_connections.unwrap_or(2 * clients + 64),
        per_address: options.max_connections_per_address.unwrap_or(clients + 16),
        opening: accept::OPENING,
    };
    if limits.connections == 0 || limits.per_address == 0 {
        anyhow::bail!("--max-connections and --max-connections-per-address must be at least 1");
    }
    Ok(limits)
}

/// [`state::open`] on the host's disk, with what `serve` keeps beside the state: the resolved
/// experiment and the kept updates' folder under `out`.
fn start_or_resume(
    experiment: Experiment,
    strategy: Box<dyn ServerStrategy>,
    out: &Path,
    state_dir: &Path,
    options: &ServeOptions,
) -> anyhow::Result<Arc<Shared>> {
    let state = state::StateDir {
        disk: disk::HostDisk::shared(),
        dir: state_dir.to_path_buf(),
        blocking: shared::Blocking::Pool,
        run_nonce: rand::random(),
    };
    let keep_updates = experiment.file.server.keep_updates;
    let mut shared = state::open(experiment, strategy, &state, options)?;
    std::fs::write(out.join("experiment.toml"), shared.experiment.to_toml())?;
    if keep_updates {
        let dir = out.join("updates");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        shared.updates_dir = Some(dir);
    }
    Ok(Arc::new(shared))
}

type Connections = Arc<Mutex<Vec<ConnMeter>>>;

/// Below this many connections listed, every arrival sweeps out the closed ones.
const SWEEP_FLOOR: usize = 64;

/// The listener's connections, each counted by its own meter. Closed ones are swept out (their
/// last bytes to their last label) when the list has doubled since the last sweep, so it stays
/// within twice the connections open however many come and go, and an arrival costs O(1)
/// amortized: sweeping at every arrival cost N² as N clients connected (5 % of the server's
/// time at 10,000 clients).
fn metered_incoming(
    listener: TcpListener,
    limits: accept::Limits,
    gate: Arc<accept::Gate>,
    sink: Arc<SharedLedger>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (
    tokio_stream::wrappers::ReceiverStream<std::io::Result<accept::Conn>>,
    Connections,
) {
    let connections: Connections = Arc::default();
    let registry = connections.clone();
    let kept_at_sweep = AtomicUsize::new(0);
    let incoming = accept::incoming(listener, limits, gate, tls, move |meter| {
        let mut open = registry.lock().expect("connections lock");
        // Read and written under the list's lock.
        let kept = &kept_at_sweep;
        if open.len() < SWEEP_FLOOR || open.len() >= 2 * kept.load(Ordering::Relaxed) {
            open.retain(|m: &ConnMeter| {
                let closed = m.is_orphan();
                if closed {
                    m.flush_to_label(&*sink, Side::Server);
                }
                !closed
            });
            kept.store(open.len(), Ordering::Relaxed);
        }
        open.push(meter.clone());
    });
    (incoming, connections)
}

/// The health service, serving; and gRPC reflection where asked for.
async fn health_and_reflection(
    reflection: bool,
) -> anyhow::Result<(
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    Option<
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
    >,
)> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<AggregatorServer<AggregatorService>>()
        .await;
    let reflection = match reflection {
        true => Some(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .build_v1()?,
        ),
        false => None,
    };
    Ok((health_service, reflection))
}

/// The aggregator service, compressing as the experiment says.
pub fn aggregator(shared: &Arc<Shared>) -> AggregatorServer<AggregatorService> {
    let service = AggregatorServer::new(AggregatorService(shared.clone()));
    match flint_shell::compression::encoding(shared.experiment.compression) {
        Some(enc) => service.send_compressed(enc).accept_compressed(enc),
        None => service,
    }
}

/// Waits, at most `limit`, for a round being aggregated to be installed: the phase changes
/// when it is (the next round opens or the run ends).
async fn wait_for_aggregation(shared: &Shared, limit: Duration) {
    let mut phase = shared.phase.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    while shared.rounds().aggregating().is_some() {
        if tokio::time::timeout_at(deadline, phase.changed())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// `results.json`, `rounds.csv` and the last `status.json`.
fn write_results(shared: &Shared, out: &Path) -> anyhow::Result<RunResults> {
    let results = results::collect(shared);
    results::write_atomic(
        &out.join("results.json"),
        &serde_json::to_vec_pretty(&results)?,
    )?;
    results::write_atomic(
        &out.join("rounds.csv"),
        results::rounds_csv(&results).as_bytes(),
    )?;
    write_status(shared, out);
    tracing::info!(out = %out.display(), "results written");
    Ok(results)
}

/// A finished run's journal is removed (the same command starts a new run); an unfinished one
/// is kept for a restart to resume.
fn close_state(shared: &Shared, state_dir: &Path, completed: bool) -> anyhow::Result<()> {
    if completed && shared.rounds().is_finished() {
        shared.journal.remove()?;
        let _ = std::fs::remove_file(state_dir.join(state::LEDGER_FILE));
        let _ = std::fs::remove_dir(state_dir);
    } else {
        tracing::warn!(state = %state_dir.display(), "the run did not finish; start the server again with the same experiment and state directory to resume it");
    }
    match shared.journal_failure() {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

/// The byte ledger as of `closed_rounds`, kept beside the journal for a restart. The replies
/// written so far are booked first (a connection's are otherwise booked when its next call
/// starts), so that the kept figures of a reply hold its socket bytes beside its message.
fn keep_ledger(shared: &Shared, connections: &Connections, state_dir: &Path, closed_rounds: usize) {
    for c in connections.lock().expect("connections lock").iter() {
        c.call_starts(&*shared.ledger, Side::Server);
    }
    let kept = flint_common::wire::ledger::KeptLedger {
        closed_rounds: closed_rounds as flint_common::Round,
        ledger: shared.ledger.snapshot(),
    };
    let bytes = serde_json::to_vec(&kept).expect("ledger serialises");
    let path = state_dir.join(state::LEDGER_FILE);
    if let Err(e) = results::write_atomic(&path, &bytes) {
        tracing::warn!(error = %e, "cannot keep the byte ledger in the state directory");
    }
}

/// Where the metrics listener's address is written (`--metrics-listen` with port 0 picks one).
pub const METRICS_ADDR_FILE: &str = "metrics.addr";

/// Closes rounds at their timeouts and keeps status.json (and, at each closed round, the byte
/// ledger of the state directory) current until the run is done.
async fn tick_until_done(
    shared: Arc<Shared>,
    connections: Connections,
    out: PathBuf,
    state_dir: PathBuf,
) {
    let mut written = u64::MAX;
    let mut ledger_at = usize::MAX;
    let mut status_paced_until = std::time::Instant::now();
    loop {
        let Ticked {
            finished,
            closed_rounds,
        } = tick(&shared);
        let version = *shared.version.borrow();
        let paced = std::time::Instant::now() < status_paced_until && !finished;
        let status_due = version != written && !paced;
        let ledger_due = closed_rounds != ledger_at;
        if status_due || ledger_due {
            // Files are written and synced off the async threads.
            let (shared, out, state_dir) = (shared.clone(), out.clone(), state_dir.clone());
            let connections = connections.clone();
            // The ledger first: a status that says a round closed comes after its bytes are kept.
            let took = tokio::task::spawn_blocking(move || {
                if ledger_due {
                    keep_ledger(&shared, &connections, &state_dir, closed_rounds);
                }
                status_due.then(|| write_status(&shared, &out))
            })
            .await;
            if let Ok(Some(took)) = took {
                written = version;
                status_paced_until = std::time::Instant::now() + took * STATUS_PACE;
            }
            ledger_at = closed_rounds;
        }
        if finished || shared.journal_failure().is_some() {
            // Wake every long-poll so it sees the finished run.
            shared.bump_phase();
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What one tick of the clock found.
pub struct Ticked {
    /// The run is over: finished, and its final evaluations are in or timed out.
    pub finished: bool,
    pub closed_rounds: usize,
}

/// Closes the open round if its timeout has passed (journaled as such, then aggregated).
pub fn tick(shared: &Arc<Shared>) -> Ticked {
    let now = shared::now();
    let (closed, ticked, advanced) = {
        let mut r = shared.rounds();
        let stepped = r.tick_secure(now);
        let closed = stepped.closed.or_else(|| r.tick(now));
        // A secure round's sum is journaled once installed; its replay needs the sum.
        if let Some(job) = closed.as_ref().filter(|j| !j.is_secure_sum()) {
            shared.record(shared::closed_by_timeout(&r, job.round()));
        }
        flint_shell::logging::set_round(r.counts().opened);
        let ticked = Ticked {
            finished: r.is_done(now),
            closed_rounds: r.history().len(),
        };
        (closed, ticked, stepped.advanced)
    };
    if let Some(job) = closed {
        shared.aggregate(job);
        shared.bump_phase();
    } else if advanced {
        shared.bump_phase();
    }
    ticked
}

/// The status is gathered at most once per this many times its last gathering took, so that
/// however many clients and rounds it sums, it takes at most 1/`STATUS_PACE` of a core.
const STATUS_PACE: u32 = 20;

/// Writes status.json; returns how long gathering it took (under the run's locks).
fn write_status(shared: &Shared, out: &Path) -> Duration {
    let started = std::time::Instant::now();
    let status = results::status(shared);
    let took = started.elapsed();
    let bytes = serde_json::to_vec_pretty(&status).expect("status serialises");
    if let Err(e) = results::write_atomic(&out.join("status.json"), &bytes) {
        tracing::warn!(error = %e, "cannot write status.json");
    }
    took
}
