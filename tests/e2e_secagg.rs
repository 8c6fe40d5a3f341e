//! Secure aggregation (`[secagg]`, docs/PROTOCOL.md §Secure aggregation) over real processes
//! and gRPC: a secure round's model is exactly the fixed-point sum of the clients' plain updates
//! (with and without clients gone after their masked input), the server keeps and journals only
//! masked inputs and sums, a server killed in the middle of the protocol (before the roster, or
//! between it and the unmasking) ends like the uninterrupted run, one killed after the shares
//! were revealed abandons the round, and what cannot be summed securely is refused.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flint_common::secagg::ring::{self, FixedPoint};
use flint_common::strategy::tpfl::TpflRound;
use flint_common::wire::proto::{Payload, payload};
use prost::Message;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);
const CLIENTS: usize = 5;
const BOUND: f64 = 100.0;

fn experiment(dir: &Path, name: &str, rounds: u32, extra: &str) -> PathBuf {
    let server = "round_timeout_secs = 300\neval_timeout_secs = 30\nkeep_updates = true";
    let text = synthetic_experiment(name, rounds, CLIENTS, server)
        .replace("strategy = \"fedavg-ahp\"", "strategy = \"fedavg\"")
        + extra;
    write(dir, &format!("{name}.toml"), &text)
}

fn secure(stage_secs: u32) -> String {
    format!("\n[secagg]\nenabled = true\nstage_secs = {stage_secs}\n")
}

fn run(exp: &Path, runs: &Path) -> PathBuf {
    ok(flint().args(["run", "--runs-dir"]).arg(runs).arg(exp));
    runs.join(exp.file_stem().unwrap())
}

/// A one-round run named `name` with `extra` sections, in its own folder under `dir`.
fn one_round(dir: &Path, name: &str, extra: &str) -> PathBuf {
    run(
        &experiment(dir, name, 1, extra),
        &dir.join(name).with_extension("runs"),
    )
}

/// A client's kept update of `round`: its model's weights then biases.
fn plain_update(run: &Path, round: u32, client: u32) -> Vec<f32> {
    let path = run.join(format!("updates/round-{round}-client-{client}.pb"));
    let p = Payload::decode(&*std::fs::read(&path).unwrap()).unwrap();
    let Some(payload::Kind::LinearModel(m)) = p.kind else {
        panic!("a linear model in {}", path.display());
    };
    let biases = match m.class_biases.is_empty() {
        true => vec![m.bias],
        false => m.class_biases,
    };
    m.weights.into_iter().chain(biases).collect()
}

/// Round 1's model as secure aggregation must give it from the plain run's updates and weights:
/// each weighted update in the ring, summed, decoded, over the weights' sum, as float32.
fn expected_model(plain: &Path) -> (Vec<f32>, BTreeMap<u32, Vec<u32>>) {
    let r = results(plain);
    let weights = &r.rounds.iter().find(|r| r.round == 1).unwrap().weights;
    let fixed = FixedPoint::for_sums(BOUND, weights.len()).unwrap();
    let mut sum: Option<Vec<u32>> = None;
    let mut encoded = BTreeMap::new();
    for (&client, &w) in weights {
        let x: Vec<f64> = plain_update(plain, 1, client)
            .iter()
            .map(|&v| f64::from(v) * w)
            .collect();
        let e = fixed.encode(&x).unwrap();
        match &mut sum {
            Some(s) => ring::add(s, &e),
            None => sum = Some(e.clone()),
        }
        encoded.insert(client, e);
    }
    let total: f64 = weights.values().sum();
    let model = fixed
        .decode(&sum.unwrap())
        .iter()
        .map(|v| (v / total) as f32)
        .collect();
    (model, encoded)
}

