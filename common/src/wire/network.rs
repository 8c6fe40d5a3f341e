//! A neural network's parameters on the wire: float32, as the baselines' papers send them.

use super::kind_name;
use super::proto::payload::Kind;
use super::proto::{NetworkParams, Payload};
use crate::{FlintError, Result};

/// The largest magnitude a received parameter may have: a trained network's are a few units,
/// so anything this large is an update that exploded (or was made to), refused before it is
/// averaged in.
pub const MAX_PARAM: f32 = 1.0e4;

pub fn encode_params(params: &[f32]) -> Payload {
    Payload {
        kind: Some(Kind::NetworkParams(NetworkParams {
            params: params.to_vec(),
        })),
    }
}

/// Exactly `expected` parameters (the run's architecture's), each finite and within
/// ±[`MAX_PARAM`].
pub fn decode_params(p: &Payload, expected: usize) -> Result<Vec<f32>> {
    let Some(Kind::NetworkParams(n)) = &p.kind else {
        return Err(invalid(format!(
            "expected a network_params payload, got {}",
            kind_name(p)
        )));
    };
    if n.params.len() != expected {
        return Err(invalid(format!(
            "network_params has {} parameters, expected {expected} (the run's architecture)",
            n.params.len()
        )));
    }
    if let Some(i) = n.params.iter().position(|v| !v.is_finite()) {
        return Err(invalid(format!(
            "network_params parameter {i} is {}, not finite",
            n.params[i]
        )));
    }
    if let Some(i) = n.params.iter().position(|v| v.abs() > MAX_PARAM) {
        return Err(invalid(format!(
            "network_params parameter {i} is {:e}, beyond ±{MAX_PARAM:e}: the update exploded",
            n.params[i]
        )));
    }
    Ok(n.params.clone())
}

fn invalid(message: String) -> FlintError {
    FlintError::InvalidUpdate(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_round_trip_and_bad_ones_are_refused() {
        let p = encode_params(&[0.5, -1.25, 3.0]);
        assert_eq!(decode_params(&p, 3).unwrap(), [0.5, -1.25, 3.0]);
        let e = decode_params(&p, 4).unwrap_err().to_string();
        assert!(e.contains("has 3 parameters, expected 4"), "{e}");
        let e = decode_params(&encode_params(&[0.0, f32::NAN]), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("parameter 1 is NaN, not finite"), "{e}");
        let e = decode_params(&encode_params(&[2.0e5]), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the update exploded"), "{e}");
        let linear =
            crate::wire::encode_linear(&crate::model::logreg::LogReg::binary(vec![1.0], 0.0));
        let e = decode_params(&linear, 1).unwrap_err().to_string();
        assert!(e.contains("got linear_model"), "{e}");
    }
}
