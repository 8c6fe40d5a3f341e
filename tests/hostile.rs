//! A hostile client, replayed against a real server process: every attack first tried by hand
//! (crafted Joins, squatting, impersonation, a flood of strangers' calls) gets its status, the
//! server stays up with its memory bounded, and the honest clients' run ends with exactly the
//! metrics of a run nobody attacked. (Oversize and concurrent uploads, swapped chunks and idle
//! sockets have their own tests in e2e_faults.rs.)

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::config::Experiment;
use flint_common::wire::TOKEN_HEADER;
use flint_common::wire::chunks::{MAX_CHUNK, split};
use flint_common::wire::proto::payload::Kind;
use flint_common::wire::proto::{
    DataSummary, EvalReport, JoinRequest, LinearModel, Payload, RoundRequest, UpdateHeader,
};
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// Calls a stranger makes without having joined: 100k, as the attack first tried by hand.
const FLOOD: usize = 100_000;
/// What the flood and the attacks may add to the server's peak resident memory over the
/// attack-free run's (the flood once added 118 MB, never freed).
const RSS_ALLOWANCE_KB: u64 = 24 * 1024;

const ROUNDS: &str = "round_timeout_secs = 120\neval_timeout_secs = 30";

/// The attacker's own token: well-formed, bound to nothing.
const MALLORY: &str = "0123456789abcdef0123456789abcdef";

fn join(name: &str, summary: DataSummary, fingerprint: &str) -> JoinRequest {
    JoinRequest {
        client_name: name.into(),
        experiment_fingerprint: fingerprint.into(),
        summary: Some(summary),
        token: MALLORY.into(),
        enrollment: String::new(),
    }
}

/// The attacker's Claim of any free slot, without an enrollment secret.
fn claim(fingerprint: &str) -> flint_common::wire::proto::ClaimRequest {
    flint_common::wire::proto::ClaimRequest {
        experiment_fingerprint: fingerprint.into(),
        token: MALLORY.into(),
        enrollment: String::new(),
    }
}

fn summary() -> DataSummary {
    DataSummary {
        train_class_counts: vec![200, 100],
        test_samples: 75,
        features: 6,
        compute_ghz: 2.0,
    }
}

fn as_mallory<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(TOKEN_HEADER, MALLORY.parse().unwrap());
    r
}

fn metrics_of(r: &flint_server::results::RunResults) -> BTreeMap<u32, serde_json::Value> {
    r.rounds
        .iter()
        .map(|rr| {
            let v = serde_json::json!({
                "metrics": rr.metrics, "weights": rr.weights, "participants": rr.participants,
            });
            (rr.round, v)
        })
        .collect()
}

/// Runs the federation of three honest clients; `attack` runs against the server first (before
/// the clients start) and `during` once they have joined. Returns the results and the server's
/// peak RSS, as it recorded it.
fn federation(
    name: &str,
    attack: impl FnOnce(&str, &Experiment),
    during: impl FnOnce(&str, &Experiment),
) -> (flint_server::results::RunResults, u64) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp_path = write(d, "hostile.toml", &synthetic_experiment(name, 4, 3, ROUNDS));
    let experiment = Experiment::load(&exp_path, &[]).unwrap();
    // Aggregations are held a moment, so that attacks land while the run is under way.
    let (mut server, addr) = start_server_with(&exp_path, d, &["--hold-aggregation-ms", "200"]);
    let url = format!("http://{addr}");
    attack(&url, &experiment);
    let mut honest = start_clients(&exp_path, &url, &["client-1", "client-2", "client-3"], d);
    wait_for(Duration::from_secs(60), || {
        status(d).filter(|s| s.joined == 3)
    });
    during(&url, &experiment);
    assert!(
        honest.wait(Duration::from_secs(120)).success(),
        "honest clients failed"
    );
    assert!(
        server.wait(Duration::from_secs(60)).success(),
        "server failed"
    );
    let r = results(d);
    let peak = r
        .server_peak_rss_kb
        .expect("the server records its peak RSS");
    let csv = std::fs::read_to_string(d.join("rounds.csv")).unwrap();
    // The run's own rows, and at most one for strangers (client 0, round 0).
    let strangers = csv.lines().filter(|l| l.starts_with("0,0,")).count();
    assert!(strangers <= 1, "{csv}");
    assert_eq!(csv.lines().count() - strangers, 1 + 5 * 4, "{csv}");
    (r, peak)
}

