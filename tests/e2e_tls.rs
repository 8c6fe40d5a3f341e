//! TLS, mutual TLS and client identity with real processes on loopback (PROTOCOL.md §Identity).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use flint_client::proto::aggregator_client::AggregatorClient;
use flint_common::config::Experiment;
use flint_common::wire::chunks::{MAX_CHUNK, split};
use flint_common::wire::proto::payload::Kind;
use flint_common::wire::proto::{
    DataSummary, EvalReport, JoinRequest, LinearModel, LinkCount, Payload, RoundRequest,
    UpdateHeader,
};
use flint_common::wire::{HOST_HEADER, TOKEN_HEADER};
use support::*;
use tonic::Code;

fn certs(out: &Path, clients: &str, pool: bool) {
    let mut cmd = flint();
    cmd.args(["certs", "--clients", clients, "--out"]).arg(out);
    if pool {
        cmd.arg("--pool");
    }
    ok(&mut cmd);
}

/// A server's flags for mutual TLS with the PKI `flint certs` wrote in `pki`.
fn mutual_tls_server(pki: &Path) -> Vec<String> {
    let p = |f: &str| pki.join(f).display().to_string();
    vec![
        "--tls-cert".into(),
        p("server.crt"),
        "--tls-key".into(),
        p("server.key"),
        "--tls-client-ca".into(),
        p("ca.crt"),
    ]
}

/// A client process that is expected to be refused; its stderr.
fn refused_client(exp: &Path, addr: &str, name: &str, tls: &[String], dir: &Path) -> String {
    let out: Output = flint()
        .args([
            "client",
            "--server",
            addr,
            "--retry-secs",
            "2",
            "--name",
            name,
        ])
        .arg("--experiment")
        .arg(exp)
        .arg("--out")
        .arg(dir)
        .args(tls)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{name} was admitted");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// With a client CA the server admits only certified clients, and a certificate
/// acts only as the client it names; the honest clients' run completes meanwhile.
#[test]
fn mutual_tls_admits_each_certificate_as_its_own_client_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "mtls.toml", &synthetic_experiment("mtls", 3, 2, ""));
    certs(&d.join("pki"), "2", false);
    certs(&d.join("other"), "2", false);
    for key in ["pki/server.key", "pki/clients/client-1.key"] {
        let mode = std::fs::metadata(d.join(key)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{key} is private");
    }
    let p = |f: &str| d.join("pki").join(f).display().to_string();
    let o = |f: &str| d.join("other").join(f).display().to_string();
    let (server_args, ca) = (mutual_tls_server(&d.join("pki")), p("ca.crt"));
    let server_args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    let (mut server, addr) = start_server_with(&exp, d, &server_args);
    let url = format!("https://{addr}");
    let with = |cert: String, key: String| {
        vec![
            "--tls-ca".to_string(),
            ca.clone(),
            "--tls-cert".into(),
            cert,
            "--tls-key".into(),
            key,
        ]
    };

    // No certificate, or one of another CA: the handshake is refused (the client sees the
    // server's alert or the closed connection, whichever comes first).
    let handshake = "if the TLS handshake was refused";
    let e = refused_client(&exp, &url, "client-1", &["--tls-ca".into(), ca.clone()], d);
    assert!(e.contains(handshake), "{e}");
    let other = with(o("clients/client-1.crt"), o("clients/client-1.key"));
    let e = refused_client(&exp, &url, "client-1", &other, d);
    assert!(e.contains(handshake), "{e}");
    // client-2's certificate, claiming to be client-1.
    let wrong = with(p("clients/client-2.crt"), p("clients/client-2.key"));
    let e = refused_client(&exp, &url, "client-1", &wrong, d);
    assert!(
        e.contains(r#"cannot join: the client certificate names "client-2", not "client-1""#),
        "{e}"
    );
    // Plaintext to a TLS server.
    let e = refused_client(&exp, &format!("http://{addr}"), "client-1", &[], d);
    assert!(e.contains("cannot join"), "{e}");

    let mut honest = Vec::new();
    for name in ["client-1", "client-2"] {
        let args = with(
            p(&format!("clients/{name}.crt")),
            p(&format!("clients/{name}.key")),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        honest.push(start_clients_with(&exp, &url, &[name], d, &args));
    }
    assert!(server.wait(Duration::from_secs(60)).success());
    for c in &mut honest {
        assert!(c.wait(Duration::from_secs(30)).success());
    }
    let r = results(d);
    assert_eq!(r.rounds.len(), 4);
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants, vec![1, 2], "round {}", rr.round);
    }
    assert_eq!(r.clients.len(), 2, "no refused client joined");
    for c in &r.clients {
        assert_eq!(c.certificate.as_deref(), Some(c.name.as_str()));
    }
}

