//! The experiment file as it is written and as a run's resolved file writes it back: its
//! top-level keys, the sections, and `[server]`'s round policy.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ChurnSection, LinksSection, SecAggSection};
use crate::data::{ClientSection, DataSection, PartitionSection};
use crate::params::{at_least, at_least_or_unset};
use crate::strategy::sections::with_sections;
use crate::strategy::{ModelKind, Sections, StrategyKind};
use crate::wire::WireSection;
use crate::{FlintError, Result};

macro_rules! experiment_file {
    ($($(#[$doc:meta])* $section:ident: $ty:ty,)*) => {
        /// An experiment file. Every section but `data` has defaults; the algorithm sections are
        /// read only by the strategies that use them, and a run's resolved file writes only those.
        /// Clients are declared one by one (`[[clients]]`) or by number (`client_count`).
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct ExperimentFile {
            /// The run's name: its directory under `runs/` and its results' title.
            pub name: String,
            /// The strategy by name: `fedavg`, `tpfl`, `fedtmos`, … (the schema lists them all).
            pub strategy: StrategyKind,
            /// `logreg`, `fcm`, `tm` or `cnn`; needed by `local` and `central`, implied by the other
            /// strategies.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub model: Option<ModelKind>,
            /// Drives every random draw of the run: partitions, initial models, training.
            #[serde(default, deserialize_with = "at_least::<0, _, _>")]
            pub seed: u64,
            /// Federated rounds (default 1 for a one-shot strategy such as `fedtmos`, 10 for the
            /// others).
            #[serde(
                default,
                deserialize_with = "at_least_or_unset::<1, _, _>",
                skip_serializing_if = "Option::is_none"
            )]
            pub rounds: Option<u32>,
            #[serde(default)]
            pub server: ServerSection,
            pub data: DataSection,
            #[serde(default)]
            pub partition: PartitionSection,
            $(
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $section: Option<$ty>,
            )*
            #[serde(default)]
            pub wire: WireSection,
            /// How selected clients drop out and straggle (none by default).
            #[serde(default, skip_serializing_if = "ChurnSection::is_none")]
            pub churn: ChurnSection,
            /// Secure aggregation of the averaging strategies' updates (off by default).
            #[serde(default, skip_serializing_if = "SecAggSection::is_off")]
            pub secagg: SecAggSection,
            /// The share of the clients `flint run` puts behind each emulated access line
            /// (none by default).
            #[serde(default, skip_serializing_if = "LinksSection::is_none")]
            pub links: LinksSection,
            /// Clients `client-1` … `client-N`, for runs too large to list (instead of
            /// `[[clients]]`).
            #[serde(
                default,
                deserialize_with = "at_least_or_unset::<0, _, _>",
                skip_serializing_if = "Option::is_none"
            )]
            pub client_count: Option<usize>,
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub clients: Vec<ClientSection>,
        }

        impl ExperimentFile {
            pub(super) fn sections(&self) -> Sections {
                Sections {
                    $($section: self.$section.clone(),)*
                }
            }

            pub(super) fn set_sections(&mut self, s: Sections) {
                $(self.$section = s.$section;)*
            }
        }
    };
}
with_sections!(experiment_file);

impl ExperimentFile {
    /// The dotted keys this file writes that overriding `keys` leaves to their new value: a
    /// FedTMOS preset's keys that hold the old preset's value go with it.
    pub(super) fn left_to_overrides(&self, keys: &[&str]) -> Vec<String> {
        let fedtmos: Vec<&str> = keys
            .iter()
            .filter_map(|k| k.strip_prefix("fedtmos."))
            .collect();
        self.fedtmos
            .map(|f| f.left_to_a_new_preset(&fedtmos))
            .unwrap_or_default()
            .into_iter()
            .map(|key| format!("fedtmos.{key}"))
            .collect()
    }
}

/// `[server]`: when rounds open and close.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Clients that must have joined before round 1 opens (unset: all of them).
    #[serde(
        deserialize_with = "at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_clients: Option<usize>,
    /// Updates a round needs before its timeout may close it.
    #[serde(deserialize_with = "at_least::<1, _, _>")]
    pub min_updates: usize,
    /// Seconds after opening at which a round closes without the missing clients.
    pub round_timeout_secs: f64,
    /// Seconds the server waits for the final evaluations after the last round.
    pub eval_timeout_secs: f64,
    /// Keep every accepted update as it arrived, `updates/round-R-client-C.pb` (a `Payload`) in
    /// the run directory: what a bench or a later analysis replays.
    pub keep_updates: bool,
    /// Clients selected for each round, drawn from the run's seed among those joined (McMahan
    /// et al.'s C·K; Flower's `fraction_fit`); unset: every joined client, as the papers run.
    #[serde(
        deserialize_with = "at_least_or_unset::<1, _, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub clients_per_round: Option<usize>,
    /// Selects this fraction more than `clients_per_round` and closes the round once
    /// `clients_per_round` updates are in (Bonawitz et al. 2019, §2.2: 130 % is 0.3); the
    /// updates of the rest arrive late and are recorded, not aggregated.
    #[serde(skip_serializing_if = "is_zero")]
    pub over_selection: f64,
    /// With `clients_per_round`: a client the next two rounds do not ask is told when to come
    /// back and hangs up (docs/PROTOCOL.md §Checking in); `false` keeps every client's
    /// connection open, waiting on its call (less memory against fewer handshakes).
    #[serde(skip_serializing_if = "is_true")]
    pub check_in: bool,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_true(x: &bool) -> bool {
    *x
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            min_clients: None,
            min_updates: 1,
            round_timeout_secs: 600.0,
            eval_timeout_secs: 60.0,
            keep_updates: false,
            clients_per_round: None,
            over_selection: 0.0,
            check_in: true,
        }
    }
}

