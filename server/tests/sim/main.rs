//! docs/PROTOCOL.md §Simulation: the server core (`Rounds`, `Identities`, the
//! journal and the gRPC handlers that tie them) run deterministically under faults, in the
//! manner of FoundationDB's simulation testing and TigerBeetle's VOPR, on tokio-rs/turmoil: one
//! thread runs the real server and the simulated clients as hosts on a simulated network, with
//! a simulated clock and file system. One seed decides one schedule: message latencies (so the
//! order calls arrive in), links held and released, the clients' duplicate calls, when the
//! server crashes (losing the journal's unsynced writes, maybe tearing the last one) and comes
//! back, and when a client crashes and starts again from its checkpoint. The clients are the
//! real client's state machine (`flint_client::machine`), driven over the simulated network. After each start the server's replayed state must hold everything a client was told
//! was taken; an honest call is never refused; the journal stays within the records the
//! experiment allows; the run ends with the fault-free run's rounds, evaluations and models.
//!
//! `FLINT_SIM_SEEDS=N` runs seeds 1..=N (default [`SEEDS`]); a failing seed replays alone with
//! `FLINT_SIM_SEED=<seed> cargo test -p flint-server --test sim`.

mod client;
mod disk;
mod net;
mod oracle;

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use flint_common::config::Experiment;
use flint_common::rng::{FlintRng, derive_rng};
use flint_server::ServeOptions;
use flint_server::journal::Journal;
use flint_server::shared::Blocking;
use flint_server::state::{self, StateDir};
use rand::RngExt;

use client::SimClient;
use disk::SimDisk;
use oracle::{Oracle, Outcome};

/// Seeds run by default: about 200 s on this project's two-core machine (debug build).
const SEEDS: u64 = 10_000;
const STATE: &str = "/flint/state";
/// How long a sync (or an aggregation) takes on the simulated clock.
const SYNC_LATENCY: Duration = Duration::from_millis(3);

/// Three clients, three rounds: the result does not depend on the order updates arrive in, so
/// every schedule must end alike. Timeouts beyond the simulation's length: a round closes only
/// when all it selected have answered. A third of the seeds run AHP-weighted FedAvg, whose
/// clients hold nothing between rounds but the download; a third TPFL, whose clients carry their
/// own machine and random stream from round to round, so a client that starts again without its
/// checkpoint ends otherwise; a third TPFL with two clients a round, drawn from the seed, so a
/// client waits through rounds that pass it over and a restarted server selects alike.
const EXPERIMENT: &str = r#"
name = "sim"
seed = 11
rounds = 3

[server]
round_timeout_secs = 7200
eval_timeout_secs = 7200

[data]
source = "synthetic"
samples = 240
features = 4

[[clients]]
name = "client-1"
compute_ghz = 3.0

[[clients]]
name = "client-2"
compute_ghz = 1.5

[[clients]]
name = "client-3"
compute_ghz = 2.0
"#;

/// What one schedule did.
struct Ran {
    oracle: Oracle,
    steps: u64,
    crashes: Crashes,
}

/// The crashes of one schedule.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Crashes {
    server: usize,
    clients: usize,
}

/// The experiment's clients, each on a host of its own.
const CLIENTS: u32 = 3;

/// The strategy a seed runs, its `[server]` keys beyond the experiment's, and its section.
const STRATEGIES: [(&str, &str, &str); 3] = [
    ("tpfl", "", "[tm]\nclauses = 20\n"),
    ("fedavg-ahp", "", "[logreg]\nlocal_epochs = 2\n"),
    ("tpfl", "clients_per_round = 2\n", "[tm]\nclauses = 20\n"),
];

/// Which of [`STRATEGIES`] `seed` runs: each alike in each shard of seeds.
fn kind(seed: u64) -> usize {
    ((seed / 2) % 3) as usize
}

