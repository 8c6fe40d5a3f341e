//! What every algorithm's settings share: the typed error of a setting that fails its check, and
//! names ⇄ enums through serde (each enum's kebab-case names are its derive's, written once).
//!
//! Each algorithm's settings type sits beside it, with its defaults in `Default` and a `check()`
//! that refuses what is out of range (linfa's `Params` → `check()`).

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer};
use serde::{Deserialize, Deserializer, Serialize};

/// Why a setting was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// A name that is none of the enum's.
    #[error("unknown {key} {given:?}; expected {}", or_list(expected))]
    UnknownName {
        key: &'static str,
        given: String,
        expected: &'static [&'static str],
    },
    /// A value outside its range.
    #[error("{key} must be {rule}, got {value}")]
    OutOfRange {
        key: &'static str,
        rule: &'static str,
        value: String,
    },
    /// A rule that ties several keys (or a key and the data) together.
    #[error("{0}")]
    Inconsistent(String),
}

pub type ParamResult<T> = std::result::Result<T, ParamError>;

/// `value` when `ok`, else `key must be rule, got value`.
pub fn require<T: fmt::Display>(
    key: &'static str,
    rule: &'static str,
    value: T,
    ok: bool,
) -> ParamResult<T> {
    if ok {
        return Ok(value);
    }
    Err(ParamError::OutOfRange {
        key,
        rule,
        value: value.to_string(),
    })
}

/// A finite, strictly positive number.
pub fn positive(key: &'static str, value: f64) -> ParamResult<f64> {
    require(key, "positive", value, value.is_finite() && value > 0.0)
}

/// The enum variant named `given` (its serde name), or an error listing the names it knows.
pub fn parse_name<T: DeserializeOwned>(key: &'static str, given: &str) -> ParamResult<T> {
    let named: de::value::StrDeserializer<'_, NameError> = given.into_deserializer();
    T::deserialize(named).map_err(|e| match e.expected {
        Some(expected) => ParamError::UnknownName {
            key,
            given: given.to_string(),
            expected,
        },
        None => ParamError::Inconsistent(format!("{key} {given:?}: {}", e.message)),
    })
}

/// The serde name of a unit variant (`Rounding::Truncate` → `"truncate"`).
pub fn name_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

/// A count, for `#[serde(deserialize_with)]`: a negative or fractional number is refused by the
/// rule it breaks (serde's own word names the integer type instead); from 0 up, the key's
/// `check()` says the rest of its rule.
pub fn at_least<'de, const LEAST: i64, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    whole::<LEAST, D::Error, T>(Number::deserialize(d)?)
}

/// [`at_least`] of an optional key.
pub fn at_least_or_unset<'de, const LEAST: i64, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    Option::<Number>::deserialize(d)?
        .map(whole::<LEAST, D::Error, T>)
        .transpose()
}

/// A number as written, whole or not.
enum Number {
    Whole(i64),
    Other(String),
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
        struct Visit;
        impl de::Visitor<'_> for Visit {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number::Whole(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(i64::try_from(v).map_or(Number::Other(v.to_string()), Number::Whole))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Other(v.to_string()))
            }
        }
        d.deserialize_any(Visit)
    }
}

fn whole<const LEAST: i64, E: de::Error, T: TryFrom<i64>>(n: Number) -> Result<T, E> {
    let rule = |got: &dyn fmt::Display| {
        E::custom(format!(
            "must be a whole number of at least {LEAST}, got {got}"
        ))
    };
    match n {
        Number::Whole(n) if n < 0 => Err(rule(&n)),
        Number::Whole(n) => {
            T::try_from(n).map_err(|_| E::custom(format!("{n} is more than this count can hold")))
        }
        Number::Other(text) => Err(rule(&text)),
    }
}

fn or_list(names: &[&str]) -> String {
    match names {
        [] => "nothing".into(),
        [one] => (*one).into(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Keeps the variant list serde hands to `unknown_variant`, which a plain error would flatten.
#[derive(Debug)]
struct NameError {
    expected: Option<&'static [&'static str]>,
    message: String,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NameError {}

impl de::Error for NameError {
    fn custom<M: fmt::Display>(message: M) -> Self {
        NameError {
            expected: None,
            message: message.to_string(),
        }
    }

    fn unknown_variant(_given: &str, expected: &'static [&'static str]) -> Self {
        NameError {
            expected: Some(expected),
            message: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    enum Shape {
        Round,
        PaperCode,
    }

    #[test]
    fn names_parse_through_serde_and_unknown_ones_list_the_known() {
        assert_eq!(parse_name::<Shape>("k", "paper-code"), Ok(Shape::PaperCode));
        assert_eq!(name_of(&Shape::PaperCode), "paper-code");
        let e = parse_name::<Shape>("tpfl.shape", "square").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown tpfl.shape \"square\"; expected round or paper-code"
        );
    }

    #[test]
    fn ranges_say_the_rule_and_the_value() {
        assert_eq!(positive("fcm.slope", 2.0), Ok(2.0));
        let e = positive("fcm.slope", -1.0).unwrap_err().to_string();
        assert_eq!(e, "fcm.slope must be positive, got -1");
        assert!(positive("x", f64::NAN).is_err());
    }
}