async fn connect(url: &str) -> Channel {
    Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Before anyone joins: Joins that once crashed or skewed the run, then the flood.
fn before(url: &str, e: &Experiment) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = connect(url).await;
        let mut g = AggregatorClient::new(channel.clone());
        let fp = &e.fingerprint;
        let refusals = [
            // 34 GB allocated at quorum, then SIGABRT.
            (
                DataSummary {
                    features: u32::MAX,
                    ..summary()
                },
                "the experiment's data has 6",
            ),
            // A first joiner declaring another width locked every honest client out.
            (
                DataSummary {
                    features: 8,
                    ..summary()
                },
                "the experiment's data has 6",
            ),
            // AHP weight taken by inflated counts and compute.
            (
                DataSummary {
                    train_class_counts: vec![1_000_000_000_000_000, 1],
                    ..summary()
                },
                "more than",
            ),
            (
                DataSummary {
                    compute_ghz: 1e9,
                    ..summary()
                },
                "compute_ghz must be in",
            ),
            // Counts that wrapped around u64 recorded an accuracy of 1.25.
            (
                DataSummary {
                    train_class_counts: vec![u64::MAX, 2],
                    ..summary()
                },
                "more than",
            ),
        ];
        for (s, says) in refusals {
            let st = g.join(join("client-1", s, fp)).await.unwrap_err();
            assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");
            assert!(st.message().contains(says), "{st:?}");
        }
        // Strangers learn nothing of the run: not the declared names, not the fingerprint.
        let st = g.join(join("nobody", summary(), fp)).await.unwrap_err();
        assert_eq!(st.code(), Code::NotFound);
        assert!(!st.message().contains("client-1"), "{st:?}");
        let st = g
            .join(join("client-1", summary(), "not-the-fingerprint"))
            .await
            .unwrap_err();
        assert!(!st.message().contains(fp.as_str()), "{st:?}");
        // A caller's long fingerprint is not echoed back in full.
        let st = g
            .join(join("client-1", summary(), &"f".repeat(100_000)))
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::FailedPrecondition, "{st:?}");
        assert!(
            st.message().len() < 300,
            "{} bytes echoed",
            st.message().len()
        );
        assert!(
            st.message().contains("(and 99968 more characters)"),
            "{st:?}"
        );
        let st = g
            .join(join(&"x".repeat(100_000), summary(), fp))
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::InvalidArgument);
        assert!(st.message().len() < 200, "a long name is not echoed");

        // The flood: health checks under made-up client ids, calls without a token, reports
        // for a client that has not joined; 16 at a time on one connection.
        use tonic_health::pb::HealthCheckRequest;
        use tonic_health::pb::health_client::HealthClient;
        let mut tasks = tokio::task::JoinSet::new();
        for lane in 0..16usize {
            let channel = channel.clone();
            tasks.spawn(async move {
                let mut health = HealthClient::new(channel.clone());
                let mut g = AggregatorClient::new(channel);
                for i in (lane..FLOOD).step_by(16) {
                    let id = 1000 + i as u32;
                    match i % 3 {
                        0 => {
                            let check = HealthCheckRequest {
                                service: "flint.v1.Aggregator".into(),
                            };
                            health.check(as_made_up_client(id, check)).await.unwrap();
                        }
                        1 => {
                            let ask = RoundRequest {
                                client_id: id,
                                run_id: String::new(),
                                after_round: 0,
                            };
                            let st = g.get_round(as_made_up_client(id, ask)).await.unwrap_err();
                            assert_eq!(st.code(), Code::Unauthenticated);
                        }
                        _ => {
                            let report = EvalReport {
                                client_id: 1,
                                run_id: String::new(),
                                round: 1,
                                classes: 2,
                                confusion: vec![1, 0, 0, 1],
                                global_test: false,
                                predictor: String::new(),
                                link: Vec::new(),
                                last: false,
                            };
                            let st = g.report_eval(as_mallory(report)).await.unwrap_err();
                            assert_eq!(st.code(), Code::Unauthenticated, "{st:?}");
                        }
                    }
                }
            });
        }
        while let Some(t) = tasks.join_next().await {
            t.unwrap();
        }
    });
}

