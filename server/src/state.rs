//! The run's state as the server opens it: a new run in its state directory, or the one its
//! journal holds, replayed into fresh [`Rounds`] and [`Identities`] (docs/PROTOCOL.md §Crash
//! recovery). The real server and the deterministic simulation (`server/tests/sim`) open it
//! alike; they differ in the [`Disk`] and where blocking work runs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use flint_common::Round;
use flint_common::config::Experiment;
use flint_common::strategy::ServerStrategy;
use flint_common::wire::ledger::{KeptLedger, Ledger};
use flint_shell::meter::SharedLedger;
use tokio::sync::Semaphore;

use crate::disk::Disk;
use crate::identity::{self, Identities};
use crate::journal::{self, Journal};
use crate::rounds::{Rounds, SecureSettings};
use crate::shared::{self, Blocking, Shared, now};
use crate::{ServeOptions, recovery};

/// Where a run's state lives and how its blocking work runs.
pub struct StateDir {
    pub disk: Arc<dyn Disk>,
    pub dir: PathBuf,
    pub blocking: Blocking,
    /// What tells a new run's id from another's: random for a real server, the seed's in the
    /// simulation (which must tell its clients the same on every replay).
    pub run_nonce: u64,
}

/// The most values a masked input may hold: one message within tonic's 4 MiB default, with room
/// for its framing (chunking a larger one is not built).
const MAX_MASKED_VALUES: usize = (4 << 20) / 4 - 4096;

/// A secure run's masked input must fit one `SecAgg` message: refused at start, not as a
/// stream of retried calls later.
fn check_masked_size(len: Option<usize>) -> anyhow::Result<()> {
    match len {
        Some(len) if len <= MAX_MASKED_VALUES => Ok(()),
        Some(len) => anyhow::bail!(
            "[secagg]: this run's update has {len} values; a masked input holds at most {MAX_MASKED_VALUES} (one 4 MiB message)"
        ),
        None => anyhow::bail!("[secagg]: this strategy does not aggregate securely"),
    }
}

/// The run's shared state: a new run in the state directory, or the one its journal holds,
/// replayed. Nothing beside the state directory is written (`serve` writes the rest).
pub fn open(
    experiment: Experiment,
    strategy: Box<dyn ServerStrategy>,
    state: &StateDir,
    options: &ServeOptions,
) -> anyhow::Result<Shared> {
    let Some(features) = experiment.data.features() else {
        anyhow::bail!(
            "the experiment does not say data.features: the server sizes the model by the experiment, never by the first client to join; add data.features = N (the CSV's feature columns), or start the run with `flint run`, which writes it into its resolved file"
        );
    };
    let classes = experiment.data.classes().len();
    if experiment.secagg.is_some() {
        check_masked_size(strategy.secure_len(features))?;
    }
    let holder = experiment.global_test_holder();
    let mut rounds = Rounds::new(experiment.policy.clone(), strategy, classes)
        .with_global_test_holder(holder)
        .with_features(Some(features))
        .with_secagg(experiment.secagg.map(|c| SecureSettings {
            bound: c.bound(),
            stage_timeout: c.stage_timeout(),
            // Each start its own: a round's attempt from before a restart is told to start
            // again, never mixed with this one's.
            nonce: rand::random(),
            degree: c.degree(),
        }));
    let names = experiment.clients.iter().map(|c| c.name.clone()).collect();
    let lease = match options.claim_lease_secs {
        None => identity::CLAIM_LEASE,
        Some(secs) if secs.is_finite() && secs > 0.0 => Duration::from_secs_f64(secs),
        Some(secs) => {
            anyhow::bail!("--claim-lease-secs must be a positive number of seconds, got {secs}")
        }
    };
    let mut identities = Identities::new(names)
        .with_lease(lease)
        .with_admission(options.admission()?);
    let (journal, start, kept_ledger) = resume(&experiment, state, &mut rounds, &mut identities)?;
    let upload_budget_kib = upload_budget_kib(&experiment, &rounds, options)?;
    let ledger = Arc::new(SharedLedger::default());
    ledger.with(|l| *l = kept_ledger);
    let since_start = unix_ms().saturating_sub(start.started_unix_ms);
    Ok(Shared {
        identities: Mutex::new(identities),
        mutual_tls: options.tls.tls_client_ca.is_some(),
        updates_dir: None,
        experiment,
        run_id: start.run_id,
        rounds: Mutex::new(rounds),
        ledger,
        version: tokio::sync::watch::channel(0).0,
        phase: tokio::sync::watch::channel(0).0,
        started: now()
            .checked_sub(Duration::from_millis(since_start))
            .unwrap_or_else(now),
        journal,
        journal_failed: Mutex::new(None),
        sync_turn: tokio::sync::Mutex::new(()),
        hold_aggregation: Duration::from_millis(options.hold_aggregation_ms.unwrap_or(0)),
        upload_budget: Arc::new(Semaphore::new(upload_budget_kib as usize)),
        upload_budget_kib,
        refused: Mutex::default(),
        long_polls: Mutex::default(),
        repeated_reports: Mutex::default(),
        telemetry: Default::default(),
        blocking: state.blocking,
    })
}

