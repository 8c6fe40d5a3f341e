//! TPFL (TPFL §5, Algorithms 1 and 2; what its code does: docs/papers/tpfl.md): a client's
//! confidence winner, the server's clustering by winning class and per-cluster averaging, and
//! the two strategy halves built on them.
//!
//! Rounding: the server rounds each cluster's mean to integer weights (`nearest` by default,
//! `truncate` as the code's integer cast) and sends those, so every member applies the same
//! vector and the download is packed `sint32`.
//!
//! One job a file: `section` (`[tpfl]` and its choices), `clustering` (Algorithm 2's steps),
//! `server` and `client` (the two strategy halves), `private` (the clusters under central
//! `[dp]`), `strategy` (as the framework runs it), `tests`.

mod client;
mod clustering;
mod private;
mod section;
mod server;
mod strategy;
#[cfg(test)]
mod tests;

pub use client::*;
pub use clustering::*;
pub use section::*;
pub use server::*;
