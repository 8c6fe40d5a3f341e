//! The client's side of TLS, owned by Flint rather than tonic: its rustls configuration (the
//! CA it trusts, its own certificate under mutual TLS, HTTP/2 by ALPN, the server's tickets
//! kept so that a reconnect resumes) and the handshake over a counted connection, written a
//! record per flush ([`Records`]).

use std::io;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::client::TlsStream;

use super::records::Records;
use super::server::{ALPN_H2, certificates};
use flint_common::FlintError;

/// A client's TLS settings: the CA that signed the server's certificate and, where the server
/// asks for one, the client's own certificate and key (PEM bytes).
pub fn client_config(
    ca: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<Arc<ClientConfig>, FlintError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in certificates(ca, "CA")? {
        roots
            .add(c)
            .map_err(|e| FlintError::Config(format!("cannot use the CA: {e}")))?;
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FlintError::Config(format!("TLS settings: {e}")))?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates(cert, "client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| FlintError::Config(format!("cannot read the client key: {e}")))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                FlintError::Config(format!("cannot use the client certificate and key: {e}"))
            })?
        }
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}

/// Where a client's TLS goes: its settings and the name the server's certificate must hold.
#[derive(Clone, Debug)]
pub struct TlsDial {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl TlsDial {
    /// `name` (a DNS name or an IP address) as the server's certificate must hold it.
    pub fn new(config: Arc<ClientConfig>, name: &str) -> Result<TlsDial, FlintError> {
        let server_name = ServerName::try_from(name.to_string()).map_err(|_| {
            FlintError::Config(format!(
                "{name:?} is not a DNS name or IP address to expect in the server's certificate"
            ))
        })?;
        Ok(TlsDial {
            config,
            server_name,
        })
    }

    /// The handshake over `io`; the stream writes a record per flush.
    pub async fn connect<T>(&self, io: T) -> io::Result<Records<TlsStream<T>>>
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(self.server_name.clone(), io)
            .await?;
        Ok(Records::new(tls))
    }
}
