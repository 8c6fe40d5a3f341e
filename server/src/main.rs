use clap::Parser;

#[derive(Parser)]
#[command(name = "flint-server", version, about = "Flint aggregator server")]
struct Cli {
    #[command(flatten)]
    args: flint_server::ServerArgs,
}

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in main, before any thread is started.
    unsafe { flint_common::config::drop_empty_env() };
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flint-server: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(flint_server::run(cli.args)) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flint-server: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
