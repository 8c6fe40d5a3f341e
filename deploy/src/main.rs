//! `flint`: run an experiment as real processes, print a run's tables, check data, or act as the
//! server or a client (the same code as `flint-server` / `flint-client`).

mod certs;
mod data;
mod explain;
mod grid;
mod kit;
mod lines;
mod link;
mod pack;
mod plot;
mod replay;
mod replayed;
mod report;
mod run;
mod split;
mod stop;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flint_common::data::default_data_dir;

#[derive(Parser)]
#[command(
    name = "flint",
    version,
    about = "Federated learning of interpretable models over real gRPC"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an experiment: one server and its clients as OS processes on loopback.
    Run(run::RunArgs),
    /// Run many experiments (files or directories), optionally over seeds, into one summary table.
    Grid(grid::GridArgs),
    /// Aggregate a round of a finished run again from its kept updates, under other settings,
    /// and measure the result on the shared test set (no training).
    Replay(replay::ReplayArgs),
    /// Print each client's rows per class, drawn as its process draws them, without training
    /// (a split checked before a long run, or written down with --toml as an explicit one).
    Split(split::SplitArgs),
    /// Print the models a run kept: coefficients and maps with their features' names.
    Explain(explain::ExplainArgs),
    /// Print the tables of a finished run.
    Report {
        /// A run directory (holding results.json), e.g. runs/quickstart.
        run_dir: PathBuf,
    },
    /// The aggregator server (as flint-server).
    Server(flint_server::ServerArgs),
    /// One or more clients (as flint-client).
    Client(flint_client::ClientArgs),
    /// Exit 0 when a server answers its gRPC health check (a container's healthcheck).
    Health(flint_client::HealthArgs),
    /// Relay clients to a server over an emulated link (bandwidth and delay per connection, in
    /// user space: for machines without tc netem).
    Link(link::LinkArgs),
    /// Generate a private PKI: a CA, a server certificate, one certificate per client.
    Certs(certs::CertsArgs),
    /// Per-site kits from a PKI and an experiment: one folder per participant with its
    /// certificate, the CA, the experiment and a compose file for its site.
    Kit(kit::KitArgs),
    /// Write a directory (a run's results) as a tar to stdout: `kubectl exec POD -- /flint pack
    /// /results > run.tar`, for an image with no shell and so no `kubectl cp`.
    Pack(pack::PackArgs),
    /// Do nothing until SIGTERM or SIGINT, then exit 0: a pod to exec `flint pack` into.
    Idle,
    /// Print every experiment key with its default and a one-line doc.
    Keys {
        /// Print the experiment file's JSON Schema instead (docs/experiment.schema.json), for
        /// editors with TOML schema support.
        #[arg(long)]
        schema: bool,
    },
    /// Datasets.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
}

#[derive(Subcommand)]
enum DataCommand {
    /// Check the known dataset files below the data directory against their sha256.
    ///
    /// Named datasets must be present; without names, missing datasets are listed and only a
    /// file that differs (or an empty data directory) is an error.
    Verify {
        /// Datasets to check (e.g. magic mnist) [default: every known one that is present]
        datasets: Vec<String>,
        /// [default: $FLINT_DATA_DIR or ./data]
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Download the known datasets from their public URLs (mirrors tried in turn) into the data
    /// directory, checked against the sha256 that `verify` knows; a file already there and
    /// intact is kept, a broken-off transfer resumes, a copy that differs is not kept.
    Fetch {
        /// Datasets to fetch (e.g. magic mnist) [default: every known one]
        datasets: Vec<String>,
        /// [default: $FLINT_DATA_DIR or ./data]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Fetch `<URL>/<path below the data directory>` instead of the public URLs (a local
        /// mirror).
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
    },
}

fn print_keys(schema: bool) {
    use flint_common::config::keys;
    if schema {
        print!("{}", keys::schema_text());
        return;
    }
    const WIDEST_DEFAULT: usize = 24;
    let keys = keys::keys();
    let width = keys.iter().map(|k| k.name.len()).max().unwrap_or(0);
    for k in keys {
        let default = match (&k.default, k.required) {
            (Some(d), _) if d.chars().count() > WIDEST_DEFAULT => "(see doc)".to_string(),
            (Some(d), _) => d.clone(),
            (None, true) => "required".to_string(),
            (None, false) => "-".to_string(),
        };
        println!("{:width$}  {default:WIDEST_DEFAULT$}  {}", k.name, k.doc);
    }
}

impl Command {
    /// Commands that read files and print, and open no socket: `flint keys | head` ends them
    /// quietly, as any Unix filter.
    fn only_prints(&self) -> bool {
        matches!(
            self,
            Command::Keys { .. }
                | Command::Report { .. }
                | Command::Explain(_)
                | Command::Split(_)
                | Command::Pack(_)
                | Command::Data {
                    command: DataCommand::Verify { .. }
                }
        )
    }
}

/// Rust ignores SIGPIPE, so a closed stdout makes `println!` panic; the default action ends
/// the process quietly instead. Only for commands without sockets, where a write to a closed
/// connection must stay an error, not a signal.
fn quiet_on_a_closed_pipe() {
    // SAFETY: called from main before any thread starts; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread is started.
    unsafe { flint_common::config::drop_empty_env() };
    let cli = Cli::parse();
    if cli.command.only_prints() {
        quiet_on_a_closed_pipe();
    }
    let result = match cli.command {
        Command::Run(args) => stop::install().and_then(|()| run::run(args)),
        Command::Grid(args) => stop::install().and_then(|()| grid::grid(args)),
        Command::Report { run_dir } => report::print(&run_dir),
        Command::Explain(args) => explain::explain(args),
        Command::Split(args) => split::split(args),
        Command::Replay(args) => {
            // A rule that trains on the server (DENSE) logs each of its epochs.
            flint_shell::logging::init(flint_shell::logging::LogFormat::Text);
            replay::replay(args)
        }
        Command::Server(args) => {
            runtime().and_then(|rt| rt.block_on(flint_server::run(args)).map(|_| ()))
        }
        Command::Client(args) => runtime().and_then(|rt| {
            rt.block_on(flint_client::run_until_stopped(args))
                .map(|_| ())
        }),
        Command::Health(args) => runtime().and_then(|rt| rt.block_on(flint_client::health(args))),
        Command::Certs(args) => certs::certs(args),
        Command::Kit(args) => kit::kit(args),
        Command::Pack(args) => pack::pack(args),
        Command::Idle => pack::idle(),
        Command::Keys { schema } => {
            print_keys(schema);
            Ok(())
        }
        Command::Link(args) => link::serve(args),
        Command::Data {
            command: DataCommand::Verify { datasets, data_dir },
        } => data::check(&datasets, &data_dir.unwrap_or_else(default_data_dir)),
        Command::Data {
            command:
                DataCommand::Fetch {
                    datasets,
                    data_dir,
                    base_url,
                },
        } => data::fetch(
            &datasets,
            &data_dir.unwrap_or_else(default_data_dir),
            base_url.as_deref(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            flint_shell::logging::fatal(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
