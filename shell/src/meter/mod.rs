//! Byte counters for the I/O shells (feature `shell`). They count and never touch the logic:
//! [`CountingIo`] wraps a connection (socket level), [`MessageMeterLayer`] wraps gRPC bodies
//! (message level), [`LinkMeter`] reads a network namespace's interface counters (link level).
//! They report to a [`MeterSink`], attributed to (client, round) through the
//! `flint-client-id` / `flint-round` headers.

mod io;
mod layer;
mod link;

pub use io::{ConnMeter, CountingIo};
pub use layer::{MessageMeter, MessageMeterLayer};
pub use link::LinkMeter;

use flint_common::wire::ledger::{Direction, Ledger};
use flint_common::{ClientId, Round};

/// Which end of the connection counts: decides whether bytes read are up or down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// Where counted bytes go; `up` is client → server on both sides.
pub trait MeterSink: Send + Sync + 'static {
    fn message_bytes(&self, method: &str, client: ClientId, round: Round, up: u64, down: u64);
    fn socket_bytes(&self, client: ClientId, round: Round, up: u64, down: u64);
    fn link_bytes(&self, client: ClientId, round: Round, up: u64, down: u64);
}

/// A byte ledger behind a lock: one per server, one per client; also the sink of their meters.
#[derive(Debug, Default)]
pub struct SharedLedger(std::sync::Mutex<Ledger>);

impl SharedLedger {
    pub fn with<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        f(&mut self.0.lock().expect("ledger lock"))
    }

    pub fn snapshot(&self) -> Ledger {
        self.with(|l| l.clone())
    }
}

impl MeterSink for SharedLedger {
    fn message_bytes(&self, method: &str, client: ClientId, round: Round, up: u64, down: u64) {
        self.with(|l| {
            l.message(method, client, round, Direction::Up, up);
            l.message(method, client, round, Direction::Down, down);
        });
    }

    fn socket_bytes(&self, client: ClientId, round: Round, up: u64, down: u64) {
        self.with(|l| {
            l.socket(client, round, Direction::Up, up);
            l.socket(client, round, Direction::Down, down);
        });
    }

    fn link_bytes(&self, client: ClientId, round: Round, up: u64, down: u64) {
        self.with(|l| {
            l.link(client, round, Direction::Up, up);
            l.link(client, round, Direction::Down, down);
        });
    }
}
