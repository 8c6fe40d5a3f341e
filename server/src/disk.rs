//! The file operations the journal makes, behind a trait: the host's file system for a real
//! server ([`HostDisk`]), a simulated one with crashes and torn writes for the deterministic
//! simulation (`server/tests/sim`, over turmoil's file system). Only what the journal and the
//! byte ledger beside it need is here; the server's other files (results, status) are not state.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

/// A directory tree the journal lives in.
pub trait Disk: Send + Sync {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// The whole file; `NotFound` when there is none.
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>>;
    /// Creates (or truncates) `path` with `bytes` and syncs it.
    fn write_synced(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Makes a rename in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()>;
    fn remove_file(&self, path: &Path) -> std::io::Result<()>;
    /// An existing file opened to read and append, locked for this process; `Ok(None)` when
    /// another holds its lock.
    fn open_locked(&self, path: &Path) -> std::io::Result<Option<Box<dyn DiskFile>>>;
    /// A file opened to write in place, created empty if missing.
    fn open_in_place(&self, path: &Path) -> std::io::Result<Box<dyn DiskFile>>;
}

/// An open file of a [`Disk`].
pub trait DiskFile: Send + Sync {
    /// Its length in bytes.
    fn size(&self) -> std::io::Result<u64>;
    fn read_to_end(&mut self, into: &mut Vec<u8>) -> std::io::Result<usize>;
    /// Appends all of `bytes` (a file opened to append).
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    fn write_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()>;
    fn set_len(&self, len: u64) -> std::io::Result<()>;
    fn sync_data(&self) -> std::io::Result<()>;
    fn sync_all(&self) -> std::io::Result<()>;
    /// A second handle on the same open file.
    fn try_clone(&self) -> std::io::Result<Box<dyn DiskFile>>;
}

/// The host's file system.
pub struct HostDisk;

impl HostDisk {
    pub fn shared() -> Arc<dyn Disk> {
        Arc::new(HostDisk)
    }
}

impl Disk for HostDisk {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn write_synced(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = File::create(path)?;
        f.write_all(bytes)?;
        f.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }

    fn open_locked(&self, path: &Path) -> std::io::Result<Option<Box<dyn DiskFile>>> {
        let file = OpenOptions::new().read(true).append(true).open(path)?;
        Ok(file.try_lock().is_ok().then(|| Box::new(file) as _))
    }

    fn open_in_place(&self, path: &Path) -> std::io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        Ok(Box::new(file))
    }
}

impl DiskFile for File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_to_end(&mut self, into: &mut Vec<u8>) -> std::io::Result<usize> {
        Read::read_to_end(self, into)
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, offset)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&self) -> std::io::Result<()> {
        File::sync_all(self)
    }

    fn try_clone(&self) -> std::io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(File::try_clone(self)?))
    }
}
