//! Watching a federation while it runs. The server's /metrics (scraped directly and by
//! a real Prometheus), the dashboard and the catalogue that must name only what it exports, and
//! JSON log lines that carry their run and round.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::wire::proto::{DataSummary, JoinRequest};
use support::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Waits for `path` to hold text, or fails after `limit`.
fn wait_for_text(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return text;
        }
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(url: &str) -> String {
    ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .into_string()
        .unwrap()
}

/// A scrape's samples: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            (series.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// The series a query names, as Prometheus spells them: a counter `x_total`, a histogram
/// `x_bucket`, `x_sum`, `x_count`, a gauge `x`.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => names.insert(format!("{name}_total")),
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
                names.insert(name.to_string())
            }
            _ => names.insert(name.to_string()),
        };
    }
    names
}

/// Every `flint_…` name in a text (a query, a table).
fn flint_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("flint_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // `flint_…` inside a longer word (a path, say) is not a metric.
        let boundary = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        if boundary {
            names.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// Every query of the dashboard: its panels' `expr`s.
fn dashboard_queries() -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let path = repo().join("deploy/grafana/flint-dashboard.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard parses");
    let mut out = Vec::new();
    walk(&json, &mut out);
    out
}

/// A server that waits for its clients, with metrics on a port of its own.
struct WaitingServer {
    child: Child,
    grpc: String,
    metrics: String,
}

impl WaitingServer {
    fn start(dir: &Path) -> WaitingServer {
        Self::start_with(dir, flint())
    }

    /// The server with at most `descriptors` open files, as a small container would have.
    fn with_descriptors(dir: &Path, descriptors: u32) -> WaitingServer {
        let mut limited = Command::new("sh");
        limited
            .arg("-c")
            .arg(format!("ulimit -n {descriptors} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_flint"));
        Self::start_with(dir, limited)
    }

    fn start_with(dir: &Path, mut flint: Command) -> WaitingServer {
        let exp = write(dir, "w.toml", &synthetic_experiment("w", 2, 2, ""));
        let out = dir.join("out");
        let ready = dir.join("ready");
        let child = flint
            .args(["server", "--open-enrollment", "--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0", "--experiment"])
            .arg(&exp)
            .arg("--out")
            .arg(&out)
            .arg("--ready-file")
            .arg(&ready)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let grpc = wait_for_text(&ready, Duration::from_secs(30));
        let metrics = wait_for_text(&out.join("metrics.addr"), Duration::from_secs(5));
        WaitingServer {
            child,
            grpc: format!("http://{grpc}"),
            metrics: format!("http://{metrics}/metrics"),
        }
    }
}

impl Drop for WaitingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Joins under names the experiment does not declare: refused, NOT_FOUND, every one.
fn strangers_join(url: &str, n: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut g = AggregatorClient::connect(url.to_string()).await.unwrap();
        for i in 0..n {
            let refused = g
                .join(JoinRequest {
                    client_name: format!("stranger-{i}"),
                    experiment_fingerprint: "0".into(),
                    summary: Some(DataSummary::default()),
                    token: "0123456789abcdef0123456789abcdef".into(),
                    enrollment: String::new(),
                })
                .await
                .unwrap_err();
            assert_eq!(refused.code(), tonic::Code::NotFound);
        }
        // An upload with no chunk at all: refused as an update.
        let empty = tokio_stream::iter(Vec::new());
        let refused = g.push_update(empty).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    });
}

