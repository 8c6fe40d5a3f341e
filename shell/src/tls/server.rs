//! The server's side of TLS, owned by Flint rather than tonic: its rustls configuration
//! (HTTP/2 by ALPN, client certificates from one CA where asked, stateless session tickets so
//! that a client checking in again resumes instead of proving its certificate again, and no
//! session memory per client), and the connections it serves, plain or TLS, each with its
//! meter and its client's certificates.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

use super::records::Records;
use crate::meter::ConnMeter;
use flint_common::FlintError;

/// HTTP/2 by ALPN, as gRPC clients ask for it.
pub const ALPN_H2: &[u8] = b"h2";

/// Session tickets sent after a full handshake: a client reconnects one at a time, and each
/// resumed connection brings a fresh one.
const TICKETS: usize = 1;

/// The server's TLS settings from PEM bytes: its certificate chain and key, and where clients
/// must present certificates, the CA that signs them.
pub fn server_config(
    cert: &[u8],
    key: &[u8],
    client_ca: Option<&[u8]>,
) -> Result<Arc<ServerConfig>, FlintError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(cert, "server certificate")?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| FlintError::Config(format!("cannot read the server key: {e}")))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certificates(ca, "client CA")? {
                roots.add(c).map_err(tls_error)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| FlintError::Config(format!("cannot use the client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        FlintError::Config(format!("cannot use the server certificate and key: {e}"))
    })?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(tls_error)?;
    config.send_tls13_tickets = TICKETS;
    Ok(Arc::new(config))
}

/// Every certificate of a PEM bundle; none is an error.
pub(crate) fn certificates(
    pem: &[u8],
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, FlintError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| FlintError::Config(format!("cannot read the {what}: {e}")))?;
    if certs.is_empty() {
        return Err(FlintError::Config(format!(
            "the {what} holds no certificate"
        )));
    }
    Ok(certs)
}

fn tls_error(e: impl std::fmt::Display) -> FlintError {
    FlintError::Config(format!("TLS settings: {e}"))
}

/// What the server knows of a connection, in every request's extensions: its byte meter, and
/// under mutual TLS the certificates its client presented (restored from the ticket when the
/// session resumed).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub meter: ConnMeter,
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// A connection the server serves: as accepted, or TLS over it.
#[derive(Debug)]
pub enum Served<T> {
    Plain(T),
    Tls(Box<Records<TlsStream<T>>>),
}

impl<T: AsyncRead + AsyncWrite + Unpin> Served<T> {
    /// The TLS handshake on `io` with `config`.
    pub async fn accept(config: Arc<ServerConfig>, io: T) -> io::Result<Self> {
        let tls = tokio_rustls::TlsAcceptor::from(config).accept(io).await?;
        Ok(Served::Tls(Box::new(Records::new(tls))))
    }
}

impl<T> tonic::transport::server::Connected for Served<T>
where
    T: tonic::transport::server::Connected<ConnectInfo = ConnMeter>,
{
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            Served::Plain(io) => ConnInfo {
                meter: io.connect_info(),
                peer_certs: None,
            },
            Served::Tls(tls) => {
                let (io, session) = tls.get_ref().get_ref();
                ConnInfo {
                    meter: io.connect_info(),
                    peer_certs: session
                        .peer_certificates()
                        .map(|c| Arc::new(c.iter().map(|c| c.clone().into_owned()).collect())),
                }
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Served<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Served::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Served::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Served<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Served::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Served::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Served::Plain(io) => Pin::new(io).poll_flush(cx),
            Served::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Served::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Served::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}
