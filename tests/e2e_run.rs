//! `flint run` end to end: a server and clients as real processes on loopback.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use flint_common::strategy::fedtmos::FedTmosRound;
use flint_common::wire::ledger::Traffic;
use support::*;

/// docs/PROTOCOL.md §Byte accounting: every client and round has socket ≥ message ≥ payload > 0
/// both ways; payload is exactly the summed `encoded_len` of the messages sent, which both ends
/// count independently (the client what it sent and received, the server likewise).
#[test]
fn every_byte_level_is_counted_per_client_and_round() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "bytes.toml",
        &synthetic_experiment("bytes", 3, 3, ""),
    );
    // Two clients share one process: each must still have its own connection and ledger.
    ok(flint()
        .args(["run", "--clients-per-process", "2", "--runs-dir"])
        .arg(dir.path().join("runs"))
        .arg(&exp));
    let r = results(&dir.path().join("runs/bytes"));
    assert_eq!(r.rounds.len(), 4, "join round and three rounds");
    assert_eq!(
        r.client_ledgers.len(),
        3,
        "each client wrote its own ledger"
    );
    for id in 1..=3u32 {
        let server = &r.ledger.flows[&id];
        let client = &r.client_ledgers[&id].flows[&id];
        assert_eq!(server.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        let (mut s_up, mut s_down) = (Traffic::default(), Traffic::default());
        for (round, s) in server {
            let c = &client[round];
            for (what, s, c) in [("up", &s.up, &c.up), ("down", &s.down, &c.down)] {
                let at = format!("client {id} round {round} {what}");
                assert!(s.payload > 0, "{at}: payload counted");
                assert_eq!(
                    s.payload, c.payload,
                    "{at}: both ends count the same encoded_len"
                );
                assert_eq!(s.messages, c.messages, "{at}: same number of messages");
                // gRPC frames each message with 5 bytes and nothing else (no compression).
                assert_eq!(
                    s.message,
                    s.payload + 5 * s.messages,
                    "{at}: server message bytes"
                );
                assert_eq!(
                    c.message, s.message,
                    "{at}: both ends see the same gRPC bodies"
                );
                assert!(
                    c.socket >= c.message,
                    "{at}: client socket {} < message {}",
                    c.socket,
                    c.message
                );
            }
            s_up += s.up;
            s_down += s.down;
        }
        // The server attributes socket bytes per connection exactly, per round approximately.
        assert!(s_up.socket >= s_up.message && s_down.socket >= s_down.message);
        // Each round's upload is one 7-parameter model at 8 bytes (the paper convention).
        assert_eq!(server[&1].up.paper, 8 * 7);
    }
    for rr in &r.rounds[1..] {
        assert_eq!(
            rr.metrics.len(),
            3,
            "round {} has every client's evaluation",
            rr.round
        );
        assert_eq!(rr.participants, vec![1, 2, 3]);
        assert!((rr.weights.values().sum::<f64>() - 1.0).abs() < 1e-9);
    }
    let csv = std::fs::read_to_string(dir.path().join("runs/bytes/rounds.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 4 * 4,
        "header, then 3 clients and `all` per round"
    );
}

fn metrics_of(run: &std::path::Path) -> BTreeMap<u32, serde_json::Value> {
    results(run)
        .rounds
        .iter()
        .map(|r| {
            (
                r.round,
                serde_json::json!({ "metrics": r.metrics, "weights": r.weights, "participants": r.participants }),
            )
        })
        .collect()
}

#[test]
fn the_same_experiment_and_seed_give_identical_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "repro.toml",
        &synthetic_experiment("repro", 3, 3, ""),
    );
    for runs in ["a", "b"] {
        ok(flint()
            .args(["run", "--runs-dir"])
            .arg(dir.path().join(runs))
            .arg(&exp));
    }
    ok(flint()
        .args(["run", "--set", "seed=12", "--runs-dir"])
        .arg(dir.path().join("c"))
        .arg(&exp));
    let a = metrics_of(&dir.path().join("a/repro"));
    assert_eq!(a, metrics_of(&dir.path().join("b/repro")));
    // gzip on the wire changes the message bytes, not the models.
    ok(flint()
        .args(["run", "--set", "wire.compression=gzip", "--runs-dir"])
        .arg(dir.path().join("g"))
        .arg(&exp));
    assert_eq!(a, metrics_of(&dir.path().join("g/repro")));
    let (plain, gzip) = (
        results(&dir.path().join("a/repro")).totals.up,
        results(&dir.path().join("g/repro")).totals.up,
    );
    assert_eq!(gzip.payload, plain.payload);
    assert_ne!(
        gzip.message, plain.message,
        "gzip frames are not the plain ones"
    );
    assert_ne!(
        a,
        metrics_of(&dir.path().join("c/repro")),
        "the seed drives the data and splits"
    );
}

#[test]
fn mistakes_in_an_experiment_are_reported_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        synthetic_experiment("bad", 3, 2, "").replace("rounds = 3", "rounds = 3\nroundz = 4");
    let exp = write(dir.path(), "bad.toml", &text);
    let err = refused(&exp, dir.path());
    assert!(err.contains("unknown field `roundz`"), "{err}");

    let good = write(
        dir.path(),
        "good.toml",
        &synthetic_experiment("good", 1, 2, ""),
    );
    let out = flint()
        .args(["client", "--name", "client-9", "--experiment"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"client-9\" is not declared") && err.contains("client-1"),
        "{err}"
    );

    let out = flint()
        .args(["run", "--runs-dir"])
        .arg(dir.path())
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));

    let out = flint()
        .args(["data", "verify", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no known dataset file"));
    let out = flint()
        .args(["data", "verify", "imagenet"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"unknown dataset "imagenet"; known: ["magic", "mnist", "fashion-mnist", "breast-cancer", "adult"]"#),
        "{err}"
    );
}

/// `flint keys | head` and the like end quietly when the reader goes away: the
/// default SIGPIPE action, never a panic on a broken pipe.
#[test]
fn a_closed_pipe_ends_a_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = flint()
        .arg("keys")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.is_empty(), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE: {:?}",
        out.status
    );
}

