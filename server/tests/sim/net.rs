//! gRPC over turmoil's simulated TCP: the server's accepted streams and the clients' connector.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};
use turmoil::net::{TcpListener, TcpStream};

pub const PORT: u16 = 9999;

/// The accepted connections of `listener`, as tonic's server takes them.
pub fn incoming(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<Accepted>> {
    futures_util::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| Accepted(s));
        Some((next, l))
    })
}

pub struct Accepted(TcpStream);

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.local_addr().ok(),
            remote_addr: self.0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

type Connecting = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TcpStream>>> + Send>>;

/// Dials the URI's host over the simulated network.
pub fn connector() -> impl tower::Service<
    http::Uri,
    Response = TokioIo<TcpStream>,
    Error = std::io::Error,
    Future = Connecting,
> + Clone {
    tower::service_fn(|uri: http::Uri| {
        Box::pin(async move {
            let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            Ok(TokioIo::new(TcpStream::connect(authority).await?))
        }) as Connecting
    })
}
