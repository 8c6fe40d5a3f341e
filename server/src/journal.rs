//! The server's write-ahead journal (docs/PROTOCOL.md §Crash recovery: a restarted server
//! resumes where it stopped). Every accepted change of the run's state is appended as one
//! record before the call that made it is answered; a restarted server replays the records
//! through the same state machine ([`crate::rounds::Rounds`]) and so reaches the same state, the
//! same aggregates included, since aggregation is a pure function of the strategy's state and
//! the updates.
//!
//! Only what time or arrival order decided is recorded beside the calls themselves: a round
//! closed by its timeout ([`Event::Close`], also written, with the round's time, when its last
//! update closed it) and the moment an aggregation was installed ([`Event::Installed`]), since
//! joins and reports may arrive while a round aggregates.
//!
//! File format (`<state dir>/journal`): records of `[u32 length][u32 CRC-32][protobuf Record]`
//! (little-endian), the first a [`Start`]. A record cut short by a crash, or damaged, ends the
//! journal: it is cut off at the last whole record, and its call was never answered.
//!
//! Beside it, `journal.synced` holds the journal's length at its last finished sync (u64,
//! little-endian), written after the sync: every call answered so far lies within it. A journal
//! found shorter than that lost records that were answered, which no crash of this server can
//! do (a crash tears only what was never synced), so it is refused rather than resumed without
//! them. The side file is not synced itself: after a power loss it may be behind the journal,
//! never ahead, so it can only under-report.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use flint_common::wire::proto::{DataSummary, EvalReport, Payload};

use crate::disk::{Disk, DiskFile};

/// Raised whenever the record format changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;
/// No record is larger: the server takes no update beyond it (see `Shared::max_update_bytes`).
pub const MAX_RECORD: usize = 1 << 30;
const FILE_NAME: &str = "journal";
const SYNCED_NAME: &str = "journal.synced";

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
    /// Written beside a `journal.synced` from its first byte: without that file (a journal
    /// copied alone) a cut tail cannot be told from a crash's, so it is refused. False in
    /// journals older than the side file.
    #[prost(bool, tag = "5")]
    pub synced_side_file: bool,
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
    /// The hash of the enrollment secret that bound the slot, where the run asks for one.
    #[prost(bytes = "vec", tag = "5")]
    pub enrollment_hash: Vec<u8>,
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

/// A secure round's sums as its aggregation took them (`[secagg]`): for each group, the
/// survivors and their weights, and Σ weight × update. Written just before the round's
/// `Installed`, all groups in one record; a replay aggregates the round again from it, since no
/// update of it was ever held in the clear.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureSum {
    #[prost(uint32, tag = "1")]
    pub round: u32,
    /// Tags 2–4 held one group's sum before groups: still read, for a journal of then.
    #[prost(uint32, repeated, tag = "2")]
    pub clients: Vec<u32>,
    #[prost(double, repeated, tag = "3")]
    pub weights: Vec<f64>,
    #[prost(double, repeated, tag = "4")]
    pub sum: Vec<f64>,
    /// The round closed at a stage's deadline (else when every client had spoken).
    #[prost(bool, tag = "5")]
    pub timed_out: bool,
    #[prost(message, repeated, tag = "6")]
    pub groups: Vec<SecureGroupSum>,
}

/// One group's part of a [`SecureSum`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureGroupSum {
    #[prost(uint32, tag = "1")]
    pub group: u32,
    #[prost(uint32, repeated, tag = "2")]
    pub clients: Vec<u32>,
    #[prost(double, repeated, tag = "3")]
    pub weights: Vec<f64>,
    #[prost(double, repeated, tag = "4")]
    pub sum: Vec<f64>,
}

/// An update that came after its round closed without it (recorded, not taken).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Late {
    #[prost(uint32, tag = "1")]
    pub client_id: u32,
    #[prost(uint32, tag = "2")]
    pub round: u32,
}