/// A client's kept model (after the run's last round): weights then biases.
fn kept_model(run: &Path, client: &str) -> Vec<f32> {
    let text = std::fs::read_to_string(run.join(format!("models/{client}.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let m = &v["model"];
    let flat = |x: &serde_json::Value| -> Vec<f32> {
        x.as_array()
            .unwrap()
            .iter()
            .flat_map(|row| match row.as_array() {
                Some(r) => r.iter().map(|v| v.as_f64().unwrap() as f32).collect(),
                None => vec![row.as_f64().unwrap() as f32],
            })
            .collect()
    };
    [flat(&m["weights"]), flat(&m["biases"])].concat()
}

#[test]
fn a_secure_round_is_the_fixed_point_sum_of_the_plain_updates_with_and_without_dropouts() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, encoded) = expected_model(&one_round(dir.path(), "plain", ""));
    let sa = one_round(dir.path(), "sa", &secure(30));
    assert_eq!(kept_model(&sa, "client-1"), expected);
    // What the server kept of each update: its masked input, nothing like the input itself.
    for (client, x) in &encoded {
        let masked: Vec<u32> =
            std::fs::read(sa.join(format!("updates/round-1-client-{client}.masked")))
                .unwrap()
                .chunks(4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                .collect();
        assert_eq!(masked.len(), x.len());
        assert!(
            masked.iter().zip(x).all(|(m, v)| m != v),
            "client {client}'s input shows"
        );
        assert!(
            !sa.join(format!("updates/round-1-client-{client}.pb"))
                .exists()
        );
    }

    // Two clients gone after their masked input: the others' shares rebuild their self-masks,
    // the round closes at the unmasking stage's deadline, and the sum is the same.
    let dropping = experiment(
        dir.path(),
        "dropping",
        1,
        &(secure(3) + "\n[churn]\nmasked_dropout = 0.25\n"),
    );
    let gone = run(&dropping, &dir.path().join("d"));
    let r = results(&gone);
    let round = r.rounds.iter().find(|r| r.round == 1).unwrap();
    let logs: String = (1..=CLIENTS)
        .map(|i| {
            std::fs::read_to_string(gone.join(format!("clients/client-{i}.log")))
                .unwrap_or_default()
        })
        .collect();
    let dropped = logs.matches("gone after the masked input").count();
    assert!(
        (1..=CLIENTS / 2).contains(&dropped),
        "{dropped} dropped: pick another share"
    );
    assert_eq!(
        round.participants.len(),
        CLIENTS,
        "every masked input summed"
    );
    assert_eq!(kept_model(&gone, "client-1"), expected);
    let report = ok(flint().arg("report").arg(&gone));
    let said = String::from_utf8_lossy(&report.stdout);
    assert!(
        said.contains("5 of 5 asked clients' inputs summed over 1 rounds"),
        "{said}"
    );
}

/// SecAgg+ (`secagg.neighbours`): each client keys, shares and masks with its 2 neighbours of a
/// ring of 5 instead of all 4 others, is sent its neighbourhood's roster and survivors only, and
/// the round's model is the same fixed-point sum of the plain updates, for fewer bytes.
#[test]
fn a_sparse_graph_sums_as_the_complete_one_for_fewer_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, _) = expected_model(&one_round(dir.path(), "plain", ""));
    let complete = one_round(dir.path(), "complete", &secure(30));
    let sparse = one_round(dir.path(), "sparse", &(secure(30) + "neighbours = 2\n"));
    assert_eq!(kept_model(&sparse, "client-1"), expected);
    let (c, s) = (results(&complete), results(&sparse));
    for client in 1..=CLIENTS as u32 {
        let (c, s) = (&c.ledger.flows[&client][&1], &s.ledger.flows[&client][&1]);
        assert!(s.up.payload < c.up.payload, "client {client} up");
        assert!(s.down.payload < c.down.payload, "client {client} down");
    }
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        match path.is_dir() {
            true => out.extend(files_under(&path)),
            false => out.push((path.clone(), std::fs::read(&path).unwrap())),
        }
    }
    out
}

