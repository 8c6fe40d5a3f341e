//! IFCA, the Iterative Federated Clustering Algorithm (Ghosh et al. 2020, Algorithm 2, model
//! averaging): the server keeps k networks and sends all of them every round; each client
//! takes the one with the lowest loss on its own training data (its cluster estimate), trains
//! it and uploads it with its cluster; the server averages each cluster's uploads (weights
//! n_k / n within the cluster) and keeps a cluster's network where no client chose it.
//! TPFL Table 5's IFCA row.
//!
//! One job a file: `section` (`[ifca]`), `server`, `client`, `strategy` (`ifca` as the
//! framework runs it), `tests`.

mod client;
mod section;
mod server;
mod strategy;
#[cfg(test)]
mod tests;

pub use client::*;
pub use section::*;
pub use server::*;
pub use strategy::*;