/// Once the honest clients hold their slots: squatting and impersonation.
fn during(url: &str, e: &Experiment) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut g = AggregatorClient::new(connect(url).await);
        // A second Join under a held name, with another token.
        let st = g
            .join(join("client-2", summary(), &e.fingerprint))
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
        // Calls naming client 2, with a token that does not hold it.
        let st = g
            .get_round(as_mallory(RoundRequest {
                client_id: 2,
                run_id: String::new(),
                after_round: 0,
            }))
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
        let model = Payload {
            kind: Some(Kind::LinearModel(LinearModel {
                weights: vec![100.0; 6],
                bias: 0.0,
                class_biases: Vec::new(),
            })),
        };
        let header = UpdateHeader {
            client_id: 2,
            round: 1,
            ..Default::default()
        };
        let chunks = split(header, &model, MAX_CHUNK);
        let st = g
            .push_update(as_mallory(tokio_stream::iter(chunks)))
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
        let report = EvalReport {
            client_id: 2,
            run_id: String::new(),
            round: 1,
            classes: 2,
            confusion: vec![0, 9, 9, 0],
            global_test: false,
            predictor: String::new(),
            link: Vec::new(),
            last: false,
        };
        let st = g.report_eval(as_mallory(report)).await.unwrap_err();
        assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
    });
}

#[test]
fn a_hostile_client_changes_nothing_and_costs_bounded_memory() {
    let (calm, calm_peak) = federation("hostile", |_, _| {}, |_, _| {});
    let (attacked, attacked_peak) = federation("hostile", before, during);
    assert_eq!(metrics_of(&attacked), metrics_of(&calm));
    // Nothing of the attacks reached the ledger: no made-up client, the honest rows alone.
    let ids: Vec<u32> = attacked.ledger.flows.keys().copied().collect();
    assert!(ids.iter().all(|id| *id <= 3), "{ids:?}");
    assert_eq!(
        attacked.ledger.flows.get(&0).map(|f| f.len()).unwrap_or(0),
        1,
        "a stranger's bytes are client 0's, round 0's"
    );
    // They were counted apart, by method and status.
    let refused = &attacked.refused;
    let flood_calls: u64 = refused.values().map(|r| r.calls).sum();
    assert!(flood_calls as usize >= 2 * FLOOD / 3, "{refused:?}");
    // One counter per method and status, however many calls.
    assert!(refused.len() <= 16, "{refused:?}");
    let json = serde_json::to_vec(&attacked).unwrap();
    let calm_json = serde_json::to_vec(&calm).unwrap();
    assert!(
        json.len() < calm_json.len() + 4096,
        "results.json grew by {}",
        json.len() - calm_json.len()
    );
    assert!(
        attacked_peak < calm_peak + RSS_ALLOWANCE_KB,
        "peak RSS {attacked_peak} kB against {calm_peak} kB without the attacks"
    );
    eprintln!(
        "hostile: peak RSS {attacked_peak} kB with the attacks, {calm_peak} kB without; {flood_calls} refused calls counted"
    );
}

/// One client holds at most four long-polls at once; a fifth is refused with
/// RESOURCE_EXHAUSTED, and a long-poll given up frees its place.
#[test]
fn a_client_holds_at_most_four_long_polls() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "polls.toml",
        &synthetic_experiment("polls", 1, 2, ROUNDS),
    );
    let e = Experiment::load(&exp, &[]).unwrap();
    let (mut server, url) = start_server(&exp, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = connect(&url).await;
        let mut g = AggregatorClient::new(channel.clone());
        // Client 1 joins; client 2 never does, so round 1 never opens and every poll waits.
        let reply = g
            .join(join("client-1", summary(), &e.fingerprint))
            .await
            .unwrap()
            .into_inner();
        let ask = RoundRequest {
            client_id: reply.client_id,
            run_id: reply.run_id.clone(),
            after_round: 0,
        };
        let mut waiting = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let (mut g, ask) = (AggregatorClient::new(channel.clone()), ask.clone());
            waiting.spawn(async move { g.get_round(as_mallory(ask)).await });
        }
        // The fifth, once the four are in (ten seconds at most).
        let mut fifth = None;
        for _ in 0..50 {
            let poll = g.get_round(as_mallory(ask.clone()));
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(200), poll).await {
                fifth = Some(r);
                break;
            }
        }
        let st = fifth.expect("a fifth long-poll is refused").unwrap_err();
        assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
        assert!(
            st.message()
                .contains("already waits in 4 calls for its next task"),
            "{st:?}"
        );
        // Given up: their places are free again, and a new poll waits instead of being refused.
        waiting.abort_all();
        while waiting.join_next().await.is_some() {}
        // The server learns of the aborted streams as their resets arrive: ten seconds at most.
        let mut again = None;
        for _ in 0..100 {
            let poll = g.get_round(as_mallory(ask.clone()));
            match tokio::time::timeout(Duration::from_millis(500), poll).await {
                Err(_) => {
                    again = None;
                    break;
                }
                Ok(Err(st)) if st.code() == Code::ResourceExhausted => {
                    again = Some(Err(st));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(other) => {
                    again = Some(other);
                    break;
                }
            }
        }
        assert!(
            again.is_none(),
            "a freed place takes a new long-poll: {again:?}"
        );
    });
    server.signal("TERM");
    server.wait(Duration::from_secs(30));
}

