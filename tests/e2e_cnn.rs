//! The neural baselines over real gRPC (TPFL Table 5's FedAvg and FedProx rows): a small
//! federation of LeNets on an MNIST subset, each client its own process, reproducible bit for
//! bit from its seed, and a server killed mid-run resumes it to the same end.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(300);
/// FLIS's LeNet on MNIST: 431,080 float32 parameters (TPFL Table 5: 1.64 MB per model).
const PARAMS: u64 = 431_080;

fn experiment(dir: &Path, strategy: &str) -> std::path::PathBuf {
    let text = format!(
        "name = \"{strategy}-small\"\nstrategy = \"{strategy}\"\nseed = 3\nrounds = 3\nclient_count = 3\n\
         [server]\nround_timeout_secs = 300\neval_timeout_secs = 120\n\
         [data]\nsource = \"mnist\"\n\
         [partition]\nkind = \"dirichlet\"\nsamples = 400\niid_clients = 3\n\
         [cnn]\nlocal_epochs = 2\nbatch_size = 16\nlearning_rate = 0.05\ntest_samples = 300\n"
    );
    write(dir, &format!("{strategy}.toml"), &text)
}

/// Per round, every client's metrics and weights: what must not move.
fn metrics_of(run: &Path) -> BTreeMap<u32, serde_json::Value> {
    results(run)
        .rounds
        .iter()
        .map(|r| {
            let v = serde_json::json!({ "metrics": r.metrics, "weights": r.weights });
            (r.round, v)
        })
        .collect()
}

fn clients(exp: &Path, addr: &str, out: &Path) -> Vec<Proc> {
    (1..=3)
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

fn finish(server: &mut Proc, clients: &mut [Proc]) {
    for c in clients.iter_mut() {
        assert!(c.wait(LIMIT).success(), "a client failed");
    }
    assert!(server.wait(LIMIT).success(), "the server failed");
}

/// `exp` run to its end in `out`; when `kill_after` is a round, the server is killed with
/// SIGKILL once that round has closed and started again with the same arguments.
fn run(exp: &Path, out: &Path, kill_after: Option<u32>) {
    std::fs::create_dir_all(out).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut s = start_server_at(exp, out, &addr, "server-1.log", &[]).0;
    let mut c = clients(exp, &addr, out);
    if let Some(round) = kill_after {
        wait_for(LIMIT, || status(out).filter(|s| s.closed_rounds >= round));
        s.signal("KILL");
        s.wait(LIMIT);
        s = start_server_at(exp, out, &addr, "server-2.log", &[]).0;
    }
    finish(&mut s, &mut c);
}

#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn a_cnn_federation_learns_counts_its_bytes_and_resumes_as_if_never_killed() {
    let root = tempfile::tempdir().unwrap();
    let exp = experiment(root.path(), "fedavg-cnn");
    let plain = root.path().join("plain");
    run(&exp, &plain, None);
    let r = results(&plain);
    assert_eq!(r.rounds.len(), 4, "round 0 and three rounds");
    let last = &r.rounds[3];
    assert_eq!(last.metrics.len(), 3, "every client evaluated");
    let mean = last.mean.unwrap().accuracy;
    assert!(mean > 0.8, "mean accuracy after 3 rounds {mean}");
    assert!(mean > r.rounds[1].mean.unwrap().accuracy, "it learned on");
    for round in 1..=3u32 {
        for id in 1..=3u32 {
            // The papers' count: 4 bytes a parameter, up and down; the payload holds them as
            // packed float32, with the update's framing and the evaluations it carries.
            let server = &r.ledger.flows[&id][&round];
            assert_eq!(server.up.paper, 4 * PARAMS, "round {round} client {id}");
            let up = server.up.payload;
            assert!((4 * PARAMS..4 * PARAMS + 1024).contains(&up), "{up}");
            assert_eq!(server.down.paper, 4 * PARAMS, "round {round} client {id}");
        }
    }

    let again = root.path().join("again");
    run(&exp, &again, None);
    assert_eq!(
        metrics_of(&again),
        metrics_of(&plain),
        "one seed, the same run"
    );

    let killed = root.path().join("killed");
    run(&exp, &killed, Some(1));
    assert_eq!(
        metrics_of(&killed),
        metrics_of(&plain),
        "resumed as if never killed"
    );
}

