//! The server's write-ahead journal (DESIGN.md §Rounds: a restarted server resumes where it
//! stopped). Every accepted change of the run's state is appended as one record before the call
//! that made it is answered; a restarted server replays the records through the same state
//! machine ([`crate::rounds::Rounds`]) and so reaches the same state, the same aggregates
//! included, since aggregation is a pure function of the strategy's state and the updates.
//!
//! Only what time or arrival order decided is recorded beside the calls themselves: a round
//! closed by its timeout ([`Event::Close`]) and the moment an aggregation was installed
//! ([`Event::Installed`]), since joins and reports may arrive while a round aggregates.
//!
//! File format (`<state dir>/journal`): records of `[u32 length][u32 CRC-32][protobuf Record]`
//! (little-endian), the first a [`Start`]. A record cut short by a crash, or damaged, ends the
//! journal: it is cut off at the last whole record, and its call was never answered.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
use flint_common::wire::proto::{DataSummary, EvalReport, Payload};

/// Raised whenever the record format changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;
/// No record is larger (an update is bounded far below by the server's own limits).
const MAX_RECORD: usize = 1 << 30;
const FILE_NAME: &str = "journal";

#[derive(Clone, PartialEq, prost::Message)]
pub struct Start {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(string, tag = "2")]
    pub run_id: String,
    /// The experiment's fingerprint: a journal resumes only the experiment it was written by.
    #[prost(string, tag = "3")]
    pub fingerprint: String,
    /// When the run started (Unix milliseconds), so wall time spans restarts.
    #[prost(uint64, tag = "4")]
    pub started_unix_ms: u64,
}