/// A stranger holding one slot of a multi-client process ends only that client:
/// its sibling goes on to the end of the run, and the process names the refusal and exits
/// non-zero when it is done (`--fail-fast`, as `flint run` starts its processes, ends it at once).
#[test]
fn a_refused_client_ends_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "squat.toml",
        &synthetic_experiment(
            "squat",
            2,
            2,
            "min_updates = 1\nround_timeout_secs = 2\neval_timeout_secs = 5",
        ),
    );
    let e = Experiment::load(&exp, &[]).unwrap();
    let (mut server, url) = start_server(&exp, dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut g = AggregatorClient::new(connect(&url).await);
        g.join(join("client-2", summary(), &e.fingerprint))
            .await
            .expect("the stranger takes the free slot first");
    });
    let clients = dir.path().join("clients");
    std::fs::create_dir_all(&clients).unwrap();
    let mut honest = start_clients(&exp, &url, &["client-1", "client-2"], &clients);
    assert!(server.wait(Duration::from_secs(120)).success());
    assert!(
        !honest.wait(Duration::from_secs(60)).success(),
        "the process reports its refused client"
    );
    let log = std::fs::read_to_string(clients.join("client-1.log")).unwrap();
    assert!(
        log.contains(
            "1 of this process's clients failed (the others finished): client \"client-2\""
        ),
        "{log}"
    );
    let r = results(dir.path());
    for rr in &r.rounds[1..] {
        assert_eq!(
            rr.participants,
            vec![1],
            "round {}: client 1 went on",
            rr.round
        );
    }
    assert!(
        clients.join("client-client-1.json").exists(),
        "client 1 wrote its report"
    );
}

/// The final round's mean accuracy over clients 1–4, of a run of five AHP clients where the
/// fifth is `insider` (or honest, without one), with `robust` as the `[robust]` section.
fn honest_accuracy(insider: bool, robust: Option<&str>) -> f64 {
    honest_accuracy_of("fedavg-ahp", insider, robust)
}

/// [`honest_accuracy`] under `strategy` (`fedavg-ahp` or `fedavg`).
fn honest_accuracy_of(strategy: &str, insider: bool, robust: Option<&str>) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut text = synthetic_experiment("capture", 5, 5, "")
        .replace("\"fedavg-ahp\"", &format!("\"{strategy}\""));
    if let Some(robust) = robust {
        text += &format!("\n[robust]\n{robust}\n");
    }
    let exp_path = write(d, "capture.toml", &text);
    let e = Experiment::load(&exp_path, &[]).unwrap();
    let (mut server, url) = start_server(&exp_path, d);
    let mut honest = start_clients(
        &exp_path,
        &url,
        &["client-1", "client-2", "client-3", "client-4"],
        d,
    );
    let mut fifth = match insider {
        true => {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(capture_and_poison(&url, &e));
            None
        }
        false => Some(start_clients(&exp_path, &url, &["client-5"], d)),
    };
    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(honest.wait(Duration::from_secs(30)).success());
    if let Some(f) = &mut fifth {
        assert!(f.wait(Duration::from_secs(30)).success());
    }
    let r = results(d);
    let last = r.rounds.last().unwrap();
    let accuracy: Vec<f64> = (1..=4).map(|id| last.metrics[&id].accuracy).collect();
    accuracy.iter().sum::<f64>() / 4.0
}