/// The README's first command on a fresh machine: no argument, no data files, any directory.
#[test]
fn flint_run_without_arguments_runs_the_quickstart() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(flint()
        .arg("run")
        .current_dir(dir.path())
        .env_remove("FLINT_DATA_DIR"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("round   5/5"), "{stdout}");
    assert!(stdout.contains("payload / message / socket"), "{stdout}");
    let r = results(&dir.path().join("runs/quickstart"));
    assert_eq!(r.strategy, "fedavg-ahp");
    // The live line's socket bytes are the clients' own, exact for the round; the last
    // round's are the server's, which alone counts the connections' closing bytes, as the
    // run's table shows them.
    for round in 1..=5u32 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("  round {round:>3}/5")))
            .unwrap_or_else(|| panic!("round {round}: {stdout}"));
        let last = round == 5;
        let whose = if last { "server's" } else { "clients'" };
        assert!(
            line.ends_with(&format!("(payload / message / {whose} socket)")),
            "{line}"
        );
        let socket = |up: bool| -> u64 {
            if last {
                let t = &r.rounds[5].bytes_total;
                return if up { t.up.socket } else { t.down.socket };
            }
            r.client_ledgers
                .iter()
                .map(|(id, l)| {
                    let f = &l.flows[id][&round];
                    if up { f.up.socket } else { f.down.socket }
                })
                .sum()
        };
        let kb = |b: u64| format!("{:.1} kB", b as f64 / 1000.0);
        assert!(
            line.contains(&format!(" / {}  down", kb(socket(true)))),
            "round {round}: up socket {}: {line}",
            kb(socket(true))
        );
        assert!(
            line.contains(&format!(" / {}  (payload", kb(socket(false)))),
            "round {round}: down socket {}: {line}",
            kb(socket(false))
        );
    }
    assert_eq!(r.rounds.last().unwrap().metrics.len(), 4);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let report = ok(flint()
        .arg("report")
        .arg(dir.path().join("runs/quickstart")));
    let said = String::from_utf8_lossy(&report.stdout);
    assert!(said.contains("Per client after round 5"), "{said}");
    // The quickstart's clients declare their speeds and differ in size: both columns.
    let header = said.lines().find(|l| l.starts_with("client ")).unwrap();
    assert!(
        header.contains("ghz") && header.contains("weight"),
        "{header}"
    );
    // Every client kept its model; after the last download they hold the same
    // one, which `flint explain` prints once.
    let explained = ok(flint()
        .arg("explain")
        .arg(dir.path().join("runs/quickstart"))
        .args(["--top", "2"]));
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.starts_with("client-1, client-2, client-3, client-4:\nlogistic regression"),
        "{text}"
    );
    assert_eq!(text.matches("  x").count(), 2, "{text}");
    // It drew its pictures too.
    for (plot, title) in [
        (
            "accuracy.svg",
            "quickstart (fedavg-ahp, seed 42): accuracy per round",
        ),
        ("bytes.svg", "bytes per round, all clients"),
    ] {
        let svg =
            std::fs::read_to_string(dir.path().join("runs/quickstart/plots").join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains(title), "{plot}");
    }
    // Running it again kept the first run, under its run id, instead of overwriting it.
    let again = ok(flint()
        .arg("run")
        .current_dir(dir.path())
        .env_remove("FLINT_DATA_DIR"));
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("the previous run is kept in"), "{said}");
    let kept = results(&dir.path().join("runs").join(&r.run_id));
    assert_eq!(kept.run_id, r.run_id);
    assert_ne!(
        results(&dir.path().join("runs/quickstart")).run_id,
        r.run_id
    );
}

/// The most series /metrics shows, whatever the number of clients: no label names a client
/// (docs/METRICS.md states the bound).
const MAX_SERIES: usize = 200;