#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn fedprox_differs_from_fedavg_only_by_its_proximal_term() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let data = std::env::var("FLINT_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let run = |strategy: &str, set: &[&str]| {
        let exp = experiment(root.path(), strategy);
        let mut cmd = flint_run(&exp, Path::new(&data), &runs);
        for s in set {
            cmd.args(["--set", s]);
        }
        ok(&mut cmd);
        results(&runs.join(format!("{strategy}-small")))
    };
    let fedavg = run("fedavg-cnn", &[]);
    // μ = 0: FedProx is FedAvg, bit for bit.
    let mu_zero = run("fedprox", &["fedprox.mu=0"]);
    for round in 1..=3 {
        assert_eq!(
            mu_zero.rounds[round].metrics, fedavg.rounds[round].metrics,
            "round {round}"
        );
    }
    // TPFL §6.6's μ = 0.1 pulls each client towards the global model: other networks.
    let prox = run("fedprox", &[]);
    assert_ne!(prox.rounds[3].metrics, fedavg.rounds[3].metrics);
    assert!(prox.rounds[3].mean.unwrap().accuracy > 0.6);
}

/// `[dp]` over networks: under central noise every round records the accountant's ε for the
/// rounds taken part in and noise at multiplier × clip × the largest weight (IFCA: within a
/// cluster), and a server killed after round 1 resumes from its kept base and noise to the same
/// models; under local noise
/// FedProx's clients noise their own changes and the server only counts the rounds.
#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn a_cnn_federation_under_dp_reports_its_epsilon_and_resumes_as_if_never_killed() {
    use flint_common::strategy::privacy::{Accountant, DpHyper, Mechanism};
    let root = tempfile::tempdir().unwrap();
    let hyper = |mechanism| DpHyper {
        mechanism,
        clip: Some(1.0),
        noise_multiplier: 0.5,
        delta: 1e-5,
    };
    let section =
        |m: &str| format!("[dp]\nmechanism = \"{m}\"\nclip = 1.0\nnoise_multiplier = 0.5\n");
    let with_dp = |strategy: &str, m: &str| {
        let plain = std::fs::read_to_string(experiment(root.path(), strategy)).unwrap();
        write(
            root.path(),
            &format!("{strategy}-{m}.toml"),
            &(plain + &section(m)),
        )
    };
    let privacy_of = |run: &Path| -> Vec<_> {
        results(run).rounds[1..]
            .iter()
            .map(|r| r.privacy.clone().expect("a privacy record every round"))
            .collect()
    };
    let central = with_dp("fedavg-cnn", "central");
    let (whole, killed) = (root.path().join("whole"), root.path().join("killed"));
    run(&central, &whole, None);
    run(&central, &killed, Some(1));
    assert_eq!(
        metrics_of(&killed),
        metrics_of(&whole),
        "resumed as if never killed"
    );
    assert_eq!(privacy_of(&killed), privacy_of(&whole));
    // IFCA's clusters are noised apart: the record holds the largest cluster noise, the
    // largest weight within a cluster times multiplier × clip.
    let ifca = with_dp("ifca", "central");
    let text = std::fs::read_to_string(&ifca).unwrap() + "[ifca]\nclusters = 2\n";
    std::fs::write(&ifca, text).unwrap();
    let clustered = root.path().join("ifca");
    run(&ifca, &clustered, None);
    let accountant = Accountant::new(hyper(Mechanism::Central));
    for r in [results(&whole), results(&clustered)] {
        for round in &r.rounds[1..] {
            let p = round.privacy.as_ref().unwrap();
            assert_eq!(p.epsilon, accountant.spent(round.round).unwrap().1);
            let largest = round.weights.values().copied().fold(0.0, f64::max);
            assert!((p.noise_std - 0.5 * largest).abs() < 1e-12, "{p:?}");
        }
    }

    let local = root.path().join("local");
    run(&with_dp("fedprox", "local"), &local, None);
    let accountant = Accountant::new(hyper(Mechanism::Local));
    for (round, p) in (1..).zip(privacy_of(&local)) {
        assert_eq!((p.mechanism, p.noise_std), (Mechanism::Local, 0.5));
        assert_eq!(p.epsilon, accountant.spent(round).unwrap().1);
    }
    assert_eq!(
        results(&local).rounds[3].metrics.len(),
        3,
        "every client evaluated"
    );
}

