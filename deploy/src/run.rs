//! `flint run`: the server and the clients as real OS processes on loopback, progress while it
//! runs, and the run directory afterwards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flint_common::config::{Experiment, LinkProfile, parse_override};
use flint_common::text::count;
use flint_common::wire::ledger::Flow;
use flint_server::results::Status;
use flint_shell::tls::Pki;

use crate::lines::{Lines, by_line, client_links, start_relays};

mod enrollment;
use crate::report::{kb, levels};
use enrollment::OwnEnrollment;

/// Built in, so `flint run` works from any directory.
const QUICKSTART: &str = include_str!("../../experiments/quickstart.toml");
const QUICKSTART_PATH: &str = "experiments/quickstart.toml";

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Experiment file [default: experiments/quickstart.toml, or its built-in copy].
    pub experiment: Option<PathBuf>,
    /// Clients hosted by one client process (each keeps its own connection) [default: 1, or
    /// as many as keep the run within 256 processes].
    #[arg(long)]
    pub clients_per_process: Option<usize>,
    /// Data directory [default: $FLINT_DATA_DIR or ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Where run directories go.
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
    /// Override an experiment key, e.g. --set rounds=3 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override)]
    pub overrides: Vec<(String, String)>,
    /// Plaintext on loopback instead of mutual TLS. By default the run generates a throwaway
    /// PKI in its directory (pki/) and each client process presents its client's certificate
    /// (the pool certificate when it hosts several).
    #[arg(long)]
    pub insecure: bool,
    /// Put every client behind its own emulated link (`lan`, `wan`, `mobile`: bandwidth and
    /// delay, in user space; see `flint link`), to see what a round costs on such a line; it
    /// stands for the experiment's `[links]` and `[[clients]] link`.
    #[arg(long, value_name = "PROFILE")]
    pub link: Option<LinkProfile>,
    #[command(flatten)]
    pub metrics: flint_server::exporter::MetricsOptions,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    keep_previous(&args.runs_dir.join(load(&args, &data_dir(&args))?.name))?;
    let dir = execute(&args, true)?;
    crate::report::print_tables(&dir, false)
}

/// A finished run already in `dir` is moved aside, to `runs/<its run id>`, rather than
/// overwritten: running an experiment again never loses the last one.
fn keep_previous(dir: &Path) -> anyhow::Result<()> {
    let Ok(bytes) = std::fs::read(dir.join("results.json")) else {
        return Ok(());
    };
    let Ok(previous) = flint_server::results::RunResults::read(&bytes) else {
        return Ok(());
    };
    let aside = dir.with_file_name(&previous.run_id);
    if previous.run_id.is_empty() || aside.exists() {
        return Ok(());
    }
    std::fs::rename(dir, &aside)
        .with_context(|| format!("cannot move the previous run aside to {}", aside.display()))?;
    println!("flint run: the previous run is kept in {}", aside.display());
    Ok(())
}