fn join(name: &str, token: &str, fingerprint: &str) -> JoinRequest {
    JoinRequest {
        client_name: name.into(),
        experiment_fingerprint: fingerprint.into(),
        summary: Some(DataSummary {
            train_class_counts: vec![200, 100],
            test_samples: 75,
            features: 6,
            compute_ghz: 2.0,
        }),
        token: token.into(),
        enrollment: String::new(),
    }
}

fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(TOKEN_HEADER, token.parse().unwrap());
    r
}

/// Without mutual TLS, a client id is worth nothing without the token its holder
/// joined with. Every attempt to act as client-1 is refused, and the run ends as it would have.
#[test]
fn a_client_id_cannot_be_used_without_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(
        d,
        "ids.toml",
        &synthetic_experiment(
            "ids",
            2,
            3,
            "min_updates = 2\nround_timeout_secs = 2\neval_timeout_secs = 5",
        ),
    );
    let fingerprint = Experiment::load(&exp, &[]).unwrap().fingerprint;
    let (mut server, addr) = start_server(&exp, d);
    let mut honest = start_clients(&exp, &addr, &["client-1", "client-2"], d);
    wait_for(Duration::from_secs(30), || {
        status(d).filter(|s| s.joined >= 2)
    });

    let mine = "ab".repeat(16);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut g = AggregatorClient::connect(addr.clone()).await.unwrap();
        // Joining under a held name, with another token.
        let e = g
            .join(join("client-1", &mine, &fingerprint))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("already held"), "{e:?}");
        // A refused Join reveals none of the run's names.
        let e = g
            .join(join("nobody", &mine, &fingerprint))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert!(!e.message().contains("client-1"), "{e:?}");
        // A Join declaring 2³² − 1 features once made the server allocate 34 GB
        // and abort; the experiment fixes the shape, so it is refused and binds nothing.
        let mut huge = join("client-3", &mine, &fingerprint);
        huge.summary.as_mut().unwrap().features = u32::MAX;
        let e = g.join(huge).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("the experiment's data has 6"), "{e:?}");
        let mut hand = tonic::Request::new(join("client-3", &mine, &fingerprint));
        hand.metadata_mut()
            .insert(HOST_HEADER, "hand".parse().unwrap());
        let run_id = g.join(hand).await.unwrap().into_inner().run_id;
        let ask = RoundRequest {
            client_id: 1,
            run_id: run_id.clone(),
            after_round: 0,
        };
        let e = g.get_round(ask.clone()).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        let e = g.get_round(with_token(ask, &mine)).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let header = UpdateHeader {
            client_id: 1,
            run_id: run_id.clone(),
            round: 1,
            payload_len: 0,
            payload_crc32: 0,
            wait_next: false,
            reports: Vec::new(),
        };
        let update = Payload {
            kind: Some(Kind::LinearModel(LinearModel {
                weights: vec![9.0; 6],
                bias: 9.0,
                class_biases: Vec::new(),
            })),
        };
        let chunks = split(header, &update, MAX_CHUNK);
        let e = g
            .push_update(with_token(tokio_stream::iter(chunks), &mine))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let report = EvalReport {
            client_id: 1,
            run_id: run_id.clone(),
            round: 1,
            classes: 2,
            confusion: vec![1000, 0, 0, 1000],
            global_test: false,
            predictor: String::new(),
            link: Vec::new(),
            last: false,
        };
        let e = g.report_eval(with_token(report, &mine)).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        // Link counts a client reports are bounded by the run, not the sender; and a report
        // of round 1 flagged as the client's last is not taken as its closing (its bytes would
        // leave the rounds): only the run's last round has one.
        let report = EvalReport {
            client_id: 3,
            run_id,
            round: 1,
            classes: 2,
            confusion: vec![1, 0, 0, 1],
            global_test: false,
            predictor: String::new(),
            link: vec![LinkCount {
                round: 99,
                up: 1,
                down: 1,
            }],
            last: true,
        };
        let e = g.report_eval(with_token(report, &mine)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("link bytes for round 99"), "{e:?}");
        // client-3 now falls silent; its rounds close at the timeout.
    });
    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(honest.wait(Duration::from_secs(30)).success());
    let r = results(d);
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants, vec![1, 2], "round {}", rr.round);
        let m = &rr.metrics[&1];
        assert!(m.accuracy < 1.0, "client-1's figures are its own: {m:?}");
    }
    let hosts: Vec<&str> = r.clients.iter().map(|c| c.host.as_str()).collect();
    assert_eq!(hosts[2], "hand");
    assert!(!r.ledger.closing.contains_key(&3), "{:?}", r.ledger.closing);
    assert!(
        r.ledger.flows[&3][&1].up.message > 0,
        "booked under round 1"
    );
}

