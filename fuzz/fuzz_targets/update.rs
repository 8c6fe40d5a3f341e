//! An upload as the server takes it: chunks reassembled under the run's size limit, then the
//! payload decoded and checked by each kind of strategy. Input: one byte choosing the run, then
//! length-delimited `UpdateChunk`s. Nothing may panic or allocate beyond the limit.
#![no_main]

use std::sync::OnceLock;

use flint_common::config::Experiment;
use flint_common::strategy::ServerStrategy;
use flint_common::wire::chunks::Reassembler;
use flint_common::wire::proto::{Payload, UpdateChunk};
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// A run of each model kind: (its server half, features, limit for one update).
struct Run {
    strategy: Box<dyn ServerStrategy>,
    features: usize,
    limit: u64,
}

// Safe to share: decoding reads the strategy only.
unsafe impl Sync for Run {}
unsafe impl Send for Run {}

fn runs() -> &'static [Run] {
    static RUNS: OnceLock<Vec<Run>> = OnceLock::new();
    RUNS.get_or_init(|| {
        [
            include_str!("../../experiments/quickstart.toml"),
            include_str!("../../experiments/fcm/breast-cancer/blended-accuracy-tanh-uneven.toml"),
            include_str!("../../experiments/tpfl/mnist-exp1.toml"),
            include_str!("../../experiments/fedtmos/mnist-dir0.1.toml"),
            include_str!("../../experiments/fedtm/mnist-dir0.1.toml"),
        ]
        .iter()
        .map(|text| {
            let e = Experiment::from_toml(text).expect("the repository's experiments load");
            let classes = e.data.classes().len();
            let features = e.data.features().unwrap_or(6);
            Run {
                strategy: e
                    .strategy
                    .server(classes, e.seed, e.robust, None)
                    .expect("these strategies hold no data"),
                features,
                limit: e.strategy.max_update_bytes(features, classes),
            }
        })
        .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let runs = runs();
    let run = &runs[which as usize % runs.len()];
    // The same bytes as one payload, straight to the strategy's checks.
    if let Ok(p) = Payload::decode(rest) {
        let _ = run.strategy.decode(1, run.features, &p);
    }
    let mut parts = Reassembler::new(run.limit);
    while !rest.is_empty() {
        let Ok(chunk) = UpdateChunk::decode_length_delimited(&mut rest) else {
            return;
        };
        if parts.push(chunk).is_err() {
            return;
        }
    }
    if let Ok((_, payload)) = parts.finish() {
        let _ = run.strategy.decode(1, run.features, &payload);
    }
});
