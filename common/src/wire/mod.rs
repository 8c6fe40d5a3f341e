//! The wire contract's generated types, model ⇄ proto conversions, validation of received
//! payloads, chunking of updates, and the byte-accounting types.

pub mod chunks;
pub mod ledger;

#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/flint.v1.rs"));
}

use proto::payload::Kind;
use proto::{AdjacencyMatrix, ClassWeights, ConfidenceWinner, LinearModel, Payload};

use crate::model::fcm::Fcm;
use crate::model::logreg::LogReg;
use crate::strategy::LocalMetrics;
use crate::{FlintError, Result};

/// Request and response headers that let byte counters attribute traffic to (client, round).
pub const CLIENT_HEADER: &str = "flint-client-id";
pub const ROUND_HEADER: &str = "flint-round";

pub fn kind_name(p: &Payload) -> &'static str {
    match &p.kind {
        None => "nothing",
        Some(Kind::LinearModel(_)) => "linear_model",
        Some(Kind::ClassWeights(_)) => "class_weights",
        Some(Kind::ConfidenceWinner(_)) => "confidence_winner",
        Some(Kind::GiniIndex(_)) => "gini_index",
        Some(Kind::TmModel(_)) => "tm_model",
        Some(Kind::AdjacencyMatrix(_)) => "adjacency_matrix",
    }
}

/// The payload's message of the kind `pick` selects, or an error naming both kinds.
fn expect<'a, T>(
    p: &'a Payload,
    what: &str,
    pick: impl Fn(&'a Kind) -> Option<&'a T>,
) -> Result<&'a T> {
    p.kind.as_ref().and_then(pick).ok_or_else(|| {
        FlintError::InvalidUpdate(format!("expected {what} payload, got {}", kind_name(p)))
    })
}

pub fn expect_linear(p: &Payload) -> Result<&LinearModel> {
    expect(p, "a linear_model", |k| match k {
        Kind::LinearModel(m) => Some(m),
        _ => None,
    })
}

pub fn expect_winner(p: &Payload) -> Result<&ConfidenceWinner> {
    expect(p, "a confidence_winner", |k| match k {
        Kind::ConfidenceWinner(m) => Some(m),
        _ => None,
    })
}

pub fn expect_class_weights(p: &Payload) -> Result<&ClassWeights> {
    expect(p, "a class_weights", |k| match k {
        Kind::ClassWeights(m) => Some(m),
        _ => None,
    })
}

pub fn class_weights_payload(class: u32, weights: Vec<i32>) -> Payload {
    Payload {
        kind: Some(Kind::ClassWeights(ClassWeights {
            class_index: class,
            weights,
        })),
    }
}

/// gRPC message compression, the same both ways; the message-level byte count sees its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn parse(s: Option<&str>) -> std::result::Result<Compression, String> {
        match s.unwrap_or("none") {
            "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "zstd" => Ok(Compression::Zstd),
            other => Err(format!(
                "unknown wire.compression {other:?}; expected none, gzip or zstd"
            )),
        }
    }

    /// The tonic encoding both ends enable (`None`: messages go uncompressed).
    #[cfg(feature = "shell")]
    pub fn encoding(self) -> Option<tonic::codec::CompressionEncoding> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some(tonic::codec::CompressionEncoding::Gzip),
            Compression::Zstd => Some(tonic::codec::CompressionEncoding::Zstd),
        }
    }
}

pub fn expect_adjacency(p: &Payload) -> Result<&AdjacencyMatrix> {
    expect(p, "an adjacency_matrix", |k| match k {
        Kind::AdjacencyMatrix(m) => Some(m),
        _ => None,
    })
}

/// A map as the wire carries it: the whole n × n matrix as packed floats, and, in an upload,
/// the client's metrics on its test split.
pub fn adjacency_payload(m: &Fcm, local: Option<LocalMetrics>) -> Payload {
    let local = local.unwrap_or(LocalMetrics {
        accuracy: 0.0,
        precision: 0.0,
    });
    Payload {
        kind: Some(Kind::AdjacencyMatrix(AdjacencyMatrix {
            concepts: m.concepts() as u32,
            weights: m.matrix().iter().map(|&w| w as f32).collect(),
            local_accuracy: local.accuracy,
            local_precision: local.precision,
        })),
    }
}