/// A thousand clients in ten processes join in one burst and finish. Before, a Join whose
/// connection closed mid-call (`Cancelled`) was not tried again: that client never joined, and
/// the 99 others of its process waited forever for a round that needed it.
#[test]
fn a_thousand_clients_join_in_one_burst_and_finish() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "k.toml",
        "name = \"k\"\nstrategy = \"fedavg\"\nseed = 3\nrounds = 2\nclient_count = 1000\n\
         [data]\nsource = \"synthetic\"\nsamples = 20000\nfeatures = 4\n\
         [logreg]\nlocal_epochs = 2\n",
    );
    let runs = dir.path().join("runs");
    // With metrics on: the series count does not grow with the clients.
    let mut run = flint()
        .arg("run")
        .arg(&exp)
        .args(["--clients-per-process", "100", "--runs-dir"])
        .arg(&runs)
        .args(["--metrics-listen", "127.0.0.1:0", "--metrics-linger", "20"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = runs.join("k");
    let start = std::time::Instant::now();
    while !run_dir.join("results.json").exists() {
        assert!(start.elapsed().as_secs() < 600, "the run did not finish");
        assert!(run.try_wait().unwrap().is_none(), "flint run ended early");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let scrape = scrape_metrics(&run_dir);
    let series: Vec<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert!(series.contains(&"flint_clients_joined 1000"), "{scrape}");
    assert!(
        series.len() <= MAX_SERIES,
        "{} series at 1,000 clients:\n{scrape}",
        series.len()
    );
    // The linger ends at a signal; flint run then ends with its server.
    end_metrics_linger(&run_dir);
    assert!(run.wait().unwrap().success());
    let r = results(&run_dir);
    assert_eq!(r.clients.len(), 1000);
    for rr in &r.rounds[1..] {
        assert_eq!(rr.participants.len(), 1000, "round {}", rr.round);
        assert_eq!(rr.metrics.len(), 1000, "round {}", rr.round);
    }
}

/// Without netem: `flint run --link mobile` puts every client behind its own
/// user-space line of 2 Mbit/s up, 10 Mbit/s down and 100 ms RTT; the run is slower and
/// otherwise the same, to the last metric.
#[test]
fn an_emulated_link_changes_the_time_not_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "link.toml",
        &synthetic_experiment("link", 2, 3, ""),
    );
    for (runs, link) in [("plain", None), ("mobile", Some("mobile"))] {
        let mut cmd = flint();
        cmd.arg("run").arg("--runs-dir").arg(dir.path().join(runs));
        if let Some(l) = link {
            cmd.args(["--link", l]);
        }
        ok(cmd.arg(&exp));
    }
    let (plain, mobile) = (
        dir.path().join("plain/link"),
        dir.path().join("mobile/link"),
    );
    assert_eq!(metrics_of(&plain), metrics_of(&mobile));
    // The run records the line it ran over, and `flint report` says it.
    let recorded = |dir: &std::path::Path| results(dir).provenance.unwrap().emulated_link;
    assert_eq!(recorded(&plain), None);
    let line = recorded(&mobile).expect("the profile is recorded");
    assert_eq!(
        (
            line.profile.as_str(),
            line.one_way_ms,
            line.up_bits_per_sec,
            line.down_bits_per_sec
        ),
        ("mobile", 50.0, Some(2_000_000), Some(10_000_000))
    );
    let report = ok(flint().arg("report").arg(&mobile));
    assert!(
        String::from_utf8_lossy(&report.stdout).contains(
            "Emulated link (flint run --link mobile): 2 Mbit/s up, 10 Mbit/s down, 50 ms one way"
        ),
        "{}",
        String::from_utf8_lossy(&report.stdout)
    );
    // Each round takes at least a few round trips of 100 ms on the emulated line.
    for rr in &results(&mobile).rounds[1..] {
        assert!(
            rr.seconds.unwrap() >= 0.1,
            "round {}: {:?}",
            rr.round,
            rr.seconds
        );
    }
    // `flint link` is the same relay on its own, in front of a server started by hand.
    let by_hand = dir.path().join("by-hand");
    std::fs::create_dir_all(&by_hand).unwrap();
    let (mut server, addr) = start_server(&exp, &by_hand);
    let relay_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let relay = Proc(
        flint()
            .args(["link", "--profile", "wan", "--listen", &relay_addr, "--to"])
            .arg(addr.trim_start_matches("http://"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut clients = start_clients(
        &exp,
        &format!("http://{relay_addr}"),
        &["client-1", "client-2", "client-3"],
        &by_hand,
    );
    assert!(clients.wait(Duration::from_secs(60)).success());
    assert!(server.wait(Duration::from_secs(60)).success());
    drop(relay);
    assert_eq!(metrics_of(&by_hand), metrics_of(&plain));
    let bad = flint()
        .args(["run", "--link", "dialup"])
        .arg(&exp)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown link profile"));
}

/// `[links]` and `[[clients]] link`: each client sits behind a line of its own profile, the
/// relay of its profile carries exactly its bytes, and the results say who sat where.
#[test]
fn a_mix_of_links_puts_each_client_behind_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = synthetic_experiment("mixed", 2, 4, "").replace(
        "name = \"client-1\"\n",
        "name = \"client-1\"\nlink = \"lan\"\n",
    );
    let exp = write(
        dir.path(),
        "mixed.toml",
        &format!("{text}\n[links]\nwan = 0.5\nmobile = 0.5\n"),
    );
    let runs = dir.path().join("runs");
    ok(flint()
        .arg("run")
        .arg("--runs-dir")
        .arg(&runs)
        .args(["--clients-per-process", "4"])
        .arg(&exp));
    let r = results(&runs.join("mixed"));
    assert_eq!(r.client_links[&1], "lan", "its own link");
    let on = |p: &str| -> Vec<u32> {
        let ids = r.client_links.iter().filter(|(_, l)| l.as_str() == p);
        ids.map(|(&id, _)| id).collect()
    };
    // Three clients at half each: the equal remainders go in profile order.
    assert_eq!(
        (on("lan").len(), on("wan").len(), on("mobile").len()),
        (1, 2, 1)
    );
    let lines = r.provenance.unwrap().emulated_links;
    for (profile, line) in &lines {
        let clients = on(profile);
        assert_eq!(line.clients, Some(clients.len()), "{profile}");
        // What the relay delivered is what its clients' sockets sent and received (a close
        // may add a few bytes no call was there to count).
        let socket = |up: bool| -> u64 {
            clients
                .iter()
                .map(|id| {
                    let l = &r.client_ledgers[id];
                    let (t, u) = (l.total(), l.unattributed());
                    if up {
                        t.up.socket + u.up.socket
                    } else {
                        t.down.socket + u.down.socket
                    }
                })
                .sum()
        };
        for (relayed, counted) in [
            (line.relayed_up_bytes.unwrap(), socket(true)),
            (line.relayed_down_bytes.unwrap(), socket(false)),
        ] {
            assert!(
                counted > 0 && (counted..=counted + 256 * clients.len() as u64).contains(&relayed),
                "{profile}: relayed {relayed}, the clients counted {counted}"
            );
        }
    }
    assert_eq!(lines.len(), 3);
    assert_eq!(lines["mobile"].one_way_ms, 50.0);
    let report = ok(flint().arg("report").arg(runs.join("mixed")));
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains(
            "Emulated links ([links]), each client behind its own: 1 × lan (1000 Mbit/s up"
        ),
        "{report}"
    );
    // The same file, the same clients on the same lines.
    let again = dir.path().join("again");
    ok(flint().arg("run").arg("--runs-dir").arg(&again).arg(&exp));
    assert_eq!(results(&again.join("mixed")).client_links, r.client_links);
}

/// FedAvg, AHP-FedAvg, `local` and `central` once panicked on any data of more than
/// two classes; they now train multinomial logistic regression (a softmax over one logit per
/// class) and report 3 × 3 confusion matrices.
#[test]
fn logistic_regression_federates_three_classes() {
    let (dir, data) = with_blobs("x,y", 600);
    for strategy in ["fedavg", "fedavg-ahp", "local", "central"] {
        let name = format!("three-{strategy}");
        let clients = if strategy == "central" { 1 } else { 3 };
        let mut text = format!(
            "name = \"{name}\"\nstrategy = \"{strategy}\"\nseed = 5\nrounds = 3\n{model}\n\
             [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\n\
             classes = [\"a\", \"b\", \"c\"]\nfeatures = 2\n\n[logreg]\nlearning_rate = 0.5\nlocal_epochs = 50\n",
            model = if matches!(strategy, "local" | "central") {
                "model = \"logreg\"\n"
            } else {
                ""
            },
        );
        for i in 1..=clients {
            text += &format!("\n[[clients]]\nname = \"client-{i}\"\ncompute_ghz = {i}.5\n");
        }
        let exp = write(dir.path(), &format!("{name}.toml"), &text);
        let runs = dir.path().join("runs");
        ok(&mut flint_run(&exp, &data, &runs));
        let r = results(&runs.join(&name));
        let last = r.rounds.last().unwrap();
        assert_eq!(last.metrics.len(), clients, "{strategy}");
        let mean = last.mean.as_ref().unwrap();
        assert!(mean.accuracy > 0.9, "{strategy}: {mean:?}");
    }
}

/// A CSV run's feature count comes from the experiment, never from the first
/// client to join: `flint run` reads it from the file into the resolved experiment, and a
/// server started by hand without it refuses to start, saying what to add.
#[test]
fn a_csv_runs_feature_count_comes_from_the_experiment() {
    let (dir, data) = with_blobs("x,y", 300);
    let text = "name = \"shape\"\nstrategy = \"fedavg\"\nseed = 5\nrounds = 1\nclient_count = 2\n\
         [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\n";
    let exp = write(dir.path(), "shape.toml", text);
    let runs = dir.path().join("runs");
    ok(&mut flint_run(&exp, &data, &runs));
    let resolved = std::fs::read_to_string(runs.join("shape/experiment.resolved.toml")).unwrap();
    assert!(resolved.contains("\nfeatures = 2\n"), "{resolved}");
    assert!(
        resolved.contains("classes = [\n    \"a\",")
            || resolved.contains("classes = [\"a\", \"b\", \"c\"]"),
        "{resolved}"
    );

    // Without `header`, the first line decides, and the run says what it read.
    let open = write(
        dir.path(),
        "open.toml",
        &text
            .replace("header = true\n", "")
            .replace("\"shape\"", "\"open\""),
    );
    let out = ok(&mut flint_run(&open, &data, &runs));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("data.header not given: line 1 is a header"),
        "{printed}"
    );
    let resolved = std::fs::read_to_string(runs.join("open/experiment.resolved.toml")).unwrap();
    assert!(resolved.contains("\nheader = true\n"), "{resolved}");

    // By hand, with the classes listed: the feature count is all it lacks.
    let listed = write(
        dir.path(),
        "listed.toml",
        &format!("{text}classes = [\"a\", \"b\", \"c\"]\n"),
    );
    let out = flint()
        .args(["server", "--open-enrollment", "--listen", "127.0.0.1:0"])
        .arg("--experiment")
        .arg(&listed)
        .arg("--out")
        .arg(dir.path().join("by-hand"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the experiment does not say data.features: the server sizes the model by the experiment, never by the first client to join"),
        "{err}"
    );
}

/// A CSV as a user brings it. Quoted fields, `;` between them, a header, missing
/// values, an absolute path, and no `classes` (read from the file, sorted, and written into
/// the resolved experiment that the server and clients read).
#[test]
fn a_csv_with_quotes_missing_values_and_no_class_list_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("elsewhere");
    std::fs::create_dir_all(&data).unwrap();
    let mut csv = String::from("\"petal; width\";\"length\";\"species\"\n");
    for i in 0..450u32 {
        let (cx, cy, label) = [
            (-2.0, 0.0, "\"virginica\""),
            (2.0, 0.0, "setosa"),
            (0.0, 3.0, "\"versicolor\""),
        ][(i % 3) as usize];
        let jitter = |k: u32| f64::from((i * 7919 + k * 104_729) % 1000) / 1000.0 - 0.5;
        let x = if i % 17 == 0 {
            "?".to_string()
        } else {
            format!("\"{}\"", cx + jitter(1))
        };
        csv += &format!("{x};{};{label}\n", cy + jitter(2));
    }
    let file = data.join("iris-like.csv");
    std::fs::write(&file, csv).unwrap();
    let experiment = |extra: &str| {
        format!(
            "name = \"user-csv\"\nstrategy = \"fedavg\"\nseed = 2\nrounds = 3\nclient_count = 3\n\
             [data]\nsource = \"csv\"\npath = {:?}\nheader = true\ndelimiter = \";\"\nfeatures = 2\n{extra}\n\
             [logreg]\nlearning_rate = 0.5\nlocal_epochs = 50\n",
            file.display().to_string()
        )
    };
    let runs = dir.path().join("runs");
    // The default policy refuses a missing value, naming where it is, before any process starts.
    let refused = write(dir.path(), "refused.toml", &experiment(""));
    let out = flint()
        .arg("run")
        .arg(&refused)
        .arg("--runs-dir")
        .arg(&runs)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2, column \"petal; width\": missing value \"?\"; set data.on_missing"),
        "{err}"
    );
    assert!(
        !runs.join("user-csv/server.log").exists(),
        "nothing started"
    );

    let exp = write(
        dir.path(),
        "impute.toml",
        &experiment("on_missing = \"impute\""),
    );
    let out = flint()
        .arg("run")
        .arg(&exp)
        .arg("--runs-dir")
        .arg(&runs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("classes read from the data: [\"setosa\", \"versicolor\", \"virginica\"]"),
        "{said}"
    );
    let resolved = flint_common::config::Experiment::load(
        &runs.join("user-csv/experiment.resolved.toml"),
        &[],
    )
    .unwrap();
    assert_eq!(
        resolved.data.classes(),
        ["setosa", "versicolor", "virginica"]
    );
    let r = results(&runs.join("user-csv"));
    let mean = r.rounds.last().unwrap().mean.as_ref().unwrap();
    assert!(mean.accuracy > 0.9, "{mean:?}");
    // The results name the build and the data they came from.
    let p = r.provenance.expect("provenance");
    assert_eq!(p.schema, flint_server::results::SCHEMA);
    assert_eq!(p.flint_version, env!("CARGO_PKG_VERSION"));
    if std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.git")).exists() {
        assert_eq!(p.git_revision.map(|r| r.len()), Some(40));
    }
    assert_eq!(
        p.data_files,
        BTreeMap::from([(
            file.display().to_string(),
            flint_common::data::registry::sha256(&file).unwrap()
        )])
    );
}

