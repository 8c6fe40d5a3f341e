//! Faults with real processes: malformed updates, a client killed mid-round.

mod support;

use std::time::Duration;

use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::config::Experiment;
use flint_common::wire::chunks::{MAX_CHUNK, split};
use flint_common::wire::proto::payload::Kind;
use flint_common::wire::proto::{
    DataSummary, JoinRequest, LinearModel, Payload, RoundRequest, UpdateHeader,
};
use support::*;
use tonic::Code;

const FAST_ROUNDS: &str = "min_updates = 2\nround_timeout_secs = 2\neval_timeout_secs = 5";

fn linear(weights: Vec<f32>) -> Payload {
    Payload {
        kind: Some(Kind::LinearModel(LinearModel { weights, bias: 0.0 })),
    }
}

/// DESIGN.md §Wire contract: every received update is validated before it touches state; a bad
/// one gets INVALID_ARGUMENT with the reason, a wrong round FAILED_PRECONDITION, and the run
/// completes with the other clients.
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
            .join(JoinRequest {
                client_name: "client-3".into(),
                experiment_fingerprint: experiment.fingerprint.clone(),
                summary: Some(DataSummary {
                    train_class_counts: vec![200, 100],
                    test_samples: 75,
                    features: 6,
                    compute_ghz: 2.0,
                }),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.client_id, 3);
        let task = grpc
            .get_round(RoundRequest {
                client_id: 3,
                run_id: reply.run_id.clone(),
                after_round: 0,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(task.round, 1);
        let header = |round: u32, run_id: &str| UpdateHeader {
            client_id: 3,
            run_id: run_id.into(),
            round,
            payload_len: 0,
        };
        let push = |round: u32, run_id: String, p: Payload| {
            let mut g = grpc.clone();
            async move {
                let chunks = split(header(round, &run_id), &p, MAX_CHUNK);
                g.push_update(tokio_stream::iter(chunks)).await.unwrap_err()
            }
        };
        let run_id = reply.run_id.clone();
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
    // The refused uploads crossed the wire and are counted as such.
    assert!(r.ledger.flows[&3][&1].up.payload > 0);
}

/// DESIGN.md §Rounds: a client that dies does not stall the run; its rounds close at the
/// timeout and the others continue. The client is frozen (SIGSTOP) once joined, so round 1
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

/// DESIGN.md §Wire contract: restarts are normal. A client process that dies mid-round and is
/// started again rejoins under the same id and answers the round it was selected for.
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

/// The server answers grpc.health.v1 and lists its services through reflection.
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
    let (_server, addr) = start_server(&exp, dir.path());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let channel = tonic::transport::Channel::from_shared(addr)
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
        let ask = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut replies = reflection
            .server_reflection_info(tokio_stream::iter([ask]))
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
