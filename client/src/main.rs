use clap::Parser;

#[derive(Parser)]
#[command(
    name = "flint-client",
    version,
    about = "Flint federated-learning client"
)]
struct Cli {
    #[command(flatten)]
    args: flint_client::ClientArgs,
}

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in main, before any thread is started.
    unsafe { flint_common::config::drop_empty_env() };
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flint-client: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(flint_client::run_until_stopped(cli.args)) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flint-client: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