/// A Tsetlin Machine on a table. Each client's thermometer code comes from its own
/// training split; TPFL federates three clients, `local` trains them alone; each keeps its
/// machine as rules over the CSV's named features and as a checkpoint.
#[test]
fn tsetlin_machines_train_on_a_table_and_keep_readable_rules() {
    let (dir, data) = with_blobs("width,height", 900);
    for strategy in ["tpfl", "local"] {
        let name = format!("table-tm-{strategy}");
        let text = format!(
            "name = \"{name}\"\nstrategy = \"{strategy}\"\nmodel = \"tm\"\nseed = 4\nrounds = 3\nclient_count = 3\n\
             [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\nfeatures = 2\nlevels = 6\n\n\
             [tm]\nclauses = 40\nt = 15\ns = 3.0\nweighted = true\n\n[tpfl]\nlocal_epochs = 5\n",
        );
        let exp = write(dir.path(), &format!("{name}.toml"), &text);
        let runs = dir.path().join("runs");
        ok(&mut flint_run(&exp, &data, &runs));
        let run = runs.join(&name);
        let r = results(&run);
        let mean = r.rounds.last().unwrap().mean.unwrap();
        assert!(mean.accuracy > 0.85, "{strategy}: {mean:?}");
        for c in 1..=3 {
            let kept = flint_common::model::kept::ModelFile::parse(
                &std::fs::read(run.join(format!("models/client-{c}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(kept.features, ["width", "height"]);
            assert_eq!(kept.conditions.len(), 12, "6 cuts for each of 2 features");
            assert!(run.join(format!("models/client-{c}.tm")).is_file());
        }
        let explained = ok(flint()
            .arg("explain")
            .arg(&run)
            .args(["--client", "client-2", "--top", "3"]));
        let text = String::from_utf8_lossy(&explained.stdout);
        assert!(text.starts_with("client-2:\ntsetlin machine, "), "{text}");
        assert!(text.contains("  class c: "), "{text}");
        assert!(text.contains("height > "), "{text}");
        let clusters = run.join("plots/clusters.svg");
        assert_eq!(
            clusters.exists(),
            strategy == "tpfl",
            "TPFL's clusters are drawn"
        );
        // The clusters go by their classes' names, in the plot and the report.
        assert_eq!(r.classes, ["a", "b", "c"]);
        if strategy == "tpfl" {
            let svg = std::fs::read_to_string(&clusters).unwrap();
            assert!(
                !svg.contains("class 0") && !svg.contains("class 1"),
                "{svg}"
            );
            let report = ok(flint().arg("report").arg(&run));
            let text = String::from_utf8_lossy(&report.stdout);
            let rows = text
                .split("Clusters per round")
                .nth(1)
                .expect("the report's clusters");
            let first = rows.lines().nth(2).unwrap_or_default();
            assert!(
                first
                    .split_whitespace()
                    .skip(3)
                    .all(|c| c.starts_with(['a', 'b', 'c'])),
                "{first}"
            );
        }
    }
}

/// A shared test set held out of a table before the partition, measured every
/// round by the client that holds it, beside the clients' own test splits.
#[test]
fn a_global_test_split_is_held_out_and_measured_every_round() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut csv = String::new();
    for i in 0..600u32 {
        let (cx, label) = [(-1.5, "a"), (1.5, "b"), (0.0, "c")][(i % 3) as usize];
        let jitter = |k: u32| f64::from((i * 7919 + k * 104_729) % 1000) / 250.0 - 2.0;
        csv += &format!("{},{},{label}\n", cx + jitter(1), jitter(2));
    }
    std::fs::write(data.join("blobs.csv"), csv).unwrap();
    let text = |strategy: &str| {
        format!(
            "name = \"held-{strategy}\"\nstrategy = \"{strategy}\"\nseed = 3\nrounds = 3\nclient_count = 3\n\
             [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nfeatures = 2\nglobal_test_fraction = 0.25\n"
        )
    };
    let runs = dir.path().join("runs");
    let exp = write(dir.path(), "held.toml", &text("fedavg"));
    let out = ok(&mut flint_run(&exp, &data, &runs));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("Round 3 on the shared test set (150 rows)"),
        "{said}"
    );
    let r = results(&runs.join("held-fedavg"));
    // 50 rows of each class are held out; the clients split the other 450.
    let rows: u64 = r
        .clients
        .iter()
        .map(|c| c.train_class_counts.iter().sum::<u64>() + c.test_samples)
        .sum();
    assert_eq!(rows, 450);
    for rr in &r.rounds[1..] {
        let g = rr.global_test.expect("measured every round");
        assert_eq!(g.samples, 150, "round {}", rr.round);
        assert!(g.accuracy > 0.5, "round {}: {g:?}", rr.round);
    }
    // A strategy that leaves each client its own model has no one model to measure.
    let tpfl = write(
        dir.path(),
        "held-local.toml",
        &text("local").replace("seed = 3", "seed = 3\nmodel = \"logreg\""),
    );
    let out = flint_run(&tpfl, &data, &runs).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("strategy local leaves each client its own"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// FedTMOS on a table. Its machines read a row's thermometer code as one patch;
/// the composite of three clients that each hold two of the three classes beats each client
/// alone, and its rules name the CSV's features.
#[test]
fn fedtmos_federates_a_table_in_one_round() {
    let (dir, data) = with_blobs("width,height", 900);
    let text = "name = \"table-fedtmos\"\nstrategy = \"fedtmos\"\nseed = 2\nrounds = 1\nclient_count = 3\n\
         [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\nfeatures = 2\nlevels = 6\nglobal_test_fraction = 0.2\n\n\
         [partition]\nkind = \"classes-per-client\"\nbeta = 2\n\n\
         [tm]\nclauses = 40\nt = 15\ns = 3.0\nweighted = true\nnegative_sampling = \"all\"\n\n\
         [fedtmos]\nmodels = 2\nk_max = 4\nlocal_epochs = 5\nbaselines = true\n";
    let exp = write(dir.path(), "table-fedtmos.toml", text);
    let runs = dir.path().join("runs");
    ok(&mut flint_run(&exp, &data, &runs));
    let run = runs.join("table-fedtmos");
    let r = results(&run);
    let rr = &r.rounds[1];
    let global = rr.global_test.expect("the shared test set");
    let alone: Vec<f64> = (1..=3)
        .map(|id| rr.baselines[&format!("client-{id}")].accuracy)
        .collect();
    assert!(
        alone.iter().all(|a| global.accuracy > *a) && global.accuracy > 0.8,
        "composite {global:?} against the clients alone {alone:?}"
    );
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    // Its report shows no compute speeds nor weights: all alike (weights 1/n).
    let report = ok(flint().arg("report").arg(&run));
    let report = String::from_utf8_lossy(&report.stdout);
    let header = report
        .lines()
        .find(|l| l.starts_with("client "))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        !header.contains("ghz") && !header.contains("weight"),
        "{header}"
    );
    // A grid of it over two seeds writes FedTMOS's tables beside its summary
    // (what scripts/fedtmos-table.py printed): one row per run, then mean ± std per experiment.
    let grid = dir.path().join("grid");
    ok(flint()
        .args(["grid", "--seeds", "1,2", "--insecure", "--data-dir"])
        .arg(&data)
        .arg("--runs-dir")
        .arg(&grid)
        .arg(&exp));
    let tables = std::fs::read_to_string(grid.join("grid-summary-fedtmos.md")).unwrap();
    let eq3 = |seed: u32| {
        let r = results(&grid.join(format!("table-fedtmos-s{seed}")));
        r.rounds[1].global_test.unwrap().accuracy * 100.0
    };
    for seed in [1, 2] {
        let row = format!("| table-fedtmos-s{seed} | {seed} | 3 | {:.2} |", eq3(seed));
        assert!(tables.contains(&row), "{row}\n{tables}");
    }
    let (a, b) = (eq3(1), eq3(2));
    let (m, sd) = ((a + b) / 2.0, (a - b).abs() / 2f64.sqrt());
    let summary = format!("| table-fedtmos | 1,2 | {m:.2} ± {sd:.2} |");
    assert!(tables.contains(&summary), "{summary}\n{tables}");
    // The grid's own summary has the shared test set's column, and describes a
    // table's machine without an image's patch.
    let grid_md = std::fs::read_to_string(grid.join("grid-summary.md")).unwrap();
    assert!(grid_md.contains("accuracy, shared test set"), "{grid_md}");
    let (ga, gb) = (eq3(1) / 100.0, eq3(2) / 100.0);
    let (gm, gsd) = ((ga + gb) / 2.0, (ga - gb).abs() / 2f64.sqrt());
    let row = "| table-fedtmos | fedtmos | tm 40 clauses on table rows, φ = 2 | S(2) × 3 | 2 | 1 |";
    assert!(grid_md.contains(row), "{row}\n{grid_md}");
    assert!(
        grid_md.contains(&format!("| {gm:.4} ± {gsd:.4} |")),
        "{grid_md}"
    );
    let csv = std::fs::read_to_string(grid.join("grid-summary.csv")).unwrap();
    let header = csv_fields(csv.lines().next().unwrap());
    let at = header
        .iter()
        .position(|h| h == "accuracy_global_test")
        .unwrap();
    let first: f64 = csv_fields(csv.lines().nth(1).unwrap())[at].parse().unwrap();
    assert_eq!(first, ga);
    let (literals, machines) = kept_composite(&run.join("models/client-1.json"));
    assert_eq!(machines, 2);
    assert_eq!(literals.len(), 12);
    assert!(
        literals[0].starts_with("width > ") && literals[11].starts_with("height > "),
        "{literals:?}"
    );
}

/// FedTMOS with the image machine (MNIST's, the table default before tables were sized from
/// their data) and the code's truncation of the scaled weights (R = 1, the table default before
/// R = 256) on a small table builds machines with no clauses, whose composite answers one
/// class; the run says so, in its output and in results.json, naming the clients. At the
/// table's own defaults the same run builds real machines and warns of nothing.
#[test]
fn a_model_that_learns_nothing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let sized = "name = \"sized\"\nstrategy = \"fedtmos\"\nseed = 1\nrounds = 1\nclient_count = 4\n\
         [data]\nsource = \"synthetic\"\nsamples = 800\nfeatures = 6\n";
    let runs = dir.path().join("runs");
    let out = ok(flint()
        .arg("run")
        .arg(write(dir.path(), "sized.toml", sized))
        .arg("--runs-dir")
        .arg(&runs));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("warning"), "{stdout}");
    assert!(results(&runs.join("sized")).warnings.is_empty());
    let text = sized.replace("\"sized\"", "\"empty\"")
        + "[tm]\nclauses = 100\nt = 1000\ns = 10.0\nweighted = false\n"
        + "[fedtmos]\nweight_resolution = 1\n";
    let exp = write(dir.path(), "empty.toml", &text);
    let out = ok(flint().arg("run").arg(&exp).arg("--runs-dir").arg(&runs));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in [
        "warning: round 1: 4 of 4 clients' models predict one class for every test row (client-1 → \"0\"",
        "warning: round 1: 4 of 4 clients' models hold machines with no clauses (client-1: 4 of 4,",
    ] {
        assert!(stdout.contains(want), "{want}\n{stdout}");
    }
    let r = results(&runs.join("empty"));
    let kinds: Vec<(String, Vec<u32>)> = r
        .warnings
        .iter()
        .map(|w| {
            (
                serde_json::to_value(w.kind)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
                w.clients.clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("one-class".to_string(), vec![1, 2, 3, 4]),
            ("no-clauses".to_string(), vec![1, 2, 3, 4]),
        ]
    );
    let report = ok(flint().arg("report").arg(runs.join("empty")));
    let report = String::from_utf8_lossy(&report.stdout);
    assert_eq!(report.matches("warning: ").count(), 2, "{report}");
}

/// FedTM keeps its machine at the end of the run, as every strategy keeps its
/// model: a composite of one machine in the table's own features, which `flint explain` reads.
#[test]
fn fedtm_keeps_its_machine() {
    let (dir, data) = with_blobs("width,height", 600);
    let text = "name = \"table-fedtm\"\nstrategy = \"fedtm\"\nseed = 2\nrounds = 2\nclient_count = 2\n\
         [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\nlevels = 6\nglobal_test_fraction = 0.2\n\n\
         [tm]\nclauses = 40\nt = 15\ns = 3.0\nweighted = true\nnegative_sampling = \"all\"\n\n\
         [fedtmos]\nlocal_epochs = 3\n";
    let exp = write(dir.path(), "table-fedtm.toml", text);
    let runs = dir.path().join("runs");
    ok(&mut flint_run(&exp, &data, &runs));
    let run = runs.join("table-fedtm");
    for client in ["client-1", "client-2"] {
        let (literals, machines) = kept_composite(&run.join(format!("models/{client}.json")));
        assert_eq!(machines, 1, "{client}");
        assert!(literals[0].starts_with("width > "), "{literals:?}");
    }
    let explained = ok(flint().arg("explain").arg(&run).args(["--top", "2"]));
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.contains("composite of 1 machine ") && text.contains(" < width <= "),
        "{text}"
    );
}

/// `flint split` draws each client's rows as its process does: its training column is what the
/// run's clients report, every row goes to one client, and its `--toml` entries, as an
/// explicit split, give each client the same counts per class. A partition whose clients
/// draw their rows each on its own has no explicit form, and `--toml` says so.
#[test]
fn flint_split_prints_the_rows_a_run_trains_on() {
    let (dir, data) = with_blobs("x,y", 600);
    let head = |name: &str, partition: &str| {
        format!(
            "name = \"{name}\"\nstrategy = \"fedavg\"\nseed = 3\nrounds = 1\n{partition}\n\
             [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\n\
             classes = [\"a\", \"b\", \"c\"]\nfeatures = 2\n\n[logreg]\nlocal_epochs = 2\n"
        )
    };
    let mut text = head(
        "skewed",
        "\n[partition]\nkind = \"dirichlet-by-class\"\nalpha = 0.5\n",
    );
    for i in 1..=3 {
        text += &format!("\n[[clients]]\nname = \"client-{i}\"\n");
    }
    let skewed = write(dir.path(), "skewed.toml", &text);
    let split_of = |exp: &Path, extra: &[&str]| {
        let out = ok(flint()
            .arg("split")
            .arg(exp)
            .arg("--data-dir")
            .arg(&data)
            .args(extra));
        String::from_utf8(out.stdout).unwrap()
    };
    let drawn = split_table(&split_of(&skewed, &[]));
    assert_eq!(drawn.len(), 3);
    let entries = split_of(&skewed, &["--toml"]);
    let shares = class_counts(&entries);
    let per_class: Vec<usize> = (0..3).map(|c| shares.iter().map(|s| s[c]).sum()).collect();
    assert_eq!(per_class, [200, 200, 200], "every row to one client");
    for (share, d) in shares.iter().zip(&drawn) {
        let held: usize = share.iter().sum();
        assert_eq!(held as u64, d.train.iter().sum::<u64>() + d.test);
    }
    let runs = dir.path().join("runs");
    ok(&mut flint_run(&skewed, &data, &runs));
    let reported: Vec<Vec<u64>> = results(&runs.join("skewed"))
        .clients
        .iter()
        .map(|c| c.train_class_counts.clone())
        .collect();
    let train: Vec<Vec<u64>> = drawn.iter().map(|d| d.train.clone()).collect();
    assert_eq!(
        train, reported,
        "the run's clients train on the rows split printed"
    );

    let explicit = head("explicit", "\n[partition]\nkind = \"explicit\"\n") + &entries;
    let explicit = write(dir.path(), "explicit.toml", &explicit);
    let again = split_table(&split_of(&explicit, &[]));
    let counts = |t: &[SplitRow]| -> Vec<(Vec<u64>, u64)> {
        t.iter().map(|d| (d.train.clone(), d.test)).collect()
    };
    assert_eq!(counts(&again), counts(&drawn), "the same rows per class");

    let own_draws = head(
        "own-draws",
        "\n[partition]\nkind = \"dirichlet\"\nsamples = 100\n",
    ) + "\n[[clients]]\n\n[[clients]]\n";
    let own_draws = write(dir.path(), "own-draws.toml", &own_draws);
    assert_eq!(split_table(&split_of(&own_draws, &[])).len(), 2);
    let refused = flint()
        .arg("split")
        .arg(&own_draws)
        .arg("--data-dir")
        .arg(&data)
        .arg("--toml")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && refused.stdout.is_empty(),
        "{err}"
    );
    assert!(err.contains("has no explicit form"), "{err}");
}

