//! The clients an experiment declares: `[[clients]]` entries or `client_count`, checked.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::link::LinkProfile;
use crate::params::{ParamError, ParamResult};

/// The longest client name: a certificate's common name holds at most 64 characters (X.509's
/// ub-common-name), and a client's certificate names it.
pub const MAX_CLIENT_NAME: usize = 64;

/// One `[[clients]]` entry as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// Unique, at most 64 characters (default `client-<position>`).
    pub name: Option<String>,
    /// Declared compute power; `flint-client --compute-ghz` overrides it for a real machine.
    pub compute_ghz: Option<f64>,
    /// Samples per class, for `partition.kind = "explicit"`.
    pub class_counts: Option<Vec<usize>>,
    /// Share of the rows, for `partition.kind = "fractions"`.
    pub fraction: Option<f64>,
    /// The access line `flint run` puts this client behind (`lan`, `wan`, `mobile`), whatever
    /// `[links]` says of the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkProfile>,
}

/// A declared client, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpec {
    pub name: String,
    pub compute_ghz: f64,
    pub link: Option<LinkProfile>,
}

/// The clients an experiment declares, one by one (`[[clients]]`) or by number
/// (`client_count`, clients `client-1` … `client-N`), with their entries as written.
/// `needs_ghz`: every client must declare its compute power.
pub fn declare_clients(
    client_count: Option<usize>,
    entries: &[ClientSection],
    needs_ghz: bool,
) -> ParamResult<(Vec<ClientSection>, Vec<ClientSpec>)> {
    let bad = |m: String| Err(ParamError::Inconsistent(m));
    let declared = match (client_count, entries.len()) {
        (Some(_), l) if l > 0 => {
            return bad("give either client_count or [[clients]] entries, not both".into());
        }
        (Some(0), _) | (None, 0) => {
            return bad(
                "at least one client is needed: client_count = N or [[clients]] entries".into(),
            );
        }
        (Some(n), _) => vec![ClientSection::default(); n],
        (None, _) => entries.to_vec(),
    };
    let mut names = BTreeSet::new();
    let mut clients = Vec::with_capacity(declared.len());
    for (i, c) in declared.iter().enumerate() {
        let name = c
            .name
            .clone()
            .unwrap_or_else(|| format!("client-{}", i + 1));
        if name.is_empty()
            || name.len() > MAX_CLIENT_NAME
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
        {
            return bad(format!(
                "client name {name:?} must be 1 to {MAX_CLIENT_NAME} ASCII letters, digits, '-', '_' or '.'"
            ));
        }
        if !names.insert(name.clone()) {
            return bad(format!("client name {name:?} appears twice"));
        }
        let compute_ghz = match c.compute_ghz {
            Some(g) if g.is_finite() && g > 0.0 => g,
            Some(g) => {
                return bad(format!(
                    "client {name:?}: compute_ghz must be positive, got {g}"
                ));
            }
            None if needs_ghz => {
                return bad(format!(
                    "client {name:?} needs compute_ghz: the ahp criterion compute-ghz uses it"
                ));
            }
            None => 1.0,
        };
        clients.push(ClientSpec {
            name,
            compute_ghz,
            link: c.link,
        });
    }
    Ok((declared, clients))
}
