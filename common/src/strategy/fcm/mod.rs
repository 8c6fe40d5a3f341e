//! Blind and Blended Blind federated learning of FCMs (Blind FL, "Federated learning for FCMs"
//! steps 1–8; "Aggregation methods" eq. 9–13).
//!
//! Round 1 has no download: there is no initial model (step 1). Each client trains its map by
//! PSO, seeded with the map it holds from round 2 on (steps 2, 6), and uploads it with its
//! accuracy and precision on its own test split (step 3). The server averages the matrices with
//! equal, accuracy- or precision-proportional weights (step 4) and broadcasts the result. A blind
//! client takes the global map as its new local map; a blended one the element-wise mean of the
//! global and its previous local map (step 5).
//!
//! One job a file: `section` (`[fcm]`, the aggregation rule, the checked settings), `server`
//! and `client` (the two strategy halves), `strategy` (`blind-fcm` and `blended-fcm` as the
//! framework runs them), `secure` (step 4 under `[secagg]`), `tests`.

mod client;
mod section;
mod secure;
mod server;
mod strategy;
#[cfg(test)]
mod tests;

pub use client::*;
pub use section::*;
pub use server::*;
pub use strategy::*;