/// Runs one experiment to its end and returns its run directory; `progress` prints rounds as
/// they close.
pub fn execute(args: &RunArgs, progress: bool) -> anyhow::Result<PathBuf> {
    let data_dir = data_dir(args);
    let experiment = load(args, &data_dir)?;
    let per_process = clients_per_process(args.clients_per_process, experiment.clients.len())?;
    let data_hashes = check_data(&experiment, &data_dir)?;
    let run = RunDir::prepare(&args.runs_dir, &experiment)?;
    let say = |line: String| {
        if progress {
            println!("{line}");
        }
    };
    announce(&experiment, &run.dir, &say);
    let links = client_links(args.link, &experiment, &say);
    let names: Vec<String> = experiment.clients.iter().map(|c| c.name.clone()).collect();
    let pki = match !args.insecure {
        true => Some(flint_shell::tls::generate_pki(
            &run.dir.join("pki"),
            &["localhost".to_string(), "127.0.0.1".to_string()],
            &names,
            per_process > 1,
            7,
        )?),
        false => None,
    };
    // A process that names no slot by its certificate (plaintext, or the pool certificate of
    // several clients) enrolls with a secret the run issued.
    let enrollment = match args.insecure || per_process > 1 {
        true => Some(OwnEnrollment::issue(&run.dir.join("enroll"), &names)?),
        false => None,
    };
    if crate::stop::requested() {
        bail!("stopped by a signal before any process started");
    }
    let started = Instant::now();
    let (mut server, addr) = spawn_server(
        &run,
        &data_dir,
        pki.as_ref(),
        enrollment.as_ref(),
        &args.metrics,
    )?;
    // Clients reach the server through their emulated line's relay, where they have one.
    let relays = match start_relays(&links, &addr) {
        Ok(r) => r,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
    };
    let clients = ClientLaunch {
        run: &run,
        data_dir: &data_dir,
        pki: pki.as_ref(),
        enrollment: enrollment.as_ref(),
        per_process,
    };
    let groups = by_line(&names, &links, &relays, &addr);
    let mut clients = match clients.spawn(&groups, &say) {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
    };
    let status = match watch(&run.dir, &mut server, &mut clients, &experiment, progress) {
        Ok(s) => s,
        Err(e) => {
            kill_all(&mut clients);
            return Err(e);
        }
    };
    let failed = reap(&mut clients, Duration::from_secs(30));
    if !status.success() {
        bail!(
            "server exited with {status}; see {}",
            run.dir.join("server.log").display()
        );
    }
    let lines = Lines::of(args.link, &links, &relays);
    merge_client_ledgers(&run.dir, &data_hashes, lines)?;
    say(format!(
        "done in {:.1} s\n",
        started.elapsed().as_secs_f64()
    ));
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(run.dir)
}

/// Checks the data before any process starts and returns the sha256 of each file the clients
/// will read, for the results' provenance. A table is read here once, so that a mistake in it
/// stops the run with the file's own error rather than a client's log.
fn check_data(
    experiment: &Experiment,
    data_dir: &Path,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    experiment.data.check_files(data_dir)?;
    if experiment.data.is_images() {
        // The same draw every client process makes, before any starts.
        flint_common::clients::check_image_shards(experiment, data_dir)?;
    }
    if !experiment.data.is_images() {
        let table = experiment.data.load(data_dir, experiment.seed)?;
        flint_common::clients::check_table_shards(experiment, &table)?;
        if let Some(flint_common::data::TableBits::Fixed(t)) = &experiment.data.table_bits
            && t.cuts.len() != table.features
        {
            bail!(
                "data.cuts has {} lists, but {} has {} features",
                t.cuts.len(),
                experiment
                    .data
                    .files()
                    .first()
                    .map_or("the data".into(), |f| f.display().to_string()),
                table.features
            );
        }
    }
    let hashes = experiment
        .data
        .files()
        .into_iter()
        .map(|f| {
            let hash = flint_common::data::registry::sha256(&data_dir.join(&f))?;
            Ok((f.display().to_string(), hash))
        })
        .collect::<flint_common::Result<_>>()?;
    Ok(hashes)
}

/// A run's directory, cleared of an earlier run's files, with the resolved experiment that the
/// server and the clients read (overrides included).
struct RunDir {
    dir: PathBuf,
    clients_dir: PathBuf,
    resolved: PathBuf,
    exe: PathBuf,
}

