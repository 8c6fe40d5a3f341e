//! The wire contract's generated types, model ⇄ proto conversions (`convert`), chunking of
//! updates, and the byte-accounting types.

pub mod chunks;
pub mod convert;
pub mod include_code;
pub mod ledger;
pub mod network;
pub mod secagg;
pub mod weight_code;

#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/flint.v1.rs"));
}

pub use convert::{
    CompositeDownload, TmShape, Update, Winner, WinnerUpload, decode_class_weights, decode_linear,
    decode_map, decode_tm_composite, decode_tm_upload, decode_winner, encode_class_weights,
    encode_linear, encode_map, encode_tm_composite, encode_tm_upload, encode_winner,
};

pub use weight_code::WeightCoding;

use proto::Payload;
use proto::payload::Kind;
use serde::{Deserialize, Serialize};

/// Request and response headers that let byte counters attribute traffic to (client, round).
pub const CLIENT_HEADER: &str = "flint-client-id";
pub const ROUND_HEADER: &str = "flint-round";
/// The token a client bound its slot to at Join; every later call carries it.
pub const TOKEN_HEADER: &str = "flint-token";
/// The host a client runs on (its container's hostname), sent with Join and Claim.
pub const HOST_HEADER: &str = "flint-host";

pub fn kind_name(p: &Payload) -> &'static str {
    match &p.kind {
        None => "nothing",
        Some(Kind::LinearModel(_)) => "linear_model",
        Some(Kind::ClassWeights(_)) => "class_weights",
        Some(Kind::ConfidenceWinner(_)) => "confidence_winner",
        Some(Kind::GiniIndex(_)) => "gini_index",
        Some(Kind::TmModel(_)) => "tm_model",
        Some(Kind::AdjacencyMatrix(_)) => "adjacency_matrix",
        Some(Kind::TmUpload(_)) => "tm_upload",
        Some(Kind::TmComposite(_)) => "tm_composite",
        Some(Kind::NetworkParams(_)) => "network_params",
    }
}

/// `[wire]`: how messages travel.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WireSection {
    /// gRPC message compression both ways: `none`, `gzip` or `zstd`.
    pub compression: Compression,
}

/// gRPC message compression, the same both ways; the message-level byte count sees its effect.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Zstd,
}

/// The papers' byte convention for a payload: parameters × the width the reference code used
/// (logistic regression: numpy float64, 8 bytes per parameter; TPFL: int32 weights up, the
/// float64 cluster average down). TPFL's paper counts a cluster's download once, not once per
/// member; the per-client figure here is the per-member one, and the round report's
/// `paper_download_bytes` (`strategy::tpfl::TpflRound`) holds the paper's. FedTMOS's code
/// (`size`, docs/papers/fedtmos.md §19) counts every one of the run's `classes` of every machine, held
/// or not: per class, clauses × (one u32 weight + ⌈literals / 32⌉ u32 words of include bits).
///
/// `clauses` is the run's (weights per class): a coded `ClassWeights` does not say how many it
/// holds.
pub fn paper_convention_bytes(p: &Payload, classes: usize, clauses: usize) -> u64 {
    let count = |c: &proto::ClassWeights| {
        if c.coded.is_empty() {
            c.weights.len() as u64
        } else {
            clauses as u64
        }
    };
    let tm = |m: &proto::TmModel| {
        let words = 1 + u64::from(m.literals).div_ceil(32);
        4 * classes as u64 * u64::from(m.clauses) * words
    };
    match &p.kind {
        Some(Kind::TmUpload(u)) => u.model.as_ref().map_or(0, tm),
        Some(Kind::TmComposite(c)) => c.models.iter().chain(&c.ensemble).map(tm).sum(),
        Some(Kind::LinearModel(m)) => 8 * (m.weights.len() as u64 + 1),
        Some(Kind::ConfidenceWinner(w)) => 4 * w.weights.as_ref().map_or(0, count),
        Some(Kind::ClassWeights(w)) => 8 * count(w),
        Some(Kind::AdjacencyMatrix(a)) => 8 * a.weights.len() as u64,
        // The baselines' PyTorch float32, with the one-shot rules' statistics.
        Some(Kind::NetworkParams(n)) => 4 * (n.params.len() + n.gram.len() + n.fisher.len()) as u64,
        _ => 0,
    }
}
