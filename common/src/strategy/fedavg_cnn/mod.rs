//! FedAvg of a convolutional network (McMahan et al. 2017, Algorithm 1: w = Σ_k n_k/n w_k):
//! TPFL Table 5's FedAvg row, and the model FedProx and IFCA train.
//!
//! One job a file: `server` (the weighted mean of the networks), `client` (local SGD, with
//! FedProx's proximal term where asked), `strategy` (`fedavg-cnn` as the framework runs it).

mod client;
mod server;
mod strategy;
#[cfg(test)]
pub(crate) mod tests;

pub use client::*;
pub use server::*;
pub use strategy::*;
