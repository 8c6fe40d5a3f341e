//! What a client half carries from one round to the next beyond the download — its own model,
//! delta bases, feedback masks — as bytes a restarted client reads back, so that it goes on
//! exactly where it stopped. Parts are framed by their lengths; floats are their
//! bits (exact), machines their binary checkpoint, the rest JSON of integers.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{FlintError, Result};

/// Each part behind its length (8 bytes, little-endian).
pub fn frame(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The `n` parts [`frame`] wrote, refused if the bytes hold more, fewer or shorter ones.
pub fn unframe(mut bytes: &[u8], n: usize) -> Result<Vec<&[u8]>> {
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or_else(|| bad("a part's length is cut short"))?;
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad("a part too long"))?;
        if rest.len() < len {
            return Err(bad("a part is cut short"));
        }
        let (part, rest) = rest.split_at(len);
        parts.push(part);
        bytes = rest;
    }
    if !bytes.is_empty() {
        return Err(bad("bytes after the last part"));
    }
    Ok(parts)
}

/// Floats as their bits, little-endian: read back exactly.
pub fn floats(values: &[f64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect()
}

pub fn floats_from(bytes: &[u8]) -> Result<Vec<f64>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(bad("floats cut short"));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| f64::from_bits(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
        .collect())
}

pub fn json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("client state serialises to json")
}

pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| bad(&e.to_string()))
}

pub fn bad(why: &str) -> FlintError {
    FlintError::Model(format!("checkpoint: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_come_back_and_damage_is_refused() {
        let bytes = frame(&[b"abc", b"", b"de"]);
        assert_eq!(unframe(&bytes, 3).unwrap(), vec![&b"abc"[..], b"", b"de"]);
        assert!(unframe(&bytes, 2).is_err());
        assert!(unframe(&bytes, 4).is_err());
        assert!(unframe(&bytes[..bytes.len() - 1], 3).is_err());
        let odd = [0.1, -0.0, f64::NAN, f64::MIN_POSITIVE / 3.0];
        let back = floats_from(&floats(&odd)).unwrap();
        assert!(
            odd.iter()
                .zip(&back)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        assert!(floats_from(&[0; 7]).is_err());
    }
}
