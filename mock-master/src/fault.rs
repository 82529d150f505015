//! What the master can be told to do wrong, and how a `POST /_mock/faults` body is
//! decoded: field by field, unknown fields skipped unread (serde's `IgnoredAny`), so a
//! hostile body costs no more memory than its known fields.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// A fault (`POST /_mock/faults`, with optional `count` and `duration_ms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Answer heartbeats with this status (and the body the real master sends with it),
    /// without looking at them.
    HeartbeatStatus { status: u16 },
    /// Delay each heartbeat answer by this much.
    Latency { ms: u64 },
}

/// A decoded `POST /_mock/faults` body.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPost {
    pub fault: Fault,
    /// Fire at most this many times.
    pub count: Option<u64>,
    /// Disarm after this many milliseconds.
    pub duration_ms: Option<u64>,
}

/// The fields as read, before `kind` says which of them it needs.
#[derive(Default)]
struct Fields {
    kind: Option<String>,
    status: Option<u16>,
    ms: Option<u64>,
    count: Option<u64>,
    duration_ms: Option<u64>,
}

/// Store a field's value, refusing a second one.
fn set_once<T, E: de::Error>(slot: &mut Option<T>, v: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(v);
    Ok(())
}

impl Fields {
    fn into_post<E: de::Error>(self) -> Result<FaultPost, E> {
        let kind = self.kind.ok_or_else(|| E::missing_field("kind"))?;
        let fault = match kind.as_str() {
            "heartbeat_status" => Fault::HeartbeatStatus {
                status: self.status.ok_or_else(|| E::missing_field("status"))?,
            },
            "latency" => Fault::Latency {
                ms: self.ms.ok_or_else(|| E::missing_field("ms"))?,
            },
            other => {
                return Err(E::unknown_variant(other, &["heartbeat_status", "latency"]));
            }
        };
        Ok(FaultPost {
            fault,
            count: self.count,
            duration_ms: self.duration_ms,
        })
    }
}

impl<'de> Deserialize<'de> for FaultPost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FaultPost;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a fault object with a \"kind\"")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultPost, A::Error> {
                let mut f = Fields::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "kind" => set_once(&mut f.kind, map.next_value()?, "kind")?,
                        "status" => set_once(&mut f.status, map.next_value()?, "status")?,
                        "ms" => set_once(&mut f.ms, map.next_value()?, "ms")?,
                        "count" => {
                            let v: Option<u64> = map.next_value()?;
                            if let Some(v) = v {
                                set_once(&mut f.count, v, "count")?;
                            }
                        }
                        "duration_ms" => {
                            let v: Option<u64> = map.next_value()?;
                            if let Some(v) = v {
                                set_once(&mut f.duration_ms, v, "duration_ms")?;
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                f.into_post()
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(s: &str) -> Result<FaultPost, serde_json::Error> {
        serde_json::from_str(s)
    }

    #[test]
    fn both_kinds_with_limits_and_unknown_fields() {
        assert_eq!(
            post(r#"{"kind":"heartbeat_status","status":503,"count":2,"x":[{"y":1}]}"#).unwrap(),
            FaultPost {
                fault: Fault::HeartbeatStatus { status: 503 },
                count: Some(2),
                duration_ms: None,
            }
        );
        assert_eq!(
            post(r#"{"duration_ms":10000,"ms":500,"kind":"latency","count":null}"#).unwrap(),
            FaultPost {
                fault: Fault::Latency { ms: 500 },
                count: None,
                duration_ms: Some(10000),
            }
        );
    }

    #[test]
    fn bad_bodies_say_why() {
        for (body, why) in [
            ("{}", "missing field `kind`"),
            (r#"{"kind":"latency"}"#, "missing field `ms`"),
            (r#"{"kind":"nope"}"#, "unknown variant `nope`"),
            (
                r#"{"kind":"latency","ms":1,"ms":2}"#,
                "duplicate field `ms`",
            ),
            (
                r#"{"kind":"heartbeat_status","status":70000}"#,
                "invalid value",
            ),
            ("[]", "invalid type"),
        ] {
            let e = post(body).unwrap_err().to_string();
            assert!(e.contains(why), "{body}: {e}");
        }
    }
}
