//! The bytes this process's clients have counted so far, for `flint run`'s live line: one file
//! per process (`<out>/process-<first id>.progress`), written by a task of its own.
//!
//! A file per client, written on the client's way from its report to its training, cost a
//! federation of thousands of clients more than the rounds themselves: at 2,500 clients each
//! replacing its file made a rename take about a second by round 4 (measured with strace), and
//! every round waited for the slowest. The clients now only book their figures here; the
//! writer gathers what changed into one file at most every [`WRITE_GAP`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flint_common::wire::ledger::Flow;
use flint_common::{ClientId, Round};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// What a process's progress file holds: each of its clients' socket bytes (up, down) of every
/// round so far, the level only a client counts exactly. A round's are complete once the client
/// has reported on it (its download and its report are booked under it), so `flint run` prints
/// them live, exact.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Progress {
    pub clients: BTreeMap<ClientId, BTreeMap<Round, SocketBytes>>,
}

/// A round's socket bytes, up and down.
pub type SocketBytes = (u64, u64);

/// The extension of progress files.
pub const EXTENSION: &str = "progress";

/// The least time between two writes of the file: figures booked meanwhile go together.
pub const WRITE_GAP: Duration = Duration::from_millis(250);

/// The process's figures and whether the file is behind them.
pub struct ProgressBook {
    path: PathBuf,
    state: Mutex<(Progress, bool)>,
    changed: Notify,
    /// One write at a time: the last one, at the process's end, may meet the writer task's.
    writing: Mutex<()>,
}

impl ProgressBook {
    /// The book of the process whose first client is `first`, written into `out`.
    pub fn new(out: &Path, first: ClientId) -> Arc<Self> {
        Arc::new(Self {
            path: out.join(format!("process-{first}.{EXTENSION}")),
            state: Mutex::default(),
            changed: Notify::new(),
            writing: Mutex::default(),
        })
    }

    /// A client's bytes of every round so far; the file follows within [`WRITE_GAP`].
    pub fn book(&self, client: ClientId, rounds: &BTreeMap<Round, Flow>) {
        let socket = rounds
            .iter()
            .map(|(r, f)| (*r, (f.up.socket, f.down.socket)))
            .collect();
        let mut state = self.state.lock().expect("progress lock");
        state.0.clients.insert(client, socket);
        state.1 = true;
        self.changed.notify_one();
    }

    /// Writes the file whenever figures change, at most every [`WRITE_GAP`]; runs until
    /// dropped (abort its task, then [`write`](Self::write) once more).
    pub async fn keep_written(self: Arc<Self>) {
        loop {
            self.changed.notified().await;
            self.write().await;
            tokio::time::sleep(WRITE_GAP).await;
        }
    }

    /// The book of the process whose first client is `first`, with its writer task, where the
    /// process has an `out` directory and clients.
    pub fn start(
        out: Option<&Path>,
        first: Option<ClientId>,
    ) -> Option<(Arc<Self>, tokio::task::JoinHandle<()>)> {
        let book = Self::new(out?, first?);
        let writer = tokio::spawn(book.clone().keep_written());
        Some((book, writer))
    }

    /// Stops the writer task and writes what it had not.
    pub async fn finish(self: &Arc<Self>, writer: tokio::task::JoinHandle<()>) {
        writer.abort();
        self.write().await;
    }

    /// Writes the file now if figures changed since the last write (whole, then renamed, off
    /// the async threads). Progress is a convenience: a failed write is logged, not fatal.
    pub async fn write(self: &Arc<Self>) {
        let book = self.clone();
        let written = tokio::task::spawn_blocking(move || book.write_blocking()).await;
        if let Ok(Err(e)) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write progress");
        }
    }

    fn write_blocking(&self) -> anyhow::Result<()> {
        let _one_at_a_time = self.writing.lock().expect("progress writing lock");
        let bytes = {
            let mut state = self.state.lock().expect("progress lock");
            if !state.1 {
                return Ok(());
            }
            state.1 = false;
            serde_json::to_vec(&state.0)?
        };
        let tmp = self.path.with_extension("tmp");
        let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &self.path));
        if written.is_err() {
            // Not on disk: the next write tries again.
            self.state.lock().expect("progress lock").1 = true;
        }
        Ok(written?)
    }
}

/// Every progress file in `dir`, read whole (a file being replaced is read as it was or as it
/// is; one that cannot be read or parsed is skipped).
pub fn read_all(dir: &Path) -> Vec<Progress> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == EXTENSION))
        .filter_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_writes_its_clients_figures_into_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let book = ProgressBook::new(dir.path(), 3);
        let writer = tokio::spawn(book.clone().keep_written());
        let mut flow = Flow::default();
        flow.up.socket = 10;
        book.book(3, &BTreeMap::from([(1, flow)]));
        book.book(4, &BTreeMap::from([(0, flow), (1, flow)]));
        tokio::time::sleep(WRITE_GAP * 2).await;
        writer.abort();
        book.book(3, &BTreeMap::from([(1, flow), (2, flow)]));
        book.write().await;
        let files = read_all(dir.path());
        assert_eq!(files.len(), 1);
        let rounds = |id| files[0].clients[&id].keys().copied().collect::<Vec<_>>();
        assert_eq!(rounds(3), [1, 2]);
        assert_eq!(rounds(4), [0, 1]);
        assert_eq!(files[0].clients[&4][&1], (10, 0));
        assert!(dir.path().join("process-3.progress").is_file());
    }
}