/// An insider: client-5 declares a summary within the caps (2^38 rows per class,
/// 1,000 GHz) to take most of the AHP weight, and sends a finite poisoned model every round.
async fn capture_and_poison(url: &str, e: &Experiment) {
    let mut g = AggregatorClient::new(connect(url).await);
    let inflated = DataSummary {
        train_class_counts: vec![1 << 38, 1 << 38],
        test_samples: 75,
        features: 6,
        compute_ghz: 1000.0,
    };
    let reply = g
        .join(join("client-5", inflated, &e.fingerprint))
        .await
        .unwrap()
        .into_inner();
    let poisoned = Payload {
        kind: Some(Kind::LinearModel(LinearModel {
            weights: vec![-20.0; 6],
            bias: 20.0,
            class_biases: Vec::new(),
        })),
    };
    let mut after = 0;
    loop {
        let task = g
            .get_round(as_mallory(RoundRequest {
                client_id: reply.client_id,
                run_id: reply.run_id.clone(),
                after_round: after,
            }))
            .await
            .unwrap()
            .into_inner();
        // It reports a perfect evaluation of each round's model, as a client must to end.
        let evaluated = if task.finished {
            task.round
        } else {
            task.round - 1
        };
        if evaluated > 0 {
            let report = EvalReport {
                client_id: reply.client_id,
                run_id: reply.run_id.clone(),
                round: evaluated,
                classes: 2,
                confusion: vec![40, 0, 0, 35],
                global_test: false,
                predictor: String::new(),
                link: Vec::new(),
                last: false,
            };
            g.report_eval(as_mallory(report)).await.unwrap();
        }
        if task.finished {
            return;
        }
        let header = UpdateHeader {
            client_id: reply.client_id,
            run_id: reply.run_id.clone(),
            round: task.round,
            ..Default::default()
        };
        let chunks = split(header, &poisoned, MAX_CHUNK);
        g.push_update(as_mallory(tokio_stream::iter(chunks)))
            .await
            .unwrap();
        after = task.round;
    }
}

/// An insider that takes most of the AHP weight with a summary within the caps
/// and sends a finite poisoned model. Under the papers' weighted mean the honest clients'
/// accuracy falls; under the coordinate-wise median, the trimmed mean (Yin et al. 2018),
/// each change clipped to the round's median with the weight capped, or the weight cap alone
/// (which clips the capped client's change), it stays within 2 points of the run without the
/// insider.
#[test]
fn an_insider_capturing_the_ahp_weight_is_outvoted_by_the_robust_rules() {
    // An empty section: the paper's plain mean, without the default cap.
    let clean = honest_accuracy(false, Some(""));
    let captured = honest_accuracy(true, Some(""));
    println!("clean {clean:.4}, captured under the mean {captured:.4}");
    assert!(
        captured < clean - 0.1,
        "the attack bites: {captured} against {clean}"
    );
    for robust in [
        "rule = \"median\"",
        "rule = \"trimmed-mean\"",
        "clip = \"median\"\nmax_weight = 0.25",
        // The cap alone: the capped client's update is clipped too.
        "max_weight = 0.25",
    ] {
        let defended = honest_accuracy(true, Some(robust));
        println!("{robust:?}: {defended:.4}");
        assert!(
            (defended - clean).abs() <= 0.02,
            "{robust}: {defended} against {clean} without the insider"
        );
    }
    // The defaults: AHP-FedAvg caps any client at twice the equal share (0.4 of five). The
    // insider must cost the honest clients at most 2 points; on their few test rows the capped
    // run may also land above the clean one (it does: 0.7569 against 0.7361).
    let defaults = honest_accuracy(true, None);
    println!("defaults: {defaults:.4}");
    assert!(
        defaults >= clean - 0.02,
        "the defaults: {defaults} against {clean} without the insider"
    );
}

/// FedAvg weights each client by the rows it declares (n_k / n): the insider's 2^39 rows take
/// the whole weight under the paper's plain mean, and at the defaults (no client above twice
/// the equal share, its change clipped) it costs the honest clients at most 2 points.
#[test]
fn an_insider_declaring_billions_of_rows_is_capped_under_fedavg_by_default() {
    let clean = honest_accuracy_of("fedavg", false, Some(""));
    let captured = honest_accuracy_of("fedavg", true, Some(""));
    println!("clean {clean:.4}, captured under the mean {captured:.4}");
    assert!(
        captured < clean - 0.1,
        "the attack bites: {captured} against {clean}"
    );
    let defaults = honest_accuracy_of("fedavg", true, None);
    println!("defaults: {defaults:.4}");
    assert!(
        defaults >= clean - 0.02,
        "the defaults: {defaults} against {clean} without the insider"
    );
}

/// 2,000 sockets to `addr`, connected and silent, from `hosts` loopback addresses in turn
/// (127.0.0.2 onwards).
fn silent_sockets(addr: &str, count: usize, hosts: usize) -> Vec<std::net::TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut held = Vec::with_capacity(count);
        for k in 0..count {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            let host =
                std::net::Ipv4Addr::from(u32::from_be_bytes([127, 0, 0, 2]) + (k % hosts) as u32);
            socket.bind((host, 0).into()).unwrap();
            held.push(socket.connect(addr).await.unwrap().into_std().unwrap());
        }
        held
    })
}