/// KiB of uploads buffered at once: `--upload-budget-kib`, refused if it cannot hold one of the
/// run's largest updates; else room for two of them, at least 256 MiB. Where the experiment
/// does not fix the feature count (a CSV without data.features), the largest update is not
/// known before the first Join: the default budget then stands.
fn upload_budget_kib(
    experiment: &Experiment,
    rounds: &Rounds,
    options: &ServeOptions,
) -> anyhow::Result<u32> {
    let classes = experiment.data.classes().len();
    let largest_kib = rounds.features().map(|f| {
        experiment
            .strategy
            .max_update_bytes(f, classes)
            .min(journal::MAX_RECORD as u64)
            .div_ceil(1024)
    });
    let kib = match (options.upload_budget_kib, largest_kib) {
        (Some(kib), Some(largest)) if u64::from(kib) < largest => anyhow::bail!(
            "--upload-budget-kib {kib} cannot hold one of this run's largest updates ({largest} KiB)"
        ),
        (Some(0), None) => anyhow::bail!("--upload-budget-kib must be at least 1"),
        (Some(kib), _) => kib,
        (None, largest) => {
            u32::try_from((2 * largest.unwrap_or(0)).max(256 * 1024)).unwrap_or(u32::MAX)
        }
    };
    Ok(kib.min(Semaphore::MAX_PERMITS as u32))
}

/// The hashes of an enrollment file: one sha256 in hex per line.
pub(crate) fn enrollment_hashes(
    path: &Path,
) -> anyhow::Result<std::collections::BTreeSet<[u8; 32]>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the enrollment file {}", path.display()))?;
    let mut hashes = std::collections::BTreeSet::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line = line.trim();
        let bytes: Option<Vec<u8>> = (line.len() == 64 && line.is_ascii())
            .then(|| {
                (0..32)
                    .map(|i| u8::from_str_radix(&line[2 * i..2 * i + 2], 16).ok())
                    .collect()
            })
            .flatten();
        let Some(hash) = bytes.and_then(|b| <[u8; 32]>::try_from(b).ok()) else {
            anyhow::bail!(
                "{} line {}: not a sha256 in hex (flint certs --enroll writes this file)",
                path.display(),
                n + 1
            );
        };
        hashes.insert(hash);
    }
    if hashes.is_empty() {
        anyhow::bail!("the enrollment file {} lists no secret", path.display());
    }
    Ok(hashes)
}

/// The server's byte ledger as of the last closed round, beside the journal (the journal holds
/// the state; bytes are only counted): a [`KeptLedger`].
pub const LEDGER_FILE: &str = "ledger.json";

