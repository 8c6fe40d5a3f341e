//! One TLS record per flush: HTTP/2 writes a call's frames as they become ready (a request's
//! HEADERS before its body, a reply's HEADERS, DATA and trailers apart), and each write into a
//! TLS stream is a record of its own, 22 bytes of header and tag under TLS 1.3. [`Records`]
//! holds what is written until a flush, and holds a flush back for one turn of the scheduler,
//! so that the frames a call makes at once leave in one record each way.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most a TLS record carries (RFC 8446 §5.1): more waiting is written at once.
pub const RECORD: usize = 16 * 1024;

/// The buffer a connection keeps between flushes; a larger one is freed once written.
const KEEP: usize = 1024;

pin_project! {
    /// `inner` (a TLS stream) written a flush at a time.
    #[derive(Debug)]
    pub struct Records<T> {
        #[pin]
        inner: T,
        // Written since the last flush; `sent` of them already passed to `inner`.
        pending: Vec<u8>,
        sent: usize,
        // This flush was held back once already.
        held: bool,
    }
}

impl<T> Records<T> {
    pub fn new(inner: T) -> Self {
        Records {
            inner,
            pending: Vec::new(),
            sent: 0,
            held: false,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncWrite> Records<T> {
    /// Passes everything pending to `inner` in as few writes as it takes.
    fn poll_drain(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        while *this.sent < this.pending.len() {
            let n = ready!(
                this.inner
                    .as_mut()
                    .poll_write(cx, &this.pending[*this.sent..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *this.sent += n;
        }
        // A connection held open between rounds keeps no large buffer from its last model.
        if this.pending.capacity() > KEEP {
            *this.pending = Vec::new();
        }
        this.pending.clear();
        *this.sent = 0;
        *this.held = false;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead> AsyncRead for Records<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for Records<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.len() >= RECORD {
            ready!(self.as_mut().poll_drain(cx))?;
        }
        let this = self.project();
        let n = buf.len().min(RECORD - this.pending.len());
        this.pending.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() {
            // The first time, the task that asked yields: a body or trailers made ready by
            // another task meanwhile join these bytes. The second time they go.
            if !self.held {
                *self.as_mut().project().held = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(self.as_mut().poll_drain(cx))?;
        }
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_drain(cx))?;
        self.project().inner.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    /// A sink that records each write it is given.
    #[derive(Default, Clone)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.lock().unwrap().push(b.to_vec());
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn writes_between_flushes_reach_the_stream_as_one() {
        let sink = Writes::default();
        let mut r = Records::new(sink.clone());
        r.write_all(b"headers").await.unwrap();
        r.write_all(b"data").await.unwrap();
        r.write_all(b"trailers").await.unwrap();
        assert!(
            sink.0.lock().unwrap().is_empty(),
            "nothing goes before a flush"
        );
        r.flush().await.unwrap();
        r.write_all(b"next").await.unwrap();
        r.flush().await.unwrap();
        let writes = sink.0.lock().unwrap().clone();
        assert_eq!(
            writes,
            vec![b"headersdatatrailers".to_vec(), b"next".to_vec()]
        );
    }

    #[tokio::test]
    async fn a_write_larger_than_a_record_goes_a_record_at_a_time() {
        let sink = Writes::default();
        let mut r = Records::new(sink.clone());
        let big = vec![7u8; 2 * RECORD + 10];
        r.write_all(&big).await.unwrap();
        r.shutdown().await.unwrap();
        let writes = sink.0.lock().unwrap().clone();
        let sizes: Vec<usize> = writes.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![RECORD, RECORD, 10]);
        assert_eq!(writes.concat(), big);
    }

    /// A flush is held back one turn, so that a write another task makes meanwhile joins it.
    #[tokio::test]
    async fn a_flush_waits_one_turn_for_what_another_task_writes() {
        let sink = Writes::default();
        let r = Arc::new(tokio::sync::Mutex::new(Records::new(sink.clone())));
        r.lock().await.write_all(b"headers").await.unwrap();
        let flushing = {
            let r = r.clone();
            std::future::poll_fn(move |cx| {
                let mut g = match r.try_lock() {
                    Ok(g) => g,
                    Err(_) => {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                };
                Pin::new(&mut *g).poll_flush(cx)
            })
        };
        let mut flushing = Box::pin(flushing);
        // The first poll holds the flush back.
        assert!(futures_poll_once(flushing.as_mut()).is_pending());
        r.lock().await.write_all(b"body").await.unwrap();
        flushing.await.unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec![b"headersbody".to_vec()]);
    }

    fn futures_poll_once<F: std::future::Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        let waker = std::task::Waker::noop();
        f.poll(&mut Context::from_waker(waker))
    }
}
