//! FedAvg (AHP paper §3.5) and its AHP-weighted variant (§3.6): w = Σ_k A_k w_k, with
//! A_k = n_k / n or the AHP client weight, computed over the clients that answered the round.
//!
//! One job a file: `server` (the weighted mean), `client` (the local logistic regression),
//! `strategy` (`fedavg` and `fedavg-ahp` as the framework runs them), `tests`.

mod client;
mod server;
mod strategy;
#[cfg(test)]
mod tests;

pub use client::*;
pub use server::*;
pub use strategy::*;