/// Whether the server closed a socket (the end of the stream, or a reset), after what it sent
/// first (a connection served before it was closed got HTTP/2's settings).
fn closed_by_the_server(s: &std::net::TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut sent = [0u8; 1024];
    loop {
        match std::io::Read::read(&mut &*s, &mut sent) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

/// The honest federation started after 2,000 silent sockets from `hosts` addresses, its
/// clients (on 127.0.0.1) giving up after 3 s without the server, well before the server's 10 s
/// opening deadline would free a slot a silent socket holds. Whether they finished, the run's
/// results, and how many silent sockets the server closed.
fn beside_silent_sockets(
    server_args: &[&str],
    hosts: usize,
) -> (bool, Option<flint_server::results::RunResults>, usize) {
    const SOCKETS: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(
        d,
        "silent.toml",
        &synthetic_experiment("silent", 4, 3, ROUNDS),
    );
    let (mut server, addr) = start_server_with(&exp, d, server_args);
    let held = silent_sockets(&addr, SOCKETS, hosts);
    let mut honest = start_clients_with(
        &exp,
        &format!("http://{addr}"),
        &["client-1", "client-2", "client-3"],
        d,
        &["--retry-secs", "3"],
    );
    let finished = honest.wait(Duration::from_secs(120)).success();
    let closed = held.iter().filter(|s| closed_by_the_server(s)).count();
    if !finished {
        return (false, None, closed);
    }
    assert!(server.wait(Duration::from_secs(60)).success());
    (true, Some(results(d)), closed)
}

/// One host's 2,000 silent sockets. With every connection of the server's pool open to one
/// address, they fill it, and each honest newcomer takes the place of the oldest (without that,
/// the honest clients gave up); with the default share per address (3 clients + 16), the server
/// closes all but that share at once. Either way the honest run ends exactly as one nobody
/// attacked.
#[test]
fn two_thousand_silent_sockets_from_one_host_leave_the_honest_run_alone() {
    let (clean, _) = federation("silent-clean", |_, _| {}, |_, _| {});
    let (finished, attacked, _) =
        beside_silent_sockets(&["--max-connections-per-address", "100000"], 1);
    assert!(
        finished,
        "without a share per address the newcomers take the silent sockets' places"
    );
    assert_eq!(metrics_of(&attacked.unwrap()), metrics_of(&clean));
    let (finished, attacked, closed) = beside_silent_sockets(&[], 1);
    assert!(
        finished,
        "the honest clients finished beside the silent sockets"
    );
    assert_eq!(metrics_of(&attacked.unwrap()), metrics_of(&clean));
    assert!(
        closed >= 2_000 - 19,
        "{closed} of 2,000 closed by the server"
    );
}

/// 2,000 silent sockets from 100 hosts, each host under its share (19 for 3 clients): together
/// they filled all 70 of the server's connections, and the honest clients waited for the
/// opening deadline to free one, and gave up.
/// Each newcomer now takes the place of the oldest silent one, so the honest clients get in at
/// once and their run ends exactly as one nobody attacked.
#[test]
fn silent_sockets_from_a_hundred_hosts_leave_the_honest_run_alone() {
    let (clean, _) = federation("silent-clean", |_, _| {}, |_, _| {});
    let (finished, attacked, closed) = beside_silent_sockets(&[], 100);
    assert!(
        finished,
        "the honest clients finished beside the silent sockets"
    );
    assert_eq!(metrics_of(&attacked.unwrap()), metrics_of(&clean));
    assert!(
        closed >= 2_000 - 70,
        "{closed} of 2,000 closed by the server"
    );
}

/// A stranger who claims a slot (`--name auto`'s call) and never joins holds it
/// only for the server's lease; then an honest client started without a name takes it and
/// the run completes, and the stranger's late Join is refused.
#[test]
fn a_slot_claimed_and_never_joined_is_released_after_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(
        d,
        "lease.toml",
        &synthetic_experiment("lease", 2, 1, ROUNDS),
    );
    let e = Experiment::load(&exp, &[]).unwrap();
    let (mut server, addr) = start_server_with(&exp, d, &["--claim-lease-secs", "1"]);
    let url = format!("http://{addr}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut g = rt.block_on(async { AggregatorClient::new(connect(&url).await) });
    let claim = claim(&e.fingerprint);
    let held = rt.block_on(g.claim(claim.clone())).unwrap().into_inner();
    assert_eq!(held.client_name, "client-1");
    // Within the lease the slot is the stranger's: another claimer finds none.
    let other = flint_common::wire::proto::ClaimRequest {
        token: "ab".repeat(16),
        ..claim
    };
    let st = rt.block_on(g.claim(other.clone())).unwrap_err();
    assert_eq!(st.code(), Code::FailedPrecondition, "{st:?}");
    // The lease (1 s) runs out with no Join: the next claimer takes the slot, and the first
    // claimer's late Join is refused.
    std::thread::sleep(Duration::from_millis(1_500));
    let next = rt.block_on(g.claim(other.clone())).unwrap().into_inner();
    assert_eq!(next.client_name, "client-1");
    let st = rt
        .block_on(g.join(join("client-1", summary(), &e.fingerprint)))
        .unwrap_err();
    assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
    // That claimer never joins either; an honest client started without a name gets the slot
    // once its lease runs out too, and the run completes.
    std::thread::sleep(Duration::from_millis(1_500));
    let mut honest = start_clients(&exp, &url, &["auto"], d);
    assert!(honest.wait(Duration::from_secs(60)).success());
    assert!(server.wait(Duration::from_secs(60)).success());
    let r = results(d);
    assert_eq!(r.rounds.len(), 3);
    assert_eq!(r.rounds[1].participants, vec![1]);
}

/// A two-client run in `d` whose server asks for the enrollment secrets `flint certs --enroll 2`
/// issued into `enroll`.
struct Enrolled {
    exp: PathBuf,
    enroll: PathBuf,
    server: Proc,
    url: String,
}

impl Enrolled {
    fn start(d: &Path, name: &str) -> Enrolled {
        Self::start_with(d, name, &[])
    }

    /// Two processes started without names, each taking a secret from the folder, run to the
    /// end, and so does the server.
    fn two_auto_processes_finish(&mut self, d: &Path, prefix: &str) {
        let enroll_args = ["--enroll-dir", self.enroll.to_str().unwrap()];
        let processes: Vec<Proc> = (1..=2)
            .map(|p| {
                let out = d.join(format!("{prefix}-{p}"));
                std::fs::create_dir_all(&out).unwrap();
                start_clients_with(&self.exp, &self.url, &["auto"], &out, &enroll_args)
            })
            .collect();
        for mut p in processes {
            assert!(p.wait(Duration::from_secs(60)).success());
        }
        assert!(self.server.wait(Duration::from_secs(60)).success());
    }

    fn start_with(d: &Path, name: &str, extra: &[&str]) -> Enrolled {
        let exp = write(
            d,
            &format!("{name}.toml"),
            &synthetic_experiment(name, 2, 2, ROUNDS),
        );
        let pki = d.join("pki");
        ok(flint().args(["certs", "--enroll", "2", "--out"]).arg(&pki));
        let hashes = pki.join("enrollment.sha256");
        let args = [&["--enrollment", hashes.to_str().unwrap()], extra].concat();
        let (server, addr) = start_server_with(&exp, d, &args);
        Enrolled {
            exp,
            enroll: pki.join("enroll"),
            server,
            url: format!("http://{addr}"),
        }
    }
}

/// A server started with `--enrollment` binds a slot the first time only with one
/// of the secrets `flint certs --enroll` issued, each once. A stranger holding the experiment
/// file (on a plaintext server: tokens only) can neither join nor claim; two processes started
/// without names take one secret each from the shared directory and run to the end.
#[test]
fn strangers_without_an_enrollment_secret_take_no_slot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut fed = Enrolled::start(d, "enroll");
    let e = Experiment::load(&fed.exp, &[]).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut g = AggregatorClient::new(connect(&fed.url).await);
        let st = g
            .join(join("client-1", summary(), &e.fingerprint))
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::Unauthenticated, "{st:?}");
        let mut guessed = join("client-1", summary(), &e.fingerprint);
        guessed.enrollment = "0f".repeat(16);
        let st = g.join(guessed).await.unwrap_err();
        assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
        let claim = claim(&e.fingerprint);
        let st = g.claim(claim).await.unwrap_err();
        assert_eq!(st.code(), Code::Unauthenticated, "{st:?}");
    });
    fed.two_auto_processes_finish(d, "process");
    assert_eq!(results(d).rounds[1].participants, vec![1, 2]);
    let left = std::fs::read_dir(&fed.enroll)
        .unwrap()
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|x| x == "secret"))
        .count();
    assert_eq!(left, 0, "each process took one secret");
}

