//! A client's checkpoint: after it trains a round and before it pushes the update,
//! `<out>/<name>.resume` holds the update, the random stream and whatever its strategy carries
//! to the next round (its own model, delta bases, feedback masks). A client killed and started
//! again with the same `--out` reads it back and goes on exactly: it pushes that update again
//! if the server still waits for it, else applies the next download to the state it had.
//!
//! The file: one line of JSON (the run, the round, the stream), then the strategy's bytes; it
//! is written whole, synced, then renamed over the last one, so a crash leaves the old or the
//! new one, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use flint_common::Round;
use flint_common::rng::FlintRng;
use flint_common::wire::proto::{EvalReport, Payload};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::machine::{Saved, Trained};

/// What a checkpoint says beside the strategy's bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub fingerprint: String,
    pub run_id: String,
    /// The round trained; its update follows.
    pub round: Round,
    /// The rounds trained before it.
    pub trained: Vec<Round>,
    /// The last round whose aggregate was evaluated and reported.
    pub reported: Round,
    /// The random stream after training `round`.
    pub rng: FlintRng,
    /// The update of `round`, protobuf.
    pub update: Vec<u8>,
    /// The evaluation reports that go up with it, protobuf each.
    #[serde(default)]
    pub reports: Vec<Vec<u8>>,
    /// The update as the weights themselves where it is a delta (sent if the server no longer
    /// holds its base), protobuf; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub whole: Vec<u8>,
}

/// A checkpoint read back.
pub struct Checkpoint {
    pub header: Header,
    pub update: Payload,
    pub reports: Vec<EvalReport>,
    pub whole: Option<Payload>,
    pub state: Vec<u8>,
}

pub fn path(out: &Path, name: &str) -> PathBuf {
    out.join(format!("{name}.resume"))
}

/// Writes `header` and `state` to `path` atomically (a temporary file synced, then renamed).
pub fn write(path: &Path, header: &Header, state: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("resume.tmp");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    serde_json::to_writer(&mut f, header)?;
    f.write_all(b"\n")?;
    f.write_all(state)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    // The rename itself synced: after a reboot the server may hold this round's update, and
    // the last round's checkpoint must not come back.
    // Some file systems refuse to sync a directory: the rename stands, said in the log.
    let synced = path
        .parent()
        .map(|dir| std::fs::File::open(dir)?.sync_all());
    if let Some(Err(e)) = synced {
        tracing::warn!(path = %path.display(), error = %e, "cannot sync the checkpoint's directory");
    }
    Ok(())
}

/// The checkpoint at `path`, if there is one of this run; one of another run or experiment is
/// left alone (`None`), a damaged one refused.
pub fn read(path: &Path, fingerprint: &str, run_id: &str) -> anyhow::Result<Option<Checkpoint>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let damaged = |why: &str| anyhow::anyhow!("checkpoint {} is damaged: {why}", path.display());
    let Some(at) = bytes.iter().position(|&b| b == b'\n') else {
        return Err(damaged("no header line"));
    };
    let header: Header =
        serde_json::from_slice(&bytes[..at]).map_err(|e| damaged(&e.to_string()))?;
    if header.fingerprint != fingerprint || header.run_id != run_id {
        return Ok(None);
    }
    let update = Payload::decode(&header.update[..]).map_err(|e| damaged(&e.to_string()))?;
    let reports = header
        .reports
        .iter()
        .map(|r| EvalReport::decode(&r[..]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| damaged(&e.to_string()))?;
    let whole = match header.whole.is_empty() {
        true => None,
        false => Some(Payload::decode(&header.whole[..]).map_err(|e| damaged(&e.to_string()))?),
    };
    if header.round == 0 || header.trained.iter().any(|&r| r >= header.round) {
        bail!(damaged("its rounds are out of order"));
    }
    Ok(Some(Checkpoint {
        update,
        reports,
        whole,
        state: bytes[at + 1..].to_vec(),
        header,
    }))
}

/// Removes a checkpoint; one that cannot be removed is said in the log (a later run of
/// another id leaves it alone).
pub fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the checkpoint")
        }
    }
}

fn encode(update: &Payload) -> Vec<u8> {
    update.encode_to_vec()
}

impl Header {
    /// The header of the machine's checkpoint `saved`, for `run_id` of the experiment with
    /// `fingerprint`.
    pub fn of(fingerprint: &str, run_id: &str, saved: &Saved) -> Header {
        let t = &saved.trained;
        Header {
            fingerprint: fingerprint.to_string(),
            run_id: run_id.to_string(),
            round: t.round,
            trained: saved.before.clone(),
            reported: saved.reported,
            rng: saved.rng.clone(),
            update: encode(&t.update),
            reports: t.reports.iter().map(Message::encode_to_vec).collect(),
            whole: t.whole.as_ref().map_or_else(Vec::new, encode),
        }
    }
}

impl Checkpoint {
    /// What the machine goes on from, and the strategy's bytes.
    pub fn saved(self) -> (Saved, Vec<u8>) {
        let h = self.header;
        let saved = Saved {
            before: h.trained,
            reported: h.reported,
            rng: h.rng,
            trained: Trained {
                round: h.round,
                update: self.update,
                reports: self.reports,
                whole: self.whole,
            },
        };
        (saved, self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_common::rng::derive_rng;
    use flint_common::wire::proto::GiniIndex;
    use flint_common::wire::proto::payload::Kind;

    #[test]
    fn a_checkpoint_reads_back_only_for_its_run_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "client-1");
        let header = Header {
            fingerprint: "f".into(),
            run_id: "r".into(),
            round: 3,
            trained: vec![1, 2],
            reported: 2,
            rng: derive_rng(1, "train", 1),
            update: encode(&Payload::default()),
            reports: vec![
                EvalReport {
                    round: 2,
                    confusion: vec![3, 1, 0, 4],
                    ..Default::default()
                }
                .encode_to_vec(),
            ],
            whole: encode(&Payload {
                kind: Some(Kind::GiniIndex(GiniIndex { value: 0.5 })),
            }),
        };
        write(&p, &header, b"state\nwith a newline").unwrap();
        let back = read(&p, "f", "r").unwrap().unwrap();
        assert_eq!(back.header, header);
        assert_eq!(back.reports[0].confusion, [3, 1, 0, 4]);
        assert_eq!(back.whole.as_ref().map(encode), Some(header.whole.clone()));
        assert_eq!(back.state, b"state\nwith a newline");
        assert!(read(&p, "f", "another run").unwrap().is_none());
        assert!(read(&dir.path().join("none"), "f", "r").unwrap().is_none());
        std::fs::write(&p, b"{not json\nstate").unwrap();
        let err = read(&p, "f", "r").err().unwrap().to_string();
        assert!(err.contains("is damaged"), "{err}");
    }
}