/// The experiment of `seed`'s schedule.
fn experiment(seed: u64) -> Experiment {
    let (strategy, server, section) = STRATEGIES[kind(seed)];
    let base = EXPERIMENT.replace("[server]\n", &format!("[server]\n{server}"));
    let text = format!("strategy = {strategy:?}\n{base}\n{section}");
    Experiment::from_toml(&text).expect("the simulation's experiment is valid")
}

thread_local! {
    /// Panics on this thread while a schedule runs: tokio catches a panicking task's unwind
    /// (a handler's, the ticker's), and its caller would only see the call fail and retry.
    static PANICS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records every panic of a simulation thread (the simulation runs on its test's thread).
fn watch_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.borrow_mut().push(info.to_string()));
            default(info);
        }));
    });
}

/// [`simulate`], a panic anywhere in it (the driver, a host, a task) a violation.
fn simulate_watched(seed: u64, faults: bool) -> Result<Ran, String> {
    simulate_clients(seed, faults, true)
}

/// [`simulate_watched`]; `resume`: whether a client started again reads its checkpoint (the
/// real client's behaviour; without it, to show the oracle notices).
fn simulate_clients(seed: u64, faults: bool, resume: bool) -> Result<Ran, String> {
    watch_panics();
    PANICS.with(|p| p.borrow_mut().clear());
    let ran = std::panic::catch_unwind(|| simulate(seed, faults, resume))
        .unwrap_or_else(|_| Err("the simulation panicked".into()));
    let panics = PANICS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    match (ran, panics.is_empty()) {
        (Ok(mut ran), false) => {
            let why = panics.into_iter().map(|p| format!("panic: {p}"));
            ran.oracle.violations.extend(why);
            Ok(ran)
        }
        (Err(e), false) => Err(format!("{e}; panic: {}", panics.join("; panic: "))),
        (ran, true) => ran,
    }
}