impl RunDir {
    /// A command of this very binary (see [`own_executable`]), named `flint` in process lists.
    fn flint(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&self.exe);
        cmd.arg0("flint");
        cmd
    }

    fn prepare(runs_dir: &Path, experiment: &Experiment) -> anyhow::Result<RunDir> {
        let dir = runs_dir.join(&experiment.name);
        let clients_dir = dir.join("clients");
        std::fs::create_dir_all(&clients_dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        for stale in [
            "results.json",
            "rounds.csv",
            "status.json",
            "server.addr",
            flint_server::METRICS_ADDR_FILE,
        ] {
            let _ = std::fs::remove_file(dir.join(stale));
        }
        // `flint run` starts the experiment over: an earlier run's journal would resume it.
        let _ = std::fs::remove_dir_all(dir.join("state"));
        let _ = std::fs::remove_dir_all(dir.join("enroll"));
        let _ = std::fs::remove_dir_all(dir.join("models"));
        let _ = std::fs::remove_dir_all(clients_dir.join("models"));
        for entry in std::fs::read_dir(&clients_dir)?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        let resolved = dir.join("experiment.resolved.toml");
        std::fs::write(&resolved, experiment.to_toml())?;
        let exe = own_executable()?;
        Ok(RunDir {
            dir,
            clients_dir,
            resolved,
            exe,
        })
    }
}

/// The running binary, for the server and client processes: on Linux `/proc/self/exe`, which
/// still opens the binary this process runs after a rebuild replaced its file (a long grid
/// would otherwise fail every later run), elsewhere its path.
fn own_executable() -> anyhow::Result<PathBuf> {
    let proc = PathBuf::from("/proc/self/exe");
    if proc.exists() {
        return Ok(proc);
    }
    std::env::current_exe().context("cannot find the flint executable")
}

fn announce(experiment: &Experiment, dir: &Path, say: &impl Fn(String)) {
    say(format!(
        "flint run {}: {} on {}, {}, seed {} -> {}",
        experiment.name,
        experiment.strategy.name(),
        count(experiment.clients.len() as u64, "client"),
        count(experiment.policy.rounds, "round"),
        experiment.seed,
        dir.display()
    ));
    if let Some(header) = experiment.header_from_data {
        let read = match header {
            true => "a header (a feature cell is not a number)",
            false => "data (its feature cells are numbers)",
        };
        say(format!("  data.header not given: line 1 is {read}"));
    }
    if experiment.classes_from_data {
        say(format!(
            "  classes read from the data: {:?}",
            experiment.data.classes()
        ));
        if let Some(warning) = flint_common::data::csv::label_warning(&experiment.data.classes()) {
            say(format!("  warning: {warning}"));
        }
    }
    for w in experiment.warnings_before_the_run() {
        say(format!("  warning: {}", w.message));
    }
}

/// The server process on a loopback port, and the address it listens on once it is ready.
fn spawn_server(
    run: &RunDir,
    data_dir: &Path,
    pki: Option<&Pki>,
    enrollment: Option<&OwnEnrollment>,
    metrics: &flint_server::exporter::MetricsOptions,
) -> anyhow::Result<(Child, String)> {
    let ready = run.dir.join("server.addr");
    let mut server = run.flint();
    server
        .args([
            "server",
            "--reflection",
            "--listen",
            "127.0.0.1:0",
            "--experiment",
        ])
        .arg(&run.resolved)
        // A server that holds images (FLIS) reads them where the clients do.
        .arg("--data-dir")
        .arg(data_dir);
    if let Some(p) = pki {
        server
            .arg("--tls-cert")
            .arg(p.server_cert())
            .arg("--tls-key")
            .arg(p.server_key())
            .arg("--tls-client-ca")
            .arg(p.ca_cert());
    }
    if let Some(e) = enrollment {
        server.arg("--enrollment").arg(e.hashes());
    }
    // Only what this run asks for: a grid's runs must not all bind a listener the environment
    // names.
    server
        .env_remove("FLINT_METRICS_LISTEN")
        .env_remove("FLINT_METRICS_LINGER");
    if let Some(addr) = metrics.metrics_listen {
        server
            .arg("--metrics-listen")
            .arg(addr.to_string())
            .arg("--metrics-linger")
            .arg(metrics.metrics_linger.to_string());
    }
    let mut server = server
        .arg("--out")
        .arg(&run.dir)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(log_file(&run.dir.join("server.log"))?)
        .spawn()
        .context("cannot start the server process")?;
    match wait_for_file(&ready, &mut server, Duration::from_secs(30)) {
        Ok(addr) => Ok((server, addr)),
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            Err(e.context(format!(
                "server did not start; see {}",
                run.dir.join("server.log").display()
            )))
        }
    }
}

