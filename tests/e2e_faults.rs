//! Faults with real processes: malformed updates, a client killed mid-round.

mod support;

use std::time::Duration;

use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::config::Experiment;
use flint_common::wire::TOKEN_HEADER;
use flint_common::wire::chunks::{MAX_CARRIED_REPORTS, MAX_CHUNK, split};
use flint_common::wire::proto::payload::Kind;
use flint_common::wire::proto::update_chunk::Part;
use flint_common::wire::proto::{
    DataSummary, EvalReport, JoinRequest, LinearModel, Payload, RoundRequest, UpdateChunk,
    UpdateHeader,
};
use support::*;
use tonic::Code;

const FAST_ROUNDS: &str = "min_updates = 2\nround_timeout_secs = 2\neval_timeout_secs = 5";

fn linear(weights: Vec<f32>) -> Payload {
    Payload {
        kind: Some(Kind::LinearModel(LinearModel {
            weights,
            bias: 0.0,
            class_biases: Vec::new(),
        })),
    }
}

/// The join of a client driven by hand over gRPC, with a summary that fits the synthetic
/// experiments (6 features, 2 classes).
fn hand_made_join(name: &str, fingerprint: &str) -> JoinRequest {
    JoinRequest {
        client_name: name.into(),
        experiment_fingerprint: fingerprint.into(),
        summary: Some(DataSummary {
            train_class_counts: vec![200, 100],
            test_samples: 75,
            features: 6,
            compute_ghz: 2.0,
        }),
        token: token_for(name),
        enrollment: String::new(),
    }
}

/// The token a hand-driven client binds its slot to: its name in hex, padded.
fn token_for(name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex:0>32}")
}

/// A call of the hand-driven client `name`, carrying its token.
fn authed<T>(msg: T, name: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(TOKEN_HEADER, token_for(name).parse().unwrap());
    r
}

