//! The accept loop: at most `max` connections open at once (the ones past it are closed at
//! once), a deadline for a connection's first byte (one that never sends the HTTP/2 preface or
//! a TLS hello is closed), and no busy loop on accept errors such as running out of file
//! descriptors: they are logged and retried after a pause.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use flint_shell::meter::{ConnMeter, CountingIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// How long an accepted connection may stay silent before its first byte.
pub const FIRST_BYTE: Duration = Duration::from_secs(10);

/// What the accept loop allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub connections: usize,
    /// How long a connection may stay silent before its first byte.
    pub first_byte: Duration,
}

/// The accept loop's slots and counts, read by the metrics.
#[derive(Debug)]
pub struct Gate {
    slots: Arc<Semaphore>,
    limit: usize,
    accepted: AtomicU64,
    refused: AtomicU64,
}

impl Gate {
    pub fn new(limits: &Limits) -> Arc<Gate> {
        Arc::new(Gate {
            slots: Arc::new(Semaphore::new(limits.connections)),
            limit: limits.connections,
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    pub fn open(&self) -> usize {
        self.limit - self.slots.available_permits()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// A connection as the server serves it: counted, holding one of the `max` slots, and closed if
/// its first byte does not come in time.
pub type Conn = Guarded<CountingIo<TcpStream>>;

/// Accepts on `listener` in a task of its own; every accepted connection gets a [`ConnMeter`]
/// (handed to `on_accept`, for the final flush of its bytes).
pub fn incoming(
    listener: TcpListener,
    limits: Limits,
    gate: Arc<Gate>,
    on_accept: impl Fn(&ConnMeter) + Send + 'static,
) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    let max = limits.connections;
    tokio::spawn(async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // EMFILE and friends: accepting again at once would spin on a core.
                    tracing::warn!(error = %e, "cannot accept a connection; pausing 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = gate.slots.clone().try_acquire_owned() else {
                let refused = gate.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        max,
                        refused,
                        "connection limit reached; closing new connections"
                    );
                }
                drop(tcp);
                continue;
            };
            gate.accepted.fetch_add(1, Ordering::Relaxed);
            let _ = tcp.set_nodelay(true);
            let meter = ConnMeter::default();
            on_accept(&meter);
            let conn = Guarded::new(CountingIo::new(tcp, meter), permit, limits.first_byte);
            if tx.send(Ok(conn)).await.is_err() {
                return; // the server stopped
            }
        }
    });
    ReceiverStream::new(rx)
}

pin_project_lite::pin_project! {
    pub struct Guarded<T> {
        #[pin]
        inner: T,
        _slot: OwnedSemaphorePermit,
        // Until the first byte is read (boxed: the connection must stay `Unpin`).
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<T> Guarded<T> {
    fn new(inner: T, slot: OwnedSemaphorePermit, first_byte: Duration) -> Self {
        Guarded {
            inner,
            _slot: slot,
            deadline: Some(Box::pin(tokio::time::sleep(first_byte))),
        }
    }
}

impl<T: AsyncRead> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.inner.poll_read(cx, buf);
        if let Some(deadline) = this.deadline {
            match &polled {
                Poll::Ready(Ok(())) if buf.filled().len() > before => *this.deadline = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no byte within the first-byte deadline",
                    )));
                }
                _ => {}
            }
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    fn limits(connections: usize) -> Limits {
        Limits {
            connections,
            first_byte: Duration::from_millis(300),
        }
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_a_talking_one_is_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = incoming(listener, limits(8), Gate::new(&limits(8)), |_| {});
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut talking = TcpStream::connect(addr).await.unwrap();
        let mut a = conns.next().await.unwrap().unwrap();
        let mut b = conns.next().await.unwrap().unwrap();
        talking.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        b.read_exact(&mut byte).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let e = a.read(&mut byte).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // The one that spoke may stay quiet as long as it likes.
        talking.write_all(b"y").await.unwrap();
        b.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_until_one_ends() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate::new(&limits(1));
        let mut conns = incoming(listener, limits(1), gate.clone(), |_| {});
        let _first = TcpStream::connect(addr).await.unwrap();
        let held = conns.next().await.unwrap().unwrap();
        assert_eq!((gate.open(), gate.limit()), (1, 1));
        let mut second = TcpStream::connect(addr).await.unwrap();
        // Closed by the server without a byte: the read sees the end (or a reset).
        let mut byte = [0u8; 1];
        let n = second.read(&mut byte).await.unwrap_or(0);
        assert_eq!(n, 0);
        // The metrics count what the gate did.
        assert_eq!((gate.accepted(), gate.refused()), (1, 1));
        drop(held);
        assert_eq!(gate.open(), 0);
        let _third = TcpStream::connect(addr).await.unwrap();
        let third = conns.next().await.unwrap();
        assert!(third.is_ok());
        assert_eq!((gate.accepted(), gate.refused(), gate.open()), (2, 1, 1));
    }
}
