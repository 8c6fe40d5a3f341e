//! FedTMOS's server aggregation (FedTMOS Table 2's "SL": scaling → composite built), on uploads
//! recorded from a real run of `experiments/fedtmos/mnist-dir0.1.toml` (seed 0, 30 local epochs,
//! kept with `--set server.keep_updates=true`), with φ = 4, σ = 0.5, k = 30.
//!
//! 100 and 1,000 clients repeat the 10 recorded uploads under new client ids, each weight moved
//! by a deterministic −1, 0 or +1 so that k-means never sees two equal vectors; the shapes (one
//! vector per held class, 100 clauses, 272 literals) are the recorded ones.
//!
//! cargo bench -p flint-common --bench fedtmos
//! FLINT_FEDTMOS_UPLOADS=runs/…/updates cargo bench -p flint-common --bench fedtmos

use std::collections::BTreeMap;
use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use flint_common::ClientId;
use flint_common::model::tm::TmHyper;
use flint_common::strategy::ServerStrategy;
use flint_common::strategy::fedtmos::{FedTmosSection, FedTmosServer};
use flint_common::wire::proto::{DataSummary, Payload};
use flint_common::wire::{TmShape, Update, decode_tm_upload};
use prost::Message;

const SHAPE: TmShape = TmShape {
    classes: 10,
    clauses: 100,
    literals: 272,
    coding: flint_common::wire::WeightCoding::Arithmetic,
};

fn recorded() -> Vec<Update> {
    let dir = std::env::var_os("FLINT_FEDTMOS_UPLOADS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/data/fedtmos-mnist-dir0.1"),
        PathBuf::from,
    );
    (1..=10)
        .map(|c| {
            let path = dir.join(format!("round-1-client-{c}.pb"));
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let payload = Payload::decode(&bytes[..]).expect("a recorded payload");
            Update::Tm(decode_tm_upload(&payload, SHAPE).expect("a recorded tm upload"))
        })
        .collect()
}

fn uploads(recorded: &[Update], clients: usize) -> BTreeMap<ClientId, Update> {
    (0..clients)
        .map(|j| {
            let mut u = recorded[j % recorded.len()].clone();
            if j >= recorded.len()
                && let Update::Tm(t) = &mut u
            {
                for (class, c) in t.parts.classes.iter_mut() {
                    for (i, w) in c.weights.iter_mut().enumerate() {
                        let step = (j * 31 + i * 17 + *class as usize * 7) % 3;
                        *w = (*w + step as u32).saturating_sub(1);
                    }
                }
            }
            (j as ClientId + 1, u)
        })
        .collect()
}

fn aggregation(c: &mut Criterion) {
    let recorded = recorded();
    let tm = TmHyper {
        clauses: 100,
        t: 1000,
        s: 5.0,
        weighted: true,
        ..Default::default()
    }
    .check()
    .unwrap();
    let hyper = FedTmosSection {
        models: 4,
        sigma: 0.5,
        k_max: 30,
        ..Default::default()
    }
    .check()
    .unwrap();
    let mut group = c.benchmark_group("fedtmos_server_aggregation");
    group.sample_size(10);
    for clients in [10usize, 100, 1000] {
        let updates = uploads(&recorded, clients);
        let summaries: BTreeMap<ClientId, DataSummary> = BTreeMap::new();
        group.bench_with_input(BenchmarkId::from_parameter(clients), &updates, |b, u| {
            b.iter(|| {
                let mut server = FedTmosServer::new(hyper, &tm, 10, 0);
                server.aggregate(1, &summaries, u).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, aggregation);
criterion_main!(benches);
