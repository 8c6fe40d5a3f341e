//! One-shot federations of a convolutional network, FedTMOS Table 1's CNN baselines: every
//! client trains once from the run's initial network and uploads it, with what its server rule
//! needs of its rows; the server combines the networks in one aggregation:
//!
//! - `fedavg`: the n_k-weighted mean after one round (McMahan et al. 2017);
//! - `ensemble`: Fed-OneShot (Guha et al. 2019), every client's network, predicting together;
//! - `regmean`: RegMean (Jin et al. 2023), each dense layer solved in closed form from the
//!   Gram matrices of its inputs, which the clients upload;
//! - `fedfisher`: FedFisher (Jhunjhunwala et al.), the diagonal-Fisher-weighted mean;
//! - `ot-fusion`: OT-Fusion (Singh & Jaggi 2020), neurons aligned layer by layer to one
//!   client's network by exact optimal transport, then averaged;
//! - `dense`: DENSE (Zhang et al. 2022a), a student distilled on the server from the ensemble
//!   on images a generator makes, the one rule that trains on the server.
//!
//! With `oneshot.uploads = "every-rule"` the clients send both statistics, so `flint replay
//! --set oneshot.rule=…` runs every rule on one training (`server.keep_updates`).
//!
//! One job a file: `section` (`[oneshot]`), one file per rule, `client`, `server`, `strategy`
//! (`oneshot-cnn` as the framework runs it), `tests`.

mod client;
mod dense;
mod ensemble;
mod fisher;
mod ot_fusion;
mod regmean;
mod section;
mod server;
mod strategy;
#[cfg(test)]
mod tests;

pub use client::*;
pub use ensemble::*;
pub use section::*;
pub use server::*;
pub use strategy::*;
