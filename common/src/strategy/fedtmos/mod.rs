//! FedTMOS's server, step by step (FedTMOS §4.2, Algorithms 1–3; what the published code does:
//! docs/papers/fedtmos.md §6–§11). Pure functions of the clients' uploads; the strategy halves and the
//! wire format build on them.
//!
//! 1. Every client's `GiniIndex` g_j = Σ_c p²; x = mean g_j if it exceeds σ, else 1.
//! 2. Scaling: θ'_{j,c} = ⌊x · θ_{j,c} · n_{j,c} / n_j⌋, in float64, truncated once (the code's
//!    `u32(...)`; the paper has clients scale by n_{j,c}/n_j, which would truncate twice).
//! 3. The vectors entering k-means: one per (client, class it holds), class-major and in
//!    client-id order within a class (the code permutes them with numpy's global generator);
//!    with `filter`, only those whose mean scaled weight floors above 0 (the code's
//!    undocumented filter).
//! 4. k-means (`model::kmeans`), k = min(vectors − 1, k_max), seeded from the run.
//! 5. Reassignment into φ server models (Algorithm 2, as the code runs it): clusters with the
//!    fewest distinct classes first; each (client, class) goes to the model without that class
//!    whose average linkage (eq. 5) it raises to the largest value (an empty model counts as
//!    0); if every model holds the class, to the model with the fewest distinct classes, and on
//!    a tie the one that took the fewest clusters ("least overlapping clusters", §4.2.2: the code
//!    compares a cluster id with class counts here, a bug fixed by default). Then every model
//!    holding fewer than 2 classes takes the missing ones from clusters it has not taken, the
//!    combination of largest linkage, each under a client that holds the class (the code takes
//!    the cluster's first client whether or not it holds it, averaging in zeros: fixed by
//!    default, `fill_from = "cluster-first"` does as the code).
//! 6. Averaging (Algorithm 3): per model and class, the truncated mean of the contributors'
//!    scaled weights, and the OR of the include bits of the top K contributors (K = 2) ranked
//!    by their samples of that class (the paper) or by their mean scaled weight (the code).

mod averaging;
mod client;
mod clustering;
mod ensemble;
mod local;
mod machines;
mod scaling;
mod section;
mod server;
mod strategy;
#[cfg(test)]
mod tests;

pub use averaging::*;
pub use client::*;
pub use clustering::*;
pub use ensemble::*;
pub(crate) use local::*;
pub(crate) use machines::*;
pub use scaling::*;
pub use section::*;
pub use server::*;
pub use strategy::*;
