//! The journal's disk on turmoil's simulated file system: writes stay pending until synced (or
//! until the simulation flushes them at random), a crash loses what is pending and may tear the
//! last write at a block boundary.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use flint_server::disk::{Disk, DiskFile};
use turmoil::fs::shim::std::fs as simfs;

/// One server per simulated host: the host is the lock.
pub struct SimDisk;

impl Disk for SimDisk {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        simfs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        simfs::exists(path)
    }

    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        simfs::read(path)
    }

    fn write_synced(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = simfs::File::create(path)?;
        f.write_all(bytes)?;
        f.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        simfs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        simfs::sync_dir(dir)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        simfs::remove_file(path)
    }

    fn open_locked(&self, path: &Path) -> std::io::Result<Option<Box<dyn DiskFile>>> {
        let f = simfs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)?;
        Ok(Some(Box::new(SimFile(f))))
    }

    fn open_in_place(&self, path: &Path) -> std::io::Result<Box<dyn DiskFile>> {
        let f = simfs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        Ok(Box::new(SimFile(f)))
    }
}

struct SimFile(simfs::File);

impl DiskFile for SimFile {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_to_end(&mut self, into: &mut Vec<u8>) -> std::io::Result<usize> {
        self.0.read_to_end(into)
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.write_all(bytes)
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> std::io::Result<()> {
        self.0.sync_all()
    }

    fn try_clone(&self) -> std::io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(SimFile(self.0.try_clone()?)))
    }
}
