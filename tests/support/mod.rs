//! Helpers for the end-to-end tests: real `flint` processes on loopback, temporary run dirs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use flint_server::results::{RunResults, Status};

pub fn flint() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flint"))
}

/// A small synthetic experiment; `extra` is appended (sections, clients).
pub fn synthetic_experiment(name: &str, rounds: u32, clients: usize, server: &str) -> String {
    let mut s = format!(
        "name = \"{name}\"\nstrategy = \"fedavg-ahp\"\nseed = 11\nrounds = {rounds}\n\n[server]\n{server}\n\n\
         [data]\nsource = \"synthetic\"\nsamples = 900\nfeatures = 6\n\n[logreg]\nlearning_rate = 0.3\nlocal_epochs = 10\n"
    );
    for i in 1..=clients {
        s += &format!(
            "\n[[clients]]\nname = \"client-{i}\"\ncompute_ghz = {}\n",
            1.0 + i as f64
        );
    }
    s
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs a command to its end and fails the test with its output if it did not succeed.
pub fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("command starts");
    assert!(
        out.status.success(),
        "command failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `flint run` on `experiment` into `runs`, which must fail: what it said on stderr.
pub fn refused(experiment: &Path, runs: &Path) -> String {
    let out = flint()
        .args(["run", "--runs-dir"])
        .arg(runs)
        .arg(experiment)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the run was not refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `flint run EXPERIMENT --data-dir DATA --runs-dir RUNS`, not yet started.
pub fn flint_run(experiment: &Path, data: &Path, runs: &Path) -> Command {
    let mut cmd = flint();
    cmd.arg("run")
        .arg(experiment)
        .arg("--data-dir")
        .arg(data)
        .arg("--runs-dir")
        .arg(runs);
    cmd
}

/// A kept FedTMOS composite (`models/<client>.json`): its literal names and how many machines.
pub fn kept_composite(model_file: &Path) -> (Vec<String>, usize) {
    let kept = flint_common::model::kept::ModelFile::read(model_file).unwrap();
    match kept.model {
        flint_common::model::kept::KeptModel::Composite {
            literals, machines, ..
        } => (literals, machines.len()),
        other => panic!("{other:?}"),
    }
}

pub fn results(run_dir: &Path) -> RunResults {
    let bytes = std::fs::read(run_dir.join("results.json")).expect("results.json exists");
    RunResults::read(&bytes).expect("results.json parses")
}

pub fn status(run_dir: &Path) -> Option<Status> {
    serde_json::from_slice(&std::fs::read(run_dir.join("status.json")).ok()?).ok()
}

/// A child process killed when the test ends, whatever happens.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Waits for exit; the limit only guards against a hung test, it measures nothing.
    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < limit,
                "process {} still running after {limit:?}",
                self.0.id()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: &str) {
        ok(Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.0.id().to_string()));
    }
}

/// Starts `flint server` on a free port; returns it and its address.
pub fn start_server(experiment: &Path, out: &Path) -> (Proc, String) {
    let (server, addr) = start_server_with(experiment, out, &[]);
    (server, format!("http://{addr}"))
}

/// [`start_server`] with more arguments; returns the bare `host:port`.
pub fn start_server_with(experiment: &Path, out: &Path, extra: &[&str]) -> (Proc, String) {
    start_server_at(experiment, out, "127.0.0.1:0", "server.log", extra)
}

/// `flint server` listening on `listen`, its log in `out/log`; returns it once it accepts
/// connections, with its bare `host:port`. The tests' clients hold no enrollment secret, so it
/// is started with `--open-enrollment` unless `extra` gives `--enrollment`.
pub fn start_server_at(
    experiment: &Path,
    out: &Path,
    listen: &str,
    log: &str,
    extra: &[&str],
) -> (Proc, String) {
    let ready = out.join("server.addr");
    let _ = std::fs::remove_file(&ready);
    let child = flint()
        .args(["server", "--listen", listen, "--experiment"])
        .arg(experiment)
        .arg("--out")
        .arg(out)
        .arg("--ready-file")
        .arg(&ready)
        .args(extra)
        .args(open_unless_enrolled(extra))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(out.join(log)).unwrap())
        .spawn()
        .unwrap();
    let server = Proc(child);
    let addr = wait_for(Duration::from_secs(30), || {
        std::fs::read_to_string(&ready)
            .ok()
            .filter(|s| !s.is_empty())
    });
    (server, addr.trim().to_string())
}

