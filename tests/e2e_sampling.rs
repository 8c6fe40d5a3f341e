//! Rounds that ask some of the clients (docs/guide/experiments.md §Sampling and churn), with
//! real processes on loopback: each round selects `server.clients_per_round` (more with
//! over-selection) from the run's seed, closes at its target, and `results.json` says who was
//! selected, took part, came late or dropped out; a server killed mid-run selects again as the
//! uninterrupted run did.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use flint_common::config::ChurnSection;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);
const SEED: u64 = 11;

/// Eight clients, five rounds, three updates a round.
fn sampled(dir: &Path, name: &str, server: &str, churn: &str) -> std::path::PathBuf {
    let text = synthetic_experiment(name, 5, 8, &format!("clients_per_round = 3\n{server}"));
    write(dir, &format!("{name}.toml"), &format!("{text}\n{churn}"))
}

#[test]
fn an_over_selected_federation_with_dropouts_and_stragglers_says_who_did_what_each_round() {
    let root = tempfile::tempdir().unwrap();
    let churn = ChurnSection {
        dropout: 0.25,
        straggle: 0.25,
        straggle_secs: 2.0,
        ..ChurnSection::default()
    };
    let exp = sampled(
        root.path(),
        "churned",
        "over_selection = 0.5\nround_timeout_secs = 4\neval_timeout_secs = 30",
        "[churn]\ndropout = 0.25\nstraggle = 0.25\nstraggle_secs = 2\n",
    );
    let runs = root.path().join("runs");
    ok(flint_run(&exp, root.path(), &runs).arg("--insecure"));
    let r = results(&runs.join("churned"));
    assert_eq!(r.rounds.len(), 6, "round 0 and five rounds");
    let mut selections = BTreeSet::new();
    let mut late_before = BTreeSet::new();
    for round in &r.rounds[1..] {
        let selected: BTreeSet<u32> = round.selected.iter().copied().collect();
        assert_eq!(selected.len(), 5, "3 × 1.5 selected: {round:?}");
        assert!(selected.iter().all(|c| (1..=8).contains(c)));
        let took: BTreeSet<u32> = round.participants.iter().copied().collect();
        assert!(took.is_subset(&selected) && took.len() <= 3, "{round:?}");
        if round.closed_by.as_deref() == Some("target-reached") {
            assert_eq!(took.len(), 3);
        }
        // A client that drew a dropout sends nothing; one that sent nothing without drawing
        // one was still holding an earlier round's update (a straggler, late there).
        for &c in &selected {
            let drew_dropout = churn.drops(SEED, c, round.round);
            let dropped = round.dropped.contains(&c);
            let busy = late_before.contains(&c);
            assert!(
                (!drew_dropout || dropped) && (drew_dropout || !dropped || busy),
                "round {}: client {c} drew dropout {drew_dropout}, dropped {dropped}: {round:?}",
                round.round
            );
        }
        assert!(
            round
                .late
                .iter()
                .all(|c| selected.contains(c) && !took.contains(c))
        );
        late_before.extend(round.late.iter().copied());
        selections.insert(round.selected.clone());
    }
    assert!(selections.len() > 1, "each round draws anew");
    let last = r.rounds.last().unwrap();
    assert_eq!(
        last.metrics.len(),
        8,
        "every client evaluates the final model, selected or not"
    );
}

/// Per round: who was asked, who took part, their metrics and weights.
fn rounds_of(run: &Path) -> BTreeMap<u32, serde_json::Value> {
    results(run)
        .rounds
        .iter()
        .map(|r| {
            let v = serde_json::json!({
                "selected": r.selected,
                "participants": r.participants,
                "metrics": r.metrics,
                "weights": r.weights,
            });
            (r.round, v)
        })
        .collect()
}

fn run(exp: &Path, out: &Path, kill_after: Option<u32>) -> BTreeMap<u32, serde_json::Value> {
    std::fs::create_dir_all(out).unwrap();
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    // Aggregations are held 300 ms, so that the kill finds the run going.
    let hold: &[&str] = match kill_after {
        Some(_) => &["--hold-aggregation-ms", "300"],
        None => &[],
    };
    let mut s = start_server_at(exp, out, &addr, "server-1.log", hold).0;
    let names: Vec<String> = (1..=8).map(|i| format!("client-{i}")).collect();
    let mut clients: Vec<Proc> = names
        .iter()
        .map(|n| start_clients(exp, &format!("http://{addr}"), &[n], out))
        .collect();
    if let Some(round) = kill_after {
        wait_for(LIMIT, || status(out).filter(|s| s.closed_rounds >= round));
        s.signal("KILL");
        s.wait(LIMIT);
        s = start_server_at(exp, out, &addr, "server-2.log", hold).0;
    }
    for c in clients.iter_mut() {
        assert!(c.wait(LIMIT).success(), "a client failed");
    }
    assert!(s.wait(LIMIT).success(), "the server failed");
    rounds_of(out)
}

#[test]
fn a_server_killed_mid_run_selects_again_as_the_uninterrupted_run_did() {
    let root = tempfile::tempdir().unwrap();
    let exp = sampled(
        root.path(),
        "resumed",
        "round_timeout_secs = 300\neval_timeout_secs = 30",
        "",
    );
    let plain = run(&exp, &root.path().join("plain"), None);
    let killed = run(&exp, &root.path().join("killed"), Some(2));
    assert_eq!(plain.len(), 6);
    assert_eq!(killed, plain);
}

/// A counter's value in a Prometheus text scrape.
fn counter(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{scrape}"))
}

#[test]
fn a_client_no_round_soon_asks_hangs_up_and_comes_back_when_told() {
    let root = tempfile::tempdir().unwrap();
    let exp = sampled(
        root.path(),
        "checked-in",
        "round_timeout_secs = 60\neval_timeout_secs = 30",
        "",
    );
    let runs = root.path().join("runs");
    let mut run = flint_run(&exp, root.path(), &runs)
        .args(["--insecure", "--metrics-listen", "127.0.0.1:0"])
        .args(["--metrics-linger", "30"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = runs.join("checked-in");
    wait_for(LIMIT, || {
        run_dir.join("results.json").exists().then_some(())
    });
    let scrape = scrape_metrics(&run_dir);
    end_metrics_linger(&run_dir);
    assert!(run.wait().unwrap().success());
    // Told to come back, a client closed its connection and made a new one to ask again.
    let come_backs = counter(&scrape, "flint_come_backs_total");
    let accepted = counter(&scrape, "flint_connections_accepted_total");
    assert!(come_backs > 0.0, "{scrape}");
    assert!(
        accepted >= 8.0 + come_backs,
        "{accepted} connections, {come_backs} come-backs"
    );
    // Back when told: every round had every client it asked, and every client the final model.
    let r = results(&run_dir);
    for round in &r.rounds[1..] {
        assert_eq!(round.participants, round.selected, "round {}", round.round);
        assert_eq!(round.closed_by.as_deref(), Some("all-answered"));
    }
    assert_eq!(r.rounds.last().unwrap().metrics.len(), 8);
    assert_eq!(r.completed, Some(true));
}
