//! The emulated access lines a client can sit behind (`flint run --link`, `[links]`,
//! `[[clients]] link`); `flint run` realizes them as relays.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{FlintError, Result};

/// An emulated access line (`flint run --link`, `flint link`; docs/guide/experiments.md).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LinkProfile {
    /// 1 Gbit/s both ways, 0.5 ms round trip.
    Lan,
    /// 20 Mbit/s both ways, 40 ms round trip.
    Wan,
    /// 2 Mbit/s up, 10 Mbit/s down, 100 ms round trip.
    Mobile,
}

impl LinkProfile {
    pub const ALL: [LinkProfile; 3] = [LinkProfile::Lan, LinkProfile::Wan, LinkProfile::Mobile];

    pub fn name(self) -> &'static str {
        match self {
            LinkProfile::Lan => "lan",
            LinkProfile::Wan => "wan",
            LinkProfile::Mobile => "mobile",
        }
    }
}

impl std::str::FromStr for LinkProfile {
    type Err = FlintError;

    fn from_str(s: &str) -> Result<LinkProfile> {
        LinkProfile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                FlintError::Config(format!("unknown link profile {s:?}: lan, wan or mobile"))
            })
    }
}
