//! `flint data`: the known datasets below the data directory, checked (`verify`) or downloaded
//! from their public URLs (`fetch`). A download goes to `<file>.part`, resumes from where a
//! transfer broke off, and takes the file's name only once its sha256 is the official copy's:
//! a file under its own name is never partial or corrupt.
//!
//! The server is not trusted with sizes or pace: a body longer than the official copy (the
//! registry knows every length) is refused before it is kept, a transfer slower on average than
//! [`MIN_RATE`] after its first [`GRACE`] is given up (which bounds its whole time), and one
//! silent for [`STALL`] is cut.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flint_common::data::registry::{FileCheck, KNOWN_FILES, KnownFile, sha256, verify};

/// Attempts per URL; each after the first resumes from the bytes already written.
const ATTEMPTS: usize = 3;
/// The slowest average rate a transfer may keep, in bytes a second: a slow link passes it many
/// times over, a trickle does not (MNIST's largest file at this rate: 10 minutes).
const MIN_RATE: f64 = 16_000.0;
/// How long a transfer runs before its rate is judged (a connection starts slowly).
const GRACE: Duration = Duration::from_secs(5);
/// How long a server may send nothing before the transfer is cut.
const STALL: Duration = Duration::from_secs(15);

/// The known files of the named datasets (all of them without names); an unknown name is
/// refused with the known ones.
fn known_files(datasets: &[String]) -> anyhow::Result<Vec<&'static KnownFile>> {
    let mut known: Vec<&str> = KNOWN_FILES.iter().map(|f| f.dataset).collect();
    known.dedup();
    if let Some(unknown) = datasets.iter().find(|d| !known.contains(&d.as_str())) {
        bail!("unknown dataset {unknown:?}; known: {known:?}");
    }
    Ok(KNOWN_FILES
        .iter()
        .filter(|f| datasets.is_empty() || datasets.iter().any(|d| d == f.dataset))
        .collect())
}

/// `flint data verify`.
pub fn check(datasets: &[String], dir: &Path) -> anyhow::Result<()> {
    let (mut ok, mut missing, mut different) = (0, 0, 0);
    for f in known_files(datasets)? {
        let outcome = verify(dir, f)?;
        let what = match &outcome {
            FileCheck::Ok => "ok".to_string(),
            FileCheck::Missing => "missing (flint data fetch gets it)".to_string(),
            FileCheck::Mismatch { actual } => format!("sha256 differs: {actual}"),
        };
        println!("{:<14} {:<45} {what}", f.dataset, f.path);
        match outcome {
            FileCheck::Ok => ok += 1,
            FileCheck::Missing => missing += 1,
            FileCheck::Mismatch { .. } => different += 1,
        }
    }
    if different > 0 {
        bail!(
            "{different} file(s) in {} differ from the official copies",
            dir.display()
        );
    }
    if missing > 0 && !datasets.is_empty() {
        bail!(
            "{missing} file(s) of the named datasets are missing from {}; `flint data fetch` downloads them",
            dir.display()
        );
    }
    if ok == 0 {
        bail!(
            "no known dataset file in {}; `flint data fetch` downloads them (or set FLINT_DATA_DIR or --data-dir)",
            dir.display()
        );
    }
    Ok(())
}

/// `flint data fetch`: every file of the named datasets that is not already here and intact.
/// `base_url` replaces the public URLs by `<base_url>/<path below the data directory>`.
pub fn fetch(datasets: &[String], dir: &Path, base_url: Option<&str>) -> anyhow::Result<()> {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(30))
        .timeout_read(STALL)
        .build();
    let mut failed = 0;
    for f in known_files(datasets)? {
        match fetch_file(&agent, dir, f, base_url) {
            Ok(Fetched::Present) => println!("{:<14} {:<45} ok, already here", f.dataset, f.path),
            Ok(Fetched::Downloaded { url, bytes }) => println!(
                "{:<14} {:<45} ok, {:.1} MB from {url}",
                f.dataset,
                f.path,
                bytes as f64 / 1e6
            ),
            Err(e) => {
                eprintln!("{:<14} {:<45} failed: {e:#}", f.dataset, f.path);
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} file(s) could not be fetched into {}; run it again to resume",
            dir.display()
        );
    }
    Ok(())
}

