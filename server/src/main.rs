use clap::Parser;

#[derive(Parser)]
#[command(name = "flint-server", version, about = "Flint aggregator server")]
struct Cli {
    #[command(flatten)]
    args: flint_server::ServerArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match flint_server::run(cli.args).await {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flint-server: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