/// Killed once every client has revealed its shares of round 1 (the sum unmasked, its
/// aggregation held, nothing installed), the server holds nothing of an update in the clear on
/// disk. Started again, it has lost the sum, and no client sends its input a second time: a
/// second sum over other clients would show one update. Round 1 is abandoned at its deadline,
/// the clients say why, and round 2 sums every client.
#[test]
fn a_server_killed_after_the_shares_were_revealed_abandons_the_round_and_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let plain = run(
        &experiment(root.path(), "plain", 2, ""),
        &root.path().join("p"),
    );
    let text = std::fs::read_to_string(experiment(root.path(), "resume", 2, &secure(30)))
        .unwrap()
        .replace("round_timeout_secs = 300", "round_timeout_secs = 6");
    let exp = write(root.path(), "resume.toml", &text);

    let out = root.path().join("killed");
    std::fs::create_dir_all(&out).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let hold = ["--hold-aggregation-ms", "5000"];
    let (mut s, _) = start_server_at(&exp, &out, &addr, "server-1.log", &hold);
    let url = format!("http://{addr}");
    let mut clients: Vec<Proc> = (1..=CLIENTS)
        .map(|i| start_clients(&exp, &url, &[&format!("client-{i}")], &out))
        .collect();
    wait_for(LIMIT, || {
        let log = std::fs::read_to_string(out.join("server-1.log")).unwrap_or_default();
        log.contains("secure round closed").then_some(())
    });
    s.signal("KILL");
    s.wait(LIMIT);
    assert!(
        status(&out).is_none_or(|st| st.closed_rounds == 0),
        "killed before round 1 was installed"
    );
    // Each client's plain update, as a packed float32 run would lie in a protobuf record.
    for c in 1..=CLIENTS as u32 {
        let update = plain_update(&plain, 1, c);
        let packed: Vec<u8> = update.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (path, bytes) in files_under(&out.join("state")) {
            let found = bytes.windows(packed.len()).any(|w| w == packed);
            assert!(
                !found,
                "client {c}'s update in the clear in {}",
                path.display()
            );
        }
    }

    let (mut s, _) = start_server_at(&exp, &out, &addr, "server-2.log", &[]);
    for c in clients.iter_mut() {
        assert!(c.wait(LIMIT).success(), "a client failed");
    }
    assert!(s.wait(LIMIT).success(), "the server failed");
    let kept_back = (1..=CLIENTS)
        .map(|i| std::fs::read_to_string(out.join(format!("client-{i}.log"))).unwrap())
        .filter(|log| log.contains("its input is not sent a second time"))
        .count();
    assert_eq!(kept_back, CLIENTS, "every client kept its input back");
    let r = results(&out);
    let first = r.rounds.iter().find(|x| x.round == 1).unwrap();
    assert!(first.participants.is_empty(), "round 1 summed nothing");
    assert_eq!(
        serde_json::to_value(&first.report).unwrap(),
        serde_json::json!("abandoned")
    );
    let second = r.rounds.iter().find(|x| x.round == 2).unwrap();
    assert_eq!(second.participants.len(), CLIENTS);
}

/// A run of stragglers under `[secagg]` whose server is killed mid-protocol and started again,
/// beside the same run uninterrupted.
struct Interrupted {
    _root: tempfile::TempDir,
    exp: PathBuf,
    whole: flint_server::results::RunResults,
    out: PathBuf,
    addr: String,
    server: Proc,
    clients: Vec<Proc>,
}

impl Interrupted {
    fn start(stage_secs: u32) -> Interrupted {
        let root = tempfile::tempdir().unwrap();
        let churn = "\n[churn]\nstraggle = 0.5\nstraggle_secs = 6\n";
        let exp = experiment(root.path(), "stragglers", 2, &(secure(stage_secs) + churn));
        let whole = results(&run(&exp, &root.path().join("whole")));
        let out = root.path().join("killed");
        std::fs::create_dir_all(&out).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let (server, _) = start_server_at(&exp, &out, &addr, "server-1.log", &[]);
        let url = format!("http://{addr}");
        let clients = (1..=CLIENTS)
            .map(|i| start_clients(&exp, &url, &[&format!("client-{i}")], &out))
            .collect();
        Interrupted {
            _root: root,
            exp,
            whole,
            out,
            addr,
            server,
            clients,
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(format!("{name}.log"))).unwrap_or_default()
    }

    fn client_log(&self, i: usize) -> String {
        self.log(&format!("client-{i}"))
    }

    /// Waits until every client has trained and a straggler holds its update (the keys' stage
    /// waits for it); a client that does not straggle, if any.
    fn keys_stage_held(&self) -> Option<usize> {
        wait_for(LIMIT, || {
            let logs: Vec<String> = (1..=CLIENTS).map(|i| self.client_log(i)).collect();
            let trained = logs.iter().filter(|l| l.contains("trained")).count();
            let holding = logs.iter().any(|l| l.contains("straggling"));
            let punctual = logs.iter().position(|l| !l.contains("straggling"));
            (trained == CLIENTS && holding).then_some(punctual.map(|i| i + 1))
        })
    }

    /// Kills the server, which had not closed round 1's secure aggregation, and starts it again.
    fn kill_and_start_again(&mut self) {
        self.server.signal("KILL");
        self.server.wait(LIMIT);
        let first = self.log("server-1");
        assert!(
            first.contains("round open") && !first.contains("secure round closed"),
            "killed while round 1's secure aggregation was under way"
        );
        let (server, _) = start_server_at(&self.exp, &self.out, &self.addr, "server-2.log", &[]);
        self.server = server;
    }

    /// The run ends, with exactly the uninterrupted run's metrics.
    fn ends_like_the_whole_run(&mut self) {
        for c in self.clients.iter_mut() {
            assert!(c.wait(LIMIT).success(), "a client failed");
        }
        assert!(self.server.wait(LIMIT).success(), "the server failed");
        let r = results(&self.out);
        for round in 1..=2 {
            let (a, b) = (&r.rounds[round], &self.whole.rounds[round]);
            assert_eq!(a.participants.len(), CLIENTS, "round {round}");
            assert_eq!(a.metrics, b.metrics, "round {round}");
        }
    }
}