/// Clients started without a name get the slots by arrival, and the run is the
/// same as with names (the slot, not the process, decides the data).
#[test]
fn clients_started_without_names_claim_the_slots_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "auto.toml", &synthetic_experiment("auto", 2, 3, ""));
    let (mut server, addr) = start_server(&exp, d);
    // A Kubernetes Indexed Job's pod names its slot by index; the others take what is left.
    let out = flint()
        .args(["client", "--server", &addr, "--index", "7", "--experiment"])
        .arg(&exp)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        e.contains("--index 7 but the experiment has 3 clients"),
        "{e}"
    );
    let mut third = Proc(
        flint()
            .args(["client", "--server", &addr, "--experiment"])
            .arg(&exp)
            .env("JOB_COMPLETION_INDEX", "2")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut clients = start_clients(&exp, &addr, &["auto", "auto"], d);
    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(clients.wait(Duration::from_secs(30)).success());
    assert!(third.wait(Duration::from_secs(30)).success());
    let auto = results(d);
    let ids: Vec<u32> = auto.clients.iter().map(|c| c.id).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    let named = tempfile::tempdir().unwrap();
    let (mut server, addr) = start_server(&exp, named.path());
    let mut clients = start_clients(
        &exp,
        &addr,
        &["client-1", "client-2", "client-3"],
        named.path(),
    );
    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(clients.wait(Duration::from_secs(30)).success());
    let named = results(named.path());
    for (a, n) in auto.rounds.iter().zip(&named.rounds) {
        assert_eq!(a.metrics, n.metrics, "round {}", a.round);
    }
}

