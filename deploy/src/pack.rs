//! `flint pack` and `flint idle`: a run directory out of a container that has no shell (the flint
//! image is one binary), so no `tar` for `kubectl cp`. A pod that runs `flint idle` with the
//! results volume mounted is exec'd into with `flint pack`, which writes the tar to stdout.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

#[derive(Debug, Clone, clap::Args)]
pub struct PackArgs {
    /// The directory to pack, e.g. a run's results (`/results` in the Kubernetes manifests).
    pub dir: PathBuf,
    /// Write the tar here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Writes `args.dir` as an uncompressed tar whose entries are below the directory's own name,
/// in name order (the same tree gives the same archive), to stdout or `--out`.
pub fn pack(args: PackArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let top = top_name(dir)?;
    let files = match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let sink = FileId::of(&file);
            write_to(file, dir, &top, sink)?
        }
        None => {
            let stdout = std::io::stdout();
            if stdout.is_terminal() {
                bail!("stdout is a terminal: redirect it (flint pack DIR > run.tar) or give --out");
            }
            let sink = FileId::of(&stdout);
            write_to(stdout.lock(), dir, &top, sink)?
        }
    };
    eprintln!("packed {files} file(s) of {} as {top}/", dir.display());
    Ok(())
}

/// The name the archive's entries go below: the directory's own (`results` for `/results`).
fn top_name(dir: &Path) -> anyhow::Result<String> {
    let real =
        std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    Ok(real
        .file_name()
        .map_or_else(|| "root".to_string(), |n| n.to_string_lossy().into_owned()))
}

/// A file by its device and inode: the archive being written, which a walk of the directory it
/// is written into must pass over (else it packs itself, growing as it is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64);

impl FileId {
    /// The file behind `fd`; `None` for what has no identity worth comparing (a pipe's is
    /// never a file of the tree).
    fn of(fd: &impl AsFd) -> Option<FileId> {
        let owned = fd.as_fd().try_clone_to_owned().ok()?;
        let meta = std::fs::File::from(owned).metadata().ok()?;
        meta.is_file().then(|| FileId(meta.dev(), meta.ino()))
    }
}

fn write_to<W: Write>(
    sink: W,
    dir: &Path,
    top: &str,
    skip: Option<FileId>,
) -> anyhow::Result<usize> {
    let mut tar = tar::Builder::new(sink);
    // A link in the run directory is archived as a link, never followed out of it.
    tar.follow_symlinks(false);
    let mut files = 0;
    add_tree(&mut tar, dir, Path::new(top), skip, &mut files)?;
    let mut sink = tar.into_inner().context("cannot finish the tar")?;
    sink.flush().context("cannot write the tar")?;
    Ok(files)
}

fn add_tree<W: Write>(
    tar: &mut tar::Builder<W>,
    dir: &Path,
    name: &Path,
    skip: Option<FileId>,
    files: &mut usize,
) -> anyhow::Result<()> {
    tar.append_dir(name, dir)
        .with_context(|| format!("cannot pack {}", dir.display()))?;
    let mut entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot read {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let inner = name.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            add_tree(tar, &path, &inner, skip, files)?;
            continue;
        }
        let meta = entry.metadata()?;
        if skip == Some(FileId(meta.dev(), meta.ino())) {
            eprintln!(
                "left out {}: it is the archive being written",
                path.display()
            );
            continue;
        }
        tar.append_path_with_name(&path, &inner)
            .with_context(|| format!("cannot pack {}", path.display()))?;
        *files += 1;
    }
    Ok(())
}

/// Waits for SIGTERM or SIGINT and exits 0: the whole work of a pod that is there to be exec'd
/// into (the image has no shell, so no `sleep`).
pub fn idle() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        // Said once both are caught: a signal from here on ends this with 0.
        eprintln!("idle: waiting for SIGTERM or SIGINT");
        tokio::select! {
            _ = term.recv() => eprintln!("idle: SIGTERM, exiting"),
            _ = int.recv() => eprintln!("idle: SIGINT, exiting"),
        }
        Ok(())
    })
}
