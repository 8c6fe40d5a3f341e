//! `flint kit`: what each site of a federation needs, one folder per participant, from the
//! federation's PKI (`flint certs`) and its experiment. The server's folder holds its
//! certificate and key, the CA and a compose file that publishes its port; each client's folder
//! holds that client's certificate and key only, the CA, the experiment and a compose file that
//! dials the server's external name. A site runs `docker-compose up` in its folder.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use flint_common::config::Experiment;
use flint_shell::tls::{Pki, certificate_names, read_pem};

#[derive(Debug, Clone, clap::Args)]
pub struct KitArgs {
    /// The federation's PKI, as `flint certs` wrote it (ca.crt, server.crt/.key,
    /// clients/<name>.crt/.key).
    #[arg(long)]
    pub pki: PathBuf,
    /// The experiment every site runs (its checked form goes into each kit, so that server and
    /// clients hold the same fingerprint).
    #[arg(long, short)]
    pub experiment: PathBuf,
    /// Where the sites reach the server, https://NAME:PORT; NAME must be one the server
    /// certificate carries (`flint certs --server-name NAME`), and PORT is published on the
    /// server's host.
    #[arg(long)]
    pub server: String,
    /// Directory for the kits: server/ and one folder per client.
    #[arg(long, default_value = "kits")]
    pub out: PathBuf,
    /// The image the kits' compose files run (FLINT_IMAGE overrides it at a site).
    #[arg(long, default_value = "flint:latest")]
    pub image: String,
    /// A hosts entry for the client containers, NAME:IP as `docker run --add-host` takes it
    /// (`host-gateway` for the Docker host), where the server's name is not in the sites' DNS.
    #[arg(long = "add-host", value_name = "NAME:IP")]
    pub add_hosts: Vec<String>,
}

/// The server's address as a site dials it.
struct Dial {
    url: String,
    host: String,
    port: u16,
}

