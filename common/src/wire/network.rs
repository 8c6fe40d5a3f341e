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
            ..Default::default()
        })),
    }
}

/// The largest magnitude a received statistic may have (a Gram entry, a Fisher diagonal): far
/// beyond what inputs in [0, 1] through a trained network give.
pub const MAX_STATISTIC: f32 = 1.0e12;

/// A one-shot upload: the trained network and what its server rule needs of the client's rows
/// (empty where the run does not ask for it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NetworkStatistics {
    pub params: Vec<f32>,
    /// RegMean's Gram matrices, packed (`model::cnn::statistics::dense_grams`).
    pub gram: Vec<f32>,
    /// FedFisher's diagonal Fisher information, one per parameter.
    pub fisher: Vec<f32>,
}

pub fn encode_statistics(s: &NetworkStatistics) -> Payload {
    Payload {
        kind: Some(Kind::NetworkParams(NetworkParams {
            params: s.params.clone(),
            cluster: None,
            gram: s.gram.clone(),
            fisher: s.fisher.clone(),
        })),
    }
}

/// A one-shot upload: `expected` parameters as [`decode_params`] checks them, exactly
/// `gram` and `fisher` statistics (the counts the run asks for; 0 for one it does not), each
/// finite and within ±[`MAX_STATISTIC`], the Fisher information and each Gram matrix's
/// diagonal not negative.
pub fn decode_statistics(
    p: &Payload,
    expected: usize,
    gram: usize,
    fisher: usize,
    gram_diagonal: &[usize],
) -> Result<NetworkStatistics> {
    let n = network(p)?;
    check_params(n, expected)?;
    no_cluster(n)?;
    check_statistic("gram", &n.gram, gram)?;
    check_statistic("fisher", &n.fisher, fisher)?;
    if let Some(i) = n.fisher.iter().position(|v| *v < 0.0) {
        return Err(invalid(format!("fisher entry {i} is negative")));
    }
    if let Some(&i) = gram_diagonal.iter().find(|&&i| n.gram.get(i) < Some(&0.0)) {
        return Err(invalid(format!(
            "gram entry {i} sits on a diagonal and is negative"
        )));
    }
    Ok(NetworkStatistics {
        params: n.params.clone(),
        gram: n.gram.clone(),
        fisher: n.fisher.clone(),
    })
}

fn check_statistic(name: &str, values: &[f32], expected: usize) -> Result<()> {
    if values.len() != expected {
        return Err(invalid(match expected {
            0 => format!("network_params carries {name}, which this run does not ask for"),
            _ => format!(
                "network_params has {} {name} entries, expected {expected} (the run's architecture)",
                values.len()
            ),
        }));
    }
    match values
        .iter()
        .position(|v| !v.is_finite() || v.abs() > MAX_STATISTIC)
    {
        Some(i) => Err(invalid(format!(
            "{name} entry {i} is {:e}, not finite or beyond ±{MAX_STATISTIC:e}",
            values[i]
        ))),
        None => Ok(()),
    }
}

/// A download of `1..=most` networks of `per` parameters each, one after the other (the
/// one-shot ensemble): each network's parameters.
pub fn decode_networks(p: &Payload, per: usize, most: usize) -> Result<Vec<Vec<f32>>> {
    let n = network(p)?;
    let count = n.params.len() / per.max(1);
    if count == 0 || count > most || count * per != n.params.len() {
        return Err(invalid(format!(
            "network_params has {} parameters: not 1 to {most} networks of {per}",
            n.params.len()
        )));
    }
    let all = decode_any(p, count * per)?.0;
    Ok(all.chunks_exact(per).map(<[f32]>::to_vec).collect())
}

fn network(p: &Payload) -> Result<&NetworkParams> {
    match &p.kind {
        Some(Kind::NetworkParams(n)) => Ok(n),
        _ => Err(invalid(format!(
            "expected a network_params payload, got {}",
            kind_name(p)
        ))),
    }
}

fn no_cluster(n: &NetworkParams) -> Result<()> {
    match n.cluster {
        Some(c) => Err(invalid(format!(
            "network_params names cluster {c}, and this run has no clusters"
        ))),
        None => Ok(()),
    }
}

/// Exactly `expected` parameters (the run's architecture's), each finite and within
/// ±[`MAX_PARAM`], and no cluster.
pub fn decode_params(p: &Payload, expected: usize) -> Result<Vec<f32>> {
    no_cluster(network(p)?)?;
    Ok(decode_any(p, expected)?.0)
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

/// The parameters and cluster of a plain network: no statistics.
fn decode_any(p: &Payload, expected: usize) -> Result<(Vec<f32>, Option<u32>)> {
    let n = network(p)?;
    check_params(n, expected)?;
    check_statistic("gram", &n.gram, 0)?;
    check_statistic("fisher", &n.fisher, 0)?;
    Ok((n.params.clone(), n.cluster))
}

fn check_params(n: &NetworkParams, expected: usize) -> Result<()> {
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
    Ok(())
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

    /// A one-shot upload carries exactly the statistics the run asks for; a plain network
    /// none.
    #[test]
    fn statistics_are_counted_by_the_run_and_checked() {
        let s = NetworkStatistics {
            params: vec![1.0, 2.0],
            gram: vec![4.0, 1.0, 9.0],
            fisher: vec![0.5, 0.25],
        };
        let p = encode_statistics(&s);
        assert_eq!(decode_statistics(&p, 2, 3, 2, &[0, 2]).unwrap(), s);
        let e = decode_statistics(&p, 2, 3, 0, &[0, 2])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("carries fisher, which this run does not ask for"),
            "{e}"
        );
        let e = decode_statistics(&p, 2, 4, 2, &[0, 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("has 3 gram entries, expected 4"), "{e}");
        let e = decode_params(&p, 2).unwrap_err().to_string();
        assert!(e.contains("carries gram"), "{e}");
        let bad = |f: fn(&mut NetworkStatistics)| {
            let mut t = s.clone();
            f(&mut t);
            decode_statistics(&encode_statistics(&t), 2, 3, 2, &[0, 2])
                .unwrap_err()
                .to_string()
        };
        assert!(bad(|t| t.fisher[1] = -1.0).contains("fisher entry 1 is negative"));
        assert!(bad(|t| t.gram[2] = -1.0).contains("gram entry 2 sits on a diagonal"));
        assert!(bad(|t| t.gram[1] = f32::INFINITY).contains("gram entry 1 is inf"));
        assert!(bad(|t| t.fisher[0] = 1e20).contains("beyond"));
    }

    #[test]
    fn an_ensemble_download_is_whole_networks_and_bounded() {
        let p = encode_params(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(decode_networks(&p, 2, 3).unwrap().len(), 3);
        assert!(
            decode_networks(&p, 2, 2)
                .unwrap_err()
                .to_string()
                .contains("not 1 to 2")
        );
        assert!(decode_networks(&p, 4, 3).is_err());
        assert!(decode_networks(&encode_params(&[]), 2, 3).is_err());
    }
}
