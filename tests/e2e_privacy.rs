//! Differential privacy (`[dp]`, docs/guide/strategies.md §Differential privacy) over real
//! processes: every round's ε in `results.json` is the accountant's own figure for the rounds
//! the clients took part in, the noise changes the model and repeats from the seed, local noise
//! runs on the clients, and a server killed mid-run resumes to the same noisy models.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use flint_common::strategy::privacy::{Accountant, DpHyper, Mechanism};
use flint_common::strategy::tpfl::TpflRound;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);

fn dp(mechanism: &str) -> String {
    format!("\n[dp]\nmechanism = \"{mechanism}\"\nclip = 0.5\nnoise_multiplier = 0.8\n")
}

/// [`dp`]'s settings, checked.
fn hyper(mechanism: Mechanism) -> DpHyper {
    DpHyper {
        mechanism,
        clip: Some(0.5),
        noise_multiplier: 0.8,
        delta: 1e-5,
    }
}

fn experiment(dir: &Path, name: &str, extra: &str) -> std::path::PathBuf {
    let server = "round_timeout_secs = 300\neval_timeout_secs = 30";
    let text = synthetic_experiment(name, 4, 3, server) + extra;
    write(dir, &format!("{name}.toml"), &text)
}

/// Per round: every client's metrics, the weights and the privacy record.
fn rounds_of(run: &Path) -> BTreeMap<u32, serde_json::Value> {
    results(run)
        .rounds
        .iter()
        .map(|r| {
            let v = serde_json::json!({ "metrics": r.metrics, "weights": r.weights, "privacy": r.privacy });
            (r.round, v)
        })
        .collect()
}

fn run(exp: &Path, runs: &Path) -> std::path::PathBuf {
    ok(flint().args(["run", "--runs-dir"]).arg(runs).arg(exp));
    let name = exp.file_stem().unwrap();
    runs.join(name)
}

#[test]
fn every_round_reports_the_accountants_epsilon_and_the_noise_repeats_from_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let central = experiment(dir.path(), "central", &dp("central"));
    let a = rounds_of(&run(&central, &dir.path().join("a")));
    let b = rounds_of(&run(&central, &dir.path().join("b")));
    assert_eq!(a, b, "one seed, one run");

    let accountant = Accountant::new(hyper(Mechanism::Central));
    let r = results(&dir.path().join("a/central"));
    let mut last = 0.0;
    for round in &r.rounds[1..] {
        let p = round
            .privacy
            .as_ref()
            .expect("a privacy record every round");
        assert_eq!(
            p.rounds, round.round,
            "every client took part in every round"
        );
        let (rho, epsilon) = accountant.spent(round.round).unwrap();
        assert_eq!((p.rho, p.epsilon), (rho, epsilon));
        assert!(p.epsilon > last, "ε grows with the rounds");
        last = p.epsilon;
        let max_weight = round.weights.values().copied().fold(0.0, f64::max);
        assert!((p.noise_std - 0.8 * 0.5 * max_weight).abs() < 1e-12);
    }

    // Without [dp] the same seed trains other models: the noise was added.
    let plain = experiment(dir.path(), "plain", "");
    let p = rounds_of(&run(&plain, &dir.path().join("p")));
    assert_ne!(p[&4]["metrics"], a[&4]["metrics"]);
    assert!(p[&4]["privacy"].is_null());

    // Local noise: the clients add it, the server only counts.
    let local = experiment(dir.path(), "local", &dp("local"));
    let l = results(&run(&local, &dir.path().join("l")));
    let last_round = l.rounds.last().unwrap().privacy.clone().unwrap();
    assert_eq!(last_round.mechanism, Mechanism::Local);
    assert_eq!(last_round.noise_std, 0.8 * 0.5);
    assert_eq!(
        last_round.epsilon,
        Accountant::new(hyper(Mechanism::Local)).spent(4).unwrap().1
    );
    assert_eq!(
        last_round.epsilon, last,
        "one mechanism, one multiplier, one ε"
    );

    // Under a key each client's noise is the key's stream, not its training stream: other
    // models, the same again with the same key.
    let key = write(
        dir.path(),
        "noise.key",
        "a secret of more than sixteen bytes",
    );
    let keyed = |runs: &str| {
        ok(flint()
            .args(["run", "--runs-dir"])
            .arg(dir.path().join(runs))
            .arg(&local)
            .env("FLINT_DP_NOISE_KEY_FILE", &key));
        rounds_of(&dir.path().join(runs).join("local"))
    };
    let (k1, k2) = (keyed("k1"), keyed("k2"));
    assert_eq!(k1, k2);
    let seeded = rounds_of(&dir.path().join("l/local"));
    assert_ne!(k1[&4]["metrics"], seeded[&4]["metrics"]);

    // A keyed central run replayed with its key gives the run's figures; without, other noise.
    let kept = dir.path().join("kept");
    ok(flint()
        .args(["run", "--set", "server.keep_updates=true", "--runs-dir"])
        .arg(&kept)
        .arg(&central)
        .env("FLINT_DP_NOISE_KEY_FILE", &key));
    let replay = |with_key: bool| {
        let mut cmd = flint();
        cmd.args(["replay", "--round", "3"])
            .arg(kept.join("central"));
        if with_key {
            cmd.arg("--dp-noise-key-file").arg(&key);
        }
        let out = String::from_utf8(ok(&mut cmd).stdout).unwrap();
        let mean = out
            .lines()
            .find(|l| l.trim_start().starts_with("mean"))
            .unwrap()
            .to_string();
        let figures: Vec<&str> = mean.split_whitespace().skip(2).collect();
        figures[0] == figures[1].trim_matches(|c| c == '(' || c == ')')
    };
    assert!(replay(true), "the key draws the run's noise again");
    assert!(!replay(false), "the seed alone draws other noise");
}

