use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{MeterSink, Side};
use flint_common::{ClientId, Round};

#[derive(Debug, Default)]
struct Counts {
    read: AtomicU64,
    written: AtomicU64,
    /// A reply on this connection went to a client the server knows (a call it accepted).
    proved: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Mark {
    read: u64,
    written: u64,
    label: Option<(ClientId, Round)>,
}

/// One connection's byte counts and how much of them has been attributed so far.
#[derive(Debug, Clone, Default)]
pub struct ConnMeter {
    counts: Arc<Counts>,
    mark: Arc<Mutex<Mark>>,
}

impl ConnMeter {
    pub fn read(&self) -> u64 {
        self.counts.read.load(Ordering::Relaxed)
    }

    pub fn written(&self) -> u64 {
        self.counts.written.load(Ordering::Relaxed)
    }

    /// Whether a call on this connection was answered for a known client (server side): the
    /// connection holds a client, not a stranger.
    pub fn proved(&self) -> bool {
        self.counts.proved.load(Ordering::Relaxed)
    }

    /// Attributes every byte since the last flush to (client, round).
    pub fn flush_to(&self, sink: &dyn MeterSink, side: Side, client: ClientId, round: Round) {
        let (read, written) = self.take(true, true);
        attribute(sink, side, client, round, read, written);
    }

    /// Attributes every byte since the last flush to the label of the last reply, if any.
    pub fn flush_to_label(&self, sink: &dyn MeterSink, side: Side) {
        if let Some(((client, round), (read, written))) = self.take_labelled(true, true) {
            attribute(sink, side, client, round, read, written);
        }
    }

    /// A call starts (server side): the bytes written since the last call started are the last
    /// reply's, as a client waits for one reply before its next call. The bytes read are left
    /// for this call's reply: they hold its request, which no earlier label owns.
    pub fn call_starts(&self, sink: &dyn MeterSink, side: Side) {
        if let Some(((client, round), (_, written))) = self.take_labelled(false, true) {
            attribute(sink, side, client, round, 0, written);
        }
    }

    /// A reply to (client, round) is ready (server side): the bytes read so far hold its
    /// request, and the bytes written from now until the next call are its reply's.
    pub fn reply_ready(&self, sink: &dyn MeterSink, side: Side, client: ClientId, round: Round) {
        if client != 0 {
            self.counts.proved.store(true, Ordering::Relaxed);
        }
        let (read, _) = {
            let mut m = self.mark.lock().expect("meter lock");
            m.label = Some((client, round));
            self.take_from(&mut m, true, false)
        };
        attribute(sink, side, client, round, read, 0);
    }

    /// Whether this is the last handle: its connection and every request on it are gone.
    pub fn is_orphan(&self) -> bool {
        Arc::strong_count(&self.counts) == 1
    }

    /// The bytes read and written since their last flush, for the directions asked.
    fn take(&self, read: bool, written: bool) -> (u64, u64) {
        self.take_from(&mut self.mark.lock().expect("meter lock"), read, written)
    }

    /// The last reply's label and [`take`](Self::take)'s bytes, under one lock: a reply made
    /// ready between the two would otherwise give its bytes to the one before it.
    fn take_labelled(&self, read: bool, written: bool) -> Option<((ClientId, Round), (u64, u64))> {
        let mut m = self.mark.lock().expect("meter lock");
        let label = m.label?;
        Some((label, self.take_from(&mut m, read, written)))
    }

    fn take_from(&self, m: &mut Mark, read: bool, written: bool) -> (u64, u64) {
        let mut delta = (0, 0);
        if read {
            let now = self.read();
            delta.0 = now - m.read;
            m.read = now;
        }
        if written {
            let now = self.written();
            delta.1 = now - m.written;
            m.written = now;
        }
        delta
    }
}

fn attribute(
    sink: &dyn MeterSink,
    side: Side,
    client: ClientId,
    round: Round,
    read: u64,
    written: u64,
) {
    let (up, down) = match side {
        Side::Server => (read, written),
        Side::Client => (written, read),
    };
    if up + down > 0 {
        sink.socket_bytes(client, round, up, down);
    }
}

pin_project_lite::pin_project! {
    /// A connection whose every byte read and written is counted, below HTTP/2 and TLS.
    pub struct CountingIo<T> {
        #[pin]
        inner: T,
        meter: ConnMeter,
    }
}

impl<T> CountingIo<T> {
    pub fn new(inner: T, meter: ConnMeter) -> Self {
        CountingIo { inner, meter }
    }