/// `class_counts` of each `[[clients]]` entry `flint split --toml` printed.
fn class_counts(entries: &str) -> Vec<Vec<usize>> {
    let value: toml::Value = toml::from_str(entries).unwrap();
    value["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["class_counts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_integer().unwrap() as usize)
                .collect()
        })
        .collect()
}

/// A client's line of `flint split`: its training rows per class and its test rows.
struct SplitRow {
    train: Vec<u64>,
    test: u64,
}

fn split_table(out: &str) -> Vec<SplitRow> {
    out.lines()
        .skip(2)
        .map(|line| {
            let fields: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .map(|f| f.parse().unwrap())
                .collect();
            let (total, test, train) = (fields[0], fields[1], fields[2..].to_vec());
            assert_eq!(train.iter().sum::<u64>(), total, "{line}");
            SplitRow { train, test }
        })
        .collect()
}

/// A temporary directory whose `data/` holds `blobs.csv` ([`write_blobs`]): the directory (kept
/// alive by the caller) and the data directory.
fn with_blobs(features: &str, rows: u32) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    write_blobs(&data.join("blobs.csv"), features, rows);
    (dir, data)
}

/// Three well-separated blobs in two features, classes `a`, `b`, `c` in turn, with a header
/// naming the features.
fn write_blobs(path: &std::path::Path, features: &str, rows: u32) {
    let mut csv = format!("{features},label\n");
    for i in 0..rows {
        let (cx, cy, label) =
            [(-2.0, 0.0, "a"), (2.0, 0.0, "b"), (0.0, 3.0, "c")][(i % 3) as usize];
        let jitter = |k: u32| f64::from((i * 7919 + k * 104_729) % 1000) / 1000.0 - 0.5;
        csv += &format!("{},{},{label}\n", cx + jitter(1), cy + jitter(2));
    }
    std::fs::write(path, csv).unwrap();
}