/// docs/PROTOCOL.md §Errors: every received update is validated before it touches state; a
/// bad one gets INVALID_ARGUMENT with the reason, a wrong round FAILED_PRECONDITION, and the
/// run completes with the other clients.
#[test]
fn malformed_updates_get_clear_errors_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    let exp_path = write(
        dir.path(),
        "faults.toml",
        &synthetic_experiment("faults", 2, 3, FAST_ROUNDS),
    );
    let experiment = Experiment::load(&exp_path, &[]).unwrap();
    let (mut server, addr) = start_server(&exp_path, dir.path());
    let mut honest = start_clients(&exp_path, &addr, &["client-1", "client-2"], dir.path());

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut grpc = AggregatorClient::connect(addr.clone()).await.unwrap();
        let reply = grpc
            .join(hand_made_join("client-3", &experiment.fingerprint))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.client_id, 3);
        let task = grpc
            .get_round(authed(
                RoundRequest {
                    client_id: 3,
                    run_id: reply.run_id.clone(),
                    after_round: 0,
                },
                "client-3",
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(task.round, 1);
        let header = |round: u32, run_id: &str| UpdateHeader {
            client_id: 3,
            run_id: run_id.into(),
            round,
            payload_len: 0,
            payload_crc32: 0,
            wait_next: false,
            reports: Vec::new(),
        };
        let push = |round: u32, run_id: String, p: Payload| {
            let mut g = grpc.clone();
            async move {
                let chunks = split(header(round, &run_id), &p, MAX_CHUNK);
                g.push_update(authed(tokio_stream::iter(chunks), "client-3"))
                    .await
                    .unwrap_err()
            }
        };
        let run_id = reply.run_id.clone();
        let push_chunks = |chunks: Vec<UpdateChunk>| {
            let mut g = grpc.clone();
            async move {
                g.push_update(authed(tokio_stream::iter(chunks), "client-3"))
                    .await
                    .unwrap_err()
            }
        };
        let cases = [
            (
                push(1, run_id.clone(), linear(vec![0.5; 3])).await,
                Code::InvalidArgument,
                "linear_model has 3 weights, expected 6",
            ),
            (
                push(
                    1,
                    run_id.clone(),
                    linear(vec![0.5, f32::NAN, 0.0, 0.0, 0.0, 0.0]),
                )
                .await,
                Code::InvalidArgument,
                "weight 1 is NaN, not finite",
            ),
            (
                push(2, run_id.clone(), linear(vec![0.5; 6])).await,
                Code::FailedPrecondition,
                "update for round 2 but round 1 is open",
            ),
            (
                push(1, "another-run".into(), linear(vec![0.5; 6])).await,
                Code::FailedPrecondition,
                "this server runs",
            ),
            // Sizes come from the run, never from the sender.
            (
                push_chunks(vec![UpdateChunk {
                    part: Some(Part::Header(UpdateHeader {
                        payload_len: 1 << 40,
                        ..header(1, &run_id)
                    })),
                    offset: 0,
                }])
                .await,
                Code::InvalidArgument,
                "is above this run's limit for one update",
            ),
            // More evaluation reports than a header may carry: refused before the sender is
            // known, as the oversize header.
            (
                push_chunks(vec![UpdateChunk {
                    part: Some(Part::Header(UpdateHeader {
                        reports: vec![EvalReport::default(); MAX_CARRIED_REPORTS + 1],
                        ..header(1, &run_id)
                    })),
                    offset: 0,
                }])
                .await,
                Code::InvalidArgument,
                "17 evaluation reports in one header; at most 16",
            ),
            // A report of another client riding on client 3's update: nothing is taken.
            (
                push_chunks(split(
                    UpdateHeader {
                        reports: vec![EvalReport {
                            client_id: 1,
                            round: 0,
                            ..Default::default()
                        }],
                        ..header(1, &run_id)
                    },
                    &linear(vec![0.5; 6]),
                    MAX_CHUNK,
                ))
                .await,
                Code::InvalidArgument,
                "an update of client 3 for round 1 carries a report of client 1 for round 0",
            ),
            // Two equal-size chunks swapped in transit.
            (
                push_chunks({
                    let mut c = split(header(1, &run_id), &linear(vec![0.5; 6]), 8);
                    let (a, b) = (c[1].part.take(), c[2].part.take());
                    (c[1].part, c[2].part) = (b, a);
                    c
                })
                .await,
                Code::InvalidArgument,
                "damaged or reordered",
            ),
        ];
        for (status, code, text) in cases {
            assert_eq!(status.code(), code, "{status:?}");
            assert!(
                status.message().contains(text),
                "{:?} does not say {text:?}",
                status.message()
            );
        }
        // Client 3 now falls silent; its rounds close at their timeout with the others.
    });

    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(honest.wait(Duration::from_secs(30)).success());
    let r = results(dir.path());
    assert_eq!(r.rounds.len(), 3);
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants, vec![1, 2], "round {}", rr.round);
        assert_eq!(rr.closed_by.as_deref(), Some("timeout"));
        assert!(rr.metrics.contains_key(&1) && rr.metrics.contains_key(&2));
    }
    // Client 3's refused uploads crossed the wire and are its own at every level (they
    // were once booked under it at the payload level but under client 0 above it).
    let refused = r.ledger.flows[&3][&1].up;
    assert!(
        refused.payload > 0 && refused.message >= refused.payload,
        "{refused:?}"
    );
    assert!(refused.socket >= refused.message, "{refused:?}");
    // The oversize header and the one with 17 reports were refused before their sender proved
    // who it is: counted apart.
    let stranger = r.refused["PushUpdate/invalid-argument"];
    assert_eq!(stranger.calls, 2, "{:?}", r.refused);
    assert!(stranger.payload_bytes > 0);
}

