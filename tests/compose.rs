//! The docker-compose federation end to end: the image built from
//! nothing, one server and four client containers over mutual TLS on a private network. The
//! documented command runs the default experiment to its end twice with the same figures; with
//! one client container killed mid-run, an experiment that goes on without it completes and
//! every client that ran to the end counted all four byte levels. Everything the tests started
//! is torn down, whatever happens.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use flint_client::ClientReport;
use flint_common::wire::ledger::Flow;
use flint_server::results::RunResults;
use support::*;

const IMAGE: &str = "flint:test";
const PROMETHEUS_IMAGE: &str = "flint-prometheus:test";

/// One federation at a time: two on two cores would time each other out.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn build_image() {
    ok(Command::new("bash")
        .arg(repo().join("deploy/build-image.sh"))
        .arg(IMAGE));
}

fn build_prometheus_image() {
    ok(Command::new("bash")
        .arg(repo().join("deploy/build-prometheus-image.sh"))
        .arg(PROMETHEUS_IMAGE));
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A user and group of no account, as the image's own.
const NOBODY: u32 = 65532;

/// `docker-compose` for this test's project; `down -v` when dropped.
struct Federation {
    project: String,
    results: tempfile::TempDir,
    /// The experiment file, where not the compose file's default.
    experiment: Option<PathBuf>,
    /// The host port of the `monitoring` profile's Prometheus, where it runs.
    prometheus: Option<u16>,
    /// The user the containers run as (FLINT_UID and FLINT_GID), where not this test's.
    user: Option<u32>,
}

impl Federation {
    fn new(name: &str, experiment: Option<PathBuf>) -> Federation {
        Federation {
            project: format!("flinttest{name}{}", std::process::id()),
            results: tempfile::tempdir().unwrap(),
            experiment,
            prometheus: None,
            user: None,
        }
    }

    /// Run as `uid` (group the same), in a results directory that user owns: the image's own
    /// user is not root, and compose-run.sh runs the containers as the invoking user.
    fn run_as(mut self, uid: u32) -> Federation {
        std::os::unix::fs::chown(self.results.path(), Some(uid), Some(uid)).unwrap();
        self.user = Some(uid);
        self
    }

    /// With the `monitoring` profile: a Prometheus scraping the server, on a free host port.
    fn monitored(mut self) -> Federation {
        self.prometheus = Some(free_port());
        self
    }

    fn prometheus_api(&self) -> String {
        let port = self.prometheus.expect("a monitored federation");
        format!("http://127.0.0.1:{port}/api/v1")
    }

    fn env(&self, cmd: &mut Command) {
        cmd.current_dir(repo())
            .env("FLINT_IMAGE", IMAGE)
            .env("FLINT_RESULTS", self.results.path());
        if let Some(e) = &self.experiment {
            cmd.env("FLINT_EXPERIMENT", e);
        }
        if let Some(uid) = self.user {
            cmd.env("FLINT_UID", uid.to_string())
                .env("FLINT_GID", uid.to_string());
        }
        if let Some(port) = self.prometheus {
            cmd.env("FLINT_PROMETHEUS_PORT", port.to_string())
                .env("FLINT_PROMETHEUS_IMAGE", PROMETHEUS_IMAGE);
        }
    }

    /// The profiles this federation runs with, as docker-compose options.
    fn profiles(&self) -> &'static [&'static str] {
        match self.prometheus {
            Some(_) => &["--profile", "monitoring"],
            None => &[],
        }
    }

    fn compose(&self) -> Command {
        let mut cmd = Command::new("docker-compose");
        self.env(&mut cmd);
        cmd.args(["-p", &self.project, "-f", "deploy/docker-compose.yml"])
            .args(self.profiles());
        cmd
    }

    /// The documented command: to the end, with the server's status and what it printed.
    /// With `crash_after`, the server's process is killed (SIGKILL from the host: a crash, not
    /// an API stop) once that many rounds have closed; Docker restarts it and it resumes.
    fn run_to_the_end(&self, crash_after: Option<u32>) -> (std::process::ExitStatus, String) {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new("bash");
        self.env(&mut cmd);
        cmd.arg("deploy/compose-run.sh")
            .args(["-p", &self.project])
            .args(self.profiles())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap());
        let mut run = Proc(cmd.spawn().unwrap());
        if let Some(round) = crash_after {
            wait_for(Duration::from_secs(300), || {
                status(self.results.path()).filter(|s| s.closed_rounds >= round)
            });
            let server = self.containers("server").remove(0);
            // 0 while the container is not running: `kill -9 0` would hit this test's own group.
            let pid = wait_for(Duration::from_secs(60), || {
                Some(inspect(&server, "{{.State.Pid}}")).filter(|p| p != "0")
            });
            ok(Command::new("kill").args(["-9", &pid]));
        }
        let exit = run.wait(Duration::from_secs(900));
        (
            exit,
            std::fs::read_to_string(log.path()).unwrap_or_default(),
        )
    }

    fn containers(&self, service: &str) -> Vec<String> {
        let out = ok(self.compose().args(["ps", "-q", service]));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for Federation {
    fn drop(&mut self) {
        let _ = self
            .compose()
            .args(["down", "-v", "--remove-orphans", "-t", "2"])
            .output();
    }
}

fn inspect(container: &str, format: &str) -> String {
    let out = ok(Command::new("docker").args(["inspect", "-f", format, container]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
#[ignore = "needs Docker and docker-compose; CI runs it"]
fn a_compose_federation_over_mutual_tls_survives_a_killed_client() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    build_image();
    // The default experiment waits for every client; this one goes on without a lost one,
    // each later round after its 3 s timeout.
    let experiments = tempfile::tempdir().unwrap();
    let default = std::fs::read_to_string(repo().join("experiments/compose.toml")).unwrap();
    let experiment = experiments.path().join("compose-fault.toml");
    std::fs::write(
        &experiment,
        format!(
            "{}\n[server]\nmin_updates = 2\nround_timeout_secs = 3\neval_timeout_secs = 3\n",
            default.replace("name = \"compose\"", "name = \"compose-fault\"")
        ),
    )
    .unwrap();
    let fed = Federation::new("fault", Some(experiment));
    let dir = fed.results.path();
    ok(fed.compose().args(["up", "-d"]));

    // Round 2 closed: kill one client container.
    wait_for(Duration::from_secs(180), || {
        status(dir).filter(|s| s.closed_rounds >= 2)
    });
    let clients = fed.containers("client");
    assert_eq!(clients.len(), 4, "four client containers");
    let victim = &clients[0];
    let victim_host = inspect(victim, "{{.Config.Hostname}}");
    ok(Command::new("docker").args(["kill", victim]));

    let server = fed.containers("server").remove(0);
    wait_for(Duration::from_secs(300), || {
        (inspect(&server, "{{.State.Status}}") == "exited").then_some(())
    });
    assert_eq!(inspect(&server, "{{.State.ExitCode}}"), "0");

    let r = results(dir);
    assert_eq!(r.rounds.len(), 11, "join round and ten rounds");
    let killed = r
        .clients
        .iter()
        .find(|c| c.host == victim_host)
        .expect("results record which container held which slot");
    assert_eq!(r.clients.len(), 4);
    for c in &r.clients {
        assert_eq!(c.certificate.as_deref(), Some("*"), "pool certificate");
    }
    let last = r.rounds.last().unwrap();
    assert!(!last.participants.contains(&killed.id));
    assert_eq!(last.participants.len(), 3, "the others went on");

    // The three that finished wrote their ledgers: all four levels, per round and direction.
    let mut reports = 0;
    for entry in std::fs::read_dir(dir.join("clients")).unwrap().flatten() {
        let p = entry.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let c: ClientReport = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_ne!(c.client_id, killed.id);
        assert_eq!(c.link_interfaces, ["eth0"]);
        reports += 1;
        let rounds = c.ledger.flows[&c.client_id].iter();
        let closing = ("closing".to_string(), &c.ledger.closing[&c.client_id]);
        for (round, f) in rounds.map(|(r, f)| (r.to_string(), f)).chain([closing]) {
            for (what, t) in [("up", &f.up), ("down", &f.down)] {
                let at = format!("client {} round {round} {what}", c.client_id);
                // The last report's answer, an empty Ack, is the closing's one message down.
                assert!(t.payload > 0 || round == "closing", "{at}: payload");
                assert!(t.payload <= t.message, "{at}: payload ≤ message: {t:?}");
                assert!(t.message <= t.socket, "{at}: message ≤ socket: {t:?}");
                assert!(t.socket <= t.link, "{at}: socket ≤ link: {t:?}");
            }
        }
    }
    assert_eq!(reports, 3);
    let report = ok(flint().arg("report").arg(dir));
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("payload / message / socket / link"), "{text}");
}

/// The documented command runs the default experiment to its end and exits
/// with the server's status; the run completes, and a second run, whose server process crashes
/// after round 3 and is restarted by Docker, waits through the restart and gives the same
/// figures.
#[test]
#[ignore = "needs Docker and docker-compose; CI runs it"]
fn the_documented_compose_command_gives_the_same_figures_twice_even_through_a_crash() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    build_image();
    build_prometheus_image();
    let runs: Vec<_> = [("once", None), ("crash", Some(3))]
        .into_iter()
        .map(|(name, crash_after)| {
            // The first run with the `monitoring` profile: its Prometheus saw the
            // figures results.json holds.
            // The second as a user of no account: the PKI volume, the results and
            // the journal it resumes from are all written without root.
            let fed = match crash_after {
                None => Federation::new(name, None).monitored(),
                Some(_) => Federation::new(name, None).run_as(NOBODY),
            };
            let (exit, printed) = fed.run_to_the_end(crash_after);
            assert!(exit.success(), "{printed}");
            if fed.prometheus.is_some() {
                prometheus_saw_the_run(&fed, &printed);
            }
            link_level_reached_the_server(fed.results.path());
            let resumed = results(fed.results.path()).ledger.resumed;
            assert_eq!(
                resumed.len(),
                usize::from(crash_after.is_some()),
                "{resumed:?}"
            );
            if let (Some(cut), Some(after)) = (resumed.first(), crash_after) {
                // The ledger is kept before the status says a round closed.
                assert!(cut.from >= after, "{cut:?}");
            }
            if crash_after.is_some() {
                let server = fed.containers("server").remove(0);
                assert_eq!(inspect(&server, "{{.RestartCount}}"), "1", "{printed}");
            }
            if let Some(uid) = fed.user {
                use std::os::unix::fs::MetadataExt;
                for file in ["results.json", "status.json", "clients"] {
                    let owner = std::fs::metadata(fed.results.path().join(file))
                        .unwrap()
                        .uid();
                    assert_eq!(owner, uid, "{file} is the invoking user's");
                }
            }
            let r = results(fed.results.path());
            assert_eq!(r.completed, Some(true));
            assert_eq!(r.rounds.len(), 11, "join round and ten rounds");
            r
        })
        .collect();
    for (a, b) in runs[0].rounds.iter().zip(&runs[1].rounds).skip(1) {
        assert_eq!(a.participants.len(), 4, "round {}: every client", a.round);
        assert_eq!(
            a.metrics.values().collect::<Vec<_>>(),
            b.metrics.values().collect::<Vec<_>>(),
            "round {}",
            a.round
        );
    }
}

/// The monitoring profile's Prometheus, asked after the run: the server's last scrape (its
/// metrics linger after the run for it) holds results.json's rounds and bytes.
fn prometheus_saw_the_run(fed: &Federation, printed: &str) {
    let api = fed.prometheus_api();
    let r = results(fed.results.path());
    // The server is gone: its series are stale, so ask for their last values.
    let last = |q: &str| prometheus_value(&api, &format!("last_over_time({q}[30m])"));
    assert_eq!(last("flint_rounds_planned"), 10.0, "{printed}");
    assert_eq!(
        last(r#"flint_phase{phase="finished"}"#),
        1.0,
        "the last scrape came after the run ended: {printed}"
    );
    assert_eq!(
        prometheus_value(&api, "sum(last_over_time(flint_rounds_closed_total[30m]))"),
        10.0
    );
    for (level, up) in [
        ("payload", r.totals.up.payload),
        ("message", r.totals.up.message),
        ("socket", r.totals.up.socket),
    ] {
        let q = format!(r#"flint_bytes_total{{level="{level}",direction="up"}}"#);
        assert_eq!(last(&q), up as f64, "{q}");
    }
    assert!(
        printed.contains("Prometheus keeps the run's metrics"),
        "{printed}"
    );
}

/// The run's results.json holds the link level of every client and round, as the clients
/// reported it with their evaluations (through a crash too: the journal keeps the reports),
/// each round's whole: what the client's own ledger ends with. In every cell of results.json
/// (each client's round, each round's sum, the totals) payload ≤ message ≤ socket ≤ link, the
/// last round included; each client's closing, booked apart, has no link level there.
fn link_level_reached_the_server(dir: &Path) {
    let r = results(dir);
    let mut clients = 0;
    for entry in std::fs::read_dir(dir.join("clients")).unwrap().flatten() {
        let p = entry.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let c: ClientReport = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        clients += 1;
        let own = &c.ledger.flows[&c.client_id];
        let reported = &r.ledger.flows[&c.client_id];
        for round in 0..=10 {
            let (mine, theirs) = (&own[&round], &reported[&round]);
            for (what, server, client) in [
                ("up", theirs.up.link, mine.up.link),
                ("down", theirs.down.link, mine.down.link),
            ] {
                let at = format!("client {} round {round} {what}", c.client_id);
                assert!(server > 0, "{at}: no link bytes in results.json");
                assert_eq!(server, client, "{at}: reported against counted");
            }
        }
        let closing = &r.ledger.closing[&c.client_id];
        for t in [&closing.up, &closing.down] {
            let at = format!("client {}'s closing", c.client_id);
            assert!(t.messages > 0 && t.payload <= t.message, "{at}: {t:?}");
            assert!(t.message <= t.socket, "{at}: {t:?}");
            assert_eq!(t.link, 0, "{at}: no report carries it");
        }
    }
    assert_eq!(clients, 4);
    assert!(r.totals.up.link > 0 && r.totals.down.link > 0);
    every_cell_in_order(&r);
    // results.json alone, as a server host has it: flint report shows the reported level.
    let alone = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join("results.json"), alone.path().join("results.json")).unwrap();
    let out = ok(flint().arg("report").arg(alone.path()));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("Link level as the clients reported it"),
        "{printed}"
    );
}

/// payload ≤ message ≤ socket ≤ link in each client's round, each round's sum and the totals
/// of results.json; after a crash, outside the rounds results.json says the restart cut
/// (those lack what the crashed process counted, the totals too).
fn every_cell_in_order(r: &RunResults) {
    let mut cells: Vec<(String, Flow)> = Vec::new();
    if r.ledger.resumed.is_empty() {
        cells.push(("totals".into(), r.totals));
    }
    for rr in r
        .rounds
        .iter()
        .filter(|rr| !r.ledger.cut_by_restart(rr.round))
    {
        cells.push((format!("round {} sum", rr.round), rr.bytes_total));
        for (id, f) in &rr.bytes {
            cells.push((format!("round {} client {id}", rr.round), *f));
        }
    }
    for (at, f) in cells {
        for (what, t) in [("up", f.up), ("down", f.down)] {
            assert!(
                t.payload <= t.message,
                "{at} {what}: payload ≤ message: {t:?}"
            );
            assert!(
                t.message <= t.socket,
                "{at} {what}: message ≤ socket: {t:?}"
            );
            assert!(t.socket <= t.link, "{at} {what}: socket ≤ link: {t:?}");
        }
    }
}

/// One participant's kit run as a compose project of its own (its own network); `down -v` when
/// dropped.
struct Site {
    project: String,
    kit: PathBuf,
}

impl Site {
    fn new(kits: &Path, name: &str) -> Site {
        Site {
            project: format!("flintsite{}{}", name.replace('-', ""), std::process::id()),
            kit: kits.join(name),
        }
    }

    fn compose(&self) -> Command {
        let mut cmd = Command::new("docker-compose");
        cmd.current_dir(&self.kit)
            .args(["-p", &self.project, "-f", "docker-compose.yml"]);
        cmd
    }

    fn container(&self) -> String {
        let out = ok(self.compose().args(["ps", "-q"]));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.compose().args(["down", "-v", "-t", "2"]).output();
    }
}

/// `flint kit` hands each site a folder; the server's site and two client sites
/// run as three compose projects on three networks, the clients reaching the server only
/// through its published port, over mutual TLS with their own certificates.
#[test]
#[ignore = "needs Docker and docker-compose; CI runs it"]
fn two_sites_with_their_kits_reach_the_server_through_its_published_port() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    build_image();
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    ok(flint()
        .args([
            "certs",
            "--server-name",
            "flint-server",
            "--clients",
            "2",
            "--out",
        ])
        .arg(&pki));
    let exp = write(
        dir.path(),
        "sites.toml",
        "name = \"sites\"\nstrategy = \"fedavg\"\nseed = 5\nrounds = 3\nclient_count = 2\n\
         [data]\nsource = \"synthetic\"\nsamples = 800\nfeatures = 4\n",
    );
    let kits = dir.path().join("kits");
    let port = free_port();
    ok(flint()
        .args(["kit", "--pki"])
        .arg(&pki)
        .arg("--experiment")
        .arg(&exp)
        .arg("--server")
        .arg(format!("https://flint-server:{port}"))
        .arg("--out")
        .arg(&kits)
        .args(["--image", IMAGE, "--add-host", "flint-server:host-gateway"]));
    // A kit holds its own key only.
    assert!(!kits.join("client-1/server.key").exists());
    assert!(!kits.join("server/client.key").exists());

    let sites: Vec<Site> = ["server", "client-1", "client-2"]
        .iter()
        .map(|n| Site::new(&kits, n))
        .collect();
    for site in &sites {
        ok(site.compose().args(["up", "-d"]));
    }
    let server = sites[0].container();
    wait_for(Duration::from_secs(300), || {
        (inspect(&server, "{{.State.Status}}") == "exited").then_some(())
    });
    assert_eq!(inspect(&server, "{{.State.ExitCode}}"), "0");

    let networks = |c: &str| {
        inspect(
            c,
            "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
        )
    };
    let server_networks = networks(&server);
    for site in &sites[1..] {
        let client = site.container();
        for n in networks(&client).split_whitespace() {
            assert!(
                !server_networks.contains(n),
                "{n} is the server's network too"
            );
        }
    }
    let r = results(&kits.join("server/results"));
    assert_eq!(r.completed, Some(true));
    assert_eq!(r.clients.len(), 2);
    for c in &r.clients {
        assert_eq!(
            c.certificate.as_deref(),
            Some(c.name.as_str()),
            "its own certificate"
        );
        let report = kits
            .join(&c.name)
            .join(format!("results/client-{}.json", c.name));
        assert!(report.exists(), "{}", report.display());
    }
    assert!(
        r.totals.up.link > 0,
        "the sites' link level reached the server"
    );
}
