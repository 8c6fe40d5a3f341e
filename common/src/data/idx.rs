//! IDX files (the MNIST format), gzip-compressed or plain: big-endian header, then bytes.

use std::io::Read;
use std::path::Path;

use crate::{FlintError, Result};

/// An IDX array of unsigned bytes: its dimensions and data.
#[derive(Debug, Clone, PartialEq)]
pub struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

pub fn load(path: &Path) -> Result<Idx> {
    let raw = std::fs::read(path).map_err(|e| FlintError::io(path, e))?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| FlintError::data(path, format!("gzip: {e}")))?;
        out
    } else {
        raw
    };
    parse(&bytes).map_err(|reason| FlintError::data(path, reason))
}

pub fn parse(b: &[u8]) -> std::result::Result<Idx, String> {
    if b.len() < 4 || b[0] != 0 || b[1] != 0 {
        return Err("not an IDX file (bad magic number)".into());
    }
    if b[2] != 0x08 {
        return Err(format!(
            "IDX element type 0x{:02x} is not unsigned byte (0x08)",
            b[2]
        ));
    }
    let n = usize::from(b[3]);
    let header = 4 + 4 * n;
    if b.len() < header {
        return Err("IDX header is cut short".into());
    }
    let dims: Vec<usize> = (0..n)
        .map(|i| u32::from_be_bytes(b[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize)
        .collect();
    let Some(len) = dims.iter().try_fold(1usize, |n, d| n.checked_mul(*d)) else {
        return Err(format!("IDX dimensions {dims:?} overflow"));
    };
    if b.len() - header != len {
        return Err(format!(
            "IDX dimensions {dims:?} need {len} bytes of data, the file has {}",
            b.len() - header
        ));
    }
    Ok(Idx {
        dims,
        data: b[header..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_and_checks_length() {
        let mut f = vec![0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3];
        f.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        let idx = parse(&f).unwrap();
        assert_eq!(idx.dims, vec![2, 3]);
        assert_eq!(idx.data, vec![1, 2, 3, 4, 5, 6]);
        f.pop();
        assert!(parse(&f).unwrap_err().contains("need 6 bytes"));
        assert!(parse(&[1, 2, 3]).unwrap_err().contains("magic"));
    }

    /// Found by the `idx` fuzz target: dimensions whose product overflowed (a panic in debug
    /// builds; in release, a wrapped length that could match the file).
    #[test]
    fn dimensions_that_overflow_are_refused() {
        let mut f = vec![0, 0, 8, 3];
        f.extend([0xff; 12]);
        f.extend([1, 2, 3]);
        assert!(parse(&f).unwrap_err().contains("overflow"));
    }
}