/// The dashboard's every query and the catalogue's every row name a metric the server exports,
/// and the catalogue lists every one it exports.
#[test]
fn the_dashboard_and_the_catalogue_name_what_the_server_exports() {
    let dir = tempfile::tempdir().unwrap();
    let server = WaitingServer::start(dir.path());
    strangers_join(&server.grpc, 3);
    let text = get(&server.metrics);
    let exported = exported_names(&text);
    let s = samples(&text);
    assert_eq!(
        s[r#"flint_calls_refused_total{method="Join",code="not-found"}"#], 3.0,
        "{text}"
    );
    assert_eq!(
        s[r#"flint_updates_total{outcome="invalid-argument"}"#], 1.0,
        "{text}"
    );
    assert_eq!(s[r#"flint_phase{phase="waiting-for-clients"}"#], 1.0);

    let queries = dashboard_queries();
    assert!(
        queries.len() >= 8,
        "the dashboard has {} queries",
        queries.len()
    );
    for q in &queries {
        let names = flint_names(q);
        assert!(
            !names.is_empty(),
            "a dashboard query names no flint metric: {q}"
        );
        for n in names {
            assert!(
                exported.contains(&n),
                "the dashboard asks for {n}, which the server does not export: {q}"
            );
        }
    }

    let catalogue = std::fs::read_to_string(repo().join("docs/METRICS.md")).unwrap();
    let rows: BTreeSet<String> = catalogue
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(n, _)| n.to_string()))
        .filter(|n| n.starts_with("flint_"))
        .collect();
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            }
        })
        .collect();
    assert_eq!(
        rows, families,
        "docs/METRICS.md's rows against the server's metrics"
    );
}

/// More idle sockets on /metrics than the server has descriptors leave its gRPC port served: the
/// listener holds a few, each for seconds (it used to keep every one: 1,100 of them took every
/// descriptor and Joins timed out), and a scrape is served again once they lapse.
#[test]
fn idle_sockets_on_the_metrics_port_leave_the_grpc_port_served() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = WaitingServer::with_descriptors(dir.path(), 256);
    let addr = server.metrics["http://".len()..].trim_end_matches("/metrics");
    let idle: Vec<std::net::TcpStream> = (0..400)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    // Some send half a request and stop, as a slow client would.
    for mut socket in idle.iter().take(20) {
        socket.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    strangers_join(&server.grpc, 3);
    std::thread::sleep(
        flint_server::scrape_listener::CONNECTION_DEADLINE / 2 + Duration::from_secs(1),
    );
    let text = get(&server.metrics);
    assert!(
        text.contains(r#"flint_calls_refused_total{method="Join",code="not-found"} 3"#),
        "{text}"
    );
    drop(idle);
}

/// Metrics are off unless asked for: no listener, no address file.
#[test]
fn metrics_are_off_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "q.toml", &synthetic_experiment("q", 1, 2, ""));
    let runs = dir.path().join("runs");
    ok(flint_run(&exp, dir.path(), &runs).arg("--insecure"));
    let log = std::fs::read_to_string(runs.join("q/server.log")).unwrap();
    assert!(!runs.join("q/metrics.addr").exists());
    assert!(!log.contains("metrics"), "{log}");
}

/// `--log-format json` (here FLINT_LOG_FORMAT=json, as a container would set it): every line
/// of the server's and the clients' logs is one JSON object with the run id and a round.
#[test]
fn json_log_lines_carry_their_run_and_round() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "j.toml", &synthetic_experiment("j", 3, 3, ""));
    let runs = dir.path().join("runs");
    ok(flint_run(&exp, dir.path(), &runs)
        .arg("--insecure")
        .env("FLINT_LOG_FORMAT", "json"));
    let run = runs.join("j");
    let run_id = results(&run).run_id;
    let mut logs = vec![run.join("server.log")];
    for entry in std::fs::read_dir(run.join("clients")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            logs.push(path);
        }
    }
    assert_eq!(logs.len(), 4, "{logs:?}");
    let mut rounds = BTreeSet::new();
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(text.lines().count() >= 3, "{}: {text}", log.display());
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not one JSON object ({e}): {line}", log.display()));
            assert_eq!(v["run"], run_id.as_str(), "{}: {line}", log.display());
            let round = v["round"].as_u64();
            assert!(round.is_some_and(|r| r <= 3), "{}: {line}", log.display());
            rounds.insert(round.unwrap());
            assert!(v["message"].is_string() && v["level"].is_string(), "{line}");
        }
    }
    assert_eq!(rounds, (0..=3).collect(), "every round appears in the logs");
}

/// With JSON logs, the line a client ends with is JSON too, what the server said escaped inside
/// it (it used to be a text line carrying the server's message raw).
#[test]
fn a_json_log_ends_with_a_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = WaitingServer::start(dir.path());
    let exp = dir.path().join("w.toml");
    let out = flint()
        .args(["client", "--log-format", "json", "--server", &server.grpc])
        .arg("--experiment")
        .arg(&exp)
        .args(["--name", "forged\u{1b}[31m\u{7}\n{\"level\":\"INFO\"}"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    assert_eq!(v["message"], "flint stopped", "{last}");
    assert!(
        v["error"].as_str().unwrap().contains("is not declared"),
        "{last}"
    );
    for line in stderr.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
    }
}