/// A server-wide budget for uploads in flight. An upload whose header does not
/// fit beside those already held is refused with RESOURCE_EXHAUSTED before any of its data is
/// buffered; once the held one ends, there is room again.
#[test]
fn uploads_in_flight_share_one_bounded_budget() {
    let dir = tempfile::tempdir().unwrap();
    let exp_path = write(
        dir.path(),
        "budget.toml",
        &synthetic_experiment("budget", 1, 2, "round_timeout_secs = 60"),
    );
    let experiment = Experiment::load(&exp_path, &[]).unwrap();
    // The run's largest update is 2,208 bytes (3 KiB): the budget holds one at a time.
    let too_small = flint()
        .args(["server", "--open-enrollment", "--upload-budget-kib", "2"])
        .arg("--experiment")
        .arg(&exp_path)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!too_small.status.success());
    let said = String::from_utf8_lossy(&too_small.stderr);
    assert!(
        said.contains("cannot hold one of this run's largest updates (3 KiB)"),
        "{said}"
    );
    let (_server, addr) = start_server_with(&exp_path, dir.path(), &["--upload-budget-kib", "5"]);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut grpc = AggregatorClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let mut run_id = String::new();
        for name in ["client-1", "client-2"] {
            run_id = grpc
                .join(hand_made_join(name, &experiment.fingerprint))
                .await
                .unwrap()
                .into_inner()
                .run_id;
        }
        let header = |client: u32, len: u64| UpdateChunk {
            part: Some(Part::Header(UpdateHeader {
                client_id: client,
                run_id: run_id.clone(),
                round: 1,
                payload_len: len,
                payload_crc32: 0,
                wait_next: false,
                reports: Vec::new(),
            })),
            offset: 0,
        };
        // Client 1 declares the largest update and sends nothing more: held.
        let (held_tx, held_rx) = tokio::sync::mpsc::channel(1);
        held_tx.send(header(1, 2208)).await.unwrap();
        let mut g = grpc.clone();
        let held = tokio::spawn(async move {
            g.push_update(authed(
                tokio_stream::wrappers::ReceiverStream::new(held_rx),
                "client-1",
            ))
            .await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let refused = grpc
            .push_update(authed(tokio_stream::iter([header(2, 2208)]), "client-2"))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused
                .message()
                .contains("budget for uploads in flight (5 KiB)")
        );
        // The held upload ends short of its length: refused, and its room given back.
        drop(held_tx);
        let short = held.await.unwrap().unwrap_err();
        assert!(
            short.message().contains("ended after 0 of 2208"),
            "{short:?}"
        );
        let p = linear(vec![0.25; 6]);
        let chunks = split(
            UpdateHeader {
                client_id: 2,
                run_id: run_id.clone(),
                round: 1,
                ..Default::default()
            },
            &p,
            MAX_CHUNK,
        );
        grpc.push_update(authed(tokio_stream::iter(chunks), "client-2"))
            .await
            .unwrap();
    });
}

/// docs/PROTOCOL.md §A round: a client that dies does not stall the run; its rounds close at
/// the timeout and the others continue. The client is frozen (SIGSTOP) once joined, so round 1
/// opens with it selected but silent, then killed (SIGKILL) mid-round.
#[test]
fn a_client_killed_mid_round_does_not_stall_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "kill.toml",
        &synthetic_experiment(
            "kill",
            3,
            3,
            "min_updates = 1\nround_timeout_secs = 1.5\neval_timeout_secs = 5",
        ),
    );
    let (mut server, addr) = start_server(&exp, dir.path());
    let victim = start_clients(&exp, &addr, &["client-3"], dir.path());
    wait_for(Duration::from_secs(30), || {
        status(dir.path()).filter(|s| s.joined == 1)
    });
    victim.signal("STOP");
    let mut others: Vec<Proc> = ["client-1", "client-2"]
        .iter()
        .map(|n| start_clients(&exp, &addr, &[n], dir.path()))
        .collect();
    wait_for(Duration::from_secs(30), || {
        status(dir.path()).filter(|s| s.open_round == Some(1) && s.updates == 2)
    });
    victim.signal("KILL");
    drop(victim);

    assert!(server.wait(Duration::from_secs(60)).success());
    for p in &mut others {
        assert!(p.wait(Duration::from_secs(30)).success());
    }
    let r = results(dir.path());
    assert_eq!(r.rounds.len(), 4, "all three rounds ran");
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants, vec![1, 2], "round {}", rr.round);
        assert_eq!(rr.closed_by.as_deref(), Some("timeout"));
    }
    assert_eq!(
        r.rounds[3].metrics.keys().copied().collect::<Vec<_>>(),
        vec![1, 2]
    );
}

