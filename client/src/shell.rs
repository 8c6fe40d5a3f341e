//! What a process's clients share: the server's address and TLS, each client's connection
//! (every byte counted), its slot (claimed where `--name auto`) and its credentials.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flint_common::ClientId;
use flint_common::config::Experiment;
use flint_common::wire::chunks::MAX_CHUNK;
use flint_common::wire::ledger::Direction;
use flint_common::wire::proto::ClaimRequest;
use flint_shell::meter::{ConnMeter, CountingIo, LinkMeter, MessageMeterLayer, SharedLedger};
use flint_shell::tls::client::TlsDial;
use flint_shell::tls::records::Records;
use hyper_util::rt::TokioIo;
use prost::Message;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;
use tonic::Request;
use tonic::transport::{Channel, Endpoint};

use crate::identity::{
    AUTO, Credentials, Enroll, give_back_secret, host_name, kept_token, new_token, take_secret,
    with_host,
};
use crate::proto::aggregator_client::AggregatorClient;
use crate::retry::{JOIN_ATTEMPT, retry_bounded};
use crate::tls::ClientTls;

pub(crate) type Slots = BTreeMap<ClientId, (String, Credentials, Conn)>;

pub(crate) type Grpc =
    AggregatorClient<flint_shell::meter::MessageMeter<flint_shell::end_stream::EndStream<Channel>>>;

/// What every client of this process shares.
pub(crate) struct Shell {
    pub server: String,
    pub tls: ClientTls,
    pub link: Option<Arc<LinkMeter>>,
    pub experiment: Arc<Experiment>,
    /// Limits how many clients train at once, so many clients share the cores without
    /// thrashing them.
    pub trainers: Arc<tokio::sync::Semaphore>,
    pub retry_for: Duration,
    /// `--out`, where each client's bytes so far go after every round it reports on.
    pub out: Option<std::path::PathBuf>,
    pub enroll: Enroll,
    /// Turns at opening a connection ([`HANDSHAKES`] at once).
    pub handshakes: Arc<tokio::sync::Semaphore>,
    /// Turns at joining ([`JOINS`] at once).
    pub joins: Arc<tokio::sync::Semaphore>,
}

/// One client's connection (every reconnect counted by one meter) and its byte ledger.
pub(crate) struct Conn {
    pub grpc: Grpc,
    pub ledger: Arc<SharedLedger>,
    pub dialer: Dialer,
}

/// How long a connection (TCP and TLS handshake) may take once it is its turn.
const CONNECT: Duration = Duration::from_secs(5);

/// Connections a process opens at once: a thousand clients of one process joining together
/// would otherwise each start a handshake, time out behind the others on a busy server, and
/// start again, the server's work on the first ones wasted.
pub(crate) const HANDSHAKES: usize = 8;

/// Joins a process has in flight at once, each holding a connection until answered.
pub(crate) const JOINS: usize = 8;

/// What makes a client's connection, kept to make it again after the client stayed away
/// (counted by the same meter, booked in the same ledger).
#[derive(Clone)]
pub(crate) struct Dialer {
    endpoint: Endpoint,
    tls: Option<TlsDial>,
    handshakes: Arc<tokio::sync::Semaphore>,
    meter: ConnMeter,
    ledger: Arc<SharedLedger>,
    link: Option<Arc<LinkMeter>>,
    experiment: Arc<Experiment>,
    max_download: usize,
}

impl Dialer {
    /// A connection made at its first call (lazily: a client that stays away holds none).
    pub(crate) fn dial(&self) -> Grpc {
        let (meter, tls, handshakes) = (
            self.meter.clone(),
            self.tls.clone(),
            self.handshakes.clone(),
        );
        let connector = tower::service_fn(move |uri: http::Uri| {
            let (meter, tls, handshakes) = (meter.clone(), tls.clone(), handshakes.clone());
            async move {
                let _turn = handshakes.acquire_owned().await;
                let io = tokio::time::timeout(CONNECT, connect(uri, meter, tls))
                    .await
                    .map_err(|_| {
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no connection within {} s", CONNECT.as_secs()),
                        )
                    })??;
                Ok::<_, std::io::Error>(TokioIo::new(io))
            }
        });
        let channel = self.endpoint.connect_with_connector_lazy(connector);
        let layer = MessageMeterLayer::client(self.ledger.clone(), self.meter.clone())
            .with_link(self.link.clone());
        let svc = tower::ServiceBuilder::new()
            .layer(layer)
            .layer(flint_shell::end_stream::EndStreamLayer)
            .service(channel);
        let mut grpc = AggregatorClient::new(svc).max_decoding_message_size(self.max_download);
        if let Some(enc) = flint_shell::compression::encoding(self.experiment.compression) {
            grpc = grpc.send_compressed(enc).accept_compressed(enc);
        }
        grpc
    }
}

/// TCP to `uri`'s host and port, counted by `meter`, and TLS over it where the client has
/// settings for it.
async fn connect(
    uri: http::Uri,
    meter: ConnMeter,
    tls: Option<TlsDial>,
) -> std::io::Result<Either<CountingIo<TcpStream>, Records<TlsStream<CountingIo<TcpStream>>>>> {
    let host = uri
        .host()
        .unwrap_or("127.0.0.1")
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(80);
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    let counted = CountingIo::new(tcp, meter);
    Ok(match tls {
        Some(tls) => Either::Right(tls.connect(counted).await?),
        None => Either::Left(counted),
    })
}