/// IFCA over the wire: every client downloads all k networks each round, uploads one with
/// its cluster, and the round's report places every participant in one cluster.
#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn ifca_sends_its_k_networks_and_places_every_client_in_a_cluster() {
    use flint_common::strategy::ifca::IfcaRound;
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let data = std::env::var("FLINT_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let exp = experiment(root.path(), "ifca");
    let mut cmd = flint_run(&exp, Path::new(&data), &runs);
    ok(cmd.args(["--set", "ifca.clusters=2"]));
    let r = results(&runs.join("ifca-small"));
    for round in 1..=3u32 {
        let rr = &r.rounds[round as usize];
        let report: IfcaRound = rr.report.as_ref().unwrap().details().unwrap();
        let mut placed: Vec<u32> = report.clusters.values().flatten().copied().collect();
        placed.sort();
        assert_eq!(placed, rr.participants, "round {round}");
        assert!(report.clusters.keys().all(|&c| c < 2));
        for id in 1..=3u32 {
            let flow = &r.ledger.flows[&id][&round];
            assert_eq!(flow.up.paper, 4 * PARAMS, "round {round} client {id}");
            assert_eq!(flow.down.paper, 2 * 4 * PARAMS, "round {round} client {id}");
        }
    }
    assert!(r.rounds[3].mean.unwrap().accuracy > 0.6);
}

/// FLIS-HC over the wire: the server reads its own images from the data directory, clusters
/// the first round's networks once, sends each client one network (its cluster's), and a server
/// killed after that round has the clusters back and ends as if never killed.
#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn flis_clusters_on_the_servers_images_once_and_keeps_them_across_a_crash() {
    use flint_common::strategy::flis::FlisRound;
    let root = tempfile::tempdir().unwrap();
    let exp = experiment(root.path(), "flis");
    let text = std::fs::read_to_string(&exp).unwrap();
    let exp = write(
        root.path(),
        "flis-hc.toml",
        &format!("{text}[flis]\nvariant = \"hc\"\nserver_per_class = 30\n"),
    );
    let plain = root.path().join("plain");
    run(&exp, &plain, None);
    let r = results(&plain);
    for round in 1..=3u32 {
        let rr = &r.rounds[round as usize];
        let report: FlisRound = rr.report.as_ref().unwrap().details().unwrap();
        let placed = if round == 1 { vec![1, 2, 3] } else { vec![] };
        assert_eq!(report.placed, placed, "clustered once, round {round}");
        assert_eq!(report.sizes.len(), 3, "every participant has a cluster");
        for id in 1..=3u32 {
            let flow = &r.ledger.flows[&id][&round];
            assert_eq!(
                flow.down.paper,
                4 * PARAMS,
                "one network down, round {round}"
            );
        }
    }
    assert!(r.rounds[3].mean.unwrap().accuracy > 0.6);
    let killed = root.path().join("killed");
    run(&exp, &killed, Some(1));
    assert_eq!(
        metrics_of(&killed),
        metrics_of(&plain),
        "resumed with its clusters"
    );
}