/// Stopping the server (SIGTERM, as docker stop does) still leaves the results so far.
#[test]
fn an_interrupted_server_writes_its_results_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "stop.toml",
        &synthetic_experiment("stop", 3, 2, ""),
    );
    let (mut server, addr) = start_server(&exp, dir.path());
    let _waiting = start_clients(&exp, &addr, &["client-1"], dir.path());
    wait_for(Duration::from_secs(30), || {
        status(dir.path()).filter(|s| s.joined == 1)
    });
    server.signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).success());
    let r = results(dir.path());
    assert_eq!(r.clients.len(), 1, "the client that joined is recorded");
    assert_eq!(r.rounds.len(), 1, "only the join round happened");
    assert!(r.ledger.flows[&1][&0].up.payload > 0);
}

/// Processes whose command line names `needle` (Linux: /proc/*/cmdline).
fn processes_naming(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

/// SIGTERM to `flint run` alone stops its server and clients too, instead of leaving them
/// running as orphans.
#[test]
fn a_terminated_flint_run_takes_its_server_and_clients_with_it() {
    let dir = tempfile::tempdir().unwrap();
    // Rounds enough to be still running when the signal comes.
    let exp = write(
        dir.path(),
        "long.toml",
        &synthetic_experiment("long", 100_000, 2, ""),
    );
    let runs = dir.path().join("runs");
    let mut run = Proc(
        flint()
            .arg("run")
            .arg(&exp)
            .arg("--runs-dir")
            .arg(&runs)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let run_dir = runs.join("long");
    wait_for(Duration::from_secs(60), || {
        status(&run_dir).filter(|s| s.joined == 2 && s.closed_rounds > 0)
    });
    let needle = run_dir.display().to_string();
    assert!(
        processes_naming(&needle).len() >= 2,
        "server and client run"
    );
    run.signal("TERM");
    assert!(
        !run.wait(Duration::from_secs(30)).success(),
        "a stopped run fails"
    );
    wait_for(Duration::from_secs(30), || {
        processes_naming(&needle).is_empty().then_some(())
    });
}

/// A federation its table cannot feed is refused in one line before any process
/// starts: by the partition itself (fewer rows than clients) or by the clients' splits (a client
/// left without a training or a test row), counted.
#[test]
fn a_federation_larger_than_its_table_is_refused_before_any_process_starts() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "big.toml",
        &synthetic_experiment("big", 1, 0, ""),
    );
    let runs = dir.path().join("runs");
    for (clients, want) in [
        (
            "100000",
            "900 rows cannot give each of 100000 clients a sample",
        ),
        ("600", "of the 600 clients are short"),
    ] {
        let out = flint()
            .arg("run")
            .arg(&exp)
            .arg("--runs-dir")
            .arg(&runs)
            .args(["--set", "strategy=fedavg", "--set"])
            .arg(format!("client_count={clients}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{clients}: {err}");
        assert!(err.contains(want), "{clients}: {err}");
        assert!(
            err.contains("training and 0 test rows") || clients == "100000",
            "{err}"
        );
        assert!(
            !runs.join("big").exists(),
            "{clients}: no run directory, no server, no client"
        );
    }
    // `flint split`, which checks a split before a run, counts them alike.
    let out = flint()
        .arg("split")
        .arg(&exp)
        .args(["--set", "strategy=fedavg", "--set", "client_count=600"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("of the 600 clients are short"), "{err}");
}

/// SIGTERM while a thousand clients' processes are being started stops the spawn
/// loop at once and takes every process started with it.
#[test]
fn a_signal_while_a_thousand_clients_start_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "crowd.toml",
        &synthetic_experiment("crowd", 1000, 0, ""),
    );
    let runs = dir.path().join("runs");
    let mut run = Proc(
        flint()
            .arg("run")
            .arg(&exp)
            .arg("--runs-dir")
            .arg(&runs)
            .args(["--clients-per-process", "4"])
            .args(["--set", "strategy=fedavg", "--set", "client_count=1000"])
            .args(["--set", "data.samples=20000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("run.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let clients = runs.join("crowd/clients");
    wait_for(Duration::from_secs(120), || {
        let logs = std::fs::read_dir(&clients).ok()?.count();
        (logs >= 10).then_some(())
    });
    let needle = runs.join("crowd").display().to_string();
    run.signal("TERM");
    wait_for(Duration::from_secs(2), || {
        processes_naming(&needle).is_empty().then_some(())
    });
    assert!(
        !run.wait(Duration::from_secs(10)).success(),
        "a stopped run fails"
    );
    // Usually still starting processes (250 take longer than ten); either way it says why.
    let err = std::fs::read_to_string(dir.path().join("run.err")).unwrap();
    assert!(err.contains("stopped by a signal"), "{err}");
}

/// docs/PROTOCOL.md §Crash recovery: restarts are normal. A client process that dies mid-round
/// and is started again rejoins under the same id and answers the round it was selected for.
#[test]
fn a_restarted_client_rejoins_with_its_id_and_finishes_the_round() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "restart.toml",
        &synthetic_experiment("restart", 2, 2, "round_timeout_secs = 120"),
    );
    let (mut server, addr) = start_server(&exp, dir.path());
    let first = start_clients(&exp, &addr, &["client-2"], dir.path());
    wait_for(Duration::from_secs(30), || {
        status(dir.path()).filter(|s| s.joined == 1)
    });
    first.signal("STOP");
    let mut other = start_clients(&exp, &addr, &["client-1"], dir.path());
    wait_for(Duration::from_secs(30), || {
        status(dir.path()).filter(|s| s.open_round == Some(1) && s.updates == 1)
    });
    first.signal("KILL");
    drop(first);
    let mut again = start_clients(&exp, &addr, &["client-2"], dir.path());

    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(other.wait(Duration::from_secs(30)).success());
    assert!(again.wait(Duration::from_secs(30)).success());
    let r = results(dir.path());
    assert_eq!(r.clients.len(), 2);
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants, vec![1, 2], "round {}", rr.round);
        assert_eq!(rr.closed_by.as_deref(), Some("all-answered"));
    }
}