/// A process hosting two clients from an enrollment folder with one secret left: the client
/// without a secret ends alone, the other joins and finishes, and the process reports the one
/// that failed (it used to end whole before any Join). The secret it is given later serves a
/// client of another process.
#[test]
fn a_short_enrollment_folder_ends_only_the_client_without_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Enrolled {
        exp,
        enroll,
        mut server,
        url,
    } = Enrolled::start(d, "short");
    let mut secrets: Vec<_> = std::fs::read_dir(&enroll)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .filter(|p| p.extension().is_some_and(|x| x == "secret"))
        .collect();
    secrets.sort();
    let aside = d.join("aside.secret");
    std::fs::rename(&secrets[1], &aside).unwrap();
    let enroll_args = ["--enroll-dir", enroll.to_str().unwrap()];
    let out = d.join("two");
    std::fs::create_dir_all(&out).unwrap();
    let mut two = start_clients_with(&exp, &url, &["auto", "auto"], &out, &enroll_args);
    // The second secret comes back; a client of another process takes it.
    std::thread::sleep(Duration::from_secs(1));
    std::fs::rename(&aside, &secrets[1]).unwrap();
    let other = d.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut one = start_clients_with(&exp, &url, &["auto"], &other, &enroll_args);
    assert!(one.wait(Duration::from_secs(60)).success());
    assert!(!two.wait(Duration::from_secs(60)).success());
    assert!(server.wait(Duration::from_secs(60)).success());
    assert_eq!(results(d).rounds[1].participants, vec![1, 2]);
    let said = std::fs::read_to_string(out.join("auto.log")).unwrap();
    assert!(
        said.contains("1 of this process's clients failed (the others finished)")
            && said.contains("no unused enrollment secret left"),
        "{said}"
    );
}