enum Fetched {
    Present,
    Downloaded { url: String, bytes: u64 },
}

fn fetch_file(
    agent: &ureq::Agent,
    dir: &Path,
    f: &KnownFile,
    base_url: Option<&str>,
) -> anyhow::Result<Fetched> {
    match verify(dir, f)? {
        FileCheck::Ok => return Ok(Fetched::Present),
        FileCheck::Missing => {}
        FileCheck::Mismatch { actual } => eprintln!(
            "{:<14} {:<45} sha256 {actual} is not the official copy's: fetching it again",
            f.dataset, f.path
        ),
    }
    let target = dir.join(f.path);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let part = part_path(&target);
    let urls: Vec<String> = match base_url {
        Some(base) => vec![format!("{}/{}", base.trim_end_matches('/'), f.path)],
        None => f.urls.iter().map(|u| u.to_string()).collect(),
    };
    let mut errors = Vec::new();
    for url in urls {
        match fetch_from(agent, &url, &part, f) {
            Ok(bytes) => {
                std::fs::rename(&part, &target)
                    .with_context(|| format!("cannot move {} into place", part.display()))?;
                return Ok(Fetched::Downloaded { url, bytes });
            }
            Err(e) => errors.push(format!("{url}: {e:#}")),
        }
    }
    bail!("{}", errors.join("; "))
}

/// `url` into `part`, checked. Bytes resumed from an earlier transfer (perhaps of another
/// mirror, or a server that ignored the range's start) that give the wrong checksum are
/// dropped, and the file is fetched once more from its first byte.
fn fetch_from(agent: &ureq::Agent, url: &str, part: &Path, f: &KnownFile) -> anyhow::Result<u64> {
    let resumed = part.exists();
    let first = download(agent, url, part, f).and_then(|()| checked(part, f));
    match first {
        Err(_) if resumed && !part.exists() => {
            download(agent, url, part, f).and_then(|()| checked(part, f))
        }
        other => other,
    }
}

/// Where a file is downloaded to before its checksum is known.
fn part_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    target.with_file_name(name)
}

/// The part file's bytes are the official copy's; a copy that is not is removed.
fn checked(part: &Path, f: &KnownFile) -> anyhow::Result<u64> {
    let actual = sha256(part)?;
    if actual != f.sha256 {
        let _ = std::fs::remove_file(part);
        bail!(
            "sha256 {actual}, not the official copy's {}; nothing kept",
            f.sha256
        );
    }
    Ok(part.metadata()?.len())
}

/// `url` into `part`, resuming from its length; a transfer that fails or is cut short is tried
/// again from where it stopped.
fn download(agent: &ureq::Agent, url: &str, part: &Path, f: &KnownFile) -> anyhow::Result<()> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        match transfer(agent, url, part, f.bytes) {
            Ok(Transfer::Complete) => return Ok(()),
            Ok(Transfer::CutShort(why)) => last = why,
            Err(e) => return Err(e),
        }
    }
    bail!("tried {ATTEMPTS} times, the last: {last}")
}

enum Transfer {
    Complete,
    /// Failed or closed early, for a reason worth trying again; what it wrote is kept.
    CutShort(String),
}

