//! What `flint replay --record` leaves in its run (`replays/<settings>.json`): the replayed
//! setting's accuracy and bytes per client, so that `flint grid` draws it beside the runs it
//! trained (a one-shot run's every server rule from one training).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use flint_common::ClientId;
use flint_common::Round;
use flint_common::config::Experiment;
use flint_common::strategy::Downloads;
use flint_common::wire::ledger::Flow;
use flint_common::wire::proto::Payload;
use flint_server::results::RoundResult;
use prost::Message;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replayed {
    /// The settings changed, as `--set` gave them.
    pub settings: Vec<(String, String)>,
    pub round: Round,
    /// The download on the shared test set, where the strategy has one.
    pub global: Option<f64>,
    /// The clients' mean on their own test rows, where they measured the download.
    pub mean: Option<f64>,
    /// Per client: the upload as a client would send it under the settings, and the download.
    pub up: Bytes,
    pub down: Bytes,
}

/// Mean bytes per client at the ledger's payload and message levels (every message of the
/// round, as the run counted them). Up: the run's own figure less what the kept uploads carry
/// beyond what a client would send under the settings, exact. Down: the replayed download's
/// encoding with the run's gRPC framing; the round's other downward messages are not seen by a
/// replay (14 bytes a client on the one-shot runs: 176,778 replayed against 176,792 run).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Bytes {
    pub payload: u64,
    pub message: u64,
}

impl Replayed {
    /// The settings as `k=v, k=v`, or "as run" when none changed.
    pub fn label(&self) -> String {
        self.joined(|(k, v)| format!("{k}={v}"))
    }

    /// The settings' values alone (`regmean`): a figure's short name for the replay.
    pub fn values(&self) -> String {
        self.joined(|(_, v)| v.clone())
    }

    fn joined(&self, each: impl Fn(&(String, String)) -> String) -> String {
        match self.settings.is_empty() {
            true => "as run".to_string(),
            false => self
                .settings
                .iter()
                .map(each)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    pub fn path(&self, run_dir: &Path) -> PathBuf {
        let slug: String = self
            .label()
            .chars()
            .map(
                |c| match c.is_ascii_alphanumeric() || matches!(c, '.' | '=' | '-' | '_') {
                    true => c,
                    false => '_',
                },
            )
            .collect();
        let name = format!("round-{}-{slug}.json", self.round);
        run_dir.join("replays").join(name)
    }

    pub fn write(&self, run_dir: &Path) -> anyhow::Result<PathBuf> {
        let path = self.path(run_dir);
        std::fs::create_dir_all(run_dir.join("replays"))?;
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Every record in the run, in file-name order; a file that is not one is refused.
    pub fn read_all(run_dir: &Path) -> anyhow::Result<Vec<Replayed>> {
        let dir = run_dir.join("replays");
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        paths.retain(|p| p.extension().is_some_and(|x| x == "json"));
        paths.sort();
        paths
            .iter()
            .map(|p| {
                let text =
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
                serde_json::from_slice(&text)
                    .with_context(|| format!("{} is not a replay record", p.display()))
            })
            .collect()
    }
}

/// The uploads as a client would send them under `e`'s settings, and the replayed downloads,
/// beside the run's own figures in `ran` ([`Bytes`]).
pub fn bytes(
    e: &Experiment,
    ran: &RoundResult,
    kept: &BTreeMap<ClientId, Payload>,
    downloads: &Downloads,
) -> (Bytes, Bytes) {
    let params = e.strategy.params();
    let unsent: Vec<u64> = kept
        .values()
        .map(|p| {
            p.encoded_len()
                .saturating_sub(params.upload_as_sent(p).encoded_len()) as u64
        })
        .collect();
    let received: Vec<u64> = kept
        .keys()
        .filter_map(|&id| downloads.for_client(id))
        .map(|p| p.encoded_len() as u64)
        .collect();
    let ran_mean =
        |level: fn(&Flow) -> u64| mean(&ran.bytes.values().map(level).collect::<Vec<_>>());
    let less = mean(&unsent);
    let up = Bytes {
        payload: ran_mean(|f| f.up.payload).saturating_sub(less),
        message: ran_mean(|f| f.up.message).saturating_sub(less),
    };
    let framing = ran_mean(|f| f.down.message).saturating_sub(ran_mean(|f| f.down.payload));
    let down = Bytes {
        payload: mean(&received),
        message: mean(&received) + framing,
    };
    (up, down)
}

fn mean(values: &[u64]) -> u64 {
    match values.len() {
        0 => 0,
        n => values.iter().sum::<u64>() / n as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_read_back_from_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let r = Replayed {
            settings: vec![("oneshot.rule".into(), "regmean".into())],
            round: 1,
            global: Some(0.8373),
            mean: None,
            up: Bytes {
                payload: 351_664,
                message: 351_684,
            },
            down: Bytes {
                payload: 176_760,
                message: 176_780,
            },
        };
        let path = r.write(dir.path()).unwrap();
        assert!(path.ends_with("replays/round-1-oneshot.rule=regmean.json"));
        assert_eq!(r.label(), "oneshot.rule=regmean");
        assert_eq!(r.values(), "regmean");
        assert_eq!(Replayed::read_all(dir.path()).unwrap(), vec![r]);
        std::fs::write(dir.path().join("replays/x.json"), "{}").unwrap();
        let err = Replayed::read_all(dir.path()).unwrap_err();
        assert!(
            format!("{err:#}").contains("not a replay record"),
            "{err:#}"
        );
    }
}