pub trait AdjacencyMatrixExt {
    /// Checks the shape against the run (features + classes concepts), that every value is
    /// finite, and the map's own rules (range, learnable links).
    fn to_fcm(&self, features: usize, classes: usize) -> Result<Fcm>;
    fn local_metrics(&self) -> LocalMetrics;
}

impl AdjacencyMatrixExt for AdjacencyMatrix {
    fn to_fcm(&self, features: usize, classes: usize) -> Result<Fcm> {
        let n = features + classes;
        if self.concepts as usize != n || self.weights.len() != n * n {
            return Err(FlintError::InvalidUpdate(format!(
                "adjacency_matrix of {} concepts with {} weights, expected {n}×{n} ({features} features + {classes} classes)",
                self.concepts,
                self.weights.len()
            )));
        }
        if let Some(i) = self.weights.iter().position(|w| !w.is_finite()) {
            return Err(FlintError::InvalidUpdate(format!(
                "adjacency_matrix weight {i} is {}, not finite",
                self.weights[i]
            )));
        }
        let w: Vec<f64> = self.weights.iter().map(|&w| f64::from(w)).collect();
        Fcm::from_matrix(features, classes, &w).map_err(|e| match e {
            FlintError::Model(m) => FlintError::InvalidUpdate(m),
            other => other,
        })
    }

    fn local_metrics(&self) -> LocalMetrics {
        LocalMetrics {
            accuracy: self.local_accuracy,
            precision: self.local_precision,
        }
    }
}

pub fn linear_payload(m: &LogReg) -> Payload {
    Payload {
        kind: Some(Kind::LinearModel(LinearModel {
            weights: m.weights.iter().map(|&w| w as f32).collect(),
            bias: m.bias as f32,
        })),
    }
}

pub trait LinearModelExt {
    /// Checks the length against the run's feature count and that every value is finite.
    fn check(&self, features: usize) -> Result<&Self>;
    fn to_logreg(&self) -> LogReg;
}

impl LinearModelExt for LinearModel {
    fn check(&self, features: usize) -> Result<&Self> {
        if self.weights.len() != features {
            return Err(FlintError::InvalidUpdate(format!(
                "linear_model has {} weights, expected {features} (one per feature)",
                self.weights.len()
            )));
        }
        if let Some(i) = self.weights.iter().position(|w| !w.is_finite()) {
            return Err(FlintError::InvalidUpdate(format!(
                "linear_model weight {i} is {}, not finite",
                self.weights[i]
            )));
        }
        if !self.bias.is_finite() {
            return Err(FlintError::InvalidUpdate(format!(
                "linear_model bias is {}, not finite",
                self.bias
            )));
        }
        Ok(self)
    }

    fn to_logreg(&self) -> LogReg {
        LogReg {
            weights: self.weights.iter().map(|&w| f64::from(w)).collect(),
            bias: f64::from(self.bias),
        }
    }
}

/// The papers' byte convention for a payload: parameters × the width the reference code used
/// (logistic regression: numpy float64, 8 bytes per parameter; TPFL: int32 weights up, the
/// float64 cluster average down). TPFL's paper counts a cluster's download once, not once per
/// member; the per-client figure here is the per-member one, and the round's
/// `paper_download_bytes` detail holds the paper's.
pub fn paper_convention_bytes(p: &Payload) -> u64 {
    match &p.kind {
        Some(Kind::LinearModel(m)) => 8 * (m.weights.len() as u64 + 1),
        Some(Kind::ConfidenceWinner(w)) => {
            4 * w.weights.as_ref().map_or(0, |c| c.weights.len()) as u64
        }
        Some(Kind::ClassWeights(w)) => 8 * w.weights.len() as u64,
        Some(Kind::AdjacencyMatrix(a)) => 8 * a.weights.len() as u64,
        _ => 0,
    }
}
