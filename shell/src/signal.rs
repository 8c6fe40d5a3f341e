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

/// A stop signal, remembered: [`Stop::received`] resolves at SIGINT or SIGTERM whenever it came,
/// even before the call (a signal that ends a server's run must also end what follows it, such
/// as the metrics linger).
#[derive(Clone)]
pub struct Stop(tokio::sync::watch::Receiver<Option<&'static str>>);

impl Stop {
    /// Starts listening now (inside a runtime).
    pub fn listen() -> Stop {
        let (tx, rx) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            let signal = interrupted().await;
            let _ = tx.send(Some(signal));
            // Keep the sender: a closed channel would look like no signal at all.
            std::future::pending::<()>().await
        });
        Stop(rx)
    }

    /// The signal received so far, if any.
    pub fn received_yet(&self) -> Option<&'static str> {
        *self.0.borrow()
    }

    /// Resolves with the signal once one has come.
    pub async fn received(&mut self) -> &'static str {
        let got = self.0.wait_for(Option::is_some).await.ok().and_then(|s| *s);
        match got {
            Some(signal) => signal,
            None => std::future::pending().await,
        }
    }
}
