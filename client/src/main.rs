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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match flint_client::run_until_stopped(cli.args).await {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flint-client: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