/// A server whose slots a bare token or the pool certificate could take (plaintext, or TLS
/// without client certificates) refuses to start without enrollment, on loopback too, and says
/// how to go on; `--open-enrollment` asks for it by name (every other test here does).
#[test]
fn a_server_on_tokens_alone_refuses_to_start_without_enrollment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "bare.toml", &synthetic_experiment("bare", 2, 1, ROUNDS));
    let pki = d.join("pki");
    ok(flint().args(["certs", "--pool", "--out"]).arg(&pki));
    let tls = [
        "--tls-cert",
        pki.join("server.crt").to_str().unwrap(),
        "--tls-key",
        pki.join("server.key").to_str().unwrap(),
    ]
    .map(String::from);
    for extra in [&[][..], &tls[..]] {
        let out = flint()
            .args(["server", "--listen", "127.0.0.1:0", "--experiment"])
            .arg(&exp)
            .arg("--out")
            .arg(d.join("refused"))
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("refusing to start without enrollment")
                && err.contains("--enrollment")
                && err.contains("--open-enrollment"),
            "{err}"
        );
        assert!(!d.join("refused").join("state").exists(), "nothing written");
    }
}

/// Under the defaults a stranger claiming again and again, with a fresh token each time and
/// no secret, takes no slot however short the lease: the honest clients started without a
/// name (each with a secret) get theirs and the run ends. On an open server the same loop
/// would hold every slot that lapses.
#[test]
fn a_claim_loop_without_secrets_keeps_no_honest_client_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut fed = Enrolled::start_with(d, "squat", &["--claim-lease-secs", "3"]);
    let e = Experiment::load(&fed.exp, &[]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let looping = {
        let (stop, url, fingerprint) = (stop.clone(), fed.url.clone(), e.fingerprint.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let mut g = AggregatorClient::new(connect(&url).await);
                let mut refused = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut c = claim(&fingerprint);
                    c.token = flint_client::random_secret();
                    refused.push(g.claim(c).await.map(|_| ()).map_err(|s| s.code()));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                refused
            })
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    fed.two_auto_processes_finish(d, "honest");
    stop.store(true, Ordering::Relaxed);
    let tried = looping.join().unwrap();
    assert!(tried.len() >= 5, "{} claims", tried.len());
    // Refused for want of a secret, or once every slot is joined for want of a slot.
    assert_eq!(tried[0], Err(Code::Unauthenticated));
    assert!(tried.iter().all(Result::is_err), "{tried:?}");
    assert_eq!(results(d).rounds[1].participants, vec![1, 2]);
}