/// A round number: closed (`Close`, by its timeout or its last update), or its aggregation
/// installed (`Installed`), with the round's timings as they were measured, so a replay reports
/// them unchanged.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RoundMark {
    #[prost(uint32, tag = "1")]
    pub round: u32,
    #[prost(double, tag = "2")]
    pub seconds: f64,
    #[prost(double, tag = "3")]
    pub aggregation_seconds: f64,
    /// A `Close` by the round's timeout (else by its last update, which the replay closes on
    /// its own; the record then only keeps the time the round was open).
    #[prost(bool, tag = "4")]
    pub timed_out: bool,
}

impl RoundMark {
    pub fn of(round: u32) -> RoundMark {
        RoundMark {
            round,
            ..Default::default()
        }
    }
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
    #[prost(message, tag = "8")]
    Late(Late),
    #[prost(message, tag = "9")]
    SecureSum(SecureSum),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Record {
    #[prost(oneof = "Event", tags = "1, 2, 3, 4, 5, 6, 7, 8, 9")]
    pub event: Option<Event>,
}

/// An open journal: appends go to the file at once (so a killed process loses nothing the
/// kernel has), [`Journal::sync`] makes them durable before a call is answered.
pub struct Journal {
    disk: Arc<dyn Disk>,
    path: PathBuf,
    file: Mutex<Box<dyn DiskFile>>,
    /// A second handle on the file, to sync without holding the append lock.
    syncer: Box<dyn DiskFile>,
    /// Records appended, and how many of them a finished sync covers.
    appended: AtomicU64,
    synced: AtomicU64,
    /// The file's length as appended so far, and where a finished sync's length is kept.
    length: AtomicU64,
    synced_length: Box<dyn DiskFile>,
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
    pub fn create(disk: Arc<dyn Disk>, dir: &Path, start: Start) -> anyhow::Result<Journal> {
        let start = Start {
            synced_side_file: true,
            ..start
        };
        disk.create_dir_all(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // A new run has answered nothing yet, whatever an earlier run's side file says; synced,
        // so that a power loss cannot bring the old length back under the new journal.
        let side = dir.join(SYNCED_NAME);
        disk.write_synced(&side, &0u64.to_le_bytes())
            .with_context(|| format!("cannot write {}", side.display()))?;
        let path = dir.join(FILE_NAME);
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        disk.write_synced(&tmp, &frame(&Event::Start(start))?)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        disk.rename(&tmp, &path)?;
        disk.sync_dir(dir)?;
        let file = Self::open_locked(&*disk, &path)?;
        Self::locked(disk, path, file)
    }

    /// The journal file, opened to read and append, and locked: one server per state
    /// directory, since a second one would interleave its records (and must not read, check
    /// or cut a file another server is appending to).
    fn open_locked(disk: &dyn Disk, path: &Path) -> anyhow::Result<Box<dyn DiskFile>> {
        let Some(file) = disk
            .open_locked(path)
            .with_context(|| format!("cannot open {}", path.display()))?
        else {
            bail!(
                "{} is in use by another server (it holds the journal's lock)",
                path.display()
            );
        };
        Ok(file)
    }

    /// A journal on a file this server has locked.
    fn locked(
        disk: Arc<dyn Disk>,
        path: PathBuf,
        file: Box<dyn DiskFile>,
    ) -> anyhow::Result<Journal> {
        let syncer = file.try_clone()?;
        let length = file.size()?;
        let side = path.with_file_name(SYNCED_NAME);
        let synced_length = disk
            .open_in_place(&side)
            .with_context(|| format!("cannot open {}", side.display()))?;
        Ok(Journal {
            disk,
            path,
            file: Mutex::new(file),
            syncer,
            appended: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            length: AtomicU64::new(length),
            synced_length,
        })
    }

    /// The journal in `dir`, if there is one, with its records; a torn tail is cut off.
    pub fn open(disk: Arc<dyn Disk>, dir: &Path) -> anyhow::Result<Option<Found>> {
        let path = dir.join(FILE_NAME);
        if !disk.exists(&path) {
            return Ok(None);
        }
        let mut file = Self::open_locked(&*disk, &path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let synced = read_synced_length(&*disk, dir)?;
        let acknowledged = synced.unwrap_or(0);
        let (events, good) = parse(&bytes, synced.unwrap_or(u64::MAX)).map_err(|why| {
            anyhow::anyhow!(
                "{} is damaged: {why}; the run cannot be resumed from it (move the state directory away to start a new run)",
                path.display()
            )
        })?;
        let Some(Event::Start(start)) = events.first().cloned() else {
            bail!(
                "{} does not start with a run record: not a journal of this server; move it away to start a new run",
                path.display()
            );
        };
        if start.synced_side_file && !disk.exists(&dir.join(SYNCED_NAME)) {
            bail!(
                "{} was written beside {SYNCED_NAME}, which is missing: without it a journal cut from outside cannot be told from a crash's torn tail. Copy the journal with its {SYNCED_NAME}, or move the state directory away to start a new run",
                path.display()
            );
        }
        if start.version != FORMAT_VERSION {
            bail!(
                "{} is journal format {}, this server writes {FORMAT_VERSION}: finish the run with the server that began it, or move the state directory away",
                path.display(),
                start.version
            );
        }
        if (good as u64) < acknowledged {
            bail!(
                "{} lost records whose calls were answered: its whole records end at byte {good}, but {acknowledged} bytes were synced before calls were answered (journal.synced). No crash of the server cuts what it synced; the file was damaged or cut from outside. The run cannot be resumed exactly: move the state directory away to start a new run",
                path.display()
            );
        }
        let torn_bytes = (bytes.len() - good) as u64;
        if torn_bytes > 0 {
            file.set_len(good as u64)?;
            file.sync_all()?;
        }
        Ok(Some(Found {
            journal: Self::locked(disk, path, file)?,
            start,
            events: events.into_iter().skip(1).collect(),
            torn_bytes,
        }))
    }

    /// Appends one record (not yet durable: see [`sync`](Self::sync)).
    pub fn append(&self, event: Event) -> std::io::Result<()> {
        self.append_framed(&frame(&event)?)
    }

    /// Appends a record framed by [`frame`] (framing a large update outside the state lock),
    /// whole or not at all: a failed write is cut off again, so no later record sits behind a
    /// torn one.
    pub fn append_framed(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = self.file.lock().expect("journal lock");
        let before = file.size()?;
        file.append(bytes).inspect_err(|_| {
            let _ = file.set_len(before);
        })?;
        self.length
            .store(before + bytes.len() as u64, Ordering::SeqCst);
        self.appended.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Records appended so far (this process).
    pub fn appended(&self) -> u64 {
        self.appended.load(Ordering::SeqCst)
    }

    /// Records known to be on disk.
    pub fn synced(&self) -> u64 {
        self.synced.load(Ordering::SeqCst)
    }

    /// Makes every record appended so far durable (blocking: call it off the async threads).
    pub fn sync(&self) -> std::io::Result<()> {
        // Counted before the sync starts: what is appended during it may not be covered. Both
        // counters move only after their record's write has finished, so the sync covers them.
        let (covered, length) = (self.appended(), self.length.load(Ordering::SeqCst));
        self.syncer.sync_data()?;
        // Before the sync is published, so before any call it covers is answered; not itself
        // synced (see the module doc).
        self.synced_length.write_at(&length.to_le_bytes(), 0)?;
        self.synced.fetch_max(covered, Ordering::SeqCst);
        Ok(())
    }

    /// The run is over: its journal goes, so the same command starts a new run.
    pub fn remove(&self) -> std::io::Result<()> {
        self.disk.remove_file(&self.path)?;
        match self
            .disk
            .remove_file(&self.path.with_file_name(SYNCED_NAME))
        {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The journal's length at its last finished sync, as `journal.synced` says (0 without it:
/// a journal written before the side file existed, or never synced).
/// `None` without the side file (a journal written before it existed): what was synced is then
/// unknown, and only a last record may be cut.
fn read_synced_length(disk: &dyn Disk, dir: &Path) -> anyhow::Result<Option<u64>> {
    let path = dir.join(SYNCED_NAME);
    match disk.read(&path) {
        // Shorter than its 8 bytes: created (by a server opening an older journal) but its
        // first length lost with a power loss: as unknown as a missing one.
        Ok(b) => Ok(b
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// One record as the file holds it; refused beyond [`MAX_RECORD`].
pub fn frame(event: &Event) -> std::io::Result<Vec<u8>> {
    use prost::Message;
    let body = Record {
        event: Some(event.clone()),
    }
    .encode_to_vec();
    if body.len() > MAX_RECORD {
        return Err(std::io::Error::other(format!(
            "a journal record of {} bytes, above the {MAX_RECORD}-byte limit",
            body.len()
        )));
    }
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The whole records of `bytes`, and how many bytes they span. A bad record (cut short, or not
/// all of it reached the disk before a power loss) that starts at or past `acknowledged`, the
/// length synced before any call was answered, ends the journal: it and whatever follows were
/// written after the last sync, and a crash may keep any part of those writes, a later one
/// whole and an earlier one torn, since unsynced writes reach the disk in any order. A bad record
/// before it, with more after it, is damage, not a crash, and is an error (its call and the
/// ones after it were answered).
fn parse(bytes: &[u8], acknowledged: u64) -> Result<(Vec<Event>, usize), String> {
    use prost::Message;
    let mut events = Vec::new();
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            // Runs past the end of the file: the record being written when the process died.
            break;
        };
        let unsynced = at as u64 >= acknowledged;
        let last = at + 8 + len == bytes.len();
        let event = match Record::decode(body) {
            Ok(Record { event: Some(e) }) if crc32fast::hash(body) == crc => e,
            _ if last || unsynced => break,
            _ => {
                return Err(format!(
                    "record {} (at byte {at}) is damaged and {} bytes follow it",
                    events.len() + 1,
                    bytes.len() - at - 8 - len
                ));
            }
        };
        events.push(event);
        at += 8 + len;
    }
    Ok((events, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::HostDisk;
    use std::fs::OpenOptions;
    use std::io::Write;

    fn start() -> Start {
        Start {
            version: FORMAT_VERSION,
            run_id: "r-1".into(),
            fingerprint: "f".into(),
            started_unix_ms: 5,
            synced_side_file: true,
        }
    }

    /// A journal copied without its side file is refused, not resumed from a tail that may
    /// have been cut (it used to resume silently).
    #[test]
    fn a_journal_without_its_side_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
        j.append(Event::Close(RoundMark::of(1))).unwrap();
        j.sync().unwrap();
        drop(j);
        std::fs::remove_file(dir.path().join(SYNCED_NAME)).unwrap();
        let e = Journal::open(HostDisk::shared(), dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("journal.synced, which is missing"), "{e}");
    }

    #[test]
    fn records_come_back_in_order_and_a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
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
            Event::Close(RoundMark::of(3)),
            Event::Installed(RoundMark::of(3)),
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
        f.write_all(&frame(&Event::Close(RoundMark::of(4))).unwrap()[..7])
            .unwrap();
        drop(f);

        let found = Journal::open(HostDisk::shared(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(found.start, start());
        assert_eq!(found.events, events);
        assert_eq!(found.torn_bytes, 7);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        // Appending after the cut goes on from the last whole record.
        found
            .journal
            .append(Event::Close(RoundMark::of(4)))
            .unwrap();
        drop(found);
        let again = Journal::open(HostDisk::shared(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(again.events.len(), 4);
        assert_eq!(again.torn_bytes, 0);
    }

    /// A last record cut short after it was synced (so its call was answered) is
    /// lost data, not a crash's torn tail: refused, and said so; one appended after the last
    /// sync is still cut off as before.
    #[test]
    fn a_synced_record_cut_short_is_refused_an_unsynced_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
        j.append(Event::Close(RoundMark::of(1))).unwrap();
        j.sync().unwrap();
        let path = dir.path().join(FILE_NAME);
        let synced = std::fs::metadata(&path).unwrap().len();
        j.append(Event::Close(RoundMark::of(2))).unwrap();
        drop(j);
        // Not synced: the crash's torn tail.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(synced + 5).unwrap();
        drop(f);
        let found = Journal::open(HostDisk::shared(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(found.events, vec![Event::Close(RoundMark::of(1))]);
        assert_eq!(found.torn_bytes, 5);
        drop(found);
        // Synced, then cut from outside: refused, naming what was lost.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(synced - 3).unwrap();
        drop(f);
        let err = Journal::open(HostDisk::shared(), dir.path())
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("lost records whose calls were answered")
                && err.contains(&format!("but {synced} bytes were synced")),
            "{err}"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            synced - 3,
            "left as found"
        );
    }

    #[test]
    fn a_bad_last_record_is_cut_off_but_damage_before_the_end_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let journal = |synced: bool| {
            let j = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
            j.append(Event::Close(RoundMark::of(1))).unwrap();
            j.append(Event::Close(RoundMark::of(2))).unwrap();
            if synced {
                j.sync().unwrap();
            }
            drop(j);
            std::fs::read(dir.path().join(FILE_NAME)).unwrap()
        };
        let path = dir.path().join(FILE_NAME);
        // The last record's body damaged (not all of it reached the disk): cut off.
        let mut bytes = journal(false);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let found = Journal::open(HostDisk::shared(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(found.events, vec![Event::Close(RoundMark::of(1))]);
        assert!(found.torn_bytes > 0);
        drop(found);
        // The first record after the start damaged, synced, with an answered one after it:
        // refused.
        let mut bytes = journal(true);
        let second = bytes.len() - 2 * (8 + 2 + 2);
        bytes[second + 9] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let e = Journal::open(HostDisk::shared(), dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is damaged: record 2"), "{e}");
    }

    /// Found by the simulation (docs/PROTOCOL.md §Simulation): writes after the last sync reach
    /// the disk in any order, so a crash may keep a later record whole and an earlier one torn.
    /// Neither was answered: the journal ends at the torn one, as it does at a torn last record.
    #[test]
    fn records_after_the_last_sync_end_at_the_first_torn_one() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
        j.append(Event::Close(RoundMark::of(1))).unwrap();
        j.sync().unwrap();
        j.append(Event::Close(RoundMark::of(2))).unwrap();
        j.append(Event::Close(RoundMark::of(3))).unwrap();
        drop(j);
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len() as u64;
        // Record 2's body reached the disk only in part; record 3 whole.
        let second = bytes.len() - 2 * (8 + 2 + 2);
        bytes[second + 9] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let found = Journal::open(HostDisk::shared(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(found.events, vec![Event::Close(RoundMark::of(1))]);
        assert_eq!(found.torn_bytes, 2 * (8 + 2 + 2));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            whole - found.torn_bytes
        );
    }

    #[test]
    fn one_server_per_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
        let e = Journal::open(HostDisk::shared(), dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("in use by another server"), "{e}");
    }

    /// Without a side file, or with one whose length never reached the disk, what was synced
    /// is unknown: only a last record may be cut, and damage with records after it is refused.
    #[test]
    fn without_a_synced_length_only_the_last_record_may_be_cut() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::create(HostDisk::shared(), dir.path(), start()).unwrap();
        for r in 1..=3 {
            j.append(Event::Close(RoundMark::of(r))).unwrap();
        }
        drop(j);
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let second = bytes.len() - 2 * (8 + 2 + 2);
        bytes[second + 9] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let side = dir.path().join(SYNCED_NAME);
        for side_file in [None, Some(&b""[..])] {
            match side_file {
                None => std::fs::remove_file(&side).unwrap(),
                Some(b) => std::fs::write(&side, b).unwrap(),
            }
            let e = Journal::open(HostDisk::shared(), dir.path())
                .err()
                .expect("refused")
                .to_string();
            assert!(e.contains("is damaged: record 3"), "{e}");
        }
    }

    #[test]
    fn no_journal_is_none_and_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            Journal::open(HostDisk::shared(), dir.path())
                .unwrap()
                .is_none()
        );
        std::fs::write(dir.path().join(FILE_NAME), b"not a journal at all").unwrap();
        let e = Journal::open(HostDisk::shared(), dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("does not start with a run record"), "{e}");
    }
}