/// The server keeps the global model the changes are clipped from and draws its noise from a
/// key only it holds: killed after round 2 and started again with the same key, it ends with
/// the uninterrupted run's noisy models, which the seed alone does not give.
#[test]
fn a_server_killed_under_central_dp_resumes_to_the_same_models() {
    let root = tempfile::tempdir().unwrap();
    let exp = experiment(root.path(), "resume", &dp("central"));
    let key = write(
        root.path(),
        "noise.key",
        "a secret of more than sixteen bytes",
    );
    let uninterrupted = root.path().join("plain");
    ok(flint()
        .args(["run", "--runs-dir"])
        .arg(&uninterrupted)
        .arg(&exp)
        .env("FLINT_DP_NOISE_KEY_FILE", &key));
    let expected = rounds_of(&uninterrupted.join("resume"));
    let seeded = rounds_of(&run(&exp, &root.path().join("seeded")));
    assert_ne!(
        seeded[&4]["metrics"], expected[&4]["metrics"],
        "the key drew other noise"
    );
    assert_eq!(expected[&4]["privacy"]["secret_noise"], true);
    assert_eq!(seeded[&4]["privacy"]["secret_noise"], false);

    let out = root.path().join("killed");
    std::fs::create_dir_all(&out).unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let key = key.to_str().unwrap();
    let hold = ["--hold-aggregation-ms", "300", "--dp-noise-key-file", key];
    let (mut s, _) = start_server_at(&exp, &out, &addr, "server-1.log", &hold);
    let url = format!("http://{addr}");
    let mut clients: Vec<Proc> = (1..=3)
        .map(|i| start_clients(&exp, &url, &[&format!("client-{i}")], &out))
        .collect();
    let at = wait_for(LIMIT, || status(&out).filter(|s| s.closed_rounds >= 2));
    assert!(at.closed_rounds < 4, "killed with rounds left to run");
    s.signal("KILL");
    s.wait(LIMIT);
    let (mut s, _) = start_server_at(&exp, &out, &addr, "server-2.log", &hold);
    for c in clients.iter_mut() {
        assert!(c.wait(LIMIT).success(), "a client failed");
    }
    assert!(s.wait(LIMIT).success(), "the server failed");
    let mut got = rounds_of(&out);
    let mut expected = expected;
    // Round 0 records the clients' first evaluations alone.
    got.remove(&0);
    expected.remove(&0);
    assert_eq!(got, expected);
}