/// The most client processes `flint run` starts; more clients share processes.
const MAX_CLIENT_PROCESSES: usize = 256;

/// Clients per process: as asked, within [`MAX_CLIENT_PROCESSES`]; unset, one each until the
/// limit, then as few per process as keep within it.
fn clients_per_process(asked: Option<usize>, clients: usize) -> anyhow::Result<usize> {
    let least = clients.div_ceil(MAX_CLIENT_PROCESSES).max(1);
    match asked {
        None => Ok(least),
        Some(0) => bail!("--clients-per-process must be at least 1"),
        Some(n) if n < least => bail!(
            "{clients} clients at {n} per process would start {} processes; flint run starts at most {MAX_CLIENT_PROCESSES}: give --clients-per-process {least} or more",
            clients.div_ceil(n)
        ),
        Some(n) => Ok(n),
    }
}

/// A client process that has already exited with an error, as the run's error.
fn first_failure(started: &mut [(String, Child)]) -> anyhow::Result<()> {
    for (log, child) in started.iter_mut() {
        if let Some(s) = child.try_wait()?
            && !s.success()
        {
            let last = std::fs::read_to_string(&*log)
                .ok()
                .and_then(|t| t.lines().last().map(str::to_string))
                .unwrap_or_default();
            bail!("a client process exited with {s}: {last}\nsee {log}");
        }
    }
    Ok(())
}

fn kill_all(clients: &mut [(String, Child)]) {
    for (_, child) in clients {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// How the client processes are started.
struct ClientLaunch<'a> {
    run: &'a RunDir,
    data_dir: &'a Path,
    pki: Option<&'a Pki>,
    enrollment: Option<&'a OwnEnrollment>,
    per_process: usize,
}

impl ClientLaunch<'_> {
    /// One process per `per_process` clients of a group (those reaching the server at one
    /// address), each with its log; the processes share the cores, each training as many
    /// clients at once as its share.
    fn spawn(
        &self,
        groups: &[(String, Vec<String>)],
        say: &impl Fn(String),
    ) -> anyhow::Result<Vec<(String, Child)>> {
        let cores = flint_common::parallel::cores();
        let processes: usize = groups
            .iter()
            .map(|(_, names)| names.len().div_ceil(self.per_process))
            .sum();
        let train_threads = (cores / processes).max(1);
        if processes > 4 * cores {
            let clients: usize = groups.iter().map(|(_, n)| n.len()).sum();
            say(format!(
                "  {processes} client processes on {cores} cores; --clients-per-process {} would load the data once per core",
                clients.div_ceil(cores)
            ));
        }
        let chunks = groups.iter().flat_map(|(addr, names)| {
            names
                .chunks(self.per_process)
                .map(move |group| (addr.as_str(), group))
        });
        let mut started = Vec::with_capacity(processes);
        for (k, (addr, group)) in chunks.enumerate() {
            let stopped = if crate::stop::requested() {
                Err(anyhow::anyhow!(
                    "stopped by a signal while the clients were starting; the server and the {} client processes started were stopped too",
                    started.len()
                ))
            } else if k % 16 == 15 {
                first_failure(&mut started)
            } else {
                Ok(())
            };
            let spawned = stopped.and_then(|()| self.spawn_one(group, addr, train_threads));
            match spawned {
                Ok(child) => started.push(child),
                Err(e) => {
                    kill_all(&mut started);
                    return Err(e);
                }
            }
        }
        first_failure(&mut started).inspect_err(|_| kill_all(&mut started))?;
        Ok(started)
    }

    fn spawn_one(
        &self,
        group: &[String],
        addr: &str,
        train_threads: usize,
    ) -> anyhow::Result<(String, Child)> {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        let mut cmd = self.run.flint();
        cmd.arg("client")
            .arg("--server")
            .arg(format!("{scheme}://{addr}"))
            .arg("--experiment")
            .arg(&self.run.resolved)
            .arg("--data-dir")
            .arg(self.data_dir)
            .arg("--out")
            .arg(&self.run.clients_dir)
            .arg("--train-threads")
            .arg(train_threads.to_string())
            .arg("--fail-fast");
        for n in group {
            cmd.arg("--name").arg(n);
        }
        if let Some(p) = self.pki {
            let (cert, key) = p.client(if group.len() == 1 { &group[0] } else { "pool" });
            cmd.arg("--tls-ca")
                .arg(p.ca_cert())
                .arg("--tls-cert")
                .arg(cert)
                .arg("--tls-key")
                .arg(key);
        }
        if let Some(e) = self.enrollment {
            cmd.arg("--enroll-dir").arg(e.folder_for(group)?);
        }
        let log = self.run.clients_dir.join(format!("{}.log", group[0]));
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log_file(&log)?)
            .spawn()
            .context("cannot start a client process")?;
        Ok((log.display().to_string(), child))
    }
}