/// A client slot bound to a token (its SHA-256), at Join or Claim.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bind {
    #[prost(uint32, tag = "1")]
    pub client_id: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub token_hash: Vec<u8>,
    #[prost(string, tag = "3")]
    pub host: String,
    #[prost(string, optional, tag = "4")]
    pub certificate: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Join {
    #[prost(uint32, tag = "1")]
    pub client_id: u32,
    #[prost(message, optional, tag = "2")]
    pub summary: Option<DataSummary>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Update {
    #[prost(uint32, tag = "1")]
    pub client_id: u32,
    #[prost(uint32, tag = "2")]
    pub round: u32,
    #[prost(message, optional, tag = "3")]
    pub payload: Option<Payload>,
}

/// A round number: closed by its timeout (`Close`), or its aggregation installed (`Installed`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RoundMark {
    #[prost(uint32, tag = "1")]
    pub round: u32,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Event {
    #[prost(message, tag = "1")]
    Start(Start),
    #[prost(message, tag = "2")]
    Bind(Bind),
    #[prost(message, tag = "3")]
    Join(Join),
    #[prost(message, tag = "4")]
    Update(Update),
    #[prost(message, tag = "5")]
    Close(RoundMark),
    #[prost(message, tag = "6")]
    Installed(RoundMark),
    /// An evaluation report as the client sent it (its `run_id` left empty).
    #[prost(message, tag = "7")]
    Eval(EvalReport),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Record {
    #[prost(oneof = "Event", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub event: Option<Event>,
}

/// An open journal: appends go to the file at once (so a killed process loses nothing the
/// kernel has), [`Journal::sync`] makes them durable before a call is answered.
pub struct Journal {
    path: PathBuf,
    file: Mutex<File>,
    /// A second handle on the file, to sync without holding the append lock.
    syncer: File,
}

/// What a journal found on disk holds.
pub struct Found {
    pub journal: Journal,
    pub start: Start,
    pub events: Vec<Event>,
    /// Bytes of a last record cut short (and cut off).
    pub torn_bytes: u64,
}

impl Journal {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a new journal in `dir`, replacing none: the caller has checked there is none.
    pub fn create(dir: &Path, start: Start) -> anyhow::Result<Journal> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join(FILE_NAME);
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        {
            let mut f =
                File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
            f.write_all(&frame(&Event::Start(start)))?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        sync_dir(dir)?;
        Self::open_file(path)
    }

    fn open_file(path: PathBuf) -> anyhow::Result<Journal> {
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let syncer = file.try_clone()?;
        Ok(Journal {
            path,
            file: Mutex::new(file),
            syncer,
        })
    }

    /// The journal in `dir`, if there is one, with its records; a torn tail is cut off.
    pub fn open(dir: &Path) -> anyhow::Result<Option<Found>> {
        let path = dir.join(FILE_NAME);
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => f
                .read_to_end(&mut bytes)
                .with_context(|| format!("cannot read {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let (events, good) = parse(&bytes);
        let Some(Event::Start(start)) = events.first().cloned() else {
            bail!(
                "{} does not start with a run record: not a journal of this server; move it away to start a new run",
                path.display()
            );
        };
        if start.version != FORMAT_VERSION {
            bail!(
                "{} is journal format {}, this server writes {FORMAT_VERSION}: finish the run with the server that began it, or move the state directory away",
                path.display(),
                start.version
            );
        }
        let torn_bytes = (bytes.len() - good) as u64;
        if torn_bytes > 0 {
            let f = OpenOptions::new().write(true).open(&path)?;
            f.set_len(good as u64)?;
            f.sync_all()?;
        }
        Ok(Some(Found {
            journal: Self::open_file(path)?,
            start,
            events: events.into_iter().skip(1).collect(),
            torn_bytes,
        }))
    }

    /// Appends one record (not yet durable: see [`sync`](Self::sync)).
    pub fn append(&self, event: Event) -> std::io::Result<()> {
        let bytes = frame(&event);
        self.file.lock().expect("journal lock").write_all(&bytes)
    }

    /// Makes every record appended so far durable (blocking: call it off the async threads).
    pub fn sync(&self) -> std::io::Result<()> {
        self.syncer.sync_data()
    }

    /// The run is over: its journal goes, so the same command starts a new run.
    pub fn remove(&self) -> std::io::Result<()> {
        std::fs::remove_file(&self.path)
    }
}

fn frame(event: &Event) -> Vec<u8> {
    use prost::Message;
    let body = Record {
        event: Some(event.clone()),
    }
    .encode_to_vec();
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The whole records of `bytes`, and how many bytes they span.
fn parse(bytes: &[u8]) -> (Vec<Event>, usize) {
    use prost::Message;
    let mut events = Vec::new();
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len > MAX_RECORD {
            break;
        }
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Ok(Record { event: Some(event) }) = Record::decode(body) else {
            break;
        };
        events.push(event);
        at += 8 + len;
    }
    (events, at)
}

/// Makes a rename in `dir` durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Start {
        Start {
            version: FORMAT_VERSION,
            run_id: "r-1".into(),
            fingerprint: "f".into(),
            started_unix_ms: 5,
        }
    }

    #[test]
    fn records_come_back_in_order_and_a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(dir.path(), start()).unwrap();
        let events = vec![
            Event::Join(Join {
                client_id: 2,
                summary: Some(DataSummary {
                    train_class_counts: vec![3, 4],
                    test_samples: 1,
                    features: 6,
                    compute_ghz: 2.0,
                }),
            }),
            Event::Close(RoundMark { round: 3 }),
            Event::Installed(RoundMark { round: 3 }),
        ];
        for e in &events {
            j.append(e.clone()).unwrap();
        }
        j.sync().unwrap();
        drop(j);
        // A crash in the middle of the next record.
        let path = dir.path().join(FILE_NAME);
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&frame(&Event::Close(RoundMark { round: 4 }))[..7])
            .unwrap();
        drop(f);

        let found = Journal::open(dir.path()).unwrap().unwrap();
        assert_eq!(found.start, start());
        assert_eq!(found.events, events);
        assert_eq!(found.torn_bytes, 7);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        // Appending after the cut goes on from the last whole record.
        found
            .journal
            .append(Event::Close(RoundMark { round: 4 }))
            .unwrap();
        let again = Journal::open(dir.path()).unwrap().unwrap();
        assert_eq!(again.events.len(), 4);
        assert_eq!(again.torn_bytes, 0);
    }

    #[test]
    fn a_damaged_record_ends_the_journal_there() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(dir.path(), start()).unwrap();
        j.append(Event::Close(RoundMark { round: 1 })).unwrap();
        j.append(Event::Close(RoundMark { round: 2 })).unwrap();
        drop(j);
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let found = Journal::open(dir.path()).unwrap().unwrap();
        assert_eq!(found.events, vec![Event::Close(RoundMark { round: 1 })]);
        assert!(found.torn_bytes > 0);
    }

    #[test]
    fn no_journal_is_none_and_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Journal::open(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(FILE_NAME), b"not a journal at all").unwrap();
        let e = Journal::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("does not start with a run record"), "{e}");
    }
}
