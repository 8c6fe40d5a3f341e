//! The server's Prometheus metrics (`--metrics-listen`): what `telemetry` counted as it
//! happened, and the run's state — rounds, clients, bytes at every level — read at each scrape
//! ([`RunState`]), so that the figures a scrape shows are the ones `results.json` will hold.
//!
//! No label names a client: the series count is fixed by the run's shape (methods × status
//! codes at most), however many clients join.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flint_common::wire::ledger::{Flow, Traffic};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::accept::Gate;
use crate::shared::Shared;

/// Where metrics are served, and for how long after the run.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MetricsOptions {
    /// Serve Prometheus metrics at http://ADDR/metrics (off unless given; see docs/METRICS.md).
    #[arg(long, env = "FLINT_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Seconds /metrics stays up after the run ends, so that a scraper sees its final figures
    /// (a run can end between two scrapes).
    #[arg(
        long,
        env = "FLINT_METRICS_LINGER",
        value_name = "SECS",
        default_value_t = 0
    )]
    pub metrics_linger: u64,
}

/// The run's state, read at each scrape.
struct RunState {
    shared: Arc<Shared>,
    gate: Arc<Gate>,
}

impl std::fmt::Debug for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunState")
            .field("run", &self.shared.run_id)
            .finish_non_exhaustive()
    }
}

/// One scrape's reading of the run, taken under each lock once.
struct Reading {
    planned: u64,
    round: u64,
    phase: &'static str,
    expected: usize,
    joined: usize,
    selected: usize,
    updates: usize,
    participants: usize,
    opened: u64,
    closed_all: u64,
    closed_target: u64,
    closed_timeout: u64,
    missed: u64,
    late: u64,
    totals: Flow,
    closing: Flow,
    unattributed: Flow,
    long_polls: usize,
}

const PHASES: [&str; 4] = ["waiting-for-clients", "open", "aggregating", "finished"];

impl RunState {
    fn read(&self) -> Reading {
        let s = &self.shared;
        let (totals, closing, unattributed) = s
            .ledger
            .with(|l| (l.total(), l.closing_total(), l.unattributed()));
        let rounds = s.rounds();
        let counts = rounds.counts();
        let (phase, selected, updates) = match (rounds.open_round(), rounds.aggregating()) {
            (Some((_, u, sel)), _) => ("open", sel, u),
            (None, Some(_)) => ("aggregating", 0, 0),
            (None, None) if rounds.is_finished() => ("finished", 0, 0),
            (None, None) => ("waiting-for-clients", 0, 0),
        };
        let last = rounds.history().last();
        Reading {
            planned: u64::from(s.experiment.policy.rounds),
            round: u64::from(counts.opened),
            phase,
            expected: s.experiment.clients.len(),
            joined: rounds.joined().len(),
            selected,
            updates,
            participants: last.map_or(0, |r| r.participants.len()),
            opened: u64::from(counts.opened),
            closed_all: counts.closed_all_answered,
            closed_target: counts.closed_target,
            closed_timeout: counts.closed_timeout,
            missed: counts.missed,
            late: counts.late,
            totals,
            closing,
            unattributed,
            long_polls: s.long_polls.lock().expect("long_polls lock").values().sum(),
        }
    }
}

impl Collector for RunState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = self.read();
        let mut enc = Encoder(&mut encoder);
        self.info(&mut enc)?;
        rounds(&mut enc, &r)?;
        clients(&mut enc, &r)?;
        traffic(&mut enc, &r)?;
        self.capacity(&mut enc, &r)
    }
}

impl RunState {
    /// What serves: the build and the run (value 1).
    fn info(&self, enc: &mut Encoder) -> Result<(), std::fmt::Error> {
        let s = &self.shared;
        enc.gauge_with(
            "flint_build_info",
            "The server's version and git revision (value 1)",
            &[[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", revision()),
            ]],
            |_| 1,
        )?;
        enc.gauge_with(
            "flint_run_info",
            "The run this server serves and its strategy (value 1)",
            &[[
                ("run", s.run_id.as_str()),
                ("strategy", s.experiment.strategy.name().as_str()),
            ]],
            |_| 1,
        )
    }