/// `flint run` runs a federation over mutual TLS by default, with
/// the certificates it generates (the pool certificate for a process of several clients); every level is counted,
/// and the handshakes show at the socket level only.
#[test]
fn flint_run_over_mutual_tls_counts_the_handshakes_at_the_socket_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "tls.toml", &synthetic_experiment("tls", 2, 3, ""));
    let run = |runs: &str, tls: bool| {
        let mut cmd = flint();
        cmd.args(["run", "--clients-per-process", "2", "--runs-dir"])
            .arg(d.join(runs))
            .arg(&exp);
        if !tls {
            cmd.arg("--insecure");
        }
        ok(&mut cmd);
        results(&d.join(runs).join("tls"))
    };
    let (tls, plain) = (run("a", true), run("b", false));
    assert!(d.join("a/tls/pki/clients/pool.key").exists());
    assert!(!d.join("b/tls/pki").exists(), "--insecure generates no PKI");
    for (a, b) in tls.rounds.iter().zip(&plain.rounds) {
        assert_eq!(
            a.metrics, b.metrics,
            "TLS changes no figure (round {})",
            a.round
        );
    }
    for id in 1..=3u32 {
        let (t, p) = (
            &tls.client_ledgers[&id].flows[&id],
            &plain.client_ledgers[&id].flows[&id],
        );
        for (round, tf) in t {
            let pf = &p[round];
            for (what, t, p) in [("up", &tf.up, &pf.up), ("down", &tf.down, &pf.down)] {
                let at = format!("client {id} round {round} {what}");
                assert_eq!(t.payload, p.payload, "{at}: same payload");
                assert_eq!(t.message, p.message, "{at}: same gRPC bodies");
                assert!(
                    t.socket >= t.message,
                    "{at}: socket {} < message {}",
                    t.socket,
                    t.message
                );
            }
        }
        // The handshake (certificates both ways) is in round 0.
        let (t0, p0) = (&t[&0], &p[&0]);
        assert!(
            t0.up.socket > p0.up.socket + 500 && t0.down.socket > p0.down.socket + 500,
            "client {id}: TLS join {:?} vs plaintext {:?}",
            t0,
            p0
        );
    }
}

/// Calls that name made-up clients (health checks with any `flint-client-id`,
/// refused calls) once added a ledger row each, without bound. The server counts by its own
/// labels only: they all land in client 0, and the results name no one else.
#[test]
fn calls_under_made_up_client_ids_leave_no_trace_in_the_ledger() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "fake.toml", &synthetic_experiment("fake", 1, 1, ""));
    let (mut server, addr) = start_server(&exp, d);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Channel::from_shared(addr.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = HealthClient::new(channel.clone());
        let mut g = AggregatorClient::new(channel);
        for id in 1000..1300u32 {
            let check = HealthCheckRequest {
                service: "flint.v1.Aggregator".into(),
            };
            health.check(as_made_up_client(id, check)).await.unwrap();
            let ask = RoundRequest {
                client_id: id,
                run_id: String::new(),
                after_round: 0,
            };
            let e = g.get_round(as_made_up_client(id, ask)).await.unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated);
        }
    });
    let mut honest = start_clients(&exp, &addr, &["client-1"], d);
    assert!(server.wait(Duration::from_secs(60)).success());
    assert!(honest.wait(Duration::from_secs(30)).success());
    let r = results(d);
    let ids: Vec<u32> = r.ledger.flows.keys().copied().collect();
    assert!(ids.iter().all(|id| *id <= 1), "{ids:?}");
    for per_client in r.ledger.by_method.values() {
        assert!(per_client.keys().all(|id| *id <= 1));
    }
}