    pub fn meter(&self) -> &ConnMeter {
        &self.meter
    }
}

impl<T: AsyncRead> AsyncRead for CountingIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let res = this.inner.poll_read(cx, buf);
        let n = buf.filled().len() - before;
        this.meter
            .counts
            .read
            .fetch_add(n as u64, Ordering::Relaxed);
        res
    }
}

fn count_written(meter: &ConnMeter, res: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
    if let Poll::Ready(Ok(n)) = res {
        meter.counts.written.fetch_add(n as u64, Ordering::Relaxed);
    }
    res
}

impl<T: AsyncWrite> AsyncWrite for CountingIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        count_written(this.meter, this.inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        count_written(this.meter, this.inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

/// The server finds the connection's meter in each request's extensions.
impl<T> tonic::transport::server::Connected for CountingIo<T> {
    type ConnectInfo = ConnMeter;

    fn connect_info(&self) -> ConnMeter {
        self.meter.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(ClientId, Round, u64, u64)>>);

    impl MeterSink for Recorded {
        fn message_bytes(&self, _: &str, _: ClientId, _: Round, _: u64, _: u64) {}
        fn socket_bytes(&self, c: ClientId, r: Round, up: u64, down: u64) {
            self.0.lock().unwrap().push((c, r, up, down));
        }
        fn link_bytes(&self, _: ClientId, _: Round, _: u64, _: u64) {}
    }

    #[tokio::test]
    async fn counts_both_directions_and_flushes_deltas() {
        let (a, mut b) = tokio::io::duplex(64);
        let meter = ConnMeter::default();
        let mut io = CountingIo::new(a, meter.clone());
        io.write_all(b"hello").await.unwrap();
        b.write_all(b"abc").await.unwrap();
        let mut buf = [0u8; 3];
        io.read_exact(&mut buf).await.unwrap();
        let sink = Recorded::default();
        meter.flush_to(&sink, Side::Client, 4, 2);
        meter.flush_to(&sink, Side::Client, 4, 3);
        io.write_all(b"xy").await.unwrap();
        meter.reply_ready(&sink, Side::Server, 4, 3);
        meter.flush_to_label(&sink, Side::Server);
        assert_eq!(*sink.0.lock().unwrap(), vec![(4, 2, 5, 3), (4, 3, 0, 2)]);
    }

    /// The bug behind a flaky ledger: the next request's bytes, read before its call starts,
    /// went to the previous reply's label. They are now its own reply's.
    #[tokio::test]
    async fn a_request_read_before_its_call_is_its_own_replys() {
        let (a, mut b) = tokio::io::duplex(64);
        let meter = ConnMeter::default();
        let mut io = CountingIo::new(a, meter.clone());
        let sink = Recorded::default();
        let mut buf = [0u8; 4];
        // Call 1 from client 7, then its reply.
        b.write_all(b"req1").await.unwrap();
        io.read_exact(&mut buf).await.unwrap();
        meter.call_starts(&sink, Side::Server);
        meter.reply_ready(&sink, Side::Server, 7, 1);
        io.write_all(b"reply1").await.unwrap();
        // Call 2 is a stranger's, fully read when its call starts.
        b.write_all(b"strngr").await.unwrap();
        let mut six = [0u8; 6];
        io.read_exact(&mut six).await.unwrap();
        meter.call_starts(&sink, Side::Server);
        meter.reply_ready(&sink, Side::Server, 0, 0);
        io.write_all(b"no").await.unwrap();
        // Call 3 is client 7's again.
        b.write_all(b"req3").await.unwrap();
        io.read_exact(&mut buf).await.unwrap();
        meter.call_starts(&sink, Side::Server);
        meter.reply_ready(&sink, Side::Server, 7, 1);
        io.write_all(b"r3").await.unwrap();
        meter.flush_to_label(&sink, Side::Server);
        assert_eq!(
            *sink.0.lock().unwrap(),
            vec![
                (7, 1, 4, 0),
                (7, 1, 0, 6),
                (0, 0, 6, 0),
                (0, 0, 0, 2),
                (7, 1, 4, 0),
                (7, 1, 0, 2),
            ]
        );
    }
}
