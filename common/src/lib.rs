//! Flint's core: everything the server and the clients share, and no network code.
//!
//! The algorithm of every strategy lives here as plain functions of their inputs (the raft-rs
//! pattern): the `flint-server` and `flint-client` crates only move bytes, keep time and persist.

pub mod clients;
pub mod config;
pub mod data;
pub mod degenerate;
pub mod error;
pub mod hex;
pub mod link;
pub mod metrics;
pub mod model;
pub mod parallel;
pub mod params;
pub mod rng;
pub mod secagg;
pub mod strategy;
pub mod text;
pub mod wire;

pub use error::{FlintError, Result};

/// A client's id in a run: its 1-based position in the experiment's `[[clients]]` list, so
/// aggregation order (always by id) does not depend on which process joined first.
pub type ClientId = u32;

/// A round number; rounds count from 1, and 0 is the join phase in the byte ledger.
pub type Round = u32;