fn open_unless_enrolled(extra: &[&str]) -> Option<&'static str> {
    let enrolled = extra.iter().any(|a| a.starts_with("--enrollment"));
    (!enrolled).then_some("--open-enrollment")
}

pub fn start_clients(experiment: &Path, addr: &str, names: &[&str], out: &Path) -> Proc {
    start_clients_with(experiment, addr, names, out, &[])
}

/// [`start_clients`] with more arguments.
pub fn start_clients_with(
    experiment: &Path,
    addr: &str,
    names: &[&str],
    out: &Path,
    extra: &[&str],
) -> Proc {
    let mut cmd = flint();
    cmd.args(["client", "--server", addr, "--experiment"])
        .arg(experiment)
        .arg("--out")
        .arg(out)
        .args(extra);
    for n in names {
        cmd.args(["--name", n]);
    }
    let log = std::fs::File::create(out.join(format!("{}.log", names[0]))).unwrap();
    Proc(cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap())
}

/// Polls until `f` gives a value; the limit guards against a hung test.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A request that says it comes from client `id` (the `flint-client-id` header), with no
/// token: what a stranger making up client ids sends.
pub fn as_made_up_client<T>(id: u32, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("flint-client-id", id.to_string().parse().unwrap());
    r
}

/// Ends the metrics linger of `flint run`'s server in `run_dir` (SIGTERM: it stops at once), so
/// that a test need not wait it out.
pub fn end_metrics_linger(run_dir: &Path) {
    let status = Command::new("pkill")
        .args(["-TERM", "-f"])
        .arg(format!(
            "server --reflection --listen 127.0.0.1:0 --experiment {}",
            run_dir.display()
        ))
        .status()
        .expect("pkill runs (procps)");
    assert!(
        status.success(),
        "no server of {} to signal",
        run_dir.display()
    );
}

/// One scrape of the metrics of `flint run`'s server in `run_dir` (its `metrics.addr`).
pub fn scrape_metrics(run_dir: &Path) -> String {
    let addr = std::fs::read_to_string(run_dir.join("metrics.addr")).unwrap();
    ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap()
}

/// A free loopback port (for a program that must be told its port, as Prometheus must).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus instant query at `api` (`http://…/api/v1`): each series' labels, sample time and
/// value; nothing while Prometheus does not answer yet.
pub fn prometheus_query(
    api: &str,
    q: &str,
) -> Vec<(std::collections::BTreeMap<String, String>, f64, f64)> {
    let Ok(response) = ureq::get(&format!("{api}/query")).query("query", q).call() else {
        return Vec::new();
    };
    let body: serde_json::Value = serde_json::from_str(&response.into_string().unwrap()).unwrap();
    assert_eq!(body["status"], "success", "{body}");
    body["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels = serde_json::from_value(r["metric"].clone()).unwrap();
            let at = r["value"][0].as_f64().unwrap();
            let value = r["value"][1].as_str().unwrap().parse().unwrap();
            (labels, at, value)
        })
        .collect()
}

/// The value of the one series a query picks.
pub fn prometheus_value(api: &str, q: &str) -> f64 {
    let found = prometheus_query(api, q);
    assert_eq!(found.len(), 1, "{q}: {found:?}");
    found[0].2
}

/// A CSV line's fields (RFC 4180 quoting), as `flint grid` writes them.
pub fn csv_fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut chars) =
        (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}
