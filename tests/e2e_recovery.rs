//! Crash recovery with real processes (docs/PROTOCOL.md §Crash recovery): the
//! server killed with SIGKILL at several points of a run and started again with the same
//! arguments resumes the same run, its clients carry on without being restarted, and the run
//! ends with exactly the metrics of an uninterrupted one. A client process killed and started
//! again does the same.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use flint_server::results::Status;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);

fn experiment(dir: &Path) -> std::path::PathBuf {
    write(
        dir,
        "recover.toml",
        &synthetic_experiment(
            "recover",
            6,
            4,
            "round_timeout_secs = 300\neval_timeout_secs = 30",
        ),
    )
}

/// `flint server` on `listen` (a fixed address, so that a restart is found where the clients
/// look); its log goes to `log`.
fn server(exp: &Path, out: &Path, listen: &str, log: &str, extra: &[&str]) -> Proc {
    start_server_at(exp, out, listen, log, extra).0
}

/// A free loopback port: bound, then let go.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// One process per client, so that each can be stopped or killed alone.
fn clients(exp: &Path, addr: &str, out: &Path) -> Vec<Proc> {
    (1..=4)
        .map(|i| {
            start_clients(
                exp,
                &format!("http://{addr}"),
                &[&format!("client-{i}")],
                out,
            )
        })
        .collect()
}

/// What must not move: per round, every client's metrics, the aggregation weights and who took
/// part, and the mean.
fn metrics_of(run: &Path) -> BTreeMap<u32, serde_json::Value> {
    results(run)
        .rounds
        .iter()
        .map(|r| {
            (
                r.round,
                serde_json::json!({
                    "metrics": r.metrics,
                    "mean": r.mean,
                    "weights": r.weights,
                    "participants": r.participants,
                }),
            )
        })
        .collect()
}

fn finish(server: &mut Proc, clients: &mut [Proc]) {
    for c in clients.iter_mut() {
        assert!(c.wait(LIMIT).success(), "a client failed");
    }
    assert!(server.wait(LIMIT).success(), "the server failed");
}

fn uninterrupted(root: &Path) -> BTreeMap<u32, serde_json::Value> {
    let m = run_once(&experiment(root), &root.join("plain"));
    assert_eq!(m.len(), 7, "round 0 and six rounds");
    m
}

/// `exp` run to its end in `out`, nothing killed; its metrics.
fn run_once(exp: &Path, out: &Path) -> BTreeMap<u32, serde_json::Value> {
    std::fs::create_dir_all(out).unwrap();
    let addr = free_addr();
    let mut s = server(exp, out, &addr, "server.log", &[]);
    let mut c = clients(exp, &addr, out);
    finish(&mut s, &mut c);
    metrics_of(out)
}

fn kill9(p: &mut Proc) {
    p.signal("KILL");
    p.wait(LIMIT);
}

/// SIGKILL between rounds, mid-round after some uploads, and during an
/// aggregation; each restart resumes the same run id, and the final metrics are those of the
/// uninterrupted run, bit for bit.
#[test]
fn a_server_killed_at_any_point_resumes_its_run_and_ends_as_if_never_killed() {
    let root = tempfile::tempdir().unwrap();
    let expected = uninterrupted(root.path());

    let out = root.path().join("killed");
    std::fs::create_dir_all(&out).unwrap();
    let exp = experiment(root.path());
    let addr = free_addr();
    // Aggregations are held 300 ms, so that the test can kill the server during one.
    let hold = ["--hold-aggregation-ms", "300"];
    let mut s = server(&exp, &out, &addr, "server-1.log", &hold);
    let run_id = wait_for(LIMIT, || status(&out)).run_id;
    let mut c = clients(&exp, &addr, &out);

    // 1. Once round 1 has closed, wherever the run is then.
    wait_for(LIMIT, || status(&out).filter(|s| s.closed_rounds >= 1));
    kill9(&mut s);
    // The state belongs to this experiment: another one is refused, and touches nothing.
    let other = flint()
        .args([
            "server",
            "--open-enrollment",
            "--listen",
            &addr,
            "--set",
            "seed=12",
            "--experiment",
        ])
        .arg(&exp)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!other.status.success());
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(said.contains("another experiment"), "{said}");
    s = server(&exp, &out, &addr, "server-2.log", &hold);

    // 2. Mid-round: client 4 is stopped, the other three upload, then the server dies.
    c[3].signal("STOP");
    // Held for a moment, so that no upload of client 4 was still in flight.
    let three_of_four = |s: &Status| s.open_round.is_some() && s.updates == 3 && s.waiting_for == 4;
    let mid = wait_for(LIMIT, || {
        let first = status(&out).filter(three_of_four)?;
        std::thread::sleep(Duration::from_millis(300));
        status(&out).filter(|s| three_of_four(s) && s.open_round == first.open_round)
    });
    kill9(&mut s);
    s = server(&exp, &out, &addr, "server-3.log", &hold);
    let back = wait_for(LIMIT, || status(&out).filter(|s| s.run_id == run_id));
    assert_eq!(
        back.open_round, mid.open_round,
        "the same round is open again"
    );
    assert_eq!(back.updates, 3, "with the three updates it had accepted");
    c[3].signal("CONT");

    // 3. During an aggregation.
    wait_for(LIMIT, || status(&out).filter(|s| s.aggregating.is_some()));
    kill9(&mut s);
    s = server(&exp, &out, &addr, "server-4.log", &hold);

    finish(&mut s, &mut c);
    let r = results(&out);
    assert_eq!(r.run_id, run_id, "one run from start to end");
    assert_eq!(metrics_of(&out), expected);
    // Three restarts, each naming the rounds whose bytes the killed process took with it; the
    // others' levels are in order.
    assert_eq!(r.ledger.resumed.len(), 3, "{:?}", r.ledger.resumed);
    for rr in r
        .rounds
        .iter()
        .filter(|rr| !r.ledger.cut_by_restart(rr.round))
    {
        for t in [rr.bytes_total.up, rr.bytes_total.down] {
            let at = format!("round {}: {t:?}", rr.round);
            assert!(t.payload <= t.message && t.message <= t.socket, "{at}");
        }
    }
    let report = ok(flint().arg("report").arg(&out));
    let printed = String::from_utf8_lossy(&report.stdout);
    assert!(
        printed.contains("the server started again in round"),
        "{printed}"
    );
    // Rounds replayed from the journal keep the timings they ran with.
    for rr in &r.rounds[1..] {
        assert!(
            rr.seconds.unwrap() > 0.0,
            "round {}: {:?}",
            rr.round,
            rr.seconds
        );
    }
    assert!(
        !out.join("state/journal").exists(),
        "a finished run leaves no journal, so the same command starts a new run"
    );
}

