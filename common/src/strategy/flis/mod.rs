//! FLIS, clustered FL by inference similarity (Morafah et al. 2023), as TPFL Table 5 ran it
//! from the authors' code: the server holds a few images of every class of the test split, runs every uploaded
//! network on it, and calls two clients similar when their networks predict the same class for
//! the same images. Each client's cluster is its neighbourhood — itself and every client at
//! least `threshold` similar — and it downloads the mean of its neighbourhood's networks.
//! FLIS-DC forms the neighbourhoods again every round; FLIS-HC forms them once, from the first
//! round's networks, and keeps them (a client first seen later gets its own when it is).
//!
//! One job a file: `section` (`[flis]`), `similarity` (the matrix and the neighbourhoods),
//! `server`, `strategy` (`flis` as the framework runs it), `tests`.

mod section;
mod server;
mod similarity;
mod strategy;
#[cfg(test)]
mod tests;

pub use section::*;
pub use server::*;
pub use similarity::*;
pub use strategy::*;