/// A TPFL run of the built-in data with `extra` sections.
fn tpfl(dir: &Path, name: &str, extra: &str) -> std::path::PathBuf {
    let text = format!(
        "name = \"{name}\"\nstrategy = \"tpfl\"\nseed = 5\nrounds = 3\nclient_count = 4\n\n\
         [server]\nround_timeout_secs = 300\neval_timeout_secs = 30\n\n\
         [data]\nsource = \"synthetic\"\nsamples = 900\nfeatures = 6\n\n\
         [tm]\nclauses = 40\n\n[tpfl]\nlocal_epochs = 2\n{extra}"
    );
    write(dir, &format!("{name}.toml"), &text)
}

/// TPFL under central `[dp]`: each cluster's mean is clipped and noised at its own weight
/// (noise_multiplier × clip / members), the run repeats from its seed, and every round records
/// the accountant's ε for the rounds each client has taken part in; under local `[dp]` the
/// clients noise their winners' weights and keep their confidences.
#[test]
fn tpfl_clusters_under_central_dp_report_the_accountants_epsilon_and_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let noised = "\n[dp]\nmechanism = \"central\"\nclip = 50.0\nnoise_multiplier = 0.8\n";
    let exp = tpfl(dir.path(), "tpfl-dp", noised);
    let a = rounds_of(&run(&exp, &dir.path().join("a")));
    let b = rounds_of(&run(&exp, &dir.path().join("b")));
    assert_eq!(a, b, "one seed, one run");
    let accountant = Accountant::new(DpHyper {
        mechanism: Mechanism::Central,
        clip: Some(50.0),
        noise_multiplier: 0.8,
        delta: 1e-5,
    });
    let r = results(&dir.path().join("a/tpfl-dp"));
    for round in &r.rounds[1..] {
        let p = round
            .privacy
            .as_ref()
            .expect("a privacy record every round");
        assert_eq!(
            p.rounds, round.round,
            "every client took part in every round"
        );
        assert_eq!(p.epsilon, accountant.spent(round.round).unwrap().1);
        let largest_weight = round.weights.values().copied().fold(0.0, f64::max);
        assert!(
            (p.noise_std - 0.8 * 50.0 * largest_weight).abs() < 1e-9,
            "{p:?}"
        );
    }
    let plain = rounds_of(&run(&tpfl(dir.path(), "tpfl", ""), &dir.path().join("p")));
    assert_ne!(
        plain[&3]["metrics"], a[&3]["metrics"],
        "the noise was added"
    );
    // Local noise: each client noises its winner's weights and keeps its confidence; the
    // server only counts the rounds.
    let local = tpfl(dir.path(), "tpfl-local", &dp("local"));
    let l = results(&run(&local, &dir.path().join("l")));
    for round in &l.rounds[1..] {
        let p = round
            .privacy
            .as_ref()
            .expect("a privacy record every round");
        assert_eq!(p.mechanism, Mechanism::Local);
        assert_eq!(p.noise_std, 0.8 * 0.5);
        let report = round.report.as_ref().unwrap();
        let winners = report.details::<TpflRound>().unwrap().winners;
        assert!(winners.values().all(|w| w.confidence == 0.0), "{winners:?}");
    }
    // Local noise under [secagg]: the clusters' sums are of noised weights, each summed round
    // counted.
    let both = dp("local") + "\n[secagg]\nenabled = true\n";
    let sa = results(&run(
        &tpfl(dir.path(), "tpfl-local-sa", &both),
        &dir.path().join("s"),
    ));
    let summed: Vec<_> = sa.rounds[1..]
        .iter()
        .filter(|r| !r.participants.is_empty())
        .collect();
    assert!(!summed.is_empty(), "a cluster of 3 or more summed");
    for round in summed {
        let p = round.privacy.as_ref().expect("a summed round is counted");
        assert_eq!(p.mechanism, Mechanism::Local);
    }
}

