//! FedProx (Li et al. 2020, Algorithm 2 and Eq. 2): FedAvg's server, and clients whose local
//! objective adds μ/2 ‖w − w_global‖², which keeps heterogeneous clients near the global model.
//! TPFL §6.6 runs it with μ = 0.1, Table 5's FedProx row.

//!
//! One job a file: `section` (`[fedprox]`), `strategy` (`fedprox` as the framework runs it).

mod section;
mod strategy;

pub use section::*;
pub use strategy::*;