impl Dial {
    fn parse(url: &str) -> anyhow::Result<Dial> {
        let Some(rest) = url.strip_prefix("https://") else {
            bail!(
                "--server {url:?}: give https://NAME:PORT (a site reaches the server over mutual TLS)"
            );
        };
        let rest = rest.trim_end_matches('/');
        let Some((host, port)) = rest.rsplit_once(':') else {
            bail!("--server {url:?}: give the port, https://NAME:PORT");
        };
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .with_context(|| format!("--server {url:?}: {port:?} is not a port"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            bail!("--server {url:?}: no host name");
        }
        Ok(Dial {
            url: format!("https://{rest}"),
            host,
            port,
        })
    }
}

pub fn kit(args: KitArgs) -> anyhow::Result<()> {
    let dial = Dial::parse(&args.server)?;
    let experiment = Experiment::load(&args.experiment, &[])?;
    let pki = Pki {
        dir: args.pki.clone(),
    };
    check_server_name(&pki, &dial)?;
    for add in &args.add_hosts {
        if add
            .split_once(':')
            .is_none_or(|(n, ip)| n.is_empty() || ip.is_empty())
        {
            bail!(
                "--add-host {add:?}: give NAME:IP (e.g. {}:host-gateway)",
                dial.host
            );
        }
    }
    let toml = experiment.to_toml();
    let server_dir = args.out.join("server");
    write_kit(
        &server_dir,
        &toml,
        &[
            (pki.ca_cert(), "ca.crt"),
            (pki.server_cert(), "server.crt"),
            (pki.server_key(), "server.key"),
        ],
        &server_compose(&args, &experiment, &dial),
    )?;
    for c in &experiment.clients {
        let (cert, key) = pki.client(&c.name);
        if !cert.exists() {
            bail!(
                "{} has no certificate for client {:?}: run flint certs with --clients naming every client of the experiment",
                args.pki.display(),
                c.name
            );
        }
        write_kit(
            &args.out.join(&c.name),
            &toml,
            &[
                (pki.ca_cert(), "ca.crt"),
                (cert, "client.crt"),
                (key, "client.key"),
            ],
            &client_compose(&args, &experiment, &dial, &c.name),
        )?;
    }
    println!(
        "wrote the server's kit and {} client kit(s) to {}: copy each folder to its site and run `docker-compose up` there (server first)",
        experiment.clients.len(),
        args.out.display()
    );
    Ok(())
}

/// The server certificate must carry the name the sites dial: a client would refuse it.
fn check_server_name(pki: &Pki, dial: &Dial) -> anyhow::Result<()> {
    let pem = read_pem(&pki.server_cert(), "server certificate")?;
    let names = certificate_names(&pem)
        .with_context(|| format!("cannot read the names of {}", pki.server_cert().display()))?;
    if !names.iter().any(|n| n == &dial.host) {
        bail!(
            "the server certificate is for {names:?}, not {:?}: the sites would refuse it. Write the PKI with flint certs --server-name {}",
            dial.host,
            dial.host
        );
    }
    Ok(())
}

/// One participant's folder: the experiment, its PEM files (keys mode 0600) and its compose
/// file.
fn write_kit(
    dir: &Path,
    experiment: &str,
    files: &[(PathBuf, &str)],
    compose: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (from, to) in files {
        let bytes = read_pem(from, to)?;
        let path = dir.join(to);
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        if to.ends_with(".key") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    std::fs::write(dir.join("experiment.toml"), experiment)?;
    std::fs::write(dir.join("docker-compose.yml"), compose)?;
    Ok(())
}

fn server_compose(args: &KitArgs, e: &Experiment, dial: &Dial) -> String {
    format!(
        r#"# Flint kit: the server of "{name}" ({clients} clients). In this folder: `docker-compose up`.
# It publishes port {port}, where the sites dial {url}; results go to ./results
# (FLINT_RESULTS), the run's journal to ./results/state (a restart resumes it).
# FLINT_UID=$(id -u) FLINT_GID=$(id -g) docker-compose up runs it as you (else as root).
version: "2.4"
services:
  server:
    image: ${{FLINT_IMAGE:-{image}}}
    user: "${{FLINT_UID:-0}}:${{FLINT_GID:-0}}"
    command: ["server", "--experiment=/kit/experiment.toml", "--listen=0.0.0.0:50051", "--out=/results"]
    environment:
      FLINT_TLS_CERT: /kit/server.crt
      FLINT_TLS_KEY: /kit/server.key
      FLINT_TLS_CLIENT_CA: /kit/ca.crt
    ports:
      - "{port}:50051"
    volumes:
      - ./:/kit:ro
      - ${{FLINT_RESULTS:-./results}}:/results
    restart: "on-failure:5"
"#,
        name = e.name,
        clients = e.clients.len(),
        port = dial.port,
        url = dial.url,
        image = args.image,
    )
}

fn client_compose(args: &KitArgs, e: &Experiment, dial: &Dial, client: &str) -> String {
    let hosts = match args.add_hosts.is_empty() {
        true => String::new(),
        false => {
            let lines: String = args
                .add_hosts
                .iter()
                .map(|h| format!("      - \"{h}\"\n"))
                .collect();
            format!("    extra_hosts:\n{lines}")
        }
    };
    format!(
        r#"# Flint kit: client "{client}" of "{name}". In this folder: `docker-compose up`.
# It dials the server at {url} over mutual TLS with this folder's certificate; its data
# directory is ./data (FLINT_DATA_DIR), its token, report and byte ledger go to ./results
# (FLINT_RESULTS: keep it, a restarted client rejoins its slot with the token).
# FLINT_UID=$(id -u) FLINT_GID=$(id -g) docker-compose up runs it as you (else as root).
version: "2.4"
services:
  client:
    image: ${{FLINT_IMAGE:-{image}}}
    user: "${{FLINT_UID:-0}}:${{FLINT_GID:-0}}"
    command: ["client", "--server={url}", "--experiment=/kit/experiment.toml", "--name={client}",
              "--data-dir=/data", "--out=/results", "--link-bytes"]
    environment:
      FLINT_TLS_CA: /kit/ca.crt
      FLINT_TLS_CERT: /kit/client.crt
      FLINT_TLS_KEY: /kit/client.key
      FLINT_RETRY_SECS: ${{FLINT_RETRY_SECS:-60}}
    volumes:
      - ./:/kit:ro
      - ${{FLINT_DATA_DIR:-./data}}:/data:ro
      - ${{FLINT_RESULTS:-./results}}:/results
{hosts}    restart: "on-failure:3"
"#,
        name = e.name,
        url = dial.url,
        image = args.image,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_address_is_https_with_a_port() {
        let d = Dial::parse("https://fl.example.org:50051/").unwrap();
        assert_eq!((d.host.as_str(), d.port), ("fl.example.org", 50051));
        assert_eq!(d.url, "https://fl.example.org:50051");
        for bad in [
            "http://fl.example.org:50051",
            "https://fl.example.org",
            "https://:50051",
            "https://x:0",
        ] {
            assert!(Dial::parse(bad).is_err(), "{bad}");
        }
    }
}
