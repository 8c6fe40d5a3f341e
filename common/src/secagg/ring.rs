//! Values in the ring Z_{2^32}: a model's floats as fixed-point integers, so that masks cancel
//! exactly and the sum of the encodings is the encoding of the sum (each value rounded once).

use crate::{FlintError, Result};

/// How reals map to Z_{2^32}: `value × scale`, rounded, in two's complement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedPoint {
    /// A power of two, so that decoding divides exactly.
    pub scale: f64,
    /// The largest |value| one client may encode.
    pub max_abs: f64,
}

/// The largest sum the ring holds as a signed number.
const HALF_RING: f64 = 2_147_483_647.0;

impl FixedPoint {
    /// The finest scale at which `terms` values, each within ±`max_abs`, still sum inside
    /// ±2^31: the sum never wraps.
    pub fn for_sums(max_abs: f64, terms: usize) -> Result<FixedPoint> {
        if !(max_abs.is_finite() && max_abs > 0.0) || terms == 0 {
            return Err(FlintError::Config(format!(
                "secure aggregation needs a positive bound on the values, got {max_abs} for {terms} terms"
            )));
        }
        // Each encoding rounds by at most ½: room for that too.
        let room = (HALF_RING - terms as f64 / 2.0) / (max_abs * terms as f64);
        if room < 1.0 {
            return Err(FlintError::Config(format!(
                "{terms} values of up to {max_abs} do not fit a 32-bit ring even unscaled"
            )));
        }
        let scale = 2f64.powi(room.log2().floor() as i32);
        Ok(FixedPoint { scale, max_abs })
    }

    /// `values` in the ring; a value beyond `max_abs` (or not finite) is refused, since it could
    /// wrap the sum and no one could tell.
    pub fn encode(&self, values: &[f64]) -> Result<Vec<u32>> {
        values
            .iter()
            .map(|&v| {
                if !v.is_finite() || v.abs() > self.max_abs {
                    return Err(FlintError::InvalidUpdate(format!(
                        "secure aggregation: a value {v} beyond the run's bound ±{}",
                        self.max_abs
                    )));
                }
                Ok((v * self.scale).round() as i64 as u32)
            })
            .collect()
    }

    /// A sum of encodings back as reals.
    pub fn decode(&self, sum: &[u32]) -> Vec<f64> {
        sum.iter()
            .map(|&x| f64::from(x as i32) / self.scale)
            .collect()
    }
}

/// `a += b` in the ring.
pub fn add(a: &mut [u32], b: &[u32]) {
    a.iter_mut()
        .zip(b)
        .for_each(|(x, y)| *x = x.wrapping_add(*y));
}

/// `a -= b` in the ring.
pub fn sub(a: &mut [u32], b: &[u32]) {
    a.iter_mut()
        .zip(b)
        .for_each(|(x, y)| *x = x.wrapping_sub(*y));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_of_encodings_decodes_to_the_sum_and_never_wraps_at_the_bound() {
        let codec = FixedPoint::for_sums(4.0, 1000).unwrap();
        assert!(codec.scale >= 2f64.powi(18), "{}", codec.scale);
        let a = codec.encode(&[4.0, -4.0, 0.125, -1.5]).unwrap();
        let mut sum = vec![0u32; 4];
        for _ in 0..1000 {
            add(&mut sum, &a);
        }
        assert_eq!(codec.decode(&sum), [4000.0, -4000.0, 125.0, -1500.0]);
        sub(&mut sum, &a);
        assert_eq!(codec.decode(&sum)[3], -1498.5);
        let e = codec.encode(&[4.01]).unwrap_err().to_string();
        assert!(e.contains("beyond the run's bound"), "{e}");
        assert!(codec.encode(&[f64::NAN]).is_err());
        assert!(FixedPoint::for_sums(1e9, 10).is_err());
    }
}