/// FedTMOS Table 1's one-shot CNN baselines: CNN2 clients train once and upload their network
/// with RegMean's Gram matrices and FedFisher's Fisher diagonal, counted in their bytes; the run
/// is the same from its seed, and `flint replay` runs the run's rule on the kept uploads to the
/// run's own figure on the global test set, and every other rule beside it (DENSE shortened).
#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn a_one_shot_run_keeps_its_uploads_and_replays_every_rule_on_them() {
    use flint_common::strategy::oneshot::OneShotRound;
    let root = tempfile::tempdir().unwrap();
    let exp = write(
        root.path(),
        "oneshot.toml",
        "name = \"oneshot-small\"\nstrategy = \"oneshot-cnn\"\nseed = 3\nrounds = 1\nclient_count = 3\n\
         [server]\nround_timeout_secs = 300\neval_timeout_secs = 120\nkeep_updates = true\n\
         [data]\nsource = \"mnist\"\n\
         [partition]\nkind = \"dirichlet\"\nsamples = 300\niid_clients = 3\n\
         [cnn]\narchitecture = \"cnn2\"\nlocal_epochs = 6\nbatch_size = 16\nlearning_rate = 0.02\nmomentum = 0.9\n\
         test_samples = 200\nglobal_test = true\n\
         [oneshot]\nrule = \"regmean\"\nuploads = \"every-rule\"\n",
    );
    // Where `flint grid --runs-dir runs` finds the run of "oneshot-small".
    let plain = root.path().join("runs/oneshot-small");
    run(&exp, &plain, None);
    let r = results(&plain);
    // CNN2: 44,190 parameters; Gram triangles of its dense inputs 256, 120 and 84 wide.
    let (params, grams) = (44_190u64, (256 * 257 + 120 * 121 + 84 * 85) / 2);
    for id in 1..=3u32 {
        let flow = &r.ledger.flows[&id][&1];
        assert_eq!(flow.up.paper, 4 * (2 * params + grams), "client {id}");
        assert_eq!(flow.down.paper, 4 * params, "one network down");
    }
    let round = &r.rounds[1];
    let report: OneShotRound = round.report.as_ref().unwrap().details().unwrap();
    assert_eq!((report.rule.as_str(), report.networks), ("regmean", 3));
    let global = round.global_test.unwrap().accuracy;
    assert!(
        global > 0.5,
        "regmean's network on the global test set: {global}"
    );

    let again = root.path().join("again");
    run(&exp, &again, None);
    assert_eq!(metrics_of(&again), metrics_of(&plain), "one seed, one run");
    assert_eq!(results(&again).rounds[1].global_test, round.global_test);

    let replay = |rule: &str| {
        let mut cmd = flint();
        cmd.arg("replay")
            .arg(&plain)
            .args(["--set", &format!("oneshot.rule={rule}")]);
        // DENSE's server training, shortened to a few steps.
        let short = [
            "distill_epochs=2",
            "generator_steps=3",
            "synthesis_batch=32",
        ];
        for set in short.iter().filter(|_| rule == "dense") {
            cmd.args(["--set", &format!("oneshot.{set}")]);
        }
        if matches!(rule, "regmean" | "fedavg") {
            cmd.arg("--record");
        }
        String::from_utf8(ok(&mut cmd).stdout).unwrap()
    };
    let same = format!("accuracy {global:.4} ({global:.4})");
    let out = replay("regmean");
    assert!(out.contains(&same), "{out}");
    for rule in ["fedavg", "ensemble", "fedfisher", "ot-fusion", "dense"] {
        let out = replay(rule);
        assert!(out.contains(&format!("\"rule\":\"{rule}\"")), "{out}");
        assert!(out.contains("the model"), "{out}");
        // Only DENSE's server time depends on the server's cores, so only it says them.
        let threads = format!("\"threads\":{}", flint_common::parallel::cores());
        assert_eq!(out.contains(&threads), rule == "dense", "{out}");
    }
    recorded_replays_are_drawn_by_the_grid(&exp, &plain, (params, grams), global);
}

/// The recorded replays count each rule's upload as its client would send it (FedAvg: no
/// statistic; RegMean: the Gram triangles too), and `flint grid` draws them beside the run.
fn recorded_replays_are_drawn_by_the_grid(
    exp: &Path,
    run: &Path,
    (params, grams): (u64, u64),
    global: f64,
) {
    let record = |rule: &str| -> serde_json::Value {
        let path = run.join(format!("replays/round-1-oneshot.rule={rule}.json"));
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    };
    let up = |v: &serde_json::Value| v["up"]["message"].as_u64().unwrap();
    let (fedavg, regmean) = (record("fedavg"), record("regmean"));
    assert_eq!(regmean["global"].as_f64(), Some(global));
    let r = results(run);
    let mean_ran = r.rounds[1]
        .bytes
        .values()
        .map(|f| f.up.message)
        .sum::<u64>()
        / 3;
    // Each statistic left out is its floats and a few bytes of tag and length.
    let fisher = mean_ran - up(&regmean);
    assert!((4 * params..4 * params + 8).contains(&fisher), "{fisher}");
    let both = mean_ran - up(&fedavg);
    assert!(
        (4 * (params + grams)..4 * (params + grams) + 16).contains(&both),
        "{both}"
    );
    let down = fedavg["down"]["message"].as_u64().unwrap();
    assert!((4 * params..4 * params + 64).contains(&down), "{down}");

    let runs = run.parent().unwrap();
    let out = ok(flint()
        .args(["grid", "--resume", "--runs-dir"])
        .arg(runs)
        .arg(exp));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("(kept)"), "{said}");
    let svg = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("-pareto-"))
        .unwrap_or_else(|| panic!("no accuracy-versus-bytes figure: {said}"));
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.contains("(shared test set)"),
        "the figure reads the shared test set"
    );
    for name in [
        "oneshot-small",
        "fedavg: oneshot-small",
        "regmean: oneshot-small",
    ] {
        assert!(svg.contains(name), "{name} is not drawn");
    }
}

