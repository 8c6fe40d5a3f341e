use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::{ConnMeter, LinkMeter, MeterSink, Side};
use flint_common::wire::{CLIENT_HEADER, ROUND_HEADER};

type OnDrop = Box<dyn FnOnce(u64) + Send>;

pin_project_lite::pin_project! {
    /// A body whose data bytes (gRPC frames: 5-byte header + message) are counted.
    pub struct CountingBody<B> {
        #[pin]
        inner: B,
        count: Arc<AtomicU64>,
        on_drop: Option<OnDrop>,
    }

    impl<B> PinnedDrop for CountingBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(f) = this.on_drop.take() {
                f(this.count.load(Ordering::Relaxed));
            }
        }
    }
}

impl<B> CountingBody<B> {
    fn new(inner: B, count: Arc<AtomicU64>, on_drop: Option<OnDrop>) -> Self {
        CountingBody {
            inner,
            count,
            on_drop,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for CountingBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let res = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &res
            && let Some(data) = frame.data_ref()
        {
            this.count.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Counts gRPC body bytes per call and reports them when the response body is dropped.
///
/// On the server the bytes read are attributed when a call's reply is ready (they hold its
/// request) and the bytes written when the next call starts (a client's calls on one
/// connection are sequential, so by then the reply has left); on the client both are
/// attributed when the response has been read to its end.
#[derive(Clone)]
pub struct MessageMeterLayer {
    sink: Arc<dyn MeterSink>,
    side: Side,
    conn: Option<ConnMeter>,
    /// The client's network namespace, when the client is alone in it.
    link: Option<Arc<LinkMeter>>,
}

impl MessageMeterLayer {
    pub fn server(sink: Arc<dyn MeterSink>) -> Self {
        MessageMeterLayer {
            sink,
            side: Side::Server,
            conn: None,
            link: None,
        }
    }

    /// `conn` is the meter of the client's one connection.
    pub fn client(sink: Arc<dyn MeterSink>, conn: ConnMeter) -> Self {
        MessageMeterLayer {
            sink,
            side: Side::Client,
            conn: Some(conn),
            link: None,
        }
    }

    /// Also attributes the namespace's interface bytes after each call (client side).
    pub fn with_link(mut self, link: Option<Arc<LinkMeter>>) -> Self {
        self.link = link;
        self
    }
}

impl<S> tower_layer::Layer<S> for MessageMeterLayer {
    type Service = MessageMeter<S>;

    fn layer(&self, inner: S) -> MessageMeter<S> {
        MessageMeter {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct MessageMeter<S> {
    inner: S,
    layer: MessageMeterLayer,
}

fn header_u32(h: &http::HeaderMap, name: &str) -> Option<u32> {
    h.get(name)?.to_str().ok()?.parse().ok()
}

impl<S, ResBody> tower_service::Service<http::Request<tonic::body::Body>> for MessageMeter<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<CountingBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let MessageMeterLayer {
            sink,
            side,
            conn,
            link,
        } = self.layer.clone();
        let conn = match side {
            // The server's connections carry their meter with the peer's certificates.
            Side::Server => req.extensions().get::<ConnMeter>().cloned().or_else(|| {
                req.extensions()
                    .get::<crate::tls::server::ConnInfo>()
                    .map(|info| info.meter.clone())
            }),
            Side::Client => conn,
        };
        if side == Side::Server
            && let Some(c) = &conn
        {
            c.call_starts(&*sink, side);
        }
        let method = match side {
            Side::Server => known_method(req.uri().path()).to_string(),
            Side::Client => req.uri().path().to_string(),
        };
        // The server trusts only its own labels (set on the replies it accepts): a request's
        // headers are whatever the caller wrote, and counting by them let made-up client ids
        // grow the ledger without bound. A refused call's bytes go to client 0, round 0.
        let (req_client, req_round) = match side {
            Side::Client => (
                header_u32(req.headers(), CLIENT_HEADER),
                header_u32(req.headers(), ROUND_HEADER),
            ),
            Side::Server => (None, None),
        };
        let up = Arc::new(AtomicU64::new(0));
        let up_body = up.clone();
        let req = req.map(move |b| tonic::body::Body::new(CountingBody::new(b, up_body, None)));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            let client = header_u32(resp.headers(), CLIENT_HEADER)
                .or(req_client)
                .unwrap_or(0);
            let round = header_u32(resp.headers(), ROUND_HEADER)
                .or(req_round)
                .unwrap_or(0);
            if side == Side::Server
                && let Some(c) = &conn
            {
                c.reply_ready(&*sink, side, client, round);
            }
            let on_drop: OnDrop = Box::new(move |down| {
                sink.message_bytes(&method, client, round, up.load(Ordering::Relaxed), down);
                if side == Side::Client
                    && let Some(c) = conn
                {
                    c.flush_to(&*sink, side, client, round);
                    if let Some(l) = &link {
                        l.flush_to(&*sink, client, round);
                    }
                }
            });
            Ok(resp.map(|b| CountingBody::new(b, Arc::new(AtomicU64::new(0)), Some(on_drop))))
        })
    }
}

/// The methods the server serves; any other path a caller makes up is counted as `other`, so
/// the ledger's per-method table stays as small as the service.
const KNOWN_METHODS: [&str; 9] = [
    "/flint.v1.Aggregator/Join",
    "/flint.v1.Aggregator/Claim",
    "/flint.v1.Aggregator/GetRound",
    "/flint.v1.Aggregator/PushUpdate",
    "/flint.v1.Aggregator/ReportEval",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

fn known_method(path: &str) -> &str {
    KNOWN_METHODS
        .iter()
        .find(|m| **m == path)
        .copied()
        .unwrap_or("other")
}