/// A run directory out of an image with no shell. `flint pack` writes it as a tar
/// (what `tar` reads back is what was there, links kept as links), and `flint idle`, the pod
/// it is exec'd into, ends at SIGTERM with 0.
#[test]
fn a_run_directory_packs_into_a_tar_and_idle_ends_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("results");
    std::fs::create_dir_all(run.join("clients")).unwrap();
    std::fs::write(run.join("results.json"), "{\"completed\": true}\n").unwrap();
    std::fs::write(run.join("clients/client-1.json"), vec![7u8; 100_000]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", run.join("outside")).unwrap();
    let tar_file = dir.path().join("run.tar");
    let out = ok(flint().arg("pack").arg(&run).arg("--out").arg(&tar_file));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("packed 3 file(s)"), "{said}");
    let piped = ok(flint().arg("pack").arg(&run));
    assert_eq!(
        piped.stdout,
        std::fs::read(&tar_file).unwrap(),
        "stdout and --out agree"
    );

    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    ok(std::process::Command::new("tar")
        .arg("-xf")
        .arg(&tar_file)
        .arg("-C")
        .arg(&unpacked));
    for file in ["results.json", "clients/client-1.json"] {
        assert_eq!(
            std::fs::read(unpacked.join("results").join(file)).unwrap(),
            std::fs::read(run.join(file)).unwrap(),
            "{file}"
        );
    }
    let link = unpacked.join("results/outside");
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("/etc/passwd"),
        "a link stays a link"
    );
    let refused = flint()
        .arg("pack")
        .arg(run.join("results.json"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a directory"));

    // Into the folder it packs, by --out or by stdout, the archive leaves itself out and ends
    // (it used to read itself as it grew, 4.59 GB in 30 s).
    let inside = run.join("run.tar");
    let out = ok(flint().arg("pack").arg(&run).arg("--out").arg(&inside));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("packed 3 file(s)") && said.contains("left out"),
        "{said}"
    );
    // The same entries (the folder's own time in its header aside): the same length.
    let len = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert_eq!(len(&inside), len(&tar_file));
    let redirected = std::fs::File::create(&inside).unwrap();
    let out = ok(flint().arg("pack").arg(&run).stdout(redirected));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("packed 3 file(s)"), "{said}");
    assert_eq!(len(&inside), len(&tar_file));
    std::fs::remove_file(&inside).unwrap();

    let mut idle = Proc(
        flint()
            .arg("idle")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut said = std::io::BufReader::new(idle.0.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut said, &mut line).unwrap();
    assert!(line.contains("waiting for SIGTERM"), "{line}");
    ok(std::process::Command::new("kill").args(["-TERM", &idle.0.id().to_string()]));
    assert!(idle.wait(Duration::from_secs(5)).success());
}

