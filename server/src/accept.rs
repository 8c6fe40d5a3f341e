//! The accept loop: at most `max` connections open at once and at most `per_address` from one
//! remote address (the ones past either are closed at once, so silent sockets from one host
//! cannot take every slot), a deadline for a connection's opening bytes (one that never sends
//! the HTTP/2 preface or a TLS hello, or stalls partway, is closed), and no busy loop on accept
//! errors such as running out of file descriptors: they are logged and retried after a pause.
//! Where every slot is taken, the oldest connection that has not proved a client yet (no call
//! of a client the server knows answered on it) is closed for the newcomer, so that sockets
//! from many hosts, silent or idle after their opening bytes, cannot keep a client out.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use flint_shell::meter::{ConnMeter, CountingIo};
use flint_shell::tls::server::Served;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How long an accepted connection has to send its opening bytes.
pub const OPENING: Duration = Duration::from_secs(10);

/// The opening bytes: HTTP/2's client preface is 24 bytes, and a TLS ClientHello is longer, so
/// an honest client sends this many at once; a caller that trickles fewer holds no slot long.
pub const OPENING_BYTES: usize = 24;

/// TLS handshakes the server runs at once.
pub const HANDSHAKES: usize = 128;

/// How long a newcomer waits for the place of the connection closed for it.
const EVICTION_WAIT: Duration = Duration::from_millis(250);

/// What the accept loop allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub connections: usize,
    /// Connections open at once from one remote address.
    pub per_address: usize,
    /// How long a connection has to send its first [`OPENING_BYTES`].
    pub opening: Duration,
}

/// The accept loop's slots and counts, read by the metrics.
#[derive(Debug)]
pub struct Gate {
    slots: Arc<Semaphore>,
    limit: usize,
    per_address: usize,
    /// Open connections by remote address (none kept at 0).
    by_address: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    /// The connections not known to hold a client, by arrival: the first that has proved none
    /// is closed for a newcomer when every slot is taken.
    unproved: Unproved,
    arrivals: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    evicted: AtomicU64,
}

/// Each connection's way to be closed for a newcomer, and its meter (which says whether it has
/// proved a client), by arrival.
type Unproved = Arc<std::sync::Mutex<BTreeMap<u64, (CancellationToken, ConnMeter)>>>;

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// Its address holds its share.
    Address,
    /// Every slot is taken.
    Full,
}

