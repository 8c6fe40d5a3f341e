//! The metrics listener's connections, bounded: whoever can reach the port holds at most
//! [`MAX_CONNECTIONS`] descriptors, each for at most [`CONNECTION_DEADLINE`], so idle sockets
//! there never take the descriptors the gRPC port needs (`axum::serve` caps neither).

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Scrapes served at once; a Prometheus server scrapes one at a time.
pub const MAX_CONNECTIONS: usize = 8;
/// How long a connection may take to send its request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may last, request and answer: a scrape takes milliseconds.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener`, one request per connection, until `stopped`.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stopped);
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "the metrics listener cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Closed at once: a connection over the cap holds nothing.
            tracing::debug!("metrics connection refused: {MAX_CONNECTIONS} already open");
            continue;
        };
        tokio::spawn(answer(stream, app.clone(), slot));
    }
}

async fn answer(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |request| app.clone().oneshot(request));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    if tokio::time::timeout(CONNECTION_DEADLINE, connection)
        .await
        .is_err()
    {
        tracing::debug!("metrics connection closed at its deadline");
    }
}