/// Killed while round 1's keys' stage waits for its stragglers (no client has revealed a share),
/// the server started again takes the clients' keys afresh, and the run ends with exactly the
/// metrics of the uninterrupted one.
#[test]
fn a_server_killed_before_any_share_was_revealed_ends_like_the_uninterrupted_run() {
    let mut run = Interrupted::start(30);
    run.keys_stage_held();
    run.kill_and_start_again();
    run.ends_like_the_whole_run();
}

/// Killed between the roster and the unmasking (the roster sent, one client's shares held back
/// by stopping it, no share revealed), the server started again begins the protocol afresh:
/// every client, the stopped one too, keys again and sends its input under new masks, which is
/// safe as nobody unmasked the first ones, and the run ends with exactly the metrics of the
/// uninterrupted one.
#[test]
fn a_server_killed_between_the_roster_and_the_unmasking_ends_like_the_uninterrupted_run() {
    let mut run = Interrupted::start(60);
    let punctual = run
        .keys_stage_held()
        .expect("a client that does not straggle");
    // A punctual client, its keys sent, is stopped; the stragglers' keys come 6 s after they
    // began to hold, the roster then goes out, and a later stage waits for the stopped client
    // (60 s) unless the roster had reached it before it stopped.
    std::thread::sleep(Duration::from_millis(500));
    run.clients[punctual - 1].signal("STOP");
    wait_for(LIMIT, || {
        (run.log("server-1").contains("stage=Advertising")).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    run.kill_and_start_again();
    run.clients[punctual - 1].signal("CONT");
    run.ends_like_the_whole_run();
    let again = (1..=CLIENTS)
        .filter(|&i| {
            run.client_log(i)
                .contains("secure aggregation started again; fresh keys")
        })
        .count();
    // A later step of a session the restart ended is answered "send fresh keys": every client
    // but perhaps the stopped one had the roster when the server died (the stopped one, if the
    // roster had not reached it yet, sends its keys again as they were).
    assert!(
        again >= CLIENTS - 1,
        "the clients that had the roster keyed again: {again}"
    );
    assert!(
        (1..=CLIENTS).all(|i| !run.client_log(i).contains("not sent a second time")),
        "no client had revealed a share"
    );
}

#[test]
fn what_cannot_be_summed_securely_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let on = secure(30);
    let cases = [
        (
            "strategy = \"fedavg\"",
            "strategy = \"fedtm\"",
            on.clone(),
            "[secagg] applies to strategies fedavg, fedavg-ahp, blind-fcm",
        ),
        (
            "",
            "",
            on.clone() + "\n[robust]\nrule = \"median\"\n",
            "a [robust] rule",
        ),
        (
            "",
            "",
            on.clone() + "\n[dp]\nmechanism = \"central\"\nclip = 1.0\n",
            "use dp.mechanism = \"local\" with it",
        ),
        (
            "[server]\n",
            "[server]\nclients_per_round = 2\n",
            on.clone(),
            "3 to 100000 of them",
        ),
        (
            "",
            "",
            "\n[churn]\nmasked_dropout = 0.1\n".to_string(),
            "it needs [secagg]",
        ),
    ];
    for (from, to, extra, said) in cases {
        let text = std::fs::read_to_string(experiment(dir.path(), "refused", 1, ""))
            .unwrap()
            .replace(from, to)
            + &extra;
        let exp = write(dir.path(), "refused.toml", &text);
        let err = refused(&exp, dir.path());
        assert!(err.contains(said), "{err}");
    }
}

/// Blind FL's maps summed securely: every client sums its score-weighted map, its score and its
/// map, so the server learns Σ s_k W_k / Σ s_k and no one's score; the run ends with the plain
/// run's metrics and maps within the fixed point's rounding.
#[test]
fn blind_fcm_maps_summed_securely_end_as_the_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let fcm = |name: &str, extra: &str| {
        let text = std::fs::read_to_string(experiment(dir.path(), name, 2, extra))
            .unwrap()
            .replace("strategy = \"fedavg\"", "strategy = \"blind-fcm\"")
            .replace("[logreg]\nlearning_rate = 0.3\nlocal_epochs = 10\n", "");
        write(dir.path(), &format!("{name}.toml"), &text)
    };
    let plain = run(&fcm("plain", ""), &dir.path().join("p"));
    let sa = run(&fcm("sa", &secure(30)), &dir.path().join("s"));
    let (p, s) = (results(&plain), results(&sa));
    for round in 1..=2 {
        assert_eq!(
            s.rounds[round].metrics, p.rounds[round].metrics,
            "round {round}"
        );
        assert_eq!(s.rounds[round].participants.len(), CLIENTS);
    }
    let matrix = |run: &Path| -> Vec<f64> {
        let text = std::fs::read_to_string(run.join("models/client-1.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["model"]["matrix"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
            .collect()
    };
    let (a, b) = (matrix(&plain), matrix(&sa));
    assert_eq!(a.len(), b.len());
    let most = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(most < 1e-4, "the maps differ by {most}");
    assert!(sa.join("updates/round-1-client-1.masked").exists());
}

/// TPFL per cluster (its §5, Algorithm 2): each client declares its confidence winner and
/// sums its weights with that cluster's members only. Every cluster of at least 3 gets exactly
/// the plain run's mean; a smaller one is left out of the round, its members keeping their own
/// weights, and the server holds no weight vector in the clear.
#[test]
fn tpfl_clusters_summed_securely_get_the_plain_means() {
    let dir = tempfile::tempdir().unwrap();
    let tpfl = |name: &str, extra: &str| {
        let text = format!(
            "name = \"{name}\"\nstrategy = \"tpfl\"\nseed = 5\nrounds = 2\nclient_count = 7\n\n\
             [server]\nround_timeout_secs = 300\neval_timeout_secs = 30\nkeep_updates = true\n\n\
             [data]\nsource = \"synthetic\"\nsamples = 1400\nfeatures = 6\n\n\
             [tm]\nclauses = 40\n\n[tpfl]\nlocal_epochs = 2\n{extra}"
        );
        write(dir.path(), &format!("{name}.toml"), &text)
    };
    let plain = results(&run(&tpfl("plain", ""), &dir.path().join("p")));
    let sa_run = run(&tpfl("sa", &secure(30)), &dir.path().join("s"));
    let sa = results(&sa_run);
    let clusters = |r: &flint_server::results::RunResults, round: usize| {
        let report = r.rounds[round].report.as_ref().unwrap();
        report.details::<TpflRound>().unwrap().clusters
    };
    let (p1, s1) = (clusters(&plain, 1), clusters(&sa, 1));
    let big: BTreeMap<u32, Vec<u32>> = p1
        .iter()
        .filter(|(_, m)| m.len() >= 3)
        .map(|(c, m)| (*c, m.clone()))
        .collect();
    assert!(
        !big.is_empty(),
        "a cluster of at least 3 in round 1: {p1:?}"
    );
    assert_eq!(
        s1, big,
        "round 1: the clusters summed are the plain run's of 3 or more"
    );
    let summed: Vec<u32> = big.values().flatten().copied().collect();
    let (pm, sm) = (&plain.rounds[1].metrics, &sa.rounds[1].metrics);
    for id in &summed {
        assert_eq!(
            sm[id], pm[id],
            "round 1, client {id}: the cluster's mean as plain"
        );
    }
    if big == p1 {
        assert_eq!(
            sa.rounds[2].metrics, plain.rounds[2].metrics,
            "every cluster summed: as plain"
        );
    }
    for (path, bytes) in files_under(&sa_run.join("updates")) {
        assert!(
            path.extension().is_some_and(|e| e == "masked"),
            "{}",
            path.display()
        );
        assert_eq!(bytes.len(), 4 * 40, "one masked weight per clause");
    }
}

/// Local `[dp]` beside `[secagg]`: each client clips and noises its change before it is masked;
/// the server, which sees only the sum, still accounts every round's ε.
#[test]
fn local_noise_and_secure_aggregation_compose() {
    let dir = tempfile::tempdir().unwrap();
    let dp = "\n[dp]\nmechanism = \"local\"\nclip = 0.5\nnoise_multiplier = 0.8\n";
    let noisy = run(
        &experiment(dir.path(), "noisy", 2, &(secure(30) + dp)),
        &dir.path().join("n"),
    );
    let quiet = run(
        &experiment(dir.path(), "quiet", 2, &secure(30)),
        &dir.path().join("q"),
    );
    let (n, q) = (results(&noisy), results(&quiet));
    for round in 1..=2 {
        let p = n.rounds[round].privacy.as_ref().expect("ε every round");
        assert_eq!(p.rounds, round as u32, "every client took part");
        assert!(p.epsilon.is_finite() && p.epsilon > 0.0);
        assert_eq!(n.rounds[round].participants.len(), CLIENTS);
        assert!(q.rounds[round].privacy.is_none(), "no [dp], no record");
    }
    assert_ne!(
        kept_model(&noisy, "client-1"),
        kept_model(&quiet, "client-1"),
        "the clients' noise is in the sum"
    );
}