/// The ledger kept beside the journal, if any (a file of an earlier version, a bare ledger,
/// counts as kept before any round closed).
fn kept_ledger(state: &StateDir) -> anyhow::Result<Option<KeptLedger>> {
    let path = state.dir.join(LEDGER_FILE);
    let Ok(bytes) = state.disk.read(&path) else {
        return Ok(None);
    };
    let kept = serde_json::from_slice::<KeptLedger>(&bytes).or_else(|_| {
        serde_json::from_slice::<Ledger>(&bytes).map(|ledger| KeptLedger {
            closed_rounds: 0,
            ledger,
        })
    });
    kept.map(Some)
        .with_context(|| format!("cannot read {}", path.display()))
}

/// The round a resumed server goes on in: the one open, else the next (the last, if every
/// round has closed and the final reports are still coming).
fn restarted_in(experiment: &Experiment, rounds: &Rounds) -> Round {
    if let Some((open, _, _)) = rounds.open_round() {
        return open;
    }
    (rounds.history().len() as Round + 1).min(experiment.policy.rounds)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Opens the run's journal in `state_dir`, replaying it into `rounds` and `identities` if the
/// run was under way, or starts a new run there.
fn resume(
    experiment: &Experiment,
    state: &StateDir,
    rounds: &mut Rounds,
    identities: &mut Identities,
) -> anyhow::Result<(Journal, journal::Start, Ledger)> {
    let state_dir = &state.dir;
    let Some(found) = Journal::open(state.disk.clone(), state_dir)? else {
        let start = journal::Start {
            version: journal::FORMAT_VERSION,
            run_id: format!("{}-{:016x}", experiment.name, state.run_nonce),
            fingerprint: experiment.fingerprint.clone(),
            started_unix_ms: unix_ms(),
            synced_side_file: true,
        };
        let journal = Journal::create(state.disk.clone(), state_dir, start.clone())?;
        return Ok((journal, start, Default::default()));
    };
    let path = found.journal.path().display().to_string();
    if found.start.fingerprint != experiment.fingerprint {
        anyhow::bail!(
            "{path} holds run {} of another experiment (fingerprint {}, this one is {}): resume it with its own experiment file, or move {} away to start a new run",
            found.start.run_id,
            found.start.fingerprint,
            experiment.fingerprint,
            state_dir.display()
        );
    }
    if found.torn_bytes > 0 {
        tracing::warn!(
            path,
            bytes = found.torn_bytes,
            "the journal's records written after its last recorded sync were torn by the crash; dropped from the first torn one on (their calls were not answered)"
        );
    }
    let replayed = recovery::replay(found.events, rounds, identities, now())
        .with_context(|| format!("cannot resume run {} from {path}", found.start.run_id))?;
    if let Some(round) = replayed.installed_at_end {
        found.journal.append(shared::installed(rounds, round))?;
    }
    found.journal.sync()?;
    let mut ledger = KeptLedger::resume(kept_ledger(state)?, restarted_in(experiment, rounds));
    // The clients' reported link counts are in the journal: the whole of them, whatever the
    // kept ledger's age (a count only grows, so taking the larger is idempotent).
    for (client, counts) in &replayed.link {
        ledger.reported_link(*client, counts);
    }
    tracing::info!(
        run = %found.start.run_id,
        records = replayed.records,
        closed_rounds = rounds.history().len(),
        open_round = ?rounds.open_round().map(|(r, _, _)| r),
        joined = rounds.joined().len(),
        "resumed the run from its journal"
    );
    Ok((found.journal, found.start, ledger))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masked_input_beyond_one_message_is_refused_at_start() {
        // FLIS's LeNet, the largest network the runs have, fits.
        assert!(check_masked_size(Some(431_080)).is_ok());
        assert!(check_masked_size(Some(MAX_MASKED_VALUES)).is_ok());
        let e = check_masked_size(Some(MAX_MASKED_VALUES + 1)).unwrap_err();
        assert!(e.to_string().contains("one 4 MiB message"), "{e}");
        assert!(check_masked_size(None).is_err());
    }
}