struct Prometheus {
    child: Child,
    api: String,
}

impl Prometheus {
    /// Debian's prometheus, scraping `target` every second, its storage in `dir`.
    fn start(dir: &Path, target: &str) -> Prometheus {
        let config = write(
            dir,
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: flint\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        );
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus starts (Debian's package; .ci/run installs it)");
        Prometheus {
            child,
            api: format!("http://127.0.0.1:{port}/api/v1"),
        }
    }

    fn query(&self, q: &str) -> Vec<(BTreeMap<String, String>, f64, f64)> {
        prometheus_query(&self.api, q)
    }

    fn value(&self, q: &str) -> f64 {
        prometheus_value(&self.api, q)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scrapes a real `flint run`; its byte counters per
/// level and direction equal the totals of results.json, its closed rounds the run's rounds,
/// and a burst of refused calls shows in the refusal counter.
#[test]
#[ignore = "needs Debian's prometheus; CI installs it and runs this"]
fn a_real_prometheus_sees_what_results_json_holds() {
    const BURST: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "p.toml", &synthetic_experiment("p", 5, 3, ""));
    let runs = dir.path().join("runs");
    // The emulated line keeps the run going for seconds: time for the burst while it serves.
    let mut run = flint_run(&exp, dir.path(), &runs)
        .args(["--insecure", "--link", "mobile"])
        .args(["--metrics-listen", "127.0.0.1:0", "--metrics-linger", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = runs.join("p");
    let grpc = wait_for_text(&run_dir.join("server.addr"), Duration::from_secs(30));
    strangers_join(&format!("http://{grpc}"), BURST);
    let target = wait_for_text(&run_dir.join("metrics.addr"), Duration::from_secs(5));
    let prometheus = Prometheus::start(dir.path(), &target);

    // Results are written before the linger starts: a scrape after that sees the final figures.
    wait_for_text(&run_dir.join("results.json"), Duration::from_secs(120));
    let written = std::fs::metadata(run_dir.join("results.json"))
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // timestamp() is the sample's scrape time (a query's own time is when it was asked).
    let start = Instant::now();
    while !prometheus
        .query("timestamp(flint_round)")
        .first()
        .is_some_and(|(_, _, scraped)| *scraped > written)
    {
        assert!(
            start.elapsed() < Duration::from_secs(25),
            "prometheus scraped nothing after the run ended; see {}",
            dir.path().join("prometheus.log").display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let r = results(&run_dir);
    for (level, up, down) in [
        ("payload", r.totals.up.payload, r.totals.down.payload),
        ("message", r.totals.up.message, r.totals.down.message),
        ("socket", r.totals.up.socket, r.totals.down.socket),
        ("paper", r.totals.up.paper, r.totals.down.paper),
    ] {
        for (direction, expected) in [("up", up), ("down", down)] {
            let q = format!(r#"flint_bytes_total{{level="{level}",direction="{direction}"}}"#);
            assert_eq!(prometheus.value(&q), expected as f64, "{q}");
            assert!(expected > 0, "{q}");
        }
    }
    let q = r#"flint_unattributed_bytes_total{level="socket",direction="up"}"#;
    assert_eq!(prometheus.value(q), r.unattributed.up.socket as f64);
    assert_eq!(
        prometheus.value("sum(flint_rounds_closed_total)"),
        r.rounds.iter().filter(|x| x.round > 0).count() as f64
    );
    assert_eq!(prometheus.value("flint_rounds_planned"), 5.0);
    assert_eq!(
        prometheus.value(r#"flint_calls_refused_total{method="Join",code="not-found"}"#),
        BURST as f64
    );
    assert_eq!(
        r.refused["Join/not-found"].calls, BURST as u64,
        "results.json counts the same refusals"
    );
    assert_eq!(prometheus.value(r#"flint_phase{phase="finished"}"#), 1.0);
    end_metrics_linger(&run_dir);
    assert!(run.wait().unwrap().success());
}