/// When rounds open and close.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundPolicy {
    pub rounds: u32,
    pub min_clients: usize,
    pub min_updates: usize,
    pub round_timeout: Duration,
    pub eval_timeout: Duration,
    pub selection: Selection,
    /// A round closes at its timeout whatever it has, and short of `min_updates` is abandoned
    /// (the model stays): where clients are sampled or drop out (`[churn]`), the missing ones
    /// may never answer that round.
    pub abandon_short: bool,
}

/// Which clients each round asks (`server.clients_per_round`, `server.over_selection`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection {
    /// The run's seed: a round's selection is drawn from (seed, round) and the clients joined
    /// when it opens, so a resumed run selects as the uninterrupted one did.
    pub seed: u64,
    /// Updates that close a round; `None`: every joined client is selected and awaited.
    pub per_round: Option<usize>,
    pub over_selection: f64,
    /// Clients no round soon asks check in rather than wait on their calls (with `per_round`).
    pub check_in: bool,
}

impl Selection {
    /// Every joined client, every round.
    pub const fn everyone() -> Selection {
        Selection {
            seed: 0,
            per_round: None,
            over_selection: 0.0,
            check_in: false,
        }
    }

    /// Clients to select among `joined`.
    pub fn selected(&self, joined: usize) -> usize {
        match self.per_round {
            None => joined,
            Some(k) => {
                let over = (k as f64 * (1.0 + self.over_selection)).ceil() as usize;
                over.min(joined)
            }
        }
    }

    /// Updates that close a round that selected `selected` clients.
    pub fn target(&self, selected: usize) -> usize {
        self.per_round.map_or(selected, |k| k.min(selected))
    }
}

impl ServerSection {
    /// The policy of a run of `rounds` rounds over `clients` declared clients.
    pub fn check(&self, rounds: u32, clients: usize, seed: u64) -> Result<RoundPolicy> {
        let bad = |m: String| FlintError::Config(m);
        let selection = self.selection(clients, seed)?;
        let policy = RoundPolicy {
            rounds,
            min_clients: self.min_clients.unwrap_or(clients),
            min_updates: self.min_updates,
            round_timeout: secs("server.round_timeout_secs", self.round_timeout_secs)?,
            eval_timeout: secs("server.eval_timeout_secs", self.eval_timeout_secs)?,
            abandon_short: selection.per_round.is_some(),
            selection,
        };
        if policy.min_clients == 0 || policy.min_clients > clients {
            return Err(bad(format!(
                "server.min_clients must be between 1 and the {clients} declared clients, got {}",
                policy.min_clients
            )));
        }
        if policy.min_updates == 0 || policy.min_updates > clients {
            return Err(bad(format!(
                "server.min_updates must be between 1 and the {clients} declared clients, got {}",
                policy.min_updates
            )));
        }
        Ok(policy)
    }

    fn selection(&self, clients: usize, seed: u64) -> Result<Selection> {
        let bad = |m: String| Err(FlintError::Config(m));
        if !(self.over_selection.is_finite() && (0.0..=10.0).contains(&self.over_selection)) {
            return bad(format!(
                "server.over_selection must be a fraction between 0 and 10, got {}",
                self.over_selection
            ));
        }
        match self.clients_per_round {
            Some(k) if k == 0 || k > clients => bad(format!(
                "server.clients_per_round must be between 1 and the {clients} declared clients, got {k}"
            )),
            Some(k) if self.min_updates > k => bad(format!(
                "server.min_updates ({}) must be at most server.clients_per_round ({k})",
                self.min_updates
            )),
            None if self.over_selection > 0.0 => {
                bad("server.over_selection needs server.clients_per_round".into())
            }
            per_round => Ok(Selection {
                seed,
                per_round,
                over_selection: self.over_selection,
                check_in: self.check_in && per_round.is_some(),
            }),
        }
    }
}

fn secs(key: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        return Err(FlintError::Config(format!(
            "{key} must be a positive number of seconds, got {v}"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}
