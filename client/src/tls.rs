//! A client's TLS settings: the CA it trusts, its own certificate where the server asks for
//! one (`{name}` in its path filled per client), the name to expect.

use std::path::PathBuf;

use anyhow::{Context, bail};
use tonic::transport::Endpoint;

use flint_shell::tls::client::TlsDial;

use crate::identity::AUTO;

/// TLS of a client (PEM files, e.g. from `flint certs`); the server address is then https://.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientTls {
    /// CA that signed the server's certificate: the client speaks TLS and trusts only it.
    #[arg(long, env = "FLINT_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate, for a server that requires one (mutual TLS). `{name}` in the
    /// path stands for the client's name, so that each client of a process, or each pod of a
    /// Kubernetes Indexed Job (`--index`), presents its own: `pki/clients/{name}.crt`.
    #[arg(long, env = "FLINT_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (`{name}` as in --tls-cert).
    #[arg(long, env = "FLINT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name to expect in the server's certificate [default: the server address's host].
    #[arg(long, env = "FLINT_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

/// What `{name}` in a certificate or key path stands for.
pub const NAME_PLACEHOLDER: &str = "{name}";

impl ClientTls {
    /// These settings for the client `name`: `{name}` in the certificate and key paths replaced
    /// by it. A client that asks for its slot (`--name auto`) has no name yet to put there.
    pub fn for_client(&self, name: &str) -> anyhow::Result<ClientTls> {
        let templated = |p: &Option<PathBuf>| {
            p.as_ref()
                .is_some_and(|p| p.to_string_lossy().contains(NAME_PLACEHOLDER))
        };
        if !templated(&self.tls_cert) && !templated(&self.tls_key) {
            return Ok(self.clone());
        }
        if name == AUTO {
            bail!(
                "--tls-cert/--tls-key with {NAME_PLACEHOLDER} need the client's name (--name NAME or --index), not --name auto"
            );
        }
        let fill = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| PathBuf::from(p.to_string_lossy().replace(NAME_PLACEHOLDER, name)))
        };
        Ok(ClientTls {
            tls_cert: fill(&self.tls_cert),
            tls_key: fill(&self.tls_key),
            ..self.clone()
        })
    }

    /// How a client's own connector reaches `server`: the address tonic is given (plain
    /// `http://` with the port spelled out: the connector does TLS itself, a record per flush)
    /// and the TLS settings, when a CA is given; the address's scheme must agree.
    pub fn dial(&self, server: &str) -> anyhow::Result<(String, Option<TlsDial>)> {
        use flint_shell::tls::read_pem;
        let uri: http::Uri = server.parse().with_context(|| {
            format!("bad server address {server:?}; expected e.g. http://host:50051")
        })?;
        let https = uri.scheme_str() == Some("https");
        let Some(ca) = &self.tls_ca else {
            if https {
                bail!(
                    "an https:// server address needs --tls-ca (the CA that signed the server's certificate)"
                );
            }
            return Ok((server.to_string(), None));
        };
        if !https {
            bail!("with --tls-ca the server address must start with https://");
        }
        let Some(host) = uri.host() else {
            bail!("the server address {server:?} names no host");
        };
        let port = uri.port_u16().unwrap_or(443);
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((
                read_pem(cert, "client certificate (--tls-cert)")?,
                read_pem(key, "client key (--tls-key)")?,
            )),
            _ => None,
        };
        let config = flint_shell::tls::client::client_config(
            &read_pem(ca, "CA (--tls-ca)")?,
            identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
        )?;
        let name = match &self.tls_server_name {
            Some(name) => name.clone(),
            None => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        };
        let dial = TlsDial::new(config, &name)?;
        Ok((format!("http://{host}:{port}"), Some(dial)))
    }

    /// The endpoint with tonic's TLS when a CA is given (one-off calls: the health check); the
    /// address's scheme must agree.
    pub fn apply(&self, endpoint: Endpoint) -> anyhow::Result<Endpoint> {
        use flint_shell::tls::read_pem;
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let https = endpoint.uri().scheme_str() == Some("https");
        let Some(ca) = &self.tls_ca else {
            if https {
                bail!(
                    "an https:// server address needs --tls-ca (the CA that signed the server's certificate)"
                );
            }
            return Ok(endpoint);
        };
        if !https {
            bail!("with --tls-ca the server address must start with https://");
        }
        flint_shell::tls::install_provider();
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read_pem(ca, "CA (--tls-ca)")?));
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            config = config.identity(Identity::from_pem(
                read_pem(cert, "client certificate (--tls-cert)")?,
                read_pem(key, "client key (--tls-key)")?,
            ));
        }
        if let Some(name) = &self.tls_server_name {
            config = config.domain_name(name.clone());
        }
        endpoint
            .tls_config(config)
            .context("cannot use the TLS settings")
    }
}