/// One request: the bytes after those `part` holds (a `Range` request), appended; or the
/// whole file, where the server ignores the range. `official`: the file's length, which no
/// body may take the part beyond.
fn transfer(
    agent: &ureq::Agent,
    url: &str,
    part: &Path,
    official: u64,
) -> anyhow::Result<Transfer> {
    let have = part.metadata().map_or(0, |m| m.len());
    let mut request = agent.get(url);
    if have > 0 {
        request = request.set("Range", &format!("bytes={have}-"));
    }
    let response = match request.call() {
        Ok(r) => r,
        // Nothing after what it holds: the part is whole, and its checksum decides.
        Err(ureq::Error::Status(416, _)) if have > 0 => return Ok(Transfer::Complete),
        Err(ureq::Error::Status(code, r)) => bail!("HTTP {code} {}", r.status_text()),
        Err(ureq::Error::Transport(t)) => return Ok(Transfer::CutShort(t.to_string())),
    };
    let append = have > 0 && response.status() == 206;
    let length: Option<u64> = response
        .header("Content-Length")
        .and_then(|v| v.parse().ok());
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(part)
        .with_context(|| format!("cannot write {}", part.display()))?;
    let start = if append { have } else { 0 };
    if let Some(l) = length.filter(|l| start.saturating_add(*l) > official) {
        let _ = std::fs::remove_file(part);
        bail!(
            "the server announces {l} bytes after byte {start}, longer than the official copy's {official}; nothing kept"
        );
    }
    let bar = progress(part, length.map(|l| l + start), start);
    // One byte more than may come, to tell a body that goes on from one that ends in time.
    let body = Paced::new(response.into_reader()).take(official - start + 1);
    let copied = std::io::copy(&mut bar.wrap_read(body), &mut file);
    bar.finish_and_clear();
    file.flush()?;
    file.sync_all()?;
    if file.metadata()?.len() > official {
        let _ = std::fs::remove_file(part);
        bail!("the body runs past the official copy's {official} bytes; nothing kept");
    }
    match (copied, length) {
        (Err(e), _) if e.get_ref().is_some_and(|i| i.is::<TooSlow>()) => bail!("{e}"),
        (Err(e), _) => Ok(Transfer::CutShort(e.to_string())),
        (Ok(n), Some(l)) if n < l => Ok(Transfer::CutShort(format!(
            "{n} of {l} bytes before the connection closed"
        ))),
        (Ok(_), _) => Ok(Transfer::Complete),
    }
}

/// A body that must keep an average of [`MIN_RATE`] once [`GRACE`] has passed: a trickle is
/// given up ([`TooSlow`], not tried again) rather than waited for.
struct Paced<R> {
    inner: R,
    started: Instant,
    read: u64,
}

impl<R: Read> Paced<R> {
    fn new(inner: R) -> Self {
        Paced {
            inner,
            started: Instant::now(),
            read: 0,
        }
    }
}

impl<R: Read> Read for Paced<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        let elapsed = self.started.elapsed();
        let rate = self.read as f64 / elapsed.as_secs_f64();
        // Judged while bytes come: a body that has ended is whole, however slowly it came.
        if n > 0 && elapsed > GRACE && rate < MIN_RATE {
            return Err(std::io::Error::other(TooSlow(format!(
                "{} bytes in {:.0} s, under the {} kB/s a transfer must keep; given up",
                self.read,
                elapsed.as_secs_f64(),
                MIN_RATE / 1000.0
            ))));
        }
        Ok(n)
    }
}

/// A transfer under [`MIN_RATE`]: trying the same server again would be as slow.
#[derive(Debug)]
struct TooSlow(String);

impl std::fmt::Display for TooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TooSlow {}

/// A byte bar on stderr, drawn only where stderr is a terminal.
fn progress(part: &Path, total: Option<u64>, at: u64) -> indicatif::ProgressBar {
    let bar = match total {
        Some(t) => indicatif::ProgressBar::new(t),
        None => indicatif::ProgressBar::no_length(),
    };
    let style = indicatif::ProgressStyle::with_template(
        "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(
        part.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .trim_end_matches(".part")
            .to_string(),
    );
    bar.set_position(at);
    bar
}