/// Secure aggregation of a network (`[secagg]`): the server holds masked inputs of the network's
/// size only, and the federation learns as the plain one does (the sum differs from the float
/// mean by the fixed point's rounding, 2^-22 per parameter here, and nothing else).
#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn a_cnn_federation_summed_securely_learns_as_the_plain_one() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let data = std::env::var("FLINT_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let exp = experiment(root.path(), "fedavg-cnn");
    let run = |dir: &str, set: &[&str]| {
        let mut cmd = flint_run(&exp, Path::new(&data), &runs.join(dir));
        cmd.args(["--set", "server.keep_updates=true"]);
        for s in set {
            cmd.args(["--set", s]);
        }
        ok(&mut cmd);
        runs.join(dir).join("fedavg-cnn-small")
    };
    let plain = results(&run("plain", &[]));
    let sa = run("secure", &["secagg.enabled=true"]);
    let secure = results(&sa);
    for round in 1..=3 {
        let (p, s) = (&plain.rounds[round], &secure.rounds[round]);
        assert_eq!(s.participants, p.participants);
        let (pa, sa) = (p.mean.unwrap().accuracy, s.mean.unwrap().accuracy);
        assert!(
            (pa - sa).abs() < 0.01,
            "round {round}: {pa} plain, {sa} secure"
        );
    }
    for id in 1..=3 {
        let masked = sa.join(format!("updates/round-1-client-{id}.masked"));
        assert_eq!(std::fs::metadata(&masked).unwrap().len(), 4 * PARAMS);
        assert!(!sa.join(format!("updates/round-1-client-{id}.pb")).exists());
    }
}

/// IFCA summed securely per cluster: each client declares the cluster whose network it trained
/// and sums with that cluster's members only. A cluster of fewer than 3 is left out of the
/// round; one of 3 or more gets its members' mean as the plain run does, up to the fixed
/// point's rounding.
#[test]
#[ignore = "needs FLINT_DATA_DIR with MNIST; CI runs it"]
fn ifca_clusters_summed_securely_learn_as_the_plain_ones() {
    use flint_common::strategy::ifca::IfcaRound;
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let data = std::env::var("FLINT_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let exp = experiment(root.path(), "ifca");
    let run = |dir: &str, set: &[&str]| {
        let mut cmd = flint_run(&exp, Path::new(&data), &runs.join(dir));
        cmd.args([
            "--set",
            "ifca.clusters=2",
            "--set",
            "server.keep_updates=true",
        ]);
        for s in set {
            cmd.args(["--set", s]);
        }
        ok(&mut cmd);
        runs.join(dir).join("ifca-small")
    };
    let plain = results(&run("plain", &[]));
    let sa = run("secure", &["secagg.enabled=true"]);
    let secure = results(&sa);
    let clusters = |r: &flint_server::results::RunResults, round: usize| -> IfcaRound {
        r.rounds[round].report.as_ref().unwrap().details().unwrap()
    };
    for round in 1..=3 {
        let s = clusters(&secure, round);
        assert!(
            s.clusters.values().all(|m| m.len() >= 3),
            "round {round}: {s:?}"
        );
        let mut placed: Vec<u32> = s.clusters.values().flatten().copied().collect();
        placed.sort();
        assert_eq!(placed, secure.rounds[round].participants, "round {round}");
    }
    let (p1, s1) = (clusters(&plain, 1), clusters(&secure, 1));
    if p1.clusters.values().all(|m| m.len() >= 3) {
        assert_eq!(s1.clusters, p1.clusters);
        let (pa, sa) = (
            plain.rounds[1].mean.unwrap().accuracy,
            secure.rounds[1].mean.unwrap().accuracy,
        );
        assert!((pa - sa).abs() < 0.01, "round 1: {pa} plain, {sa} secure");
    }
    for entry in std::fs::read_dir(sa.join("updates")).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(path.extension().unwrap(), "masked", "{}", path.display());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * PARAMS);
    }
}
