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
    encode(params, None)
}

/// IFCA's upload: the network trained from cluster `cluster`'s model.
pub fn encode_cluster_params(cluster: u32, params: &[f32]) -> Payload {
    encode(params, Some(cluster))
}

fn encode(params: &[f32], cluster: Option<u32>) -> Payload {
    Payload {
        kind: Some(Kind::NetworkParams(NetworkParams {
            params: params.to_vec(),
            cluster,
        })),
    }
}

/// Exactly `expected` parameters (the run's architecture's), each finite and within
/// ±[`MAX_PARAM`], and no cluster.
pub fn decode_params(p: &Payload, expected: usize) -> Result<Vec<f32>> {
    let (params, cluster) = decode_any(p, expected)?;
    match cluster {
        Some(c) => Err(invalid(format!(
            "network_params names cluster {c}, and this run has no clusters"
        ))),
        None => Ok(params),
    }
}

/// IFCA's upload: `expected` parameters as [`decode_params`] checks them, and a cluster below
/// `clusters`.
pub fn decode_cluster_params(
    p: &Payload,
    expected: usize,
    clusters: usize,
) -> Result<(u32, Vec<f32>)> {
    match decode_any(p, expected)? {
        (params, Some(c)) if (c as usize) < clusters => Ok((c, params)),
        (_, Some(c)) => Err(invalid(format!(
            "network_params names cluster {c}; the run has {clusters} (0 to {})",
            clusters - 1
        ))),
        (_, None) => Err(invalid(
            "network_params names no cluster; IFCA's uploads must".into(),
        )),
    }
}

fn decode_any(p: &Payload, expected: usize) -> Result<(Vec<f32>, Option<u32>)> {
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
    Ok((n.params.clone(), n.cluster))
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
        // IFCA's uploads name a cluster of the run; the others name none.
        let up = encode_cluster_params(2, &[1.0]);
        assert_eq!(decode_cluster_params(&up, 1, 3).unwrap(), (2, vec![1.0]));
        let e = decode_cluster_params(&up, 1, 2).unwrap_err().to_string();
        assert!(e.contains("names cluster 2; the run has 2"), "{e}");
        assert!(decode_params(&up, 1).is_err());
        assert!(decode_cluster_params(&encode_params(&[1.0]), 1, 2).is_err());
    }
}