impl Gate {
    pub fn new(limits: &Limits) -> Arc<Gate> {
        Arc::new(Gate {
            slots: Arc::new(Semaphore::new(limits.connections)),
            limit: limits.connections,
            per_address: limits.per_address,
            by_address: Arc::default(),
            unproved: Arc::default(),
            arrivals: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    /// A slot for a connection from `from`; where every slot is taken, the place of the oldest
    /// connection that has not proved a client, once it is closed.
    async fn admit(&self, from: IpAddr, meter: &ConnMeter) -> Option<Slot> {
        let permit = match self.try_admit(from, meter) {
            Ok(slot) => return Some(slot),
            Err(Refusal::Address) => return None,
            Err(Refusal::Full) if self.evict_oldest_unproved() => {
                let freed = self.slots.clone().acquire_owned();
                tokio::time::timeout(EVICTION_WAIT, freed)
                    .await
                    .ok()?
                    .ok()?
            }
            Err(Refusal::Full) => return None,
        };
        self.slot(host_of(from), permit, meter).ok()
    }

    fn try_admit(&self, from: IpAddr, meter: &ConnMeter) -> Result<Slot, Refusal> {
        let from = host_of(from);
        // The address's share first: an address past it makes no room at others' expense.
        self.check_address(from)?;
        let permit = self.slots.clone().try_acquire_owned();
        self.slot(from, permit.map_err(|_| Refusal::Full)?, meter)
    }

    fn check_address(&self, from: IpAddr) -> Result<(), Refusal> {
        let by_address = self.by_address.lock().expect("address counts lock");
        match by_address.get(&from) {
            Some(&open) if open >= self.per_address => Err(Refusal::Address),
            _ => Ok(()),
        }
    }

    /// The connection from `from` that `permit` admits, counted by address and kept among the
    /// unproved until it closes; its `meter` says once it has proved a client.
    fn slot(
        &self,
        from: IpAddr,
        permit: OwnedSemaphorePermit,
        meter: &ConnMeter,
    ) -> Result<Slot, Refusal> {
        let mut by_address = self.by_address.lock().expect("address counts lock");
        let open = by_address.entry(from).or_insert(0);
        if *open >= self.per_address {
            return Err(Refusal::Address);
        }
        *open += 1;
        let id = self.arrivals.fetch_add(1, Ordering::Relaxed);
        let evict = CancellationToken::new();
        self.unproved
            .lock()
            .expect("unproved connections lock")
            .insert(id, (evict.clone(), meter.clone()));
        Ok(Slot {
            _permit: permit,
            from,
            by_address: self.by_address.clone(),
            id,
            evict,
            meter: meter.clone(),
            unproved: self.unproved.clone(),
        })
    }

    /// Closes the oldest connection that has not proved a client (one that has is dropped from
    /// the list for good); whether there was one.
    fn evict_oldest_unproved(&self) -> bool {
        let mut unproved = self.unproved.lock().expect("unproved connections lock");
        let evict = loop {
            match unproved.pop_first() {
                None => return false,
                Some((_, (_, meter))) if meter.proved() => continue,
                Some((_, (evict, _))) => break evict,
            }
        };
        drop(unproved);
        evict.cancel();
        let evicted = self.evicted.fetch_add(1, Ordering::Relaxed) + 1;
        if evicted.is_power_of_two() {
            tracing::warn!(
                max = self.limit,
                evicted,
                "every connection slot taken; closing the oldest that holds no client for a newcomer"
            );
        }
        true
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

    /// Connections closed before they proved a client, for a newcomer.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

/// A connection as the server serves it: counted, holding one of the `max` slots, closed if its
/// opening bytes do not come in time, under TLS where the server has a certificate.
pub type Conn = Served<Guarded<CountingIo<TcpStream>>>;

/// Accepts on `listener` in a task of its own; every accepted connection gets a [`ConnMeter`]
/// (handed to `on_accept`, for the final flush of its bytes). Under `tls` each handshake runs in
/// a task of its own, within the opening deadline, and a failed one is dropped.
pub fn incoming(
    listener: TcpListener,
    limits: Limits,
    gate: Arc<Gate>,
    tls: Option<Arc<rustls::ServerConfig>>,
    on_accept: impl Fn(&ConnMeter) + Send + 'static,
) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    let max = limits.connections;
    let handshakes = Arc::new(Semaphore::new(HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let (tcp, from) = match listener.accept().await {
                Ok((tcp, peer)) => (tcp, peer.ip()),
                Err(e) => {
                    // EMFILE and friends: accepting again at once would spin on a core.
                    tracing::warn!(error = %e, "cannot accept a connection; pausing 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let meter = ConnMeter::default();
            let Some(slot) = gate.admit(from, &meter).await else {
                let refused = gate.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        max,
                        per_address = gate.per_address,
                        %from,
                        refused,
                        "connection limit reached; closing new connections"
                    );
                }
                drop(tcp);
                continue;
            };
            gate.accepted.fetch_add(1, Ordering::Relaxed);
            let _ = tcp.set_nodelay(true);
            on_accept(&meter);
            let Some(config) = &tls else {
                let conn = Guarded::new(CountingIo::new(tcp, meter), slot, limits.opening);
                if tx.send(Ok(Served::Plain(conn))).await.is_err() {
                    return; // the server stopped
                }
                continue;
            };
            let opening = Opening {
                tcp,
                meter,
                slot,
                deadline: limits.opening,
            };
            let turns = handshakes.clone();
            tokio::spawn(handshake(config.clone(), opening, turns, tx.clone()));
        }
    });
    ReceiverStream::new(rx)
}

/// An accepted connection before its TLS handshake.
struct Opening {
    tcp: TcpStream,
    meter: ConnMeter,
    slot: Slot,
    deadline: Duration,
}

/// The TLS handshake of an accepted connection, passed on to the server if it completes in
/// time. It waits for the client's first bytes before it takes one of the [`HANDSHAKES`]
/// turns: the turns bound the cores' work (thousands of handshakes at once, none ending in
/// time, is how a server of a hundred thousand clients ran out of sockets), and a connection
/// that never speaks must not hold one.
async fn handshake(
    config: Arc<rustls::ServerConfig>,
    opening: Opening,
    turns: Arc<Semaphore>,
    tx: mpsc::Sender<io::Result<Conn>>,
) {
    let Opening {
        tcp,
        meter,
        slot,
        deadline,
    } = opening;
    // Closed for a newcomer while waiting for its first bytes or a turn, or before its hello
    // is read whole.
    let evicted = slot.evicted();
    let shaken = tokio::time::timeout(deadline, async {
        tcp.readable().await?;
        let _turn = turns.acquire_owned().await.map_err(io::Error::other)?;
        let conn = Guarded::new(CountingIo::new(tcp, meter), slot, deadline);
        Served::accept(config, conn).await
    });
    let shaken = tokio::select! {
        shaken = shaken => shaken,
        () = evicted => Ok(Err(closed_for_a_newcomer())),
    };
    match shaken {
        Ok(Ok(conn)) => {
            let _ = tx.send(Ok(conn)).await;
        }
        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake did not complete in time"),
    }
}

/// The host an address counts for: an IPv4 address (also one mapped into IPv6), or an IPv6
/// address's /64, which one host usually holds whole.
fn host_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(prefix))
            }
        },
    }
}