/// The ensemble's clients all predict with the same machines (every client's), so
/// each machine is stored once, by content, below models/machines/; the run's models take
/// about one composite's room, not one per client, and `flint explain` puts them back.
#[test]
fn the_ensembles_machines_are_stored_once() {
    let (dir, data) = with_blobs("width,height", 900);
    let text = "name = \"table-ensemble\"\nstrategy = \"ensemble\"\nseed = 2\nrounds = 1\nclient_count = 6\n\
         [data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\nfeatures = 2\nlevels = 6\n\n\
         [tm]\nclauses = 40\nt = 15\ns = 3.0\nweighted = true\n\n\
         [fedtmos]\nlocal_epochs = 2\n";
    let exp = write(dir.path(), "table-ensemble.toml", text);
    let runs = dir.path().join("runs");
    ok(&mut flint_run(&exp, &data, &runs));
    let models = runs.join("table-ensemble/models");
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let mut stored = Vec::new();
    for id in 1..=6 {
        let file = models.join(format!("client-{id}.json"));
        let parsed = flint_common::model::kept::ModelFile::parse(&std::fs::read(&file).unwrap());
        match parsed.unwrap().model {
            flint_common::model::kept::KeptModel::Composite {
                stored: s,
                machines,
                ..
            } => {
                assert!(machines.is_empty(), "by reference, not inline");
                stored.push(s);
            }
            other => panic!("{other:?}"),
        }
        let (_, machines) = kept_composite(&file);
        assert_eq!(machines, 6, "every client's machine, read back in place");
    }
    assert!(stored.iter().all(|s| *s == stored[0]), "{stored:?}");
    let machines_dir = models.join("machines");
    let files: Vec<_> = std::fs::read_dir(&machines_dir)
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(
        files.len(),
        12,
        "six machines, rules and checkpoint each, once"
    );
    let machines_bytes: u64 = files.iter().map(|f| size(&f.path())).sum();
    let one_composite = machines_bytes + size(&models.join("client-1.json"));
    let clients_bytes: u64 = (1..=6)
        .map(|id| size(&models.join(format!("client-{id}.json"))))
        .sum();
    assert!(
        machines_bytes + clients_bytes <= 2 * one_composite,
        "{machines_bytes} B of machines and {clients_bytes} B of client files"
    );
    let explained = ok(flint()
        .arg("explain")
        .arg(runs.join("table-ensemble"))
        .args(["--top", "1"]));
    let text = String::from_utf8_lossy(&explained.stdout);
    assert_eq!(text.matches("composite of 6 machines").count(), 6, "{text}");
}