/// The server answers grpc.health.v1, and lists its services through reflection only when
/// told to (`--reflection`, as `flint run` does): a stranger learns nothing by default.
#[test]
fn health_and_reflection_are_served() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "health.toml",
        &synthetic_experiment("health", 1, 1, ""),
    );
    let (_server, addr) = start_server_with(&exp, dir.path(), &["--reflection"]);
    let quiet = tempfile::tempdir().unwrap();
    let (_quiet, quiet_addr) = start_server(&exp, quiet.path());
    let ask = || ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let quiet_channel = tonic::transport::Channel::from_shared(quiet_addr)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut refused = ServerReflectionClient::new(quiet_channel);
        let e = refused
            .server_reflection_info(tokio_stream::iter([ask()]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);

        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = HealthClient::new(channel.clone());
        let reply = health
            .check(HealthCheckRequest {
                service: "flint.v1.Aggregator".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.status, ServingStatus::Serving as i32);

        let mut reflection = ServerReflectionClient::new(channel);
        let mut replies = reflection
            .server_reflection_info(tokio_stream::iter([ask()]))
            .await
            .unwrap()
            .into_inner();
        let reply = replies.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
            panic!("expected a service list, got {reply:?}");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        assert!(
            names.contains(&"flint.v1.Aggregator".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"grpc.health.v1.Health".to_string()),
            "{names:?}"
        );
    });
}

/// A server half that aggregates as the experiment's own does, but holds round 1's aggregation
/// until the test releases it: a stand-in for a slow one (FedTMOS's k-means, 1,000 clients).
struct HeldAggregation {
    inner: Box<dyn flint_common::strategy::ServerStrategy>,
    entered: std::sync::mpsc::Sender<()>,
    release: std::sync::mpsc::Receiver<()>,
}

impl flint_common::strategy::ServerStrategy for HeldAggregation {
    fn initial_download(&self, features: usize) -> Option<Payload> {
        self.inner.initial_download(features)
    }

    fn decoder(&self) -> std::sync::Arc<dyn flint_common::strategy::UpdateDecoder> {
        self.inner.decoder()
    }

    fn aggregate(
        &mut self,
        round: u32,
        clients: &std::collections::BTreeMap<u32, DataSummary>,
        updates: &std::collections::BTreeMap<u32, flint_common::wire::Update>,
    ) -> flint_common::Result<flint_common::strategy::Aggregate> {
        if round == 1 {
            self.entered.send(()).unwrap();
            self.release
                .recv_timeout(Duration::from_secs(60))
                .expect("the test releases the aggregation");
        }
        self.inner.aggregate(round, clients, updates)
    }