fn closed_for_a_newcomer() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed for a newer connection: every slot was taken and this one held no client",
    )
}

/// A connection's place in both limits, given back when it closes.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    from: IpAddr,
    by_address: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    id: u64,
    evict: CancellationToken,
    meter: ConnMeter,
    unproved: Unproved,
}

impl Slot {
    /// Ready once the connection is closed for a newcomer.
    fn evicted(&self) -> WaitForCancellationFutureOwned {
        self.evict.clone().cancelled_owned()
    }

    fn proved(&self) -> bool {
        self.meter.proved()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.unproved
            .lock()
            .expect("unproved connections lock")
            .remove(&self.id);
        let mut by_address = self.by_address.lock().expect("address counts lock");
        if let Some(open) = by_address.get_mut(&self.from) {
            *open -= 1;
            if *open == 0 {
                by_address.remove(&self.from);
            }
        }
    }
}

pin_project_lite::pin_project! {
    pub struct Guarded<T> {
        #[pin]
        inner: T,
        slot: Slot,
        // Until the opening bytes are read (boxed: the connection must stay `Unpin`).
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        evicted: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
        read: usize,
    }
}

impl<T> Guarded<T> {
    fn new(inner: T, slot: Slot, opening: Duration) -> Self {
        Guarded {
            inner,
            evicted: Some(Box::pin(slot.evicted())),
            slot,
            deadline: Some(Box::pin(tokio::time::sleep(opening))),
            read: 0,
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
        // Closed for a newcomer until it proves a client; checked before anything it read.
        if this.slot.proved() {
            *this.evicted = None;
        } else if let Some(evicted) = this.evicted.as_mut()
            && evicted.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(closed_for_a_newcomer()));
        }
        let Some(deadline) = this.deadline else {
            return polled;
        };
        *this.read += buf.filled().len() - before;
        if *this.read >= OPENING_BYTES {
            *this.deadline = None;
            return polled;
        }
        // Checked on every poll, not only a pending one: bytes trickled one by one keep the
        // read ready, and must not keep the connection.
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the opening bytes did not come within the deadline",
            )));
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
            per_address: connections,
            opening: Duration::from_millis(300),
        }
    }

    const PREFACE: &[u8; OPENING_BYTES] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    /// `client` sends its opening bytes and the server's side of it reads them.
    async fn speak(client: &mut TcpStream, served: &mut Conn) {
        client.write_all(PREFACE).await.unwrap();
        let mut opening = [0u8; OPENING_BYTES];
        served.read_exact(&mut opening).await.unwrap();
    }

    /// The meters of the connections `incoming` accepts, in order.
    type Meters = Arc<std::sync::Mutex<Vec<ConnMeter>>>;

    fn metered(
        limits: Limits,
        gate: &Arc<Gate>,
    ) -> (
        ReceiverStream<io::Result<Conn>>,
        Meters,
        std::net::SocketAddr,
    ) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        let meters = Meters::default();
        let kept = meters.clone();
        let conns = incoming(listener, limits, gate.clone(), None, move |m| {
            kept.lock().unwrap().push(m.clone())
        });
        (conns, meters, addr)
    }

    /// A call on connection `k` answered for client 1, as the meter layer marks it.
    fn prove(meters: &Meters, k: usize) {
        let sink = flint_shell::meter::SharedLedger::default();
        let m = meters.lock().unwrap()[k].clone();
        m.call_starts(&sink, flint_shell::meter::Side::Server);
        m.reply_ready(&sink, flint_shell::meter::Side::Server, 1, 1);
    }

    /// With every slot taken, a newcomer takes the place of the oldest connection that has not
    /// proved a client, silent or not (closed at once, not at its deadline); a connection that
    /// has is never closed for one, and where every one has, the newcomer is refused.
    #[tokio::test]
    async fn a_newcomer_takes_the_place_of_the_oldest_connection_holding_no_client() {
        let slow = Limits {
            opening: Duration::from_secs(60),
            per_address: 8,
            ..limits(2)
        };
        let gate = Gate::new(&slow);
        let (mut conns, meters, addr) = metered(slow, &gate);
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut old = conns.next().await.unwrap().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let mut known = conns.next().await.unwrap().unwrap();
        speak(&mut client, &mut known).await;
        prove(&meters, 1);
        let mut byte = [0u8; 1];
        // A newcomer: the silent one goes.
        let mut talker = TcpStream::connect(addr).await.unwrap();
        let e = old.read(&mut byte).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
        drop(old);
        let mut talking = conns.next().await.unwrap().unwrap();
        speak(&mut talker, &mut talking).await;
        // Another: the one that spoke but holds no client goes, not the client's.
        let _late = TcpStream::connect(addr).await.unwrap();
        let e = talking.read(&mut byte).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
        drop(talking);
        let _admitted = conns.next().await.unwrap().unwrap();
        prove(&meters, 3);
        assert_eq!((gate.open(), gate.evicted(), gate.refused()), (2, 2, 0));
        // Both hold clients: the next is refused.
        let mut last = TcpStream::connect(addr).await.unwrap();
        assert_eq!(last.read(&mut byte).await.unwrap_or(0), 0, "closed");
        assert_eq!((gate.evicted(), gate.refused()), (2, 1));
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_a_talking_one_is_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = incoming(listener, limits(8), Gate::new(&limits(8)), None, |_| {});
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut talking = TcpStream::connect(addr).await.unwrap();
        let mut a = conns.next().await.unwrap().unwrap();
        let mut b = conns.next().await.unwrap().unwrap();
        speak(&mut talking, &mut b).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut byte = [0u8; 1];
        let e = a.read(&mut byte).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // The one that spoke may stay quiet as long as it likes.
        talking.write_all(b"y").await.unwrap();
        b.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
    }

    /// An opening trickled a byte at a time, each in time, still ends at the deadline.
    #[tokio::test]
    async fn an_opening_trickled_a_byte_at_a_time_is_closed_at_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = incoming(listener, limits(8), Gate::new(&limits(8)), None, |_| {});
        let mut slow = TcpStream::connect(addr).await.unwrap();
        let mut conn = conns.next().await.unwrap().unwrap();
        let started = std::time::Instant::now();
        let trickle = tokio::spawn(async move {
            for _ in 0..OPENING_BYTES {
                if slow.write_all(b"P").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let mut byte = [0u8; 1];
        let ended = loop {
            match conn.read(&mut byte).await {
                Ok(0) => break None,
                Ok(_) => continue,
                Err(e) => break Some(e.kind()),
            }
        };
        assert_eq!(ended, Some(io::ErrorKind::TimedOut));
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "closed at the deadline, not after the trickle"
        );
        trickle.abort();
    }

    #[test]
    fn an_ipv6_host_counts_by_its_64_and_a_mapped_ipv4_as_itself() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(host_of(a), host_of(b));
        assert_ne!(host_of(a), host_of(other));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(host_of(mapped), "10.0.0.7".parse::<IpAddr>().unwrap());
    }

    /// One address's connections past its share are closed; another address is
    /// still admitted, and a closed connection gives its address's place back.
    #[tokio::test]
    async fn one_address_cannot_take_every_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let capped = Limits {
            per_address: 2,
            ..limits(8)
        };
        let gate = Gate::new(&capped);
        let mut conns = incoming(listener, capped, gate.clone(), None, |_| {});
        let from = |ip: &str| {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
            socket.connect(addr)
        };
        let _a1 = from("127.0.0.2").await.unwrap();
        let _a2 = from("127.0.0.2").await.unwrap();
        let first = conns.next().await.unwrap().unwrap();
        let _second = conns.next().await.unwrap().unwrap();
        let mut a3 = from("127.0.0.2").await.unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            a3.read(&mut byte).await.unwrap_or(0),
            0,
            "the third from one address is closed"
        );
        let _b = from("127.0.0.3").await.unwrap();
        let other = conns.next().await.unwrap();
        assert!(other.is_ok(), "another address is admitted");
        assert_eq!((gate.open(), gate.refused()), (3, 1));
        drop(first);
        let _a4 = from("127.0.0.2").await.unwrap();
        assert!(
            conns.next().await.unwrap().is_ok(),
            "a place given back is taken again"
        );
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_until_one_ends() {
        let gate = Gate::new(&limits(1));
        let (mut conns, meters, addr) = metered(limits(1), &gate);
        let mut first = TcpStream::connect(addr).await.unwrap();
        let mut held = conns.next().await.unwrap().unwrap();
        // It holds a client: no newcomer takes its place.
        speak(&mut first, &mut held).await;
        prove(&meters, 0);
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