/// One schedule: `seed` drives the faults, none without `faults`.
fn simulate(seed: u64, faults: bool, resume: bool) -> Result<Ran, String> {
    let e = experiment(seed);
    let oracle = Arc::new(Mutex::new(Oracle::default()));
    let mut schedule = derive_rng(seed, "sim-schedule", 0);
    let mut sim = build(seed, faults, &mut schedule);
    let server = (e.clone(), oracle.clone());
    sim.host("server", move || {
        let (e, oracle) = server.clone();
        serve(e, oracle)
    });
    let disks = client::Disks::default();
    for host in 1..=CLIENTS {
        let client = SimClient {
            host,
            experiment: e.clone(),
            oracle: oracle.clone(),
            disks: disks.clone(),
            seed,
            duplicates: if faults { 0.25 } else { 0.0 },
            resume,
        };
        sim.host(format!("client-{host}"), move || client.clone().run());
    }
    let done = oracle.clone();
    sim.client("watch", async move {
        while done.lock().expect("oracle").finished.len() < CLIENTS as usize {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    });
    let (steps, crashes) = drive(&mut sim, &oracle, faults, &mut schedule)?;
    let oracle = std::mem::take(&mut *oracle.lock().expect("oracle"));
    Ok(Ran {
        oracle,
        steps,
        crashes,
    })
}

fn build<'a>(seed: u64, faults: bool, schedule: &mut FlintRng) -> turmoil::Sim<'a> {
    let mut b = turmoil::Builder::new();
    b.rng_seed(seed)
        .simulation_duration(Duration::from_secs(SIMULATED_SECONDS))
        .tick_duration(Duration::from_millis(2));
    if faults {
        let latency = [1, 10, 80][schedule.random_range(0..3)];
        b.min_message_latency(Duration::from_millis(1))
            .max_message_latency(Duration::from_millis(latency));
        let flush = [0.0, 0.05, 0.5][schedule.random_range(0..3)];
        b.fs().sync_probability(flush).block_size(16);
    }
    b.build()
}

/// Steps after the clients are done, at most, for the server to see the run finished.
const FINISH_STEPS: usize = 2000;

/// The clients are done. Under faults the server crashes once more (if it is up) and comes
/// back, so every schedule ends checked against its journal: the outcome is the one the
/// restarted server rebuilt. It ticks on until it sees the run finished and records its
/// outcome, or the step budget runs out.
fn finish(
    sim: &mut turmoil::Sim<'_>,
    oracle: &oracle::Shared,
    faults: bool,
    down: bool,
) -> Result<(), String> {
    if faults {
        if !down {
            sim.crash("server");
        }
        sim.bounce("server");
        let mut o = oracle.lock().expect("oracle");
        o.outcome.rounds.clear();
        o.outcome.evals.clear();
        o.outcome.served.clear();
    }
    let recorded = || !oracle.lock().expect("oracle").outcome.rounds.is_empty();
    for _ in 0..FINISH_STEPS {
        if recorded() {
            break;
        }
        sim.step()
            .map_err(|e| format!("the simulation failed at its end: {e}"))?;
    }
    Ok(())
}

/// A schedule's length at most in simulated time: a run takes about a second, and under
/// four crashes well under a minute; one still going by then hangs.
const SIMULATED_SECONDS: u64 = 120;

/// Most server crashes one schedule holds, so that every run ends.
const MAX_CRASHES: usize = 4;
/// Most client crashes one schedule holds.
const MAX_CLIENT_CRASHES: usize = 4;

/// Steps the simulation to its end, crashing and restarting the server and the clients and
/// holding links as the schedule says; returns the steps taken and the crashes.
fn drive(
    sim: &mut turmoil::Sim<'_>,
    oracle: &oracle::Shared,
    faults: bool,
    schedule: &mut FlintRng,
) -> Result<(u64, Crashes), String> {
    let (mut steps, mut crashes) = (0u64, Crashes::default());
    let mut back_at: Option<u64> = None;
    let mut down: Vec<(u32, u64)> = Vec::new();
    let mut held: Vec<(String, u64)> = Vec::new();
    loop {
        match sim.step() {
            Ok(true) => {
                finish(sim, oracle, faults, back_at.is_some())?;
                return Ok((steps, crashes));
            }
            Ok(false) => {}
            Err(e) => return Err(format!("the simulation failed at step {steps}: {e}")),
        }
        steps += 1;
        if !oracle.lock().expect("oracle").violations.is_empty() {
            // Found: the rest of the schedule would only wait for what was lost.
            return Ok((steps, crashes));
        }
        if !faults {
            continue;
        }
        if back_at.is_some_and(|at| steps >= at) {
            sim.bounce("server");
            back_at = None;
        }
        if back_at.is_none() && crashes.server < MAX_CRASHES && schedule.random_bool(1.0 / 400.0) {
            sim.crash("server");
            crashes.server += 1;
            back_at = Some(steps + schedule.random_range(1..300));
        }
        crash_clients(sim, oracle, schedule, steps, &mut down, &mut crashes);
        hold_links(sim, schedule, steps, &mut held);
    }
}

/// Brings back the clients whose time is up, and crashes one that has not finished where the
/// schedule says: it starts again from its checkpoint.
fn crash_clients(
    sim: &mut turmoil::Sim<'_>,
    oracle: &oracle::Shared,
    schedule: &mut FlintRng,
    steps: u64,
    down: &mut Vec<(u32, u64)>,
    crashes: &mut Crashes,
) {
    down.retain(|&(host, until)| {
        let keep = until > steps;
        if !keep {
            sim.bounce(format!("client-{host}"));
        }
        keep
    });
    if crashes.clients >= MAX_CLIENT_CRASHES || !schedule.random_bool(1.0 / 300.0) {
        return;
    }
    let host = schedule.random_range(1..=CLIENTS);
    let finished = oracle.lock().expect("oracle").finished.contains(&host);
    if finished || down.iter().any(|&(h, _)| h == host) {
        return;
    }
    sim.crash(format!("client-{host}"));
    crashes.clients += 1;
    down.push((host, steps + schedule.random_range(1..300)));
}

/// Releases the links whose time is up, and holds one where the schedule says.
fn hold_links(
    sim: &mut turmoil::Sim<'_>,
    schedule: &mut FlintRng,
    steps: u64,
    held: &mut Vec<(String, u64)>,
) {
    held.retain(|(client, until)| {
        let keep = *until > steps;
        if !keep {
            sim.release(client.as_str(), "server");
        }
        keep
    });
    if schedule.random_bool(1.0 / 100.0) {
        let client = format!("client-{}", schedule.random_range(1..=CLIENTS));
        if !held.iter().any(|(c, _)| *c == client) {
            sim.hold(client.as_str(), "server");
            held.push((client, steps + schedule.random_range(1..200)));
        }
    }
}

/// The server host: the run's state opened from the journal (new or replayed), checked
/// against what the clients were told, then served over the simulated network.
async fn serve(e: Experiment, oracle: oracle::Shared) -> turmoil::Result {
    let state = StateDir {
        disk: Arc::new(SimDisk),
        dir: STATE.into(),
        blocking: Blocking::Inline(SYNC_LATENCY),
        run_nonce: 0x5eed,
    };
    let strategy = e
        .strategy
        .server(e.data.classes().len(), e.seed, e.robust, None)
        .expect("the simulation's strategies hold no data");
    // The simulated clients hold no certificate and no enrollment secret.
    let options = ServeOptions {
        open_enrollment: true,
        ..Default::default()
    };
    let shared = Arc::new(state::open(e, strategy, &state, &options)?);
    // The journal as replayed, read a second time to count it: `SimDisk` takes no lock (the host
    // is the lock), where the host's disk would refuse a second opener.
    let records = Journal::open(Arc::new(SimDisk), Path::new(STATE))?.map_or(0, |f| f.events.len());
    {
        let identities = shared.identities.lock().expect("identities");
        let mut o = oracle.lock().expect("oracle");
        o.check_recovered(&shared.rounds(), &identities, records);
    }
    let ticker = (shared.clone(), oracle);
    tokio::spawn(async move {
        let (shared, oracle) = ticker;
        loop {
            if flint_server::tick(&shared).finished {
                let rounds = shared.rounds();
                oracle
                    .lock()
                    .expect("oracle")
                    .outcome
                    .record_server(&rounds);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", net::PORT)).await?;
    tonic::transport::Server::builder()
        .add_service(flint_server::aggregator(&shared))
        .serve_with_incoming(net::incoming(listener))
        .await?;
    Ok(())
}

/// The journal's records a run of this experiment may hold at most, whatever the faults: a
/// bind and a join per client, per round an update and an evaluation per client and the
/// round's close and install. Duplicates are journaled once.
fn most_records(e: &Experiment) -> usize {
    let (c, r) = (e.clients.len(), e.policy.rounds as usize);
    2 * c + r * (2 * c + 2)
}

/// The fault-free run every schedule of `seed`'s strategy must end like.
fn reference(seed: u64) -> &'static Outcome {
    static REFERENCE: [OnceLock<Outcome>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let kind = kind(seed);
    REFERENCE[kind].get_or_init(|| {
        let ran = simulate_watched(2 * kind as u64, false).expect("the fault-free run completes");
        assert!(
            ran.oracle.violations.is_empty(),
            "{:?}",
            ran.oracle.violations
        );
        ran.oracle.outcome
    })
}

/// Every way `ran` breaks an invariant.
fn violations(seed: u64, ran: &Ran) -> Vec<String> {
    let mut found = ran.oracle.violations.clone();
    let expected = reference(seed);
    let outcome = &ran.oracle.outcome;
    if outcome.rounds.is_empty() {
        found.push("the server did not see the run finished".into());
    } else if outcome.rounds != expected.rounds {
        found.push(format!(
            "rounds differ from the fault-free run: {:?} against {:?}",
            outcome.rounds, expected.rounds
        ));
    }
    if outcome.evals != expected.evals {
        found.push("evaluations differ from the fault-free run".into());
    }
    if outcome.finals != expected.finals {
        found.push("the clients' final models differ from the fault-free run".into());
    }
    if outcome.served != expected.served {
        found.push(
            "the final models the restarted server holds differ from the fault-free run".into(),
        );
    }
    let most = most_records(&experiment(seed));
    if ran.oracle.most_records > most {
        found.push(format!(
            "the journal held {} records, above the {most} this run may write",
            ran.oracle.most_records
        ));
    }
    found
}

/// This shard's seeds: 1..=N (`FLINT_SIM_SEEDS`, default [`SEEDS`]) taken by every
/// [`SHARDS`]th from `shard`, so the test harness runs the shards on every core; or the one
/// seed `FLINT_SIM_SEED` names, in the first shard.
fn seeds(shard: u64) -> Vec<u64> {
    if let Some(one) = std::env::var("FLINT_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return if shard == 1 { vec![one] } else { vec![] };
    }
    let n = std::env::var("FLINT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS);
    (shard..=n).step_by(SHARDS as usize).collect()
}

const SHARDS: u64 = 2;

/// Runs this shard's seeds under faults; fails naming each failing seed and its replay.
fn check_shard(shard: u64) {
    let started = std::time::Instant::now();
    let (mut crashes, mut steps, mut failed) = (Crashes::default(), 0, Vec::new());
    let seeds = seeds(shard);
    for &seed in &seeds {
        let found = match simulate_watched(seed, true) {
            Ok(ran) => {
                crashes.server += ran.crashes.server;
                crashes.clients += ran.crashes.clients;
                steps += ran.steps;
                violations(seed, &ran)
            }
            Err(e) => vec![e],
        };
        if !found.is_empty() {
            failed.push(format!(
                "seed {seed}: {}\n  replay: FLINT_SIM_SEED={seed} cargo test -p flint-server --test sim",
                found.join("; ")
            ));
        }
    }
    eprintln!(
        "simulation, shard {shard} of {SHARDS}: {} seeds, {} server and {} client crashes, {steps} steps, {} failed, {:.1} s",
        seeds.len(),
        crashes.server,
        crashes.clients,
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn every_schedule_keeps_the_invariants_shard_1() {
    check_shard(1);
}

#[test]
fn every_schedule_keeps_the_invariants_shard_2() {
    check_shard(2);
}

/// The checkpoint is what a TPFL client started again goes on from: without it, its machine
/// and stream start afresh, and the oracle must see the run end otherwise in some schedules
/// (an AHP-FedAvg client carries nothing a checkpoint holds, so those seeds are left out).
#[test]
fn a_client_started_again_without_its_checkpoint_is_caught() {
    let tpfl: Vec<u64> = (1..=100)
        .filter(|&s| STRATEGIES[kind(s)].0 == "tpfl")
        .collect();
    let caught = tpfl
        .iter()
        .filter(|&&seed| {
            let ran = simulate_clients(seed, true, false).expect("the seed runs");
            ran.crashes.clients > 0 && !violations(seed, &ran).is_empty()
        })
        .count();
    eprintln!(
        "without checkpoints: {caught} of {} TPFL seeds caught",
        tpfl.len()
    );
    assert!(
        caught > 0,
        "no schedule noticed clients that forget their checkpoint"
    );
}

/// One seed, one schedule: the same seed twice takes the same steps, crashes and restarts to
/// the same end, and tells the clients the same.
#[test]
fn a_seed_replays_its_schedule() {
    for seed in [7, 8, 9, 10, 11] {
        let a = simulate_watched(seed, true).expect("the seed runs");
        let b = simulate_watched(seed, true).expect("the seed runs again");
        assert_eq!((a.steps, a.crashes), (b.steps, b.crashes), "seed {seed}");
        assert_eq!(a.oracle.starts, b.oracle.starts, "seed {seed}");
        assert_eq!(a.oracle.acked(), b.oracle.acked(), "seed {seed}");
        assert_eq!(a.oracle.outcome, b.oracle.outcome, "seed {seed}");
    }
}