/// A server on an address other than loopback refuses plaintext and says what to
/// give instead; `--insecure` asks for it by name.
#[test]
fn plaintext_beyond_loopback_needs_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "open.toml",
        &synthetic_experiment("open", 1, 1, ""),
    );
    let out = flint()
        .args(["server", "--listen", "0.0.0.0:0", "--experiment"])
        .arg(&exp)
        .arg("--out")
        .arg(dir.path().join("refused"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("refusing to serve plaintext on 0.0.0.0:0") && err.contains("--insecure"),
        "{err}"
    );
    assert!(!dir.path().join("refused").exists(), "nothing written");
    std::fs::create_dir_all(dir.path().join("insecure")).unwrap();
    let (mut server, _) = start_server_at(
        &exp,
        &dir.path().join("insecure"),
        "0.0.0.0:0",
        "server.log",
        &["--insecure"],
    );
    server.signal("TERM");
    server.wait(Duration::from_secs(30));
    // As the compose plaintext override asks for it: FLINT_INSECURE is no experiment key.
    let out = dir.path().join("by-env");
    std::fs::create_dir_all(&out).unwrap();
    let ready = out.join("server.addr");
    let mut server = Proc(
        flint()
            .args(["server", "--listen", "0.0.0.0:0", "--experiment"])
            .arg(&exp)
            .arg("--out")
            .arg(&out)
            .arg("--ready-file")
            .arg(&ready)
            .env("FLINT_INSECURE", "1")
            .env("FLINT_OPEN_ENROLLMENT", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(Duration::from_secs(30), || {
        std::fs::read_to_string(&ready)
            .ok()
            .filter(|s| !s.is_empty())
    });
    server.signal("TERM");
    server.wait(Duration::from_secs(30));
    // FLINT_LINK_BYTES, the other yes-or-no variable, takes 1 as well: the client gets past
    // its arguments (and fails later, with no server to reach).
    let out = flint()
        .args(["client", "--name", "client-1", "--retry-secs", "0"])
        .args(["--server", "http://127.0.0.1:9", "--experiment"])
        .arg(&exp)
        .env("FLINT_LINK_BYTES", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("invalid value"), "{err}");
    assert!(err.contains("cannot join"), "{err}");
}

/// The Kubernetes manifests' identities: each pod of an Indexed Job names its slot
/// by index and presents that client's own certificate (`{name}` in FLINT_TLS_CERT), and the
/// server's probes use a certificate that passes the handshake but can take no slot.
#[test]
fn indexed_pods_present_their_own_certificates_and_the_probe_takes_no_slot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(d, "k8s.toml", &synthetic_experiment("k8s", 3, 3, ""));
    ok(flint()
        .args(["certs", "--clients", "3", "--probe", "--out"])
        .arg(d.join("pki")));
    let p = |f: &str| d.join("pki").join(f).display().to_string();
    let server_args = mutual_tls_server(&d.join("pki"));
    let server_args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    let (mut server, addr) = start_server_with(&exp, d, &server_args);
    let url = format!("https://{addr}");
    let probe = [
        "--tls-ca".to_string(),
        p("ca.crt"),
        "--tls-cert".into(),
        p("clients/probe.crt"),
        "--tls-key".into(),
        p("clients/probe.key"),
    ];
    ok(flint().args(["health", "--server", &url]).args(&probe));
    let e = refused_client(&exp, &url, "client-1", &probe, d);
    assert!(
        e.contains(r#"the client certificate names "probe", not "client-1""#),
        "{e}"
    );
    let e = refused_client(&exp, &url, "auto", &probe, d);
    assert!(e.contains("cannot claim a client slot"), "{e}");

    // `{name}` needs a name: a client that asks for its slot has none yet.
    let templated = |cmd: &mut std::process::Command| {
        cmd.env("FLINT_TLS_CA", p("ca.crt"))
            .env("FLINT_TLS_CERT", p("clients/{name}.crt"))
            .env("FLINT_TLS_KEY", p("clients/{name}.key"));
    };
    let mut auto = flint();
    auto.args(["client", "--server", &url, "--name", "auto", "--experiment"])
        .arg(&exp);
    templated(&mut auto);
    let out = auto.output().unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("need the client's name"), "{e}");

    let pods: Vec<Proc> = (0..3)
        .map(|index| {
            let mut pod = flint();
            pod.args(["client", "--server", &url, "--experiment"])
                .arg(&exp)
                .arg("--out")
                .arg(d.join(format!("pod-{index}")))
                .env("JOB_COMPLETION_INDEX", index.to_string())
                .stderr(std::process::Stdio::null());
            templated(&mut pod);
            Proc(pod.spawn().unwrap())
        })
        .collect();
    assert!(server.wait(Duration::from_secs(60)).success());
    for mut pod in pods {
        assert!(pod.wait(Duration::from_secs(30)).success());
    }
    let r = results(d);
    assert_eq!(r.rounds.len(), 4);
    let held: Vec<(&str, Option<&str>)> = r
        .clients
        .iter()
        .map(|c| (c.name.as_str(), c.certificate.as_deref()))
        .collect();
    assert_eq!(
        held,
        [
            ("client-1", Some("client-1")),
            ("client-2", Some("client-2")),
            ("client-3", Some("client-3"))
        ],
        "each slot held by its own certificate, the probe's by none"
    );
}