/// `flint replay` on a table: each client, prepared again from the data as the run prepared it,
/// measures the aggregate of the kept updates on its own test rows and gets the run's figure; a
/// changed server setting changes the aggregate; data that no longer gives the run's rows is
/// refused.
#[test]
fn a_table_run_replays_on_each_clients_test_rows() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let fedtmos = "name = \"kept\"\nstrategy = \"fedtmos\"\nseed = 1\nrounds = 1\nclient_count = 4\n\
         [server]\nkeep_updates = true\n[data]\nsource = \"synthetic\"\nsamples = 800\nfeatures = 6\n\
         global_test_fraction = 0.2\n";
    let fedavg = synthetic_experiment("kept-ahp", 3, 3, "keep_updates = true");
    let other = |strategy: &str| {
        fedtmos
            .replace("\"kept\"", &format!("\"kept-{strategy}\""))
            .replace("fedtmos", strategy)
            .replace("rounds = 1", "rounds = 2")
            .replace("global_test_fraction = 0.2\n", "")
    };
    let runs_of = [
        ("kept", fedtmos.to_string(), 1),
        ("kept-ahp", fedavg, 3),
        ("kept-fedtm", other("fedtm"), 2),
        ("kept-blind-fcm", other("blind-fcm"), 2),
    ];
    for (name, text, round) in runs_of {
        let exp = write(dir.path(), &format!("{name}.toml"), &text);
        ok(flint().arg("run").arg(exp).arg("--runs-dir").arg(&runs));
        let r = results(&runs.join(name));
        let out = replay_run(&runs.join(name), round, &[]);
        let ran = &r.rounds[round as usize];
        for c in &r.clients {
            let want = format!("{:.4}", ran.metrics[&c.id].accuracy);
            let line = format!("accuracy {want} ({want})");
            assert!(
                out.lines()
                    .any(|l| l.trim_start().starts_with(&c.name) && l.ends_with(&line)),
                "{name}, {}: {line}\n{out}",
                c.name
            );
        }
        let mean = format!("{:.4}", ran.mean.as_ref().unwrap().accuracy);
        assert!(
            out.contains(&format!("mean{}accuracy {mean} ({mean})", " ".repeat(23))),
            "{out}"
        );
    }
    // The shared test set's holder measures the model on it, as in the run.
    let shared = results(&runs.join("kept")).rounds[1].global_test.unwrap();
    let out = replay_run(&runs.join("kept"), 1, &[]);
    let line = format!("the model{}accuracy {:.4}", " ".repeat(18), shared.accuracy);
    assert!(out.contains(&line), "{line}\n{out}");
    let per_class = flint()
        .arg("replay")
        .arg(runs.join("kept"))
        .arg("--per-class")
        .output()
        .unwrap();
    let per_class = String::from_utf8_lossy(&per_class.stdout);
    assert!(
        per_class.contains("recall per class, the clients' test rows pooled: 0: "),
        "{per_class}"
    );
    let one = replay_run(&runs.join("kept"), 1, &["fedtmos.models=1"]);
    let report = one.lines().find(|l| l.starts_with('{')).unwrap();
    let report: flint_common::strategy::RoundReport = serde_json::from_str(report).unwrap();
    assert_eq!(
        report.details::<FedTmosRound>().unwrap().models.len(),
        1,
        "{one}"
    );

    // A TPFL client's clause bank stays local: the download alone is not its model.
    ok(flint()
        .arg("run")
        .arg(write(dir.path(), "tpfl.toml", &other("tpfl")))
        .arg("--runs-dir")
        .arg(&runs));
    let out = replay_run(&runs.join("kept-tpfl"), 2, &[]);
    assert!(out.contains("is not the download alone"), "{out}");
    assert!(!out.contains("accuracy"), "{out}");

    // A setting of the rows is refused before anything is read.
    let out = replay_fails(&runs.join("kept"), &["--set", "data.scaling=none"]);
    let want = "--set data.scaling: a replay measures the run's own clients";
    assert!(out.contains(want), "{out}");
    let out = replay_fails(&runs.join("kept"), &["--round", "2"]);
    assert!(
        out.contains("--round 2: the run closed rounds 1 to 1"),
        "{out}"
    );

    // A data file that no longer holds the run's rows is refused, never measured.
    let (blobs, data) = with_blobs("x,y", 300);
    let text = "name = \"kept-csv\"\nstrategy = \"fedavg\"\nseed = 5\nrounds = 1\nclient_count = 3\n\
         [server]\nkeep_updates = true\n[data]\nsource = \"csv\"\npath = \"blobs.csv\"\nheader = true\n";
    let csv_runs = blobs.path().join("runs");
    let exp = write(blobs.path(), "csv.toml", text);
    ok(&mut flint_run(&exp, &data, &csv_runs));
    write_blobs(&data.join("blobs.csv"), "x,y", 299);
    let data_dir = data.to_str().unwrap();
    let out = replay_fails(&csv_runs.join("kept-csv"), &["--data-dir", data_dir]);
    assert!(out.contains("holds other rows than in the run"), "{out}");
}

/// `flint replay RUN ARGS`, which must fail: its standard error.
fn replay_fails(run: &Path, args: &[&str]) -> String {
    let out = flint().arg("replay").arg(run).args(args).output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn replay_run(run: &Path, round: u32, set: &[&str]) -> String {
    let mut cmd = flint();
    cmd.arg("replay")
        .arg(run)
        .args(["--round", &round.to_string()]);
    for s in set {
        cmd.args(["--set", s]);
    }
    String::from_utf8(ok(&mut cmd).stdout).unwrap()
}
