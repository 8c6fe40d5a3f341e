//! The emulated lines `flint run` puts its clients behind: which client sits on which
//! profile, a relay per profile in front of the server, the clients grouped by the address
//! they reach it at, and what results.json records of them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::Context;
use flint_common::ClientId;
use flint_common::config::{Experiment, LinkProfile};
use flint_server::results::EmulatedLink;

/// The line each client sits behind: `--link`'s for all of them, else the experiment's.
pub fn client_links(
    link: Option<LinkProfile>,
    experiment: &Experiment,
    say: &impl Fn(String),
) -> BTreeMap<ClientId, LinkProfile> {
    let Some(link) = link else {
        return experiment.links.clone();
    };
    if !experiment.links.is_empty() {
        say(format!(
            "  --link {}: every client on it, not on the experiment's [links]",
            link.name()
        ));
    }
    (1..=experiment.clients.len() as ClientId)
        .map(|id| (id, link))
        .collect()
}

/// A relay in front of the server at `addr` for each line some client sits behind: the
/// address its clients use, and what it carried.
pub type Relays = BTreeMap<LinkProfile, (String, Arc<crate::link::Carried>)>;

pub fn start_relays(links: &BTreeMap<ClientId, LinkProfile>, addr: &str) -> anyhow::Result<Relays> {
    let server: std::net::SocketAddr = addr
        .parse()
        .with_context(|| format!("the server's address {addr:?}"))?;
    let used: BTreeSet<LinkProfile> = links.values().copied().collect();
    used.into_iter()
        .map(|p| {
            let (relay, carried) = crate::link::spawn(crate::link::of(p), server)?;
            Ok((p, (relay.to_string(), carried)))
        })
        .collect()
}

/// The clients by the address they reach the server at (their line's relay, or the server),
/// each group in id order.
pub fn by_line(
    names: &[String],
    links: &BTreeMap<ClientId, LinkProfile>,
    relays: &Relays,
    server: &str,
) -> Vec<(String, Vec<String>)> {
    let mut groups: BTreeMap<Option<LinkProfile>, Vec<String>> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let link = links.get(&(i as ClientId + 1)).copied();
        groups.entry(link).or_default().push(name.clone());
    }
    groups
        .into_iter()
        .map(|(link, names)| {
            let addr = link.map_or(server, |p| relays[&p].0.as_str());
            (addr.to_string(), names)
        })
        .collect()
}

/// The emulated lines as results.json records them.
pub struct Lines {
    /// `--link`'s, which every client sat behind.
    pub every: Option<EmulatedLink>,
    pub by_profile: BTreeMap<String, EmulatedLink>,
    pub clients: BTreeMap<ClientId, String>,
}

impl Lines {
    pub fn of(
        every: Option<LinkProfile>,
        links: &BTreeMap<ClientId, LinkProfile>,
        relays: &Relays,
    ) -> Lines {
        let line = |p: LinkProfile| {
            let l = crate::link::of(p);
            let carried = relays.get(&p).map(|(_, c)| c);
            let load = |a: &Arc<std::sync::atomic::AtomicU64>| {
                a.load(std::sync::atomic::Ordering::Relaxed)
            };
            EmulatedLink {
                profile: p.name().to_string(),
                one_way_ms: l.one_way.as_secs_f64() * 1e3,
                up_bits_per_sec: l.up_bits_per_sec,
                down_bits_per_sec: l.down_bits_per_sec,
                clients: Some(links.values().filter(|&&q| q == p).count()),
                relayed_up_bytes: carried.map(|c| load(&c.up)),
                relayed_down_bytes: carried.map(|c| load(&c.down)),
            }
        };
        Lines {
            every: every.map(line),
            by_profile: relays
                .keys()
                .map(|&p| (p.name().to_string(), line(p)))
                .collect(),
            clients: links
                .iter()
                .map(|(&id, p)| (id, p.name().to_string()))
                .collect(),
        }
    }
}
