//! `flint-client`: joins a run, trains on its shard, uploads, applies downloads, evaluates and
//! reports. One process can host several clients, each with its own connection.
//!
//! Each client's loop is [`machine::Machine`], a pure state machine (the server's simulation
//! drives the same one); `driver` is the shell that performs its actions.

mod args;
pub mod core;
mod driver;
mod health;
mod identity;
pub mod machine;
pub mod progress;
mod report;
mod resume;
mod retry;
mod shell;
mod tls;
pub mod proto {
    tonic::include_proto!("flint.v1");
}

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flint_common::ClientId;
use flint_common::clients::{Prepared, prepare};
use flint_common::config::Experiment;
use flint_common::data::default_data_dir;
use flint_common::model::kept::Condition;
use flint_shell::meter::LinkMeter;
use progress::ProgressBook;
use tracing::Instrument;
use tracing::field::Empty;

pub use args::ClientArgs;
pub use health::{HealthArgs, health};
pub use identity::{AUTO, random_secret, write_private};
pub use report::ClientReport;
pub use tls::{ClientTls, NAME_PLACEHOLDER};

use args::client_names;
use identity::Enroll;
use report::write_reports;
use shell::Shell;

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
    let names = client_names(&args, &experiment)?;
    let shell = shell_for(&args, &experiment, names.len())?;
    let (mut slots, refused) = shell
        .slots(&names, args.out.as_deref(), args.fail_fast)
        .await?;
    let ids: Vec<ClientId> = slots.keys().copied().collect();
    let mut prepared = load(&experiment, data_dir, ids, args.compute_ghz).await?;
    key_the_noise(
        &mut prepared,
        args.dp_noise_key_file.as_deref(),
        experiment.seed,
    )?;
    let progress = ProgressBook::start(args.out.as_deref(), prepared.first().map(|p| p.id));
    let book = progress.as_ref().map(|(b, _)| b);
    let mut tasks = tokio::task::JoinSet::new();
    for p in prepared {
        let (_, creds, conn) = slots.remove(&p.id).expect("prepared for a slot");
        spawn_client(&mut tasks, &shell, p, creds, conn, book);
    }
    let finished = finish_all(tasks, args.fail_fast).await;
    if let Some((book, writer)) = progress {
        book.finish(writer).await;
    }
    let (reports, mut failed) = finished?;
    if let Some(out) = &args.out {
        write_reports(out, &reports)?;
    }
    failed.splice(0..0, refused);
    process_outcome(&failed, reports.is_empty())?;
    Ok(reports)
}

/// What this process's `clients` share: the server, TLS, training threads, link counters,
/// retry budget and enrollment, each checked against the arguments.
fn shell_for(
    args: &ClientArgs,
    experiment: &Arc<Experiment>,
    clients: usize,
) -> anyhow::Result<Shell> {
    let threads = match args.train_threads {
        Some(0) => bail!("--train-threads must be at least 1"),
        Some(n) => n,
        None => flint_common::parallel::cores(),
    };
    let link = match (args.link_bytes, clients) {
        (false, _) => None,
        (true, 1) => Some(Arc::new(LinkMeter::open().context(
            "--link-bytes: cannot read this network namespace's interface counters",
        )?)),
        (true, n) => bail!(
            "--link-bytes counts a whole network namespace, so it needs a process of one client, not {n}"
        ),
    };
    let enroll = match (&args.enroll_secret, &args.enroll_dir) {
        (Some(_), _) if clients > 1 => bail!(
            "--enroll-secret enrolls one client; this process hosts {clients} (give --enroll-dir)"
        ),
        (Some(s), _) => Enroll::Secret(s.trim().to_string()),
        (None, Some(dir)) => Enroll::Dir(dir.clone()),
        (None, None) => Enroll::None,
    };
    Ok(Shell {
        server: args.server.clone(),
        tls: args.tls.clone(),
        link,
        experiment: experiment.clone(),
        trainers: Arc::new(tokio::sync::Semaphore::new(threads)),
        retry_for: Duration::from_secs_f64(args.retry_secs.max(0.0)),
        out: args.out.clone(),
        enroll,
        handshakes: Arc::new(tokio::sync::Semaphore::new(shell::HANDSHAKES)),
        joins: Arc::new(tokio::sync::Semaphore::new(shell::JOINS)),
    })
}

/// With `--dp-noise-key-file`, each client's local noise from the key's stream.
fn key_the_noise(
    prepared: &mut [Prepared],
    file: Option<&std::path::Path>,
    seed: u64,
) -> anyhow::Result<()> {
    use flint_common::strategy::privacy::{ClientNoise, NoiseKey};
    let Some(path) = file else {
        return Ok(());
    };
    let key = NoiseKey::from_file(path)?;
    for p in prepared {
        let noise = ClientNoise {
            key: key.clone(),
            seed,
            client: p.id,
        };
        if !p.half.set_noise_key(noise) {
            tracing::warn!(
                client = %p.name,
                "a dp noise key was given, and this client adds no noise (dp.mechanism is not \"local\")"
            );
        }
    }
    Ok(())
}

/// Each client's shard, summary and half: loading and booleanizing can take seconds, so off
/// the async threads.
async fn load(
    experiment: &Arc<Experiment>,
    data_dir: PathBuf,
    ids: Vec<ClientId>,
    compute_ghz: Option<f64>,
) -> anyhow::Result<Vec<Prepared>> {
    let (e, dir) = (experiment.clone(), data_dir.clone());
    tokio::task::spawn_blocking(move || prepare(&e, &dir, &ids, compute_ghz))
        .await
        .context("loading the data panicked")?
        .with_context(|| {
            format!(
                "loading the data of {:?} (data directory {})",
                experiment.name,
                data_dir.display()
            )
        })
}

/// Starts one prepared client in `tasks`, its log lines in a span naming it.
fn spawn_client(
    tasks: &mut tokio::task::JoinSet<anyhow::Result<ClientReport>>,
    shell: &Shell,
    p: Prepared,
    creds: identity::Credentials,
    conn: shell::Conn,
    book: Option<&Arc<ProgressBook>>,
) {
    let name = p.name.clone();
    let client = driver::Client::new(shell, p.name, p.id, p.summary, creds, conn, book);
    let conditions = p
        .bits
        .iter()
        .map(|&(feature, above)| Condition { feature, above })
        .collect();
    let run = client.run(p.half, p.feature_names, conditions);
    // Its JSON log lines carry its run and round (recorded as they are known); an error span,
    // so that no level filter drops it.
    let span = tracing::error_span!("client", client_name = %name, run = Empty, round = Empty);
    let run = run.instrument(span);
    tasks.spawn(async move { run.await.with_context(|| format!("client {name:?}")) });
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