/// Waits up to `grace` for the client processes after the server ended; one still running is
/// killed. Returns what went wrong, one line per process.
fn reap(clients: &mut [(String, Child)], grace: Duration) -> Vec<String> {
    let deadline = Instant::now() + grace;
    let mut failed = Vec::new();
    for (log, child) in clients {
        match wait_until(child, deadline) {
            Some(s) if s.success() => {}
            Some(s) => failed.push(format!("client process exited with {s}; see {log}")),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                failed.push(format!(
                    "client process still running after the server ended; killed; see {log}"
                ));
            }
        }
    }
    failed
}

fn data_dir(args: &RunArgs) -> PathBuf {
    args.data_dir
        .clone()
        .unwrap_or_else(flint_common::data::default_data_dir)
}

fn load(args: &RunArgs, data_dir: &Path) -> anyhow::Result<Experiment> {
    let from = |p: &Path| Experiment::load_with_data(p, &args.overrides, data_dir);
    match &args.experiment {
        Some(p) => Ok(from(p)?),
        None if Path::new(QUICKSTART_PATH).exists() => Ok(from(Path::new(QUICKSTART_PATH))?),
        None => {
            let tmp =
                std::env::temp_dir().join(format!("flint-quickstart-{}.toml", std::process::id()));
            std::fs::write(&tmp, QUICKSTART)?;
            let e = from(&tmp);
            let _ = std::fs::remove_file(&tmp);
            Ok(e?)
        }
    }
}

fn log_file(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
}

