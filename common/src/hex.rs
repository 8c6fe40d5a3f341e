//! Bytes as lowercase hex: fingerprints, checksums, content ids.

/// `bytes` (a digest, or its first bytes) as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