    /// What the server holds room for: uploads in flight, long-polls, connections.
    fn capacity(&self, enc: &mut Encoder, r: &Reading) -> Result<(), std::fmt::Error> {
        let s = &self.shared;
        enc.gauge(
            "flint_upload_budget_bytes",
            "Bytes of uploads the server buffers at once, across all clients",
            i64::from(s.upload_budget_kib) * 1024,
        )?;
        let free = s.upload_budget.available_permits() as i64;
        enc.gauge(
            "flint_upload_budget_in_use_bytes",
            "Bytes of the upload budget held by uploads in flight",
            (i64::from(s.upload_budget_kib) - free).max(0) * 1024,
        )?;
        enc.gauge(
            "flint_long_polls_waiting",
            "calls waiting for the next round (GetRound, PushUpdate with wait_next)",
            r.long_polls as i64,
        )?;
        enc.gauge(
            "flint_connections_open",
            "Connections open",
            self.gate.open() as i64,
        )?;
        enc.gauge(
            "flint_connections_limit",
            "Connections the server keeps open at once (--max-connections)",
            self.gate.limit() as i64,
        )?;
        enc.counter(
            "flint_connections_accepted",
            "Connections accepted",
            self.gate.accepted(),
        )?;
        enc.counter(
            "flint_connections_refused",
            "Connections closed on arrival because the limit was reached",
            self.gate.refused(),
        )?;
        enc.counter(
            "flint_connections_evicted",
            "Connections closed before they spoke, for a newcomer, because the limit was reached",
            self.gate.evicted(),
        )
    }
}

/// The round, the phase, rounds opened and closed.
fn rounds(enc: &mut Encoder, r: &Reading) -> Result<(), std::fmt::Error> {
    enc.gauge(
        "flint_rounds_planned",
        "Rounds the run has",
        r.planned as i64,
    )?;
    enc.gauge(
        "flint_round",
        "The last round opened: open, aggregating or closed",
        r.round as i64,
    )?;
    enc.gauge_with(
        "flint_phase",
        "The run's phase (1 for the current one)",
        &PHASES.map(|p| [("phase", p)]),
        |[(_, p)]| i64::from(*p == r.phase),
    )?;
    enc.counter("flint_rounds_opened", "Rounds opened", r.opened)?;
    enc.counter_with(
        "flint_rounds_closed",
        "Rounds closed, by cause: every selected client answered, server.clients_per_round updates were in (over-selection), or the round timed out",
        &[
            [("cause", "all-answered")],
            [("cause", "target-reached")],
            [("cause", "timeout")],
        ],
        |[(_, cause)]| match *cause {
            "timeout" => r.closed_timeout,
            "target-reached" => r.closed_target,
            _ => r.closed_all,
        },
    )?;
    enc.counter(
        "flint_updates_missed",
        "Selected clients whose round closed without their update (dropped out, or late)",
        r.missed,
    )?;
    enc.counter(
        "flint_updates_late",
        "Updates of selected clients that came after their round closed",
        r.late,
    )
}

/// The clients: declared, joined, taken by the last round, awaited by the open one.
fn clients(enc: &mut Encoder, r: &Reading) -> Result<(), std::fmt::Error> {
    enc.gauge(
        "flint_clients_expected",
        "Clients the experiment declares",
        r.expected as i64,
    )?;
    enc.gauge(
        "flint_clients_joined",
        "Clients that have joined the run",
        r.joined as i64,
    )?;
    enc.gauge(
        "flint_clients_active",
        "Clients whose update the last closed round took",
        r.participants as i64,
    )?;
    enc.gauge(
        "flint_round_selected",
        "Clients the open round waits for (0 while no round is open)",
        r.selected as i64,
    )?;
    enc.gauge(
        "flint_round_updates",
        "Updates the open round holds so far",
        r.updates as i64,
    )
}

/// Bytes at every level and messages, the run's clients' and unattributed.
fn traffic(enc: &mut Encoder, r: &Reading) -> Result<(), std::fmt::Error> {
    bytes(
        enc,
        "flint_bytes",
        "Bytes of the run's clients, by level (payload, message, socket; link as the clients report it; paper: the papers' 4 B per weight) and direction",
        &["payload", "message", "socket", "link", "paper"],
        &r.totals,
    )?;
    // No report after a closing says its link bytes, nor a stranger's.
    bytes(
        enc,
        "flint_closing_bytes",
        "Bytes of the clients' closings (each one's last report and its connection's close), kept out of flint_bytes, by level and direction",
        &["payload", "message", "socket", "paper"],
        &r.closing,
    )?;
    bytes(
        enc,
        "flint_unattributed_bytes",
        "Bytes of connections that never proved a client (health probes, strangers' refused calls), by level and direction",
        &["payload", "message", "socket", "paper"],
        &r.unattributed,
    )?;
    enc.counter_with(
        "flint_messages",
        "gRPC messages of the run's clients, by direction",
        &[[("direction", "up")], [("direction", "down")]],
        |[(_, d)]| pick(&r.totals, d).messages,
    )
}

/// The commit the server was built from; `unknown` for a build outside git (an image's).
fn revision() -> &'static str {
    match env!("FLINT_GIT_REVISION") {
        "" => "unknown",
        r => r,
    }
}

fn pick<'a>(flow: &'a Flow, direction: &str) -> &'a Traffic {
    match direction {
        "up" => &flow.up,
        _ => &flow.down,
    }
}

