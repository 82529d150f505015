//! Durations as a scenario file writes them: `"1.5s"`, `"300ms"`, `"2m"`, or seconds as a
//! number. Their own type so that every duration in the language parses, prints and
//! errs the same way (a bare `"3"` is an error that asks for a unit).

use std::fmt;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// A duration written `"1.5s"`, `"300ms"`, `"2m"` or as a number of seconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    /// A duration of `ms` milliseconds.
    pub const fn ms(ms: u64) -> Dur {
        Dur(Duration::from_millis(ms))
    }
    /// The duration in whole milliseconds.
    pub fn as_ms(&self) -> u64 {
        self.0.as_millis() as u64
    }
}

impl fmt::Debug for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.as_ms();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{}ms", ms)
        }
    }
}

/// Parse `"1.5s"`, `"300ms"`, `"2m"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let unit_at = s
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| format!("duration `{s}` needs a unit: ms, s or m (e.g. \"1.5s\")"))?;
    let (num, unit) = s.split_at(unit_at);
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("duration `{s}`: `{num}` is not a number"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        other => {
            return Err(format!(
                "duration `{s}`: unknown unit `{other}` (use ms, s or m)"
            ))
        }
    };
    if !secs.is_finite() || !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("duration `{s}` out of range (0 to 24h)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        let expected =
            "expected a duration: a string like \"1.5s\" or \"300ms\", or seconds as a number";
        let raw = Raw::deserialize(d).map_err(|_| D::Error::custom(expected))?;
        match raw {
            Raw::Num(n) if n.is_finite() && (0.0..=86_400.0).contains(&n) => {
                Ok(Dur(Duration::from_secs_f64(n)))
            }
            Raw::Num(n) => Err(D::Error::custom(format!("duration {n} out of range"))),
            Raw::Text(s) => parse_duration(&s).map(Dur).map_err(D::Error::custom),
        }
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