    fn snapshot(&self) -> flint_common::strategy::StrategyState {
        self.inner.snapshot()
    }

    fn restore(
        &mut self,
        state: flint_common::strategy::StrategyState,
    ) -> flint_common::Result<()> {
        self.inner.restore(state)
    }
}

/// The raft-rs `Ready` split: a round's aggregation runs off the lock and off the async threads,
/// so while it runs the server still answers health checks, refuses what it must refuse, reports
/// its progress, and holds long-polls until the next round opens.
#[test]
fn the_server_keeps_answering_while_a_round_aggregates() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

    let dir = tempfile::tempdir().unwrap();
    let exp_path = write(
        dir.path(),
        "held.toml",
        &synthetic_experiment("held", 2, 2, "round_timeout_secs = 120"),
    );
    let experiment = Experiment::load(&exp_path, &[]).unwrap();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let strategy = Box::new(HeldAggregation {
        inner: experiment
            .strategy
            .server(2, experiment.seed, experiment.robust, None)
            .unwrap(),
        entered: entered_tx,
        release: release_rx,
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let out = dir.path().to_path_buf();
        let fingerprint = experiment.fingerprint.clone();
        let server = tokio::spawn(async move {
            flint_server::serve_with(
                experiment,
                strategy,
                listener,
                &out,
                None,
                &flint_server::ServeOptions {
                    open_enrollment: true,
                    ..Default::default()
                },
            )
            .await
        });
        let channel = tonic::transport::Channel::from_shared(addr.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = AggregatorClient::new(channel.clone());
        let mut run_id = String::new();
        for name in ["client-1", "client-2"] {
            let reply = grpc
                .join(hand_made_join(name, &fingerprint))
                .await
                .unwrap()
                .into_inner();
            run_id = reply.run_id;
        }
        let push = |client: u32, round: u32| {
            let mut g = grpc.clone();
            let header = UpdateHeader {
                client_id: client,
                run_id: run_id.clone(),
                round,
                payload_len: 0,
                payload_crc32: 0,
                wait_next: false,
                reports: Vec::new(),
            };
            let chunks = split(header, &linear(vec![0.5; 6]), MAX_CHUNK);
            async move {
                g.push_update(authed(
                    tokio_stream::iter(chunks),
                    &format!("client-{client}"),
                ))
                .await
            }
        };
        push(1, 1).await.unwrap();
        push(2, 1).await.unwrap();
        // The second update closed round 1; its aggregation is now held.
        tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .expect("round 1's aggregation starts");

        // Every answer below needs the round state; a held lock would leave them unanswered,
        // and the guard turns that hang into a failure.
        fn answered<T>(what: &str) -> impl FnOnce(Result<T, tokio::time::error::Elapsed>) -> T {
            move |r| r.unwrap_or_else(|_| panic!("{what}: no answer while round 1 aggregates"))
        }
        let guard = Duration::from_secs(20);
        let long_poll = {
            let mut g = grpc.clone();
            let ask = RoundRequest {
                client_id: 1,
                run_id: run_id.clone(),
                after_round: 1,
            };
            tokio::spawn(async move { g.get_round(authed(ask, "client-1")).await })
        };
        let health = tokio::time::timeout(
            guard,
            HealthClient::new(channel.clone()).check(HealthCheckRequest {
                service: "flint.v1.Aggregator".into(),
            }),
        )
        .await;
        let health = answered("health")(health).unwrap().into_inner();
        assert_eq!(health.status, ServingStatus::Serving as i32);
        let early =
            answered("an early update")(tokio::time::timeout(guard, push(1, 2)).await).unwrap_err();
        assert_eq!(early.code(), Code::FailedPrecondition, "{early:?}");
        assert!(
            early
                .message()
                .contains("round 1 is being aggregated; round 2 is not open yet"),
            "{early:?}"
        );
        // An update the round took, sent again (its answer lost): a duplicate, not a refusal,
        // so its client knows it was taken (the deterministic simulation found it refused).
        let again = answered("a repeated update")(tokio::time::timeout(guard, push(1, 1)).await)
            .unwrap()
            .into_inner();
        assert!(again.duplicate, "{again:?}");
        let mut stranger = grpc.clone();
        let unknown = stranger.get_round(RoundRequest {
            client_id: 9,
            run_id: run_id.clone(),
            after_round: 0,
        });
        let unknown =
            answered("an unknown client")(tokio::time::timeout(guard, unknown).await).unwrap_err();
        // A caller without a token learns nothing, whatever id it names.
        assert_eq!(unknown.code(), Code::Unauthenticated, "{unknown:?}");
        let progress = tokio::task::spawn_blocking({
            let dir = dir.path().to_path_buf();
            move || {
                wait_for(Duration::from_secs(20), || {
                    status(&dir).filter(|s| s.aggregating == Some(1))
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(progress.closed_rounds, 0);
        assert!(
            !long_poll.is_finished(),
            "no round 2 before round 1 is installed"
        );

        release.send(()).unwrap();
        let task = answered("the long-poll")(tokio::time::timeout(guard, long_poll).await)
            .unwrap()
            .unwrap()
            .into_inner();
        assert_eq!(task.round, 2);
        let global = flint_common::wire::decode_linear(&task.download.unwrap(), 6, 2).unwrap();
        assert!(
            global.weights.iter().all(|w| (w - 0.5).abs() < 1e-6),
            "the average of two equal models is that model: {global:?}"
        );
        server.abort();
    });
}

/// Sockets that never speak once held the server's descriptors forever. Past
/// `--max-connections` new connections are closed at once, and a silent one is closed after the
/// opening deadline, so the honest clients get in and the run completes.
#[test]
fn silent_connections_beyond_the_limit_do_not_lock_the_clients_out() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "idle.toml",
        &synthetic_experiment("idle", 2, 2, ""),
    );
    let (mut server, addr) = start_server_with(&exp, dir.path(), &["--max-connections", "8"]);
    let idle: Vec<std::net::TcpStream> = (0..50)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    assert!(!idle.is_empty());
    let mut honest = start_clients(
        &exp,
        &format!("http://{addr}"),
        &["client-1", "client-2"],
        dir.path(),
    );
    assert!(server.wait(Duration::from_secs(90)).success());
    assert!(honest.wait(Duration::from_secs(30)).success());
    let r = results(dir.path());
    assert_eq!(r.rounds.len(), 3);
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants, vec![1, 2]);
    }
    drop(idle);
}

/// Idle sockets beyond the server's file-descriptor limit. The server runs
/// with 48 descriptors; 80 silent connections exhaust them (accept fails with EMFILE, which the
/// server logs and backs off from instead of spinning), the opening deadline closes them,
/// and the honest clients get in and finish.
#[test]
fn silent_connections_beyond_the_descriptor_limit_do_not_lock_the_clients_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "fds.toml", &synthetic_experiment("fds", 2, 2, ""));
    let ready = d.join("server.addr");
    let server = std::process::Command::new("prlimit")
        .arg("--nofile=48:48")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_flint"))
        .args(["server", "--open-enrollment", "--listen", "127.0.0.1:0"])
        .arg("--experiment")
        .arg(&exp)
        .arg("--out")
        .arg(d)
        .arg("--ready-file")
        .arg(&ready)
        // Every socket here comes from 127.0.0.1: a share per address as large as the pool,
        // so that the descriptors run out before the share does (the per-address share closes
        // them earlier otherwise: tests/hostile.rs).
        .args(["--max-connections-per-address", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(d.join("server.log")).unwrap())
        .spawn()
        .unwrap();
    let mut server = Proc(server);
    let addr = wait_for(Duration::from_secs(30), || {
        std::fs::read_to_string(&ready)
            .ok()
            .filter(|s| !s.is_empty())
    });
    let idle: Vec<std::net::TcpStream> = (0..80)
        .filter_map(|_| std::net::TcpStream::connect(addr.trim()).ok())
        .collect();
    assert!(idle.len() > 48, "{} connections", idle.len());
    let mut honest = start_clients(
        &exp,
        &format!("http://{}", addr.trim()),
        &["client-1", "client-2"],
        d,
    );
    assert!(server.wait(Duration::from_secs(90)).success());
    assert!(honest.wait(Duration::from_secs(30)).success());
    let log = std::fs::read_to_string(d.join("server.log")).unwrap();
    assert!(
        log.contains("cannot accept a connection; pausing 100 ms"),
        "{log}"
    );
    // Backed off, not spun: at most one such line per 100 ms of the run.
    let lines = log.matches("cannot accept a connection").count();
    assert!(lines < 400, "{lines} accept errors logged");
    assert_eq!(results(d).rounds.len(), 3);
    drop(idle);
}