/// The levels of `flow` in both directions, as one counter family.
fn bytes(
    enc: &mut Encoder,
    name: &str,
    help: &str,
    levels: &[&'static str],
    flow: &Flow,
) -> Result<(), std::fmt::Error> {
    let labels: Vec<[(&str, &str); 2]> = levels
        .iter()
        .flat_map(|l| {
            [
                [("level", *l), ("direction", "up")],
                [("level", *l), ("direction", "down")],
            ]
        })
        .collect();
    enc.counter_with(name, help, &labels, |[(_, level), (_, d)]| {
        let t = pick(flow, d);
        match *level {
            "payload" => t.payload,
            "message" => t.message,
            "socket" => t.socket,
            "link" => t.link,
            _ => t.paper,
        }
    })
}

/// Const metrics into a scrape, one family per call.
struct Encoder<'a, 'b>(&'a mut DescriptorEncoder<'b>);

impl Encoder<'_, '_> {
    fn gauge(&mut self, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
        let gauge = ConstGauge::new(value);
        let metric = self
            .0
            .encode_descriptor(name, help, None, gauge.metric_type())?;
        gauge.encode(metric)
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(value);
        let metric = self
            .0
            .encode_descriptor(name, help, None, counter.metric_type())?;
        counter.encode(metric)
    }

    fn gauge_with<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[L],
        value: impl Fn(&L) -> i64,
    ) -> Result<(), std::fmt::Error> {
        self.family(name, help, labels, |l| ConstGauge::new(value(l)))
    }

    fn counter_with<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[L],
        value: impl Fn(&L) -> u64,
    ) -> Result<(), std::fmt::Error> {
        self.family(name, help, labels, |l| ConstCounter::new(value(l)))
    }

    /// One family: a descriptor, then a metric per label set.
    fn family<L: EncodeLabelSet, M: EncodeMetric>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[L],
        metric: impl Fn(&L) -> M,
    ) -> Result<(), std::fmt::Error> {
        let Some(first) = labels.first() else {
            return Ok(());
        };
        let kind = metric(first).metric_type();
        let mut family = self.0.encode_descriptor(name, help, None, kind)?;
        for l in labels {
            metric(l).encode(family.encode_family(l)?)?;
        }
        Ok(())
    }
}

/// The registry a scrape encodes: the event metrics and the run's state.
fn registry(shared: &Arc<Shared>, gate: &Arc<Gate>) -> Registry {
    let mut registry = Registry::default();
    shared.telemetry.register(&mut registry);
    registry.register_collector(Box::new(RunState {
        shared: shared.clone(),
        gate: gate.clone(),
    }));
    registry
}

/// The text a scrape gets (OpenMetrics); `None` if a collector failed (a panic included), so
/// that the scrape fails rather than shows nothing as if it were so.
fn scrape(registry: &Registry) -> Option<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).ok()?;
    Some(text)
}

/// GET /metrics.
async fn answer(registry: Arc<Registry>) -> axum::response::Response {
    use axum::response::IntoResponse;
    // Reading the ledger takes its lock: off the async threads.
    match tokio::task::spawn_blocking(move || scrape(&registry)).await {
        Ok(Some(text)) => ([(http::header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        _ => (
            http::StatusCode::INTERNAL_SERVER_ERROR,
            "cannot read the metrics; see the server's log\n",
        )
            .into_response(),
    }
}

/// The metrics listener, serving until [`stop`](Self::stop).
pub struct MetricsServer {
    pub addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    linger: Duration,
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl MetricsOptions {
    /// Binds the listener, if metrics are asked for: before the run's state is touched, so that
    /// a busy address fails the start with nothing written.
    pub async fn bind(&self) -> anyhow::Result<Option<tokio::net::TcpListener>> {
        let Some(addr) = self.metrics_listen else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        Ok(Some(listener))
    }

    /// Serves the registry of `shared`'s run on `listener` (from [`bind`](Self::bind)).
    pub fn start(
        &self,
        listener: Option<tokio::net::TcpListener>,
        shared: &Arc<Shared>,
        gate: &Arc<Gate>,
    ) -> anyhow::Result<Option<MetricsServer>> {
        let Some(listener) = listener else {
            return Ok(None);
        };
        let addr = listener.local_addr()?;
        let registry = Arc::new(registry(shared, gate));
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || answer(registry.clone())),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(crate::scrape_listener::serve(listener, app, stopped));
        tracing::info!(%addr, "serving metrics at /metrics");
        Ok(Some(MetricsServer {
            addr,
            stop,
            task,
            linger: Duration::from_secs(self.metrics_linger),
        }))
    }
}

impl MetricsServer {
    /// Serves the final figures `--metrics-linger` longer, then stops; not at all once a stop
    /// signal has come, during the run or the linger (a container's grace period is short).
    pub async fn stop(self, mut signal: flint_shell::signal::Stop) {
        if !self.linger.is_zero() && signal.received_yet().is_none() {
            tracing::info!(
                seconds = self.linger.as_secs(),
                "metrics stay up after the run"
            );
            tokio::select! {
                _ = tokio::time::sleep(self.linger) => {}
                _ = signal.received() => {}
            }
        }
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}
