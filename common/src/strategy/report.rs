//! What a strategy records about a round and keeps between rounds, as values its own module
//! types: the framework stores and compares them without naming any strategy, and a reader asks
//! for the type it knows ([`RoundReport::details`]).
//!
//! Both are tagged JSON values, the shape `results.json` and the server's checkpoint have always
//! written: a bare tag (`"fedavg"`, `"stateless"`) or `{tag: details}`. A value rather than a
//! trait object because both are written to disk and read back by another process, and a value
//! compares and prints without a registry of types.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{FlintError, Result};

/// A strategy's own record type and the tag it travels under.
pub trait Tagged: Serialize + DeserializeOwned {
    const TAG: &'static str;
}

fn tagged<T: Tagged>(details: &T) -> Value {
    // A record of plain numbers and strings always serializes; a NaN becomes null.
    let inner = serde_json::to_value(details).unwrap_or(Value::Null);
    Value::Object([(T::TAG.to_string(), inner)].into_iter().collect())
}

fn untag<T: Tagged>(value: &Value) -> Option<std::result::Result<T, serde_json::Error>> {
    let inner = value.as_object()?.get(T::TAG)?;
    Some(serde_json::from_value(inner.clone()))
}

/// What a strategy records about one round beyond the weights (TPFL: the clusters, each
/// client's winner, the paper's download bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RoundReport(Value);

impl RoundReport {
    /// A round with nothing to say beyond its tag (FedAvg: the weights say it all).
    pub fn plain(tag: &str) -> Self {
        RoundReport(Value::String(tag.into()))
    }

    pub fn of<T: Tagged>(details: &T) -> Self {
        RoundReport(tagged(details))
    }

    /// Why the round's aggregation failed, where it did (its record says `"failed: …"`).
    pub fn failure(&self) -> Option<&str> {
        self.0.as_str()?.strip_prefix("failed: ")
    }

    /// The details as their strategy wrote them; `None` where the round is another strategy's
    /// (or its record does not read as `T`).
    pub fn details<T: Tagged>(&self) -> Option<T> {
        untag(&self.0)?.ok()
    }
}

/// What a server half keeps from one round to the next, so a restarted server can go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StrategyState(Value);

const STATELESS: &str = "stateless";

impl StrategyState {
    /// Nothing: every round is a function of its updates alone (FedAvg, Blind FL).
    pub fn stateless() -> Self {
        StrategyState(Value::String(STATELESS.into()))
    }

    pub fn of<T: Tagged>(state: &T) -> Self {
        StrategyState(tagged(state))
    }

    pub fn is_stateless(&self) -> bool {
        self.0.as_str() == Some(STATELESS)
    }

    /// The state `T` wrote, refused (with what it is) where it is anything else.
    pub fn expect<T: Tagged>(&self, who: &str) -> Result<T> {
        match untag::<T>(&self.0) {
            Some(Ok(state)) => Ok(state),
            Some(Err(e)) => Err(FlintError::Model(format!(
                "{who}'s kept state does not read: {e}"
            ))),
            None => Err(FlintError::Model(format!(
                "{who} keeps {} state between rounds, but was given {}",
                T::TAG,
                self.describe()
            ))),
        }
    }

    /// Nothing kept, as a strategy that keeps nothing expects; anything else is refused.
    pub fn expect_stateless(&self, who: &str) -> Result<()> {
        if self.is_stateless() {
            return Ok(());
        }
        Err(FlintError::Model(format!(
            "{who} keeps no state between rounds, but was given {}",
            self.describe()
        )))
    }

    fn describe(&self) -> String {
        match &self.0 {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .keys()
                .next()
                .map_or("an empty record".into(), |k| format!("{k}'s")),
            other => format!("{other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Clusters {
        members: Vec<u32>,
    }

    impl Tagged for Clusters {
        const TAG: &'static str = "tpfl";
    }

    #[test]
    fn a_report_reads_back_as_the_type_that_wrote_it_and_as_nothing_else() {
        let report = RoundReport::of(&Clusters {
            members: vec![1, 3],
        });
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(json, r#"{"tpfl":{"members":[1,3]}}"#);
        let back: RoundReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.details::<Clusters>().unwrap().members, [1, 3]);
        let plain = RoundReport::plain("fedavg");
        assert_eq!(serde_json::to_string(&plain).unwrap(), r#""fedavg""#);
        assert_eq!(plain.details::<Clusters>(), None);
    }

    #[test]
    fn a_state_is_taken_back_only_by_the_strategy_that_kept_it() {
        let kept = StrategyState::of(&Clusters { members: vec![2] });
        assert_eq!(kept.expect::<Clusters>("tpfl").unwrap().members, [2]);
        let e = kept.expect_stateless("fedavg").unwrap_err().to_string();
        assert!(
            e.contains("keeps no state between rounds, but was given tpfl's"),
            "{e}"
        );
        let e = StrategyState::stateless()
            .expect::<Clusters>("tpfl")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("keeps tpfl state between rounds, but was given stateless"),
            "{e}"
        );
        let json = serde_json::to_string(&StrategyState::stateless()).unwrap();
        assert_eq!(json, r#""stateless""#);
    }
}