impl Shell {
    /// Every client's connection and token, by id; an `auto` one asks for its slot, since which
    /// data it loads depends on it. Tokens are kept in `out`, so that a client started again is
    /// still itself (an `auto` one by host and position: containers may share `out`). A client
    /// refused here (no secret left, a claim refused) ends alone, what it took given back, and
    /// is listed with why; with `fail_fast` it ends the process.
    pub(crate) async fn slots(
        &self,
        names: &[String],
        out: Option<&std::path::Path>,
        fail_fast: bool,
    ) -> anyhow::Result<(Slots, Vec<String>)> {
        let (mut slots, mut failed) = (BTreeMap::new(), Vec::new());
        let mut autos = 0;
        for name in names {
            let stem = if name == AUTO {
                autos += 1;
                format!("auto-{}-{autos}", host_name())
            } else {
                format!("client-{name}")
            };
            let (id, slot) = match self.slot(name, &stem, out).await {
                Ok(slot) => slot,
                Err(e) if fail_fast => return Err(e),
                Err(e) => {
                    let e = format!("client {name:?}: {e:#}");
                    tracing::error!(error = %e, "client refused before joining; the others go on");
                    failed.push(e);
                    continue;
                }
            };
            if slots.insert(id, slot).is_some() {
                bail!("client {name:?} is named twice");
            }
        }
        Ok((slots, failed))
    }

    /// One client's slot: its token, its enrollment secret, and for an `auto` one the slot the
    /// server gives it; a secret it took is given back if the claim fails.
    async fn slot(
        &self,
        name: &str,
        stem: &str,
        out: Option<&std::path::Path>,
    ) -> anyhow::Result<(ClientId, (String, Credentials, Conn))> {
        let conn = self.connect(name)?;
        let token = match out {
            Some(dir) => kept_token(&dir.join(format!("{stem}.token")))?,
            None => new_token(),
        };
        let creds = Credentials {
            enrollment: self.enrollment(&token)?,
            token,
        };
        if name != AUTO {
            let id = self
                .experiment
                .client_id(name)
                .expect("checked by client_names");
            return Ok((id, (name.to_string(), creds, conn)));
        }
        match self.claim(&conn, &creds).await {
            Ok((name, id)) => Ok((id, (name, creds, conn))),
            Err(e) => {
                if let Enroll::Dir(dir) = &self.enroll {
                    give_back_secret(dir, &creds.token);
                }
                Err(e)
            }
        }
    }

    /// The enrollment secret of the client holding `token`: none, the one given, or the one
    /// it takes (or took before) from the directory.
    fn enrollment(&self, token: &str) -> anyhow::Result<String> {
        match &self.enroll {
            Enroll::None => Ok(String::new()),
            Enroll::Secret(s) => Ok(s.clone()),
            Enroll::Dir(dir) => take_secret(dir, token),
        }
    }

    /// A connection for the client `name` (`auto` for one that asks for its slot).
    fn connect(&self, name: &str) -> anyhow::Result<Conn> {
        let (address, tls) = self.tls.for_client(name)?.dial(&self.server)?;
        let endpoint = Endpoint::from_shared(address.clone())
            .with_context(|| format!("bad server address {address:?}"))?
            .tcp_nodelay(true)
            // A ping after 30 s without a frame from the server (a dead server is noticed within
            // 50 s); at 10 s, a client waiting out its peers' training pinged in most rounds.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        // Every connection this client makes (reconnects too) is counted by one meter.
        let ledger = Arc::new(SharedLedger::default());
        let dialer = Dialer {
            endpoint,
            tls,
            handshakes: self.handshakes.clone(),
            meter: ConnMeter::default(),
            ledger: ledger.clone(),
            link: self.link.clone(),
            experiment: self.experiment.clone(),
            max_download: self.max_download_bytes(),
        };
        Ok(Conn {
            grpc: dialer.dial(),
            ledger,
            dialer,
        })
    }

    /// The largest download this run can send, from the experiment (an ensemble's grows with
    /// its clients); where a CSV's features are not in it, a generous 1 GiB.
    fn max_download_bytes(&self) -> usize {
        let e = &self.experiment;
        let largest = e.data.features().map_or(1 << 30, |f| {
            e.strategy
                .max_download_bytes(f, e.data.classes().len(), e.clients.len())
        });
        usize::try_from(largest)
            .unwrap_or(usize::MAX)
            .max(2 * MAX_CHUNK)
    }

    /// Asks the server which slot this token may hold (`--name auto`).
    async fn claim(&self, conn: &Conn, creds: &Credentials) -> anyhow::Result<(String, ClientId)> {
        let ask = ClaimRequest {
            experiment_fingerprint: self.experiment.fingerprint.clone(),
            token: creds.token.clone(),
            enrollment: creds.enrollment.clone(),
        };
        let reply = retry_bounded(self.retry_for, JOIN_ATTEMPT, "claim", || {
            let mut g = conn.grpc.clone();
            let req = with_host(Request::new(ask.clone()));
            async move { g.claim(req).await }
        })
        .await
        .map_err(|s| anyhow::anyhow!("cannot claim a client slot: {}", s.message()))?;
        let name = &reply.client_name;
        if self.experiment.client_id(name) != Some(reply.client_id) {
            bail!(
                "the server gave slot {} named {name:?}, which this experiment does not declare",
                reply.client_id
            );
        }
        conn.ledger.with(|l| {
            l.payload(reply.client_id, 0, Direction::Up, ask.encoded_len(), 0);
            l.payload(reply.client_id, 0, Direction::Down, reply.encoded_len(), 0);
        });
        tracing::info!(client = reply.client_id, name = %name, "client slot claimed");
        Ok((reply.client_name, reply.client_id))
    }
}
