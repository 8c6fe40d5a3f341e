//! Stop signals for the shells: a server or client may be PID 1 in a container, where a signal
//! with no handler is ignored and `docker stop` would wait for its SIGKILL.

/// Resolves at SIGINT or SIGTERM, with the signal's name.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return tokio::signal::ctrl_c().await.map_or("none", |_| "SIGINT"),
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
