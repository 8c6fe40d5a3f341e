//! TLS for the shells: the one crypto provider, reading PEM files, a certificate's client name,
//! and generating a private PKI (`flint certs`, `flint run`); the server's and the client's
//! TLS streams (`server`, `client`), each written a record per flush (`records`).
//!
//! Identity under mutual TLS is the client certificate's common name: the name of one client
//! slot of the experiment, or [`POOL_IDENTITY`], which may claim any unclaimed slot (for
//! identical containers scaled with `docker-compose --scale`).

pub mod client;
pub mod records;
pub mod server;

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use flint_common::FlintError;

/// The common name of a pool certificate: it proves membership of the federation, not a slot.
pub const POOL_IDENTITY: &str = "*";

/// Installs ring as the process's rustls provider (once; later calls are no-ops). Without it a
/// process that links two providers panics at its first handshake.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A PEM file's contents, with a message naming the file and the flag that gave it.
pub fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, FlintError> {
    let bytes = std::fs::read(path).map_err(|e| {
        FlintError::Config(format!("cannot read the {what} {}: {e}", path.display()))
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(FlintError::Config(format!(
            "the {what} {} is not a PEM file",
            path.display()
        )));
    }
    Ok(bytes)
}

/// The common name of a DER certificate, if it has one.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The DNS names and IP addresses a PEM certificate is valid for (its subject alternative
/// names); `None` if it does not parse.
pub fn certificate_names(pem: &[u8]) -> Option<Vec<String>> {
    use x509_parser::extensions::GeneralName;
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).ok()?;
    let names = cert.subject_alternative_name().ok()??;
    let named = names.value.general_names.iter().filter_map(|n| match n {
        GeneralName::DNSName(d) => Some(d.to_string()),
        GeneralName::IPAddress(ip) => match ip.len() {
            4 => <[u8; 4]>::try_from(*ip)
                .ok()
                .map(|b| std::net::Ipv4Addr::from(b).to_string()),
            16 => <[u8; 16]>::try_from(*ip)
                .ok()
                .map(|b| std::net::Ipv6Addr::from(b).to_string()),
            _ => None,
        },
        _ => None,
    });
    Some(named.collect())
}

/// What `flint certs` writes, by file.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }
    /// A client's certificate and key; the pool's under the name `pool`.
    pub fn client(&self, name: &str) -> (PathBuf, PathBuf) {
        let dir = self.dir.join("clients");
        (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        )
    }
}

/// Generates a CA, a server certificate valid for `server_names` (DNS names or IP addresses),
/// one client certificate per name (common name = the client's name) and, with `pool`, a pool
/// certificate, all below `dir`. Keys are written mode 0600.
pub fn generate_pki(
    dir: &Path,
    server_names: &[String],
    clients: &[String],
    pool: bool,
    days: u32,
) -> Result<Pki, FlintError> {
    let bad = |e: rcgen::Error| FlintError::Config(format!("cannot generate certificates: {e}"));
    if server_names.is_empty() {
        return Err(FlintError::Config(
            "the server certificate needs at least one name (--server-name)".into(),
        ));
    }
    if let Some(n) = clients
        .iter()
        .find(|n| n.is_empty() || n.contains(['/', '\\']))
    {
        return Err(FlintError::Config(format!(
            "client name {n:?} cannot name a certificate file"
        )));
    }
    let pki = Pki {
        dir: dir.to_path_buf(),
    };
    std::fs::create_dir_all(dir.join("clients")).map_err(|e| FlintError::io(dir, e))?;
    // Valid from an hour ago, so hosts whose clocks differ a little accept them.
    let now = time::OffsetDateTime::now_utc();
    let validity = |p: &mut CertificateParams| {
        p.not_before = now - time::Duration::hours(1);
        p.not_after = now + time::Duration::days(i64::from(days));
    };

    let ca_key = KeyPair::generate().map_err(bad)?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = name("flint federation CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut ca);
    let ca = CertifiedIssuer::self_signed(ca, ca_key).map_err(bad)?;
    write(&pki.ca_cert(), ca.pem().as_bytes(), false)?;

    let leaf = |cn: &str, sans: &[String], usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().map_err(bad)?;
        let mut p = CertificateParams::new(sans.to_vec()).map_err(bad)?;
        p.distinguished_name = name(cn);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![usage];
        validity(&mut p);
        let cert = p.signed_by(&key, &ca).map_err(bad)?;
        Ok::<_, FlintError>((cert.pem(), key.serialize_pem()))
    };
    let (cert, key) = leaf(
        &server_names[0],
        server_names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    write(&pki.server_cert(), cert.as_bytes(), false)?;
    write(&pki.server_key(), key.as_bytes(), true)?;
    let pool_entry = pool.then(|| ("pool".to_string(), POOL_IDENTITY.to_string()));
    for (file, cn) in clients
        .iter()
        .map(|n| (n.clone(), n.clone()))
        .chain(pool_entry)
    {
        let (cert, key) = leaf(&cn, &[], ExtendedKeyUsagePurpose::ClientAuth)?;
        let (cert_path, key_path) = pki.client(&file);
        write(&cert_path, cert.as_bytes(), false)?;
        write(&key_path, key.as_bytes(), true)?;
    }
    Ok(pki)
}

fn name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

/// Writes a file; keys are created mode 0600 (never readable by others, even briefly).
fn write(path: &Path, bytes: &[u8], secret: bool) -> Result<(), FlintError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| FlintError::io(path, e))?;
    f.write_all(bytes).map_err(|e| FlintError::io(path, e))
}