/// Health probes (a compose healthcheck's, one a second) are no client's traffic:
/// their bytes are booked apart (`unattributed`) and kept out of the run's totals and of every
/// round's, which are the clients' alone.
#[test]
fn health_probes_are_kept_out_of_the_run_totals() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "probes.toml",
        &synthetic_experiment("probes", 2, 2, ""),
    );
    let (mut server, addr) = start_server(&exp, dir.path());
    for _ in 0..3 {
        ok(flint().args(["health", "--server", &addr]));
    }
    let clients = dir.path().join("clients");
    std::fs::create_dir_all(&clients).unwrap();
    let mut run = start_clients(&exp, &addr, &["client-1", "client-2"], &clients);
    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(run.wait(Duration::from_secs(30)).success());
    let r = results(dir.path());
    assert!(r.unattributed.up.socket > 0, "{:?}", r.unattributed);
    let mut clients_only = flint_common::wire::ledger::Flow::default();
    for (id, rounds) in &r.ledger.flows {
        if *id != 0 {
            rounds.values().for_each(|f| clients_only += *f);
        }
    }
    assert_eq!(r.totals, clients_only);
    for rr in &r.rounds {
        assert!(!rr.bytes.contains_key(&0), "round {}", rr.round);
        let sum =
            rr.bytes
                .values()
                .fold(flint_common::wire::ledger::Flow::default(), |mut a, f| {
                    a += *f;
                    a
                });
        assert_eq!(rr.bytes_total, sum, "round {}", rr.round);
    }
    let report = ok(flint().arg("report").arg(dir.path()));
    assert!(
        String::from_utf8_lossy(&report.stdout)
            .contains("not any client's (health probes, refused callers; kept out of the totals)"),
        "{}",
        String::from_utf8_lossy(&report.stdout)
    );
}

