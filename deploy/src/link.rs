//! Emulated links in user space, for machines whose kernel has no `sch_netem` (as this one):
//! a TCP relay that gives every connection through it its own link of the profile's bandwidth
//! and delay, each direction apart, as if each client sat behind its own access line.
//!
//! It shapes the byte stream, not packets: data is cut into segments of one MSS, each leaves
//! when the emulated line is free and arrives one delay later; a queue of more than
//! [`QUEUE`] stops the relay reading, so TCP's flow control slows the sender as a full router
//! queue would. Loss cannot be emulated on a byte stream (TCP below would hide it, and
//! retransmission is what loss costs), so the profiles here have none; `deploy/netem.sh` has
//! the packet-level ones, loss included, for kernels with netem. Delays are as fine as tokio's
//! timer (1 ms), so `lan`'s 0.25 ms each way is about 1 ms; a connection reset is passed on as a
//! close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use flint_common::config::LinkProfile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One TCP segment's worth of payload on an Ethernet path.
const SEGMENT: usize = 1448;
/// How much a line may have queued before the relay stops reading from its sender.
const QUEUE: Duration = Duration::from_millis(100);
/// Segments in flight on one line at most (about 6 MB).
const QUEUED_SEGMENTS: usize = 4096;

/// A link: its one-way delay and its rate each way (`None`: unlimited).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub one_way: Duration,
    pub up_bits_per_sec: Option<u64>,
    pub down_bits_per_sec: Option<u64>,
}

/// The profiles of `deploy/netem.sh`, without its loss: `lan` (1 Gbit/s, 0.5 ms RTT), `wan`
/// (20 Mbit/s both ways, 40 ms RTT), `mobile` (2 Mbit/s up, 10 Mbit/s down, 100 ms RTT).
pub fn of(profile: LinkProfile) -> Link {
    let link = |rtt_us: u64, up: u64, down: u64| Link {
        one_way: Duration::from_micros(rtt_us / 2),
        up_bits_per_sec: Some(up),
        down_bits_per_sec: Some(down),
    };
    match profile {
        LinkProfile::Lan => link(500, 1_000_000_000, 1_000_000_000),
        LinkProfile::Wan => link(40_000, 20_000_000, 20_000_000),
        LinkProfile::Mobile => link(100_000, 2_000_000, 10_000_000),
    }
}

/// A profile by name.
pub fn profile(name: &str) -> anyhow::Result<Link> {
    Ok(of(name.parse()?))
}

/// The bytes a relay delivered each way, over all its connections.
#[derive(Debug, Default)]
pub struct Carried {
    pub up: Arc<AtomicU64>,
    pub down: Arc<AtomicU64>,
}

/// Relays every connection made to `listener` to `to` over its own emulated `link` until the
/// process ends.
pub async fn relay(listener: TcpListener, to: SocketAddr, link: Link, carried: Arc<Carried>) {
    loop {
        let inbound = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "link relay: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (up, down) = (carried.up.clone(), carried.down.clone());
        tokio::spawn(async move {
            let outbound = match TcpStream::connect(to).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, %to, "link relay: cannot reach the server");
                    return;
                }
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (client_r, client_w) = inbound.into_split();
            let (server_r, server_w) = outbound.into_split();
            tokio::join!(
                line(client_r, server_w, (link.up_bits_per_sec, link.one_way), up),
                line(
                    server_r,
                    client_w,
                    (link.down_bits_per_sec, link.one_way),
                    down
                ),
            );
        });
    }
}

/// One direction of a link: bytes read from `from` reach `to` after their serialisation at
/// `rate` behind what the line already carries, plus `delay`; `delivered` counts them.
async fn line(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    (rate, delay): (Option<u64>, Duration),
    delivered: Arc<AtomicU64>,
) {
    // Bounded: a receiver slower than the line holds the relay's reading back, not its memory.
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUED_SEGMENTS);
    let deliver = tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
            delivered.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        let _ = to.shutdown().await;
    });
    let mut free_at = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        for segment in buf[..n].chunks(SEGMENT) {
            let start = free_at.max(now);
            let serialise = rate.map_or(Duration::ZERO, |bps| {
                Duration::from_secs_f64(segment.len() as f64 * 8.0 / bps as f64)
            });
            free_at = start + serialise;
            if tx.send((free_at + delay, segment.to_vec())).await.is_err() {
                return;
            }
        }
        if free_at > now + QUEUE {
            tokio::time::sleep_until(free_at - QUEUE).await;
        }
    }
    drop(tx);
    let _ = deliver.await;
}

/// Starts a relay to `to` on a thread of its own (for `flint run`, which is not async);
/// returns the address clients should use instead of the server's, and its byte counts.
pub fn spawn(link: Link, to: SocketAddr) -> anyhow::Result<(SocketAddr, Arc<Carried>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the link relay")?;
    let listener = rt
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .context("the link relay cannot listen")?;
    let addr = listener.local_addr()?;
    let carried = Arc::new(Carried::default());
    let counts = carried.clone();
    std::thread::Builder::new()
        .name("link-relay".into())
        .spawn(move || rt.block_on(relay(listener, to, link, counts)))
        .context("cannot start the link relay")?;
    Ok((addr, carried))
}

/// `flint link`: the relay on its own, e.g. in front of a server on another host.
#[derive(Debug, Clone, clap::Args)]
pub struct LinkArgs {
    /// `lan`, `wan` or `mobile` (see `flint run --link`).
    #[arg(long)]
    pub profile: String,
    /// Where clients connect.
    #[arg(long)]
    pub listen: SocketAddr,
    /// The server the relay forwards to.
    #[arg(long)]
    pub to: SocketAddr,
}

pub fn serve(args: LinkArgs) -> anyhow::Result<()> {
    let link = profile(&args.profile)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        eprintln!(
            "link {}: {} → {} ({link:?})",
            args.profile, args.listen, args.to
        );
        tokio::select! {
            _ = relay(listener, args.to, link, Default::default()) => Ok(()),
            signal = flint_shell::signal::interrupted() => {
                eprintln!("link: stopped by {signal}");
                Ok(())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A megabyte through a 20 Mbit/s, 40 ms RTT line takes its serialisation (0.42 s) plus the
    /// one-way delay, and arrives whole and in order.
    #[tokio::test]
    async fn a_line_delays_and_paces_its_bytes() {
        let (a, mut b) = tokio::io::duplex(1 << 22);
        let (mut c, d) = tokio::io::duplex(1 << 22);
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let start = std::time::Instant::now();
        tokio::spawn(async move {
            b.write_all(&sent).await.unwrap();
            b.shutdown().await.unwrap();
        });
        let delivered = Arc::new(AtomicU64::new(0));
        let line = line(
            a,
            d,
            (Some(20_000_000), Duration::from_millis(20)),
            delivered.clone(),
        );
        tokio::spawn(line);
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        let took = start.elapsed().as_secs_f64();
        assert_eq!(got, data);
        assert_eq!(delivered.load(Ordering::Relaxed), 1_000_000);
        // No faster than the line allows: 8e6 bits at 2e7 bit/s, plus 20 ms.
        assert!(took >= 0.42, "{took}");
    }

    #[test]
    fn profiles_are_the_netem_scripts() {
        let m = profile("mobile").unwrap();
        assert_eq!(m.one_way, Duration::from_millis(50));
        assert_eq!(
            (m.up_bits_per_sec, m.down_bits_per_sec),
            (Some(2_000_000), Some(10_000_000))
        );
        assert!(profile("dialup").is_err());
    }
}