/// A client process killed and started again with the same `--out` (its token) rejoins and
/// continues; FedAvg's clients keep nothing between rounds but the server's model, so the run
/// ends as if it had never been killed.
#[test]
fn a_client_killed_and_started_again_rejoins_and_the_run_ends_the_same() {
    let root = tempfile::tempdir().unwrap();
    let expected = uninterrupted(root.path());

    let out = root.path().join("client-killed");
    let killed = client_2_killed_and_started_again(&experiment(root.path()), &out, |_| {});
    assert_eq!(killed, expected);
}

/// A run whose client 2 is killed with SIGKILL once two rounds have closed and started again
/// with the same `--out`; `after_kill` looks at its directory between the two. Its metrics.
fn client_2_killed_and_started_again(
    exp: &Path,
    out: &Path,
    after_kill: impl Fn(&Path),
) -> BTreeMap<u32, serde_json::Value> {
    std::fs::create_dir_all(out).unwrap();
    let addr = free_addr();
    let mut s = server(
        exp,
        out,
        &addr,
        "server.log",
        &["--hold-aggregation-ms", "100"],
    );
    let mut c = clients(exp, &addr, out);
    wait_for(LIMIT, || status(out).filter(|s| s.closed_rounds >= 2));
    kill9(&mut c[1]);
    after_kill(out);
    c[1] = start_clients(exp, &format!("http://{addr}"), &["client-2"], out);
    finish(&mut s, &mut c);
    metrics_of(out)
}

/// TPFL, Blended FL of FCMs and FedTM clients carry state from round to round
/// (their own machine or map, delta bases, feedback masks, the random stream). Killed and
/// started again with the same `--out`, such a client resumes from the checkpoint it wrote
/// after its last training, and the run ends with exactly the metrics of an uninterrupted one.
#[test]
fn a_client_that_carries_state_killed_and_started_again_ends_the_same() {
    let settings = [
        ("tpfl", "[tm]\nclauses = 40\n[tpfl]\nlocal_epochs = 2\n"),
        ("blended-fcm", "[pso]\nswarm = 4\niterations = 3\n"),
        ("fedtm", "[fedtmos]\nlocal_epochs = 2\n"),
    ];
    for (strategy, extra) in settings {
        let root = tempfile::tempdir().unwrap();
        let text = format!(
            "name = \"{strategy}\"\nstrategy = \"{strategy}\"\nseed = 5\nrounds = 5\nclient_count = 4\n\n\
             [server]\nround_timeout_secs = 300\neval_timeout_secs = 30\n\n\
             [data]\nsource = \"synthetic\"\nsamples = 900\nfeatures = 6\n\n{extra}"
        );
        let exp = write(root.path(), "stateful.toml", &text);
        let expected = run_once(&exp, &root.path().join("plain"));
        assert_eq!(expected.len(), 6, "{strategy}: round 0 and five rounds");
        let out = root.path().join("client-killed");
        let checkpoint = |out: &Path| {
            let kept = out.join("client-2.resume").exists();
            assert!(kept, "{strategy}: no checkpoint");
        };
        assert_eq!(
            client_2_killed_and_started_again(&exp, &out, checkpoint),
            expected,
            "{strategy}"
        );
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".resume"))
            .collect();
        assert!(
            left.is_empty(),
            "{strategy}: a finished run keeps no checkpoint: {left:?}"
        );
    }
}
