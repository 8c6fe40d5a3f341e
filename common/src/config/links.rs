//! `[links]` and `[[clients]] link`: which access line each client sits behind, as a
//! cross-device federation mixes them (Bonawitz et al. 2019 §9: devices on slow and fast
//! networks alike). `flint run` puts each client behind a relay of its profile; the assignment
//! is drawn from the seed, so every run of a file puts the same clients on the same lines.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::data::partition::ClientSpec;
pub use crate::link::LinkProfile;
use crate::rng::derive_seed;
use crate::{ClientId, FlintError, Result};

/// `[links]`, as written: the share of the clients (those without a `link` of their own)
/// behind each profile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LinksSection {
    pub lan: f64,
    pub wan: f64,
    pub mobile: f64,
}

impl LinksSection {
    /// No mix (what a file without `[links]` says).
    pub fn is_none(&self) -> bool {
        self.shares().iter().all(|&(_, s)| s == 0.0)
    }

    fn shares(&self) -> [(LinkProfile, f64); 3] {
        [
            (LinkProfile::Lan, self.lan),
            (LinkProfile::Wan, self.wan),
            (LinkProfile::Mobile, self.mobile),
        ]
    }

    pub fn check(self) -> Result<LinksSection> {
        for (p, share) in self.shares() {
            if !(share.is_finite() && (0.0..=1.0).contains(&share)) {
                return Err(FlintError::Config(format!(
                    "links.{} must be a share in [0, 1], got {share}",
                    p.name()
                )));
            }
        }
        let sum: f64 = self.shares().iter().map(|&(_, s)| s).sum();
        if !self.is_none() && (sum - 1.0).abs() > 1e-9 {
            return Err(FlintError::Config(format!(
                "the [links] shares must add up to 1, got {sum}"
            )));
        }
        Ok(self)
    }

    /// Each client's line: its own `link`, else one of the mix, which takes as close to its
    /// share of the other clients as whole clients allow (largest remainders), the clients
    /// ranked by a key drawn from the seed; none without either.
    pub fn assign(&self, seed: u64, clients: &[ClientSpec]) -> BTreeMap<ClientId, LinkProfile> {
        let ids = 1..=clients.len() as ClientId;
        let mut links: BTreeMap<ClientId, LinkProfile> = ids
            .clone()
            .zip(clients)
            .filter_map(|(id, c)| Some((id, c.link?)))
            .collect();
        if self.is_none() {
            return links;
        }
        let mut rest: Vec<ClientId> = ids.filter(|id| !links.contains_key(id)).collect();
        rest.sort_by_key(|&id| (derive_seed(seed, "links", id), id));
        let mut next = rest.into_iter();
        for (profile, count) in self.counts(next.len()) {
            links.extend(next.by_ref().take(count).map(|id| (id, profile)));
        }
        links
    }

    /// Whole clients per profile for `n` clients, as near the shares as they allow.
    fn counts(&self, n: usize) -> Vec<(LinkProfile, usize)> {
        let quotas: Vec<(LinkProfile, f64)> =
            self.shares().map(|(p, s)| (p, s * n as f64)).to_vec();
        let mut counts: Vec<(LinkProfile, usize)> = quotas
            .iter()
            .map(|&(p, q)| (p, q.floor() as usize))
            .collect();
        let mut left = n - counts.iter().map(|&(_, c)| c).sum::<usize>();
        let mut by_remainder: Vec<usize> = (0..quotas.len()).collect();
        by_remainder.sort_by(|&a, &b| {
            let frac = |i: usize| quotas[i].1 - quotas[i].1.floor();
            frac(b).total_cmp(&frac(a)).then(a.cmp(&b))
        });
        for i in by_remainder {
            if left == 0 {
                break;
            }
            if quotas[i].1 > 0.0 {
                counts[i].1 += 1;
                left -= 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients(n: usize) -> Vec<ClientSpec> {
        (1..=n)
            .map(|i| ClientSpec {
                name: format!("client-{i}"),
                compute_ghz: 1.0,
                link: None,
            })
            .collect()
    }

    fn mix(lan: f64, wan: f64, mobile: f64) -> LinksSection {
        LinksSection { lan, wan, mobile }
    }

    #[test]
    fn a_mix_puts_its_share_of_the_clients_on_each_line_the_same_every_run() {
        let m = mix(0.1, 0.3, 0.6).check().unwrap();
        let links = m.assign(4, &clients(100));
        let count = |p| links.values().filter(|&&l| l == p).count();
        assert_eq!(
            (
                count(LinkProfile::Lan),
                count(LinkProfile::Wan),
                count(LinkProfile::Mobile)
            ),
            (10, 30, 60)
        );
        assert_eq!(links, m.assign(4, &clients(100)), "seeded");
        assert_ne!(links, m.assign(5, &clients(100)), "another seed, others");
        // Seven clients at a third each: 3, 2, 2 (the remainders are equal: profile order).
        let thirds = mix(1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0).check().unwrap();
        let counts = thirds.counts(7);
        assert_eq!(counts.iter().map(|c| c.1).sum::<usize>(), 7);
        assert!(counts.iter().all(|c| (2..=3).contains(&c.1)), "{counts:?}");
    }

    #[test]
    fn a_client_own_link_stands_and_the_mix_shares_the_others() {
        let mut cs = clients(5);
        cs[0].link = Some(LinkProfile::Lan);
        let links = mix(0.0, 0.5, 0.5).assign(1, &cs);
        assert_eq!(links[&1], LinkProfile::Lan);
        let wan = links.values().filter(|&&l| l == LinkProfile::Wan).count();
        assert_eq!((links.len(), wan), (5, 2));
        let only_own = LinksSection::default().assign(1, &cs);
        assert_eq!(only_own, BTreeMap::from([(1, LinkProfile::Lan)]));
    }

    #[test]
    fn shares_out_of_range_or_not_adding_up_are_refused() {
        let e = mix(0.5, 0.6, 0.0).check().unwrap_err().to_string();
        assert!(e.contains("add up to 1"), "{e}");
        let e = mix(-0.1, 1.1, 0.0).check().unwrap_err().to_string();
        assert!(e.contains("links.lan must be a share"), "{e}");
        assert!("dialup".parse::<LinkProfile>().is_err());
        assert_eq!("wan".parse::<LinkProfile>().unwrap(), LinkProfile::Wan);
    }
}
