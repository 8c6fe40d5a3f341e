//! The link level: bytes on a network namespace's interfaces (IP, TCP, TLS, gRPC), from the
//! kernel's counters in `/sys/class/net/*/statistics`. They count everything the namespace sends
//! and receives, so they belong to one client only when that client is alone in it (its own
//! container); the client shell uses them only when told so (`--link-bytes`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::MeterSink;
use flint_common::{ClientId, Round};

#[derive(Debug)]
pub struct LinkMeter {
    root: PathBuf,
    interfaces: Vec<String>,
    /// (received, transmitted) at the last flush.
    last: Mutex<(u64, u64)>,
}

impl LinkMeter {
    /// The counters of every interface but loopback, in `/sys/class/net`.
    pub fn open() -> std::io::Result<Self> {
        Self::open_at(Path::new("/sys/class/net"))
    }

    pub fn open_at(root: &Path) -> std::io::Result<Self> {
        let mut interfaces: Vec<String> = std::fs::read_dir(root)?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "lo")
            .collect();
        interfaces.sort();
        if interfaces.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no network interface but lo in {}", root.display()),
            ));
        }
        let meter = LinkMeter {
            root: root.to_path_buf(),
            interfaces,
            last: Mutex::new((0, 0)),
        };
        *meter.last.lock().expect("link lock") = meter.read()?;
        Ok(meter)
    }

    pub fn interfaces(&self) -> &[String] {
        &self.interfaces
    }

    fn read(&self) -> std::io::Result<(u64, u64)> {
        let counter = |iface: &str, name: &str| -> std::io::Result<u64> {
            let path = self.root.join(iface).join("statistics").join(name);
            let text = std::fs::read_to_string(&path)?;
            text.trim().parse().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })
        };
        let mut total = (0, 0);
        for i in &self.interfaces {
            total.0 += counter(i, "rx_bytes")?;
            total.1 += counter(i, "tx_bytes")?;
        }
        Ok(total)
    }

    /// Attributes every byte since the last flush to (client, round): transmitted is up.
    pub fn flush_to(&self, sink: &dyn MeterSink, client: ClientId, round: Round) {
        let Ok(now) = self.read() else {
            return;
        };
        let mut last = self.last.lock().expect("link lock");
        let (rx, tx) = (now.0.saturating_sub(last.0), now.1.saturating_sub(last.1));
        *last = now;
        if rx + tx > 0 {
            sink.link_bytes(client, round, tx, rx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(ClientId, Round, u64, u64)>>);

    impl MeterSink for Recorded {
        fn message_bytes(&self, _: &str, _: ClientId, _: Round, _: u64, _: u64) {}
        fn socket_bytes(&self, _: ClientId, _: Round, _: u64, _: u64) {}
        fn link_bytes(&self, c: ClientId, r: Round, up: u64, down: u64) {
            self.0.lock().unwrap().push((c, r, up, down));
        }
    }

    fn set(root: &Path, iface: &str, rx: u64, tx: u64) {
        let dir = root.join(iface).join("statistics");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rx_bytes"), format!("{rx}\n")).unwrap();
        std::fs::write(dir.join("tx_bytes"), format!("{tx}\n")).unwrap();
    }

    #[test]
    fn deltas_of_every_interface_but_loopback_are_attributed_transmitted_as_up() {
        let dir = tempfile::tempdir().unwrap();
        set(dir.path(), "lo", 1000, 1000);
        set(dir.path(), "eth0", 100, 50);
        set(dir.path(), "eth1", 10, 5);
        let meter = LinkMeter::open_at(dir.path()).unwrap();
        assert_eq!(meter.interfaces(), ["eth0", "eth1"]);
        set(dir.path(), "lo", 9000, 9000);
        set(dir.path(), "eth0", 400, 150);
        set(dir.path(), "eth1", 20, 5);
        let sink = Recorded::default();
        meter.flush_to(&sink, 3, 1);
        meter.flush_to(&sink, 3, 2);
        assert_eq!(*sink.0.lock().unwrap(), vec![(3, 1, 100, 310)]);
    }

    #[test]
    fn a_namespace_with_only_loopback_has_no_link_level() {
        let dir = tempfile::tempdir().unwrap();
        set(dir.path(), "lo", 1, 1);
        assert!(LinkMeter::open_at(dir.path()).is_err());
    }
}