/// A Blind FL run of the built-in data with `extra` sections.
fn blind(dir: &Path, name: &str, strategy: &str, extra: &str) -> std::path::PathBuf {
    let server = "round_timeout_secs = 300\neval_timeout_secs = 30";
    let text = synthetic_experiment(name, 3, 3, server)
        .replace("\"fedavg-ahp\"", &format!("\"{strategy}\""))
        + extra;
    write(dir, &format!("{name}.toml"), &text)
}

/// Blind FL under central `[dp]`: the mean map's changes are clipped and noised at 1/n
/// (noise_multiplier × clip / clients), the run repeats from its seed and every round records
/// the accountant's ε; without `[dp]` the same seed gives other maps. Under local `[dp]` the
/// blended clients noise their own maps and the server only counts.
#[test]
fn blind_fl_maps_under_dp_report_the_accountants_epsilon_and_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let central = blind(d, "fcm-central", "blind-fcm", &dp("central"));
    let a = rounds_of(&run(&central, &d.join("a")));
    let b = rounds_of(&run(&central, &d.join("b")));
    assert_eq!(a, b, "one seed, one run");
    let accountant = Accountant::new(hyper(Mechanism::Central));
    let r = results(&d.join("a/fcm-central"));
    for round in &r.rounds[1..] {
        let p = round
            .privacy
            .as_ref()
            .expect("a privacy record every round");
        assert_eq!(p.rounds, round.round);
        assert_eq!(p.epsilon, accountant.spent(round.round).unwrap().1);
        assert!((p.noise_std - 0.8 * 0.5 / 3.0).abs() < 1e-12, "{p:?}");
    }
    let plain = blind(d, "fcm-plain", "blind-fcm", "");
    let p = rounds_of(&run(&plain, &d.join("p")));
    assert_ne!(p[&3]["metrics"], a[&3]["metrics"], "the noise was added");
    assert!(p[&3]["privacy"].is_null());

    let local = blind(d, "fcm-local", "blended-fcm", &dp("local"));
    let l = results(&run(&local, &d.join("l")));
    let last = l.rounds.last().unwrap().privacy.clone().unwrap();
    assert_eq!(
        (last.mechanism, last.noise_std),
        (Mechanism::Local, 0.8 * 0.5)
    );
    let plain = blind(d, "fcm-blended", "blended-fcm", "");
    let q = rounds_of(&run(&plain, &d.join("q")));
    assert_ne!(
        q[&3]["metrics"],
        rounds_of(&d.join("l/fcm-local"))[&3]["metrics"]
    );
}

#[test]
fn dp_is_refused_where_it_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "strategy = \"fedavg-ahp\"",
            "strategy = \"local\"\nmodel = \"logreg\"",
            dp("central"),
            "[dp] applies to strategies fedavg, fedavg-ahp, tpfl, blind-fcm, blended-fcm, fedavg-cnn",
        ),
        (
            "strategy = \"fedavg-ahp\"",
            "strategy = \"blind-fcm\"",
            dp("central") + "\n[fcm]\naggregation = \"accuracy\"\n",
            "[dp] noises Blind FL's plain mean",
        ),
        (
            "",
            "",
            dp("central") + "\n[robust]\nrule = \"median\"\n",
            "[robust] would change it",
        ),
        (
            "",
            "",
            "\n[dp]\nmechanism = \"local\"\n".to_string(),
            "dp.mechanism needs dp.clip",
        ),
    ];
    for (from, to, extra, said) in cases {
        let text = synthetic_experiment("refused", 2, 2, "").replace(from, to) + &extra;
        let exp = write(dir.path(), "refused.toml", &text);
        let err = refused(&exp, dir.path());
        assert!(err.contains(said), "{err}");
    }
}
