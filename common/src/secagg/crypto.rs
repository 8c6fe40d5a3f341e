//! The primitives, each a well-kept crate's: X25519 key agreement (x25519-dalek), HKDF-SHA-256
//! (hkdf, sha2), the ChaCha20 keystream as the masks' generator (chacha20), ChaCha20-Poly1305 for
//! the shares in transit (chacha20poly1305), Shamir's scheme over GF(256) (vsss-rs).

use chacha20::ChaCha20;
use chacha20::cipher::{KeyIvInit, StreamCipher};
use chacha20poly1305::ChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use hkdf::Hkdf;
use rand::CryptoRng;
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};

use crate::{ClientId, FlintError, Result, Round};

/// 32 secret bytes from `rng` (the OS's in a run).
pub fn secret_bytes<R: CryptoRng + ?Sized>(rng: &mut R) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    bytes
}

/// An X25519 key pair.
pub struct KeyPair {
    pub secret: StaticSecret,
    pub public: [u8; 32],
}

impl KeyPair {
    pub fn from_secret(bytes: [u8; 32]) -> KeyPair {
        let secret = StaticSecret::from(bytes);
        let public = PublicKey::from(&secret).to_bytes();
        KeyPair { secret, public }
    }
}

/// What `secret` and the other side's `public` agree on, through HKDF with `info`; a public key
/// of low order (no shared secret) is refused.
pub fn agree(secret: &StaticSecret, public: &[u8; 32], info: &[u8]) -> Result<[u8; 32]> {
    let shared = secret.diffie_hellman(&PublicKey::from(*public));
    if !shared.was_contributory() {
        return Err(FlintError::InvalidRequest(
            "secure aggregation: a public key of low order".into(),
        ));
    }
    let mut out = [0u8; 32];
    Hkdf::<Sha256>::new(None, shared.as_bytes())
        .expand(info, &mut out)
        .map_err(|_| FlintError::Model("hkdf: 32 bytes are always expandable".into()))?;
    Ok(out)
}

/// Whether `public` is a point no agreement with it is secret for (it gives the all-zero
/// secret whatever the other key: X25519 clamps every scalar to a multiple of 8).
pub fn is_low_order(public: &[u8; 32]) -> bool {
    let probe = StaticSecret::from([9u8; 32]);
    !probe
        .diffie_hellman(&PublicKey::from(*public))
        .was_contributory()
}

/// What the HKDF of a pair's agreement is bound to: the purpose, the round and the pair (in
/// the order given: sorted for a shared mask, sender then recipient for an envelope).
pub fn info(purpose: &str, round: Round, a: ClientId, b: ClientId) -> Vec<u8> {
    let mut info = purpose.as_bytes().to_vec();
    info.extend(round.to_le_bytes());
    info.extend(a.to_le_bytes());
    info.extend(b.to_le_bytes());
    info
}

/// `len` ring elements of ChaCha20's keystream under `seed`: a mask.
pub fn mask(seed: &[u8; 32], len: usize) -> Vec<u32> {
    let mut bytes = vec![0u8; len * 4];
    ChaCha20::new(seed.into(), &[0u8; 12].into()).apply_keystream(&mut bytes);
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// SHA-256 of a self-mask seed: published so that its reconstruction can be checked.
pub fn digest(seed: &[u8; 32]) -> [u8; 32] {
    Sha256::digest(seed).into()
}

/// `plaintext` sealed under a key used for this one message (so a fixed nonce), bound to `aad`.
pub fn seal(key: &[u8; 32], aad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>> {
    ChaCha20Poly1305::new(key.into())
        .encrypt(
            &[0u8; 12].into(),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| FlintError::Model("secure aggregation: cannot seal the shares".into()))
}

pub fn open(key: &[u8; 32], aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>> {
    ChaCha20Poly1305::new(key.into())
        .decrypt(&[0u8; 12].into(), Payload { msg: sealed, aad })
        .map_err(|_| {
            FlintError::InvalidRequest(
                "secure aggregation: shares that do not open under the pair's key".into(),
            )
        })
}

/// A 32-byte secret in `count` Shamir shares, any `threshold` of which give it back; share i
/// (from 0) has x-coordinate i + 1 and is 33 bytes.
pub fn split<R: CryptoRng + ?Sized>(
    secret: &[u8; 32],
    threshold: usize,
    count: usize,
    rng: &mut R,
) -> Result<Vec<Vec<u8>>> {
    vsss_rs::Gf256::split_bytes(threshold, count, secret, rng)
        .map_err(|e| FlintError::Model(format!("secure aggregation: shamir split: {e}")))
}

/// The secret `shares` (at least the threshold of them) give back.
pub fn combine(shares: &[Vec<u8>]) -> Result<[u8; 32]> {
    let bytes = vsss_rs::Gf256::combine_bytes(shares).map_err(|e| {
        FlintError::InvalidRequest(format!("secure aggregation: shamir combine: {e}"))
    })?;
    bytes.try_into().map_err(|b: Vec<u8>| {
        FlintError::InvalidRequest(format!(
            "secure aggregation: shares of {} bytes, not 32",
            b.len()
        ))
    })
}

/// Bytes of one share of a 32-byte secret: its x-coordinate and 32 bytes.
pub const SHARE_BYTES: usize = 33;