fn wait_for_file(path: &Path, child: &mut Child, limit: Duration) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.is_empty()
        {
            return Ok(s.trim().to_string());
        }
        if let Some(status) = child.try_wait()? {
            bail!("server exited with {status} before listening");
        }
        if start.elapsed() > limit {
            bail!("server not listening after {} s", limit.as_secs());
        }
        if crate::stop::requested() {
            bail!("stopped by a signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline || crate::stop::requested() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Prints progress from status.json until the server exits. A client process that fails ends
/// the run (the server would otherwise wait for it until its timeouts).
fn watch(
    dir: &Path,
    server: &mut Child,
    clients: &mut [(String, Child)],
    e: &Experiment,
    progress: bool,
) -> anyhow::Result<std::process::ExitStatus> {
    let path = dir.join("status.json");
    let mut live = LiveLines::new(dir.join("clients"), e.policy.rounds);
    let mut lingering = false;
    loop {
        // A finished run whose server keeps its metrics up (--metrics-linger) is complete: a
        // signal then ends only the linger, and the run is reported as usual.
        if crate::stop::requested() && !lingering && dir.join("results.json").exists() {
            lingering = true;
            // SAFETY: kill(2) on our own child's pid, which it keeps until we reap it.
            unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
        }
        if crate::stop::requested() && !lingering {
            let _ = server.kill();
            let _ = server.wait();
            bail!("stopped by a signal; the server and its clients were stopped too");
        }
        let exited = server.try_wait()?;
        if exited.is_none()
            && let Err(e) = first_failure(clients)
        {
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
        if progress && let Some(s) = read_status(&path) {
            live.show(&s, exited.is_some());
        }
        if let Some(s) = exited {
            if progress {
                live.finish(&path);
            }
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `flint run`'s live lines: joins, updates of a long round, and each closed round.
struct LiveLines {
    clients_dir: PathBuf,
    rounds: u32,
    started: Instant,
    joined: usize,
    printed: u32,
    /// Long rounds (many clients, many local epochs) show their updates as they arrive, at
    /// most every 10 s.
    shown_updates: (u32, usize),
    last_updates_line: Instant,
    /// When each closed round not yet printed was first seen closed: each waits for the
    /// clients' progress files from then, not from the line before it.
    closed_at: std::collections::BTreeMap<u32, Instant>,
    /// The server has exited and the grace is over: no round waits any longer.
    no_wait: bool,
}

impl LiveLines {
    fn new(clients_dir: PathBuf, rounds: u32) -> Self {
        LiveLines {
            clients_dir,
            rounds,
            started: Instant::now(),
            joined: 0,
            printed: 0,
            shown_updates: (0, 0),
            last_updates_line: Instant::now(),
            closed_at: std::collections::BTreeMap::new(),
            no_wait: false,
        }
    }

    fn show(&mut self, s: &Status, server_exited: bool) {
        if s.joined != self.joined {
            self.joined = s.joined;
            println!("  clients joined {}/{}", s.joined, s.clients);
        }
        self.show_updates(s);
        for r in self.printed + 1..=s.closed_rounds {
            self.closed_at.entry(r).or_insert_with(Instant::now);
        }
        // A round is printed once every joined client reported on it, or the run moved on.
        while self.printed < s.closed_rounds {
            let r = self.printed + 1;
            let Some(&(n, acc, f1)) = s.evals.get(&r) else {
                break;
            };
            if n < s.joined && !(s.finished && server_exited) && r == s.closed_rounds {
                break;
            }
            let Some((b, counted_by)) = self.round_bytes(s, r, server_exited) else {
                break;
            };
            println!(
                "  round {r:>3}/{}  clients {n}  accuracy {acc:.4}  f1 {f1:.4}  up {}  down {}  (payload / message / {counted_by} socket)",
                self.rounds,
                levels(&b.up, kb),
                levels(&b.down, kb),
            );
            self.printed = r;
            self.closed_at.remove(&r);
        }
    }

    /// The rounds still held for the clients' progress files once the server has exited:
    /// they wait out their grace, then print with the server's count.
    fn finish(&mut self, status: &Path) {
        let deadline = Instant::now() + PROGRESS_FILE_GRACE + Duration::from_secs(1);
        loop {
            let Some(s) = read_status(status) else {
                return;
            };
            self.no_wait = Instant::now() >= deadline;
            self.show(&s, true);
            if self.printed >= s.closed_rounds || self.no_wait {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn show_updates(&mut self, s: &Status) {
        let Some(r) = s.open_round else {
            return;
        };
        if (r, s.updates) == self.shown_updates
            || s.updates == 0
            || s.updates >= s.waiting_for
            || self.last_updates_line.elapsed() < Duration::from_secs(10)
        {
            return;
        }
        println!(
            "  round {r:>3}/{}  updates {}/{}  ({:.0} s)",
            self.rounds,
            s.updates,
            s.waiting_for,
            self.started.elapsed().as_secs_f64()
        );
        self.shown_updates = (r, s.updates);
        self.last_updates_line = Instant::now();
    }

    /// Round `r`'s bytes with the socket level as the clients counted it, exact per round once
    /// each has reported on it; the server's own count lags behind its attribution. A client
    /// books its progress just after its report is answered, so the line waits a moment
    /// for the files (`None`) before it falls back to the server's count.
    ///
    /// The run's last round is the server's count once it has exited, as the run's table
    /// shows it: its attribution of the round's last reply waits for the clients' closing
    /// calls.
    fn round_bytes(&self, s: &Status, r: u32, server_exited: bool) -> Option<(Flow, &'static str)> {
        let mut b = s.bytes.get(&r).copied().unwrap_or_default();
        if r == self.rounds {
            return server_exited.then_some((b, "server's"));
        }
        let waited = self
            .closed_at
            .get(&r)
            .map_or(Duration::MAX, Instant::elapsed);
        match client_socket_bytes(&self.clients_dir, r, s.joined) {
            Some((up, down)) => {
                (b.up.socket, b.down.socket) = (up, down);
                Some((b, "clients'"))
            }
            None if waited < PROGRESS_FILE_GRACE && !self.no_wait => None,
            None => Some((b, "server's")),
        }
    }
}

/// How long a closed round's live line waits for every client's progress file.
const PROGRESS_FILE_GRACE: Duration = Duration::from_secs(5);

/// Round `round`'s socket bytes summed over the clients' progress files (one per client
/// process, `process-<id>.progress`), up and down; `None` unless all `clients` have written
/// theirs for that round.
fn client_socket_bytes(dir: &Path, round: u32, clients: usize) -> Option<(u64, u64)> {
    let mut found = 0;
    let (mut up, mut down) = (0, 0);
    for file in flint_client::progress::read_all(dir) {
        for (u, d) in file.clients.values().filter_map(|r| r.get(&round)) {
            found += 1;
            up += u;
            down += d;
        }
    }
    (found == clients).then_some((up, down))
}

fn read_status(path: &Path) -> Option<Status> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Adds each client's own ledger and training times (clients/client-<name>.json) to
/// results.json.
fn merge_client_ledgers(
    dir: &Path,
    data_files: &std::collections::BTreeMap<String, String>,
    lines: Lines,
) -> anyhow::Result<()> {
    // The progress files said what the clients' reports now say in full.
    if let Ok(entries) = std::fs::read_dir(dir.join("clients")) {
        for entry in entries.flatten() {
            if entry
                .path()
                .extension()
                .is_some_and(|x| x == flint_client::progress::EXTENSION)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    // The clients' models, to where a researcher looks for them.
    let kept = dir.join("clients").join("models");
    if kept.is_dir() {
        let models = dir.join("models");
        let _ = std::fs::remove_dir_all(&models);
        std::fs::rename(&kept, &models)
            .with_context(|| format!("cannot move {} to {}", kept.display(), models.display()))?;
    }
    let path = dir.join("results.json");
    let mut results = crate::report::load(dir)?;
    if let Some(p) = &mut results.provenance {
        p.data_files = data_files.clone();
        p.emulated_link = lines.every;
        p.emulated_links = lines.by_profile;
    }
    results.client_links = lines.clients;
    std::fs::write(&path, serde_json::to_vec_pretty(&results)?)?;
    std::fs::write(
        dir.join("rounds.csv"),
        flint_server::results::rounds_csv(&results),
    )?;
    if let Err(e) = crate::plot::run_plots(dir, &results) {
        eprintln!("flint run: no plots: {e:#}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One client per process up to the limit, then grouped to fit; a number
    /// asked for that would pass the limit is refused with the least that fits.
    #[test]
    fn clients_per_process_keeps_a_run_within_the_process_limit() {
        assert_eq!(clients_per_process(None, 4).unwrap(), 1);
        assert_eq!(clients_per_process(None, MAX_CLIENT_PROCESSES).unwrap(), 1);
        assert_eq!(clients_per_process(None, 1000).unwrap(), 4);
        assert_eq!(clients_per_process(None, 100_000).unwrap(), 391);
        assert_eq!(clients_per_process(Some(100), 1000).unwrap(), 100);
        let err = clients_per_process(Some(1), 1000).unwrap_err().to_string();
        assert!(
            err.contains("would start 1000 processes")
                && err.contains("give --clients-per-process 4 or more"),
            "{err}"
        );
        assert!(clients_per_process(Some(0), 4).is_err());
    }
}