/// A client still training the last round when the server finishes without it
/// (its round closed by the timeout, the final evaluations waited for and given up) finds the
/// server gone for good; it ends with its ledger and exit 0, saying so, instead of failing
/// after its retry window with nothing written.
#[test]
fn a_client_late_for_the_last_round_ends_with_its_ledger() {
    let dir = tempfile::tempdir().unwrap();
    // Seconds of training a round, so that the late client is stopped mid-training.
    let text = synthetic_experiment(
        "late",
        1,
        2,
        "min_updates = 1\nround_timeout_secs = 1\neval_timeout_secs = 2",
    )
    .replace("local_epochs = 10", "local_epochs = 200000");
    let exp = write(dir.path(), "late.toml", &text);
    let (mut server, addr) = start_server(&exp, dir.path());
    let clients = dir.path().join("clients");
    std::fs::create_dir_all(&clients).unwrap();
    let retry = ["--retry-secs", "2"];
    let mut on_time = start_clients_with(&exp, &addr, &["client-1"], &clients, &retry);
    let mut late = start_clients_with(&exp, &addr, &["client-2"], &clients, &retry);
    wait_for(Duration::from_secs(60), || {
        status(dir.path()).filter(|s| s.open_round == Some(1))
    });
    late.signal("STOP");
    assert!(server.wait(Duration::from_secs(120)).success());
    assert!(on_time.wait(Duration::from_secs(30)).success());
    late.signal("CONT");
    assert!(
        late.wait(Duration::from_secs(120)).success(),
        "the late client ends well"
    );
    let log = std::fs::read_to_string(clients.join("client-2.log")).unwrap();
    assert!(
        log.contains("it finished without this client's last word"),
        "{log}"
    );
    let report: flint_client::ClientReport =
        serde_json::from_slice(&std::fs::read(clients.join("client-client-2.json")).unwrap())
            .unwrap();
    assert_eq!(report.rounds_trained, vec![1]);
    assert!(
        report.ledger.flows[&2][&0].up.payload > 0,
        "its join is booked"
    );
    let r = results(dir.path());
    assert_eq!(r.rounds[1].participants, vec![1]);
}
