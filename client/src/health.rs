//! `flint health`.

use std::time::Duration;

use anyhow::{Context, bail};
use tonic::transport::Endpoint;

use crate::tls::ClientTls;

/// `flint health`: whether a server answers the gRPC health check (a container's healthcheck:
/// the image has no shell).
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// Server address.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 3.0)]
    pub timeout_secs: f64,
    #[command(flatten)]
    pub tls: ClientTls,
}

/// Ok when the server reports the aggregator as serving.
pub async fn health(args: HealthArgs) -> anyhow::Result<()> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let limit = Duration::from_secs_f64(args.timeout_secs.max(0.1));
    let server = &args.server;
    let endpoint = Endpoint::from_shared(server.to_string())
        .with_context(|| format!("bad server address {server:?}; expected e.g. http://host:50051"))?
        .connect_timeout(limit)
        .timeout(limit);
    let channel = args
        .tls
        .apply(endpoint)?
        .connect()
        .await
        .with_context(|| format!("cannot reach {server}"))?;
    let service = "flint.v1.Aggregator".to_string();
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest { service })
        .await
        .map_err(|s| anyhow::anyhow!("health check failed: {}", s.message()))?
        .into_inner();
    match reply.status() {
        ServingStatus::Serving => Ok(()),
        other => bail!("the aggregator is {}", other.as_str_name()),
    }
}
