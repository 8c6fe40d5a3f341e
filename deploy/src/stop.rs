//! SIGTERM or SIGINT to `flint run` or `flint grid`: the server and client processes it started
//! are stopped with it, never left running behind it.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Watches for SIGTERM and SIGINT on a thread of its own; [`requested`] then says so.
pub fn install() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Registered here, before this returns, so that no signal slips through at start.
    let (mut term, mut int) = rt.block_on(async {
        Ok::<_, std::io::Error>((
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        ))
    })?;
    std::thread::spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        });
        STOP.store(true, Ordering::SeqCst);
    });
    Ok(())
}

/// A stop was asked for: kill what was started and return.
pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
