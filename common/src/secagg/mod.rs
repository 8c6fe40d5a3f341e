//! Secure aggregation: the server learns the sum of the clients' vectors and nothing of any one.
//!
//! The protocol of Bonawitz et al. (2017, "Practical secure aggregation for privacy-preserving
//! machine learning", the protocol of its Figure 4) against an honest-but-curious server:
//! its rounds AdvertiseKeys, ShareKeys, MaskedInputCollection and Unmasking, without the
//! ConsistencyCheck and signatures of the actively secure version. Each client masks its input
//! (fixed-point in Z_{2^32}, [`ring::FixedPoint`]) with a self-mask from a fresh seed b and one
//! pairwise mask per other client from an X25519 agreement, which cancel in the sum; it
//! Shamir-shares b and its mask key among the group (sealed to each member, relayed by the
//! server), so that any `threshold` survivors let the server take out the self-masks of those
//! who sent an input and the pairwise masks of those who dropped before it. Each survivor reveals
//! for any one client either a seed share or a key share, never both, and only once.
//!
//! A client shares with at most 254 others (GF(256) shares): in a larger group each shares and
//! masks with its neighbours in SecAgg+'s sparse graph (Bell et al. 2020, [`graph`]), whose
//! clients run this same protocol over their neighbourhoods. Pure: the server and client shells
//! move the messages. A round, as a shell drives it (each step a barrier that the group or a
//! timeout closes; `tests.rs` passes the messages by hand):
//!
//! 1. each client: [`SecAggClient::new`] → its [`Advert`] → [`SecAggServer::advertise`];
//! 2. [`SecAggServer::roster`] → every member: [`SecAggClient::share_keys`] → its sealed
//!    envelopes → [`SecAggServer::share`];
//! 3. [`SecAggServer::inboxes`] → each member its inbox: [`SecAggClient::masked_input`] of its
//!    input in the ring ([`ring::FixedPoint`]) → [`SecAggServer::masked`];
//! 4. [`SecAggServer::survivors`] → every survivor: [`SecAggClient::unmask`] →
//!    [`SecAggServer::unmasking`]; then [`SecAggServer::sum`], decoded by the same codec.

pub mod client;
pub mod crypto;
pub mod graph;
pub mod ring;
pub mod server;

use std::collections::BTreeMap;

use x25519_dalek::StaticSecret;

pub use client::SecAggClient;
pub use server::SecAggServer;

use crate::{ClientId, FlintError, Result, Round};

/// The most clients one neighbourhood shares among: GF(256) has 255 non-zero x-coordinates.
pub const MAX_GROUP: usize = 255;

/// The most clients one group sums, over SecAgg+'s graph beyond [`MAX_GROUP`].
pub const MAX_SPARSE_GROUP: usize = 100_000;

/// What a client advertises and the server relays: its two public keys and the digest of its
/// self-mask seed (so that the seed's reconstruction can be checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    pub envelope_key: [u8; 32],
    pub mask_key: [u8; 32],
    pub self_mask_digest: [u8; 32],
}

/// A survivor's last message: shares of the survivors' self-mask seeds and of the dropped
/// clients' mask keys, by whose they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unmasking {
    pub seed_shares: BTreeMap<ClientId, Vec<u8>>,
    pub key_shares: BTreeMap<ClientId, Vec<u8>>,
}

/// A threshold for a group of `clients`: more than half (so that two disjoint sets of survivors
/// cannot both reach it), at least 2, at most the group.
pub fn check_threshold(threshold: usize, clients: usize) -> Result<()> {
    if clients > MAX_GROUP {
        return Err(FlintError::Config(format!(
            "secure aggregation shares among at most {MAX_GROUP} clients, not {clients}"
        )));
    }
    if threshold < 2 || 2 * threshold <= clients || threshold > clients {
        return Err(FlintError::Config(format!(
            "a secure aggregation threshold of {threshold} for {clients} clients: it must be more than half of them, at least 2, at most all"
        )));
    }
    Ok(())
}

/// A message refused: what is wrong with it, and nothing changed.
fn refuse<T>(why: impl std::fmt::Display) -> Result<T> {
    Err(FlintError::InvalidRequest(format!(
        "secure aggregation: {why}"
    )))
}

/// The mask two clients share in `round`, from one's mask key and the other's public one.
fn pairwise_mask(
    secret: &StaticSecret,
    public: &[u8; 32],
    round: Round,
    a: ClientId,
    b: ClientId,
    len: usize,
) -> Result<Vec<u32>> {
    let info = crypto::info("flint secagg mask", round, a.min(b), a.max(b));
    Ok(crypto::mask(&crypto::agree(secret, public, &info)?, len))
}

#[cfg(test)]
mod tests;
