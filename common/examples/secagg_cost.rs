//! What one round of secure aggregation (`flint_common::secagg`) costs, in one process: the
//! protocol's bytes per client at each stage (the last client's messages as built, each item
//! with a 4-byte id; before protobuf and gRPC framing) and the time of
//! each side, for groups of 10, 100 and 255 clients (every client sharing with every other) and
//! 1,000 (SecAgg+, each sharing with its neighbours in the graph, 40 by default), with no one
//! dropping, with 10 % dropping after their masked input, and with 10 % dropping after sharing
//! their keys (before any input).
//!
//!   cargo run --release -p flint-common --example secagg_cost [VALUES ...]
//!
//! VALUES: the vector lengths (default 11, MAGIC's logistic regression, and 7850, MNIST's);
//! SIZES="10 100 255 1000" by default.

use std::collections::BTreeMap;
use std::time::Instant;

use flint_common::secagg::{SecAggClient, SecAggServer, ring::FixedPoint};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Bytes one client sends (up) and receives (down) at each stage, and the times.
#[derive(Default)]
struct Cost {
    up: [usize; 4],
    down: [usize; 4],
    client_seconds: f64,
    server_seconds: f64,
}

/// `early` members leave after sharing (their pairwise masks must be rebuilt), `late` after
/// their masked input (fewer shares come back).
fn one_round(n: u32, len: usize, early: usize, late: usize) -> Cost {
    let threshold = n as usize * 2 / 3 + 1;
    let mut rng = StdRng::from_seed([1; 32]);
    let codec = FixedPoint::for_sums(1.0, n as usize).unwrap();
    let mut cost = Cost::default();
    let (mut server, mut server_t, mut client_t) = (SecAggServer::new(1, threshold, len), 0.0, 0.0);
    let mut clients = BTreeMap::new();
    let timed = |acc: &mut f64, start: Instant| *acc += start.elapsed().as_secs_f64();
    for id in 1..=n {
        let t = Instant::now();
        let (c, advert) = SecAggClient::new(id, 1, &mut rng);
        timed(&mut client_t, t);
        server.advertise(id, advert).unwrap();
        clients.insert(id, c);
    }
    let t = Instant::now();
    server.roster().unwrap();
    timed(&mut server_t, t);
    for (id, c) in clients.iter_mut() {
        let own = server.roster_for(*id);
        let t = Instant::now();
        let sealed = c
            .share_keys(own, server.threshold_of(*id), &mut rng)
            .unwrap();
        timed(&mut client_t, t);
        if *id == n {
            // The last client's envelopes, each with its recipient's id.
            cost.up[1] = sealed.values().map(|e| 4 + e.len()).sum();
        }
        let t = Instant::now();
        server.share(*id, sealed).unwrap();
        timed(&mut server_t, t);
    }
    let t = Instant::now();
    let inboxes = server.inboxes().unwrap();
    timed(&mut server_t, t);
    let x = codec.encode(&vec![0.5; len]).unwrap();
    for (id, inbox) in inboxes.into_iter().skip(early) {
        if id == n {
            cost.down[1] = inbox.values().map(|e| 4 + e.len()).sum();
        }
        let t = Instant::now();
        let y = clients
            .get_mut(&id)
            .unwrap()
            .masked_input(inbox, &x)
            .unwrap();
        timed(&mut client_t, t);
        if id == n {
            cost.up[2] = 4 * y.len();
        }
        server.masked(id, y).unwrap();
    }
    let survivors = server.survivors().unwrap();
    for &id in survivors.iter().skip(late) {
        let own = server.survivors_for(id);
        let t = Instant::now();
        let reply = clients.get_mut(&id).unwrap().unmask(&own).unwrap();
        timed(&mut client_t, t);
        if id == n {
            let shares = reply.seed_shares.values().chain(reply.key_shares.values());
            cost.up[3] = shares.map(|s| 4 + s.len()).sum();
        }
        server.unmasking(id, reply).unwrap();
    }
    let t = Instant::now();
    let sum = server.sum().unwrap();
    timed(&mut server_t, t);
    assert_eq!(codec.decode(&sum)[0], 0.5 * (n as usize - early) as f64);
    // The advert's three 32-byte values; the roster, each member's id and advert; the
    // survivors' ids. The rest as the last client's messages held them.
    cost.up[0] = 96;
    cost.down[0] = server.neighbourhood(n).len() * (4 + 96);
    cost.down[2] = 4 * server.survivors_for(n).len();
    cost.client_seconds = client_t / n as f64;
    cost.server_seconds = server_t;
    cost
}

fn main() {
    let lens: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let lens = if lens.is_empty() {
        vec![11, 7850]
    } else {
        lens
    };
    println!(
        "| clients | values | dropping (after shares / after input) | up B per client (keys / shares / input / unmask) | down B per client (roster / shares / survivors) | up ÷ plain input | client ms | server ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let sizes: Vec<u32> = std::env::var("SIZES")
        .unwrap_or_else(|_| "10 100 255 1000".into())
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    for &len in &lens {
        for &n in &sizes {
            let tenth = n as usize / 10;
            for (early, late) in [(0, 0), (0, tenth), (tenth, 0)] {
                let c = one_round(n, len, early, late);
                let up: usize = c.up.iter().sum();
                println!(
                    "| {n} | {len} | {early} / {late} | {} ({}) | {} ({}) | {:.2} | {:.2} | {:.1} |",
                    up,
                    c.up.map(|b| b.to_string()).join(" / "),
                    c.down[..3].iter().sum::<usize>(),
                    c.down[..3]
                        .iter()
                        .map(|b| b.to_string())
                        .collect::<Vec<_>>()
                        .join(" / "),
                    up as f64 / (4 * len) as f64,
                    1000.0 * c.client_seconds,
                    1000.0 * c.server_seconds,
                );
            }
        }
    }
}
